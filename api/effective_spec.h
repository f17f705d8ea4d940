// The effective spec: a job spec with every documented default written out. It is the one place
// those defaults live: the executor applies it to every spec before it reads one (Validate, Run,
// PlanFusion, RunFused in trainer/torch_executor.cc), so a default set here is the default a job
// runs with, and clients apply it to show and compare jobs by what they ran with rather than by
// what their files happened to spell out (`mpsctl compare`, the TensorBoard export's hparams).
#ifndef MPSD_API_EFFECTIVE_SPEC_H_
#define MPSD_API_EFFECTIVE_SPEC_H_

#include <string>

#include "absl/strings/string_view.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::api {

// `request` with every unset field that has a documented default set to it (mpsd.proto's comments
// and docs/job-files.md), including those that depend on another field (learning_rate 0.01 for
// sgd, else 0.001; weight_decay 0.01 for adamw; the schedule's own keys only for that schedule;
// the task's loss). Fields without a fixed default (seed, dataset root, a limit of 0 = all, an
// EvalJob's batch_size: its TrainJob's) stay as they are, and a field already set is never
// changed, so applying it twice changes nothing. Values are not checked (Validate does). Pure;
// thread-safe.
mpsd::v1::SubmitJobRequest EffectiveSpec(mpsd::v1::SubmitJobRequest request);

// What `job` ran (or will run) with: its stored effective_spec, or for a job stored before mpsd
// kept one, EffectiveSpec(job.spec()). A sweep's own spec (a sweep has no effective spec) as
// it is. Pure; thread-safe.
mpsd::v1::SubmitJobRequest EffectiveSpecOf(const mpsd::v1::Job& job);

// The directory a published dataset is read from when its spec names no `root`: Debian's
// dataset packages' layout, "/usr/share/datasets/<name>" for fashion-mnist, mnist and cifar10;
// "" for any other name (synthetic has no files; image_folder and tensors need a root). The
// trainer reads its files there, the daemon holds it to the data roots (server/access), and
// EffectiveSpec writes it into dataset.root. Pure; thread-safe.
std::string DefaultDatasetRoot(absl::string_view dataset_name);

}  // namespace mpsd::api

#endif  // MPSD_API_EFFECTIVE_SPEC_H_
