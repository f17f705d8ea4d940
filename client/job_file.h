// Job files: YAML documents that become mpsd.v1.SubmitJobRequest, and back.
//
//   kind: TrainJob                      # picks the `spec` oneof member whose message is TrainJob
//   priority: 5                         # fields of SubmitJobRequest itself (outside `spec`):
//   request_id: nightly-2024-05-01      #   priority, request_id
//   model: {name: convnet}              # every other key is a field of that message, by its
//   dataset: {name: fashion-mnist, limit_train: 2000}   # proto field name, nested as in the proto
//   batch_size: 64
//
// Values are typed by the field, not by how they look: a plain scalar for a string field stays a
// string (`resume_from: 12` is "12"), integers must be integers in range, enums are given by name,
// repeated fields are YAML sequences, and `key:` with no value (or `~`, `null`) leaves the field
// unset.
#ifndef MPSD_CLIENT_JOB_FILE_H_
#define MPSD_CLIENT_JOB_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::client {

// Parses the text of a job file; `filename` only labels the errors.
//
// On bad input returns InvalidArgument whose message has one line per problem, in document order,
// each naming the file, the 1-based line and column when known, and the key path:
//   job.yaml:4:42: dataset.limt_train: unknown field (did you mean "limit_train"?)
//   job.yaml:5:13: batch_size: expected an integer, got "sixty"
//   job.yaml: missing "kind" (expected TrainJob, BenchJob, EvalJob or PredictJob)
//   job.yaml:1:7: kind: unknown "TranJob" (expected TrainJob, BenchJob, EvalJob or PredictJob)
//   job.yaml:3:1: YAML syntax error: illegal map value
// Thread-safe.
absl::StatusOr<mpsd::v1::SubmitJobRequest> ParseJobFile(absl::string_view yaml,
                                                        absl::string_view filename);

// Submits carry a request_id, so that a retry after a timeout finds the job the first attempt
// created instead of creating another: mpsctl makes one up when neither the file nor
// --request-id gives one, "mpsctl-" and 32 hex digits from /dev/urandom.
inline constexpr absl::string_view kGeneratedRequestIdPrefix = "mpsctl-";
std::string NewRequestId();
// Whether `request_id` is one NewRequestId made (FormatJobFile leaves those out).
bool IsGeneratedRequestId(absl::string_view request_id);

// The largest job file ReadJobFile reads, bytes (1 MiB; the Python client's limit too). A job
// is a few hundred bytes of YAML; this bounds what a mistaken path (a log, a dataset) costs.
inline constexpr int64_t kMaxJobFileBytes = int64_t{1} << 20;

// Reads `path` and parses it as above, then applies MakePathsAbsolute against `path`.
// INVALID_ARGUMENT "PATH: ..." for what is not a regular file (a FIFO, /dev/zero, a directory;
// the open never blocks) and for a file over kMaxJobFileBytes; NotFound / PermissionDenied / ...
// (from errno) when the file cannot be read; the message names the path.
absl::StatusOr<mpsd::v1::SubmitJobRequest> ReadJobFile(const std::string& path);

// Makes the job's relative file paths absolute against the directory of `job_file` (itself
// taken against the current directory), since the daemon resolves relative paths against its
// own working directory: a TrainJob's model.torchscript, model.weights, loss.torchscript,
// metrics' torchscript, dataset.root, and resume_from unless it is a job id (all digits); a
// BenchJob's models that are TorchScript files (ending in ".pt" or holding a '/'); an EvalJob's
// model (unless a job id) and dataset.root; a PredictJob's model (unless a job id) and inputs.
// Absolute paths and empty fields are left alone. Thread-safe.
void MakePathsAbsolute(mpsd::v1::SubmitJobRequest& request, const std::string& job_file);

// The job file for `request`: `kind:` first, then the set request-level fields (priority,
// request_id), then the spec's set fields in proto order. Strings that YAML
// would read as another type are quoted, so any YAML reader (PyYAML too) reads the same values
// back, and ParseJobFile(FormatJobFile(r)) == r. Empty string when no spec is set.
std::string FormatJobFile(const mpsd::v1::SubmitJobRequest& request);

}  // namespace mpsd::client

#endif  // MPSD_CLIENT_JOB_FILE_H_
