#include "api/tensorboard/event_file.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "mpsd/tensorboard/event.pb.h"

namespace mpsd::tensorboard {
namespace {

constexpr char kFileVersion[] = "brain.Event:2";

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// Map entries (the hyperparameters) in key order, so that the same job gives the same bytes.
std::string Deterministic(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  message.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

// A length-0 float vector: what the HParams plugin's summaries carry as their value
// (tensorboard/plugins/hparams/metadata.py, NULL_TENSOR).
TensorProto NullTensor() {
  TensorProto tensor;
  tensor.set_dtype(DT_FLOAT);
  tensor.mutable_tensor_shape()->add_dim()->set_size(0);
  return tensor;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(const std::string& dir,
                                                                         double wall_time,
                                                                         std::string host) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat(dir, ": ", error.message()));
  if (host.empty()) host = HostName();
  const std::string path = absl::StrCat(dir, "/events.out.tfevents.",
                                        static_cast<int64_t>(std::floor(wall_time)), ".", host);
  absl::StatusOr<std::unique_ptr<TfRecordWriter>> records = TfRecordWriter::Create(path);
  if (!records.ok()) return records.status();
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(*std::move(records)));
  Event first;
  first.set_wall_time(wall_time);
  first.set_file_version(kFileVersion);
  first.mutable_source_metadata()->set_writer("mpsd");
  if (absl::Status written = writer->records_->Write(first.SerializeAsString()); !written.ok()) {
    return written;
  }
  return writer;
}

absl::Status EventFileWriter::WriteScalars(int64_t step, double wall_time,
                                           const std::vector<TaggedValue>& values) {
  if (values.empty()) return absl::OkStatus();
  Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  for (const TaggedValue& value : values) {
    Summary::Value* out = event.mutable_summary()->add_value();
    out->set_tag(value.tag);
    out->set_simple_value(static_cast<float>(value.value));
  }
  return records_->Write(event.SerializeAsString());
}

absl::Status EventFileWriter::WritePluginSummary(const char* tag,
                                                 const hparams::HParamsPluginData& data,
                                                 double wall_time) {
  Event event;
  event.set_wall_time(wall_time);
  Summary::Value* value = event.mutable_summary()->add_value();
  value->set_tag(tag);
  SummaryMetadata::PluginData* plugin = value->mutable_metadata()->mutable_plugin_data();
  plugin->set_plugin_name("hparams");
  plugin->set_content(Deterministic(data));
  *value->mutable_tensor() = NullTensor();
  return records_->Write(event.SerializeAsString());
}

absl::Status EventFileWriter::WriteSessionStart(
    const std::map<std::string, google::protobuf::Value>& hparams, double start_time) {
  hparams::HParamsPluginData data;
  hparams::SessionStartInfo* start = data.mutable_session_start_info();
  for (const auto& [name, value] : hparams) (*start->mutable_hparams())[name] = value;
  start->set_start_time_secs(start_time);
  return WritePluginSummary(kSessionStartTag, data, start_time);
}

absl::Status EventFileWriter::WriteSessionEnd(hparams::Status status, double end_time) {
  hparams::HParamsPluginData data;
  data.mutable_session_end_info()->set_status(status);
  data.mutable_session_end_info()->set_end_time_secs(end_time);
  return WritePluginSummary(kSessionEndTag, data, end_time);
}

}  // namespace mpsd::tensorboard
