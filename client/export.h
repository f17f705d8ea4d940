// `mpsctl export`: a job's stored events as files other tools read: TensorBoard event files
// (api/tensorboard/), CSV tables, or JSON Lines. Tags, columns and layout: docs/metrics-export.md.
#ifndef MPSD_CLIENT_EXPORT_H_
#define MPSD_CLIENT_EXPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::client {

enum class ExportFormat { kTensorBoard, kCsv, kJsonl };

// "tensorboard", "csv", "jsonl". INVALID_ARGUMENT naming --format and the choices otherwise.
absl::StatusOr<ExportFormat> ParseExportFormat(absl::string_view name);

// Writes one job under `dir`/`run`/ (run: api/tensorboard/job_history.h RunName) from its events,
// fed in seq order. Not thread-safe.
//   kTensorBoard: events.out.tfevents.<created_at seconds>.<host> (the same name on every export
//     of a job, so a second export replaces the first rather than doubling its curves): the
//     HParams session (the effective spec, api/effective_spec.h), one
//     value per step and epoch (the latest attempt's), the "final/" metrics, the session's end.
//   kCsv: steps.csv (one row per step, a column per StepMetrics field, wall_time) and epochs.csv
//     (one row per epoch, a column per EpochMetrics field, an unmeasured value empty).
//   kJsonl: events.jsonl, every event as one JSON object per line, as `mpsctl logs --json`.
// Errors name the file (INTERNAL, RESOURCE_EXHAUSTED for a full disk).
class JobExporter {
 public:
  static absl::StatusOr<std::unique_ptr<JobExporter>> Start(const v1::Job& job, ExportFormat format,
                                                            const std::string& dir,
                                                            const std::string& run);
  virtual ~JobExporter() = default;
  virtual absl::Status Add(const v1::JobEvent& event) = 0;
  // Writes what is left and closes; returns the files written.
  virtual absl::StatusOr<std::vector<std::string>> Finish() = 0;
};

}  // namespace mpsd::client

#endif  // MPSD_CLIENT_EXPORT_H_
