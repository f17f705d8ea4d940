// How mpsctl shows jobs, events and devices to people: numbers, durations, progress and epoch
// lines, the final summary, the job table. Pure functions of their arguments (no I/O, no clock),
// so tests can pin the exact text. Machine-readable output is protobuf's JSON mapping instead
// (ToJsonLine).
#ifndef MPSD_CLIENT_FORMAT_H_
#define MPSD_CLIENT_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <google/protobuf/message.h>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::client {

// One line of protobuf's JSON mapping, field names as in the proto (and in job files), no
// trailing newline, for programs: fields without presence are printed at their default value
// too (a heartbeat's "seq":0, "skipped":false: protobuf's "always print primitive fields"),
// while an unset `optional` field (an unmeasured metric) stays absent; 64-bit integers are JSON
// numbers, not the mapping's strings (every value mpsd sends is below 2^53, exact as a double);
// keys in the proto's field order. Protobuf's JSON parser reads it back.
std::string ToJsonLine(const google::protobuf::Message& message);

// The shortest "%g" text (6 to 17 significant digits) that reads back as the same double.
std::string ExactNumber(double value);
// 12345 → "12,345".
std::string FormatThousands(int64_t n);
// Samples per second, rounded: "12,345 samples/s".
std::string FormatRate(double samples_per_second);
// A countdown: 42 → "0:42", 3725 → "1:02:05". Negative or non-finite → "-:--".
std::string FormatClock(double seconds);
// A duration for summaries: 9.84 → "9.8 s", 125 → "2m 05s", 7300 → "2h 01m".
std::string FormatSeconds(double seconds);
// An age for tables, kubectl style: "45s", "12m", "3h", "5d".
std::string FormatAge(absl::Duration age);
// Bytes as MiB with one decimal: "123.4 MiB".
std::string FormatMiB(int64_t bytes);
// A file's size in the unit that shows it: "512 B", "2.0 KiB", "123.4 MiB", "1.5 GiB"
// (binary units, one decimal above bytes).
std::string FormatSize(int64_t bytes);

// "TrainJob" / "BenchJob" for the spec's kind; "-" when none is set.
std::string KindName(const v1::SubmitJobRequest& spec);
// Epochs the spec asks for (default 1 for a TrainJob); 0 when unknown.
int TotalEpochs(const v1::SubmitJobRequest& spec);

// An EvalJob summary's confusion matrix (JobSummary.confusion_matrix, confusion_classes) as a
// table: a header of predicted class indices, one line per true class ("3 Dress", index and
// class name when known) with its counts and the row's total, each line starting with `indent`
// and ending in '\n'; "" when the summary has none (or its size is not K × K).
std::string FormatConfusionMatrix(const v1::JobSummary& summary, absl::string_view indent);

// The live progress line: "epoch 1/3  step 120/938  loss 0.4123  acc 0.859  lr 0.001
// 12,345 samples/s  ETA 0:42", with "  scale 65536" for fp16 and " (skipped: inf/NaN
// gradients)" for a skipped step. `total_epochs` 0 leaves out "/N"; a learning rate of 0 (not
// reported) is left out. The ETA counts training steps only.
// `with_eta`: append the time left ("ETA 0:42") when the step says how many are left; false for
// a job that has ended (an early-stopped job never ran its remaining steps).
// with_accuracy false leaves out the step's accuracy (a regression measures none).
std::string FormatProgress(const v1::StepMetrics& step, int total_epochs, bool with_eta = true,
                           bool with_accuracy = true);
// Whether a job's steps measure an accuracy: every job but TrainJob.task regression.
bool HasStepAccuracy(const v1::SubmitJobRequest& spec);
// "epoch 1: train loss 0.4123 acc 0.859, test loss 0.3876 acc 0.861, 9.8 s, 6,123 samples/s".
std::string FormatEpoch(const v1::EpochMetrics& epoch);
// A log event: INFO text as is, WARNING and ERROR prefixed "warning: " / "error: ".
std::string FormatLog(const v1::LogLine& log);
// "checkpoint /state/artifacts/7/checkpoint-epoch-2.pt (epoch 2, step 64, 12.3 MiB)".
std::string FormatCheckpoint(const v1::CheckpointSaved& checkpoint);
// The end of a job, several lines each ending in '\n':
//   job 42 SUCCEEDED in 42.1 s on cpu
//     test accuracy 0.8612, test loss 0.3876, final train loss 0.4123
//     1 epoch, 32 steps, 2,000 train / 500 test examples, 6,123 samples/s, ...
//     memory: allocated before 0.0 MiB, peak 123.4 MiB, after 1.2 MiB
// FAILED adds the reason (as does CANCELLED with one: DEPENDENCY_FAILED, EARLY_STOPPED) and the
// message; `summary` may be null (a job cancelled while queued).
std::string FormatFinal(const std::string& job_id, const v1::StateChange& state,
                        const v1::JobSummary* summary);

// A job's state for a table cell: its State name, except "EARLY_STOPPED" for a sweep trial its
// sweep's scheduler stopped (CANCELLED with failure_reason EARLY_STOPPED): in a sweep's list of
// trials those are the rule working, not trials someone cancelled.
std::string StateCell(const v1::Job& job);

// The table of `mpsctl list`: ID, (NAME when a job has one,) KIND, STATE, MODEL, PROGRESS, AGE,
// (LABELS, BY when a job has them); columns padded to fit (client/text_table.h),
// each row ending in '\n'. "no jobs\n" when empty.
std::string FormatJobTable(const std::vector<v1::Job>& jobs, absl::Time now);
// "owner=ana,project=fmnist": the spec's labels sorted by key.
std::string FormatLabels(const v1::SubmitJobRequest& spec);
// "42%" (or "-" before the first step) from last_step; "100%" for a SUCCEEDED job.
std::string FormatJobProgress(const v1::Job& job);
// `mpsctl get`: labelled lines for the job, its spec as a job file, progress and summary.
std::string FormatJobDetails(const v1::Job& job, absl::Time now);
// `mpsctl device`.
std::string FormatDevice(const v1::DeviceInfo& device);
// `mpsctl models`: NAME, PARAMETERS (with thousands separators), INPUT, CLASSES, DESCRIPTION (or,
// for a model that cannot take the input, why); numbers right-aligned, each row ending in '\n'.
// "no models\n" when empty.
std::string FormatModelTable(const v1::ListModelsResponse& response);
// `mpsctl status`: labelled lines, e.g.
//   streams     2 open, 1 waiting for events
//   queue       3 queued, job 12 running
//   jobs        57
//   memory      45.2 MiB resident
//   uptime      2h 01m
//   events      12,345 stored in 456 commits, 0 pending; 81,234 events/s of commit time
std::string FormatServerStatus(const v1::ServerStatus& status);
// DeleteArtifacts' answer: one line per job (files, bytes, the policy's reason), then the bytes
// freed and left; `dry_run` words it as what would happen.
std::string FormatDeletedArtifacts(const v1::DeleteArtifactsResponse& response, bool dry_run);

// `mpsctl artifacts`: NAME, SIZE (FormatSize, right-aligned), KIND, SHA256; "no artifacts\n" when
// empty.
std::string FormatArtifacts(const v1::ListArtifactsResponse& response);

}  // namespace mpsd::client

#endif  // MPSD_CLIENT_FORMAT_H_
