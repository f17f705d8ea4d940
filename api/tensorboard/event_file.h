// TensorBoard event files (events.out.tfevents.<seconds>.<host>): scalars and the HParams
// plugin's session records, as Event protos (proto/mpsd/tensorboard/) in TFRecord framing.
#ifndef MPSD_API_TENSORBOARD_EVENT_FILE_H_
#define MPSD_API_TENSORBOARD_EVENT_FILE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/tensorboard/tfrecord.h"
#include "google/protobuf/struct.pb.h"
#include "mpsd/tensorboard/hparams.pb.h"

namespace mpsd::tensorboard {

// The HParams plugin's tags (tensorboard/plugins/hparams/metadata.py). mpsd writes no
// "_hparams_/experiment" record: TensorBoard infers the experiment from every run's session
// start and scalars, where one run's experiment record would hide the others' hyperparameters.
inline constexpr char kSessionStartTag[] = "_hparams_/session_start_info";
inline constexpr char kSessionEndTag[] = "_hparams_/session_end_info";

struct TaggedValue {
  std::string tag;
  double value = 0;  // written as float32, as TensorBoard's simple_value
};

// Writes one event file. Not thread-safe: one owner calls it. Every error names the file.
class EventFileWriter {
 public:
  // Creates `dir` (and its parents) and in it events.out.tfevents.<floor(wall_time)>.<host>
  // (host: gethostname when empty), and writes the file_version record "brain.Event:2".
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(const std::string& dir,
                                                                 double wall_time,
                                                                 std::string host = "");

  // One Event at `step` (TensorBoard's x axis) holding every value as a simple_value scalar.
  // wall_time: seconds since the Unix epoch.
  absl::Status WriteScalars(int64_t step, double wall_time, const std::vector<TaggedValue>& values);
  // The HParams plugin's session start: hyperparameter name → a number, string or bool.
  absl::Status WriteSessionStart(const std::map<std::string, google::protobuf::Value>& hparams,
                                 double start_time);
  absl::Status WriteSessionEnd(hparams::Status status, double end_time);

  // Hands what was written to the kernel, so that a reader (TensorBoard) sees it.
  absl::Status Flush() { return records_->Flush(); }
  absl::Status Close() { return records_->Close(); }
  const std::string& path() const { return records_->path(); }
  int64_t bytes() const { return records_->bytes(); }

 private:
  explicit EventFileWriter(std::unique_ptr<TfRecordWriter> records)
      : records_(std::move(records)) {}
  absl::Status WritePluginSummary(const char* tag, const hparams::HParamsPluginData& data,
                                  double wall_time);

  std::unique_ptr<TfRecordWriter> records_;
};

}  // namespace mpsd::tensorboard

#endif  // MPSD_API_TENSORBOARD_EVENT_FILE_H_
