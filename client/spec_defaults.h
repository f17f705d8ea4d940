// A job spec with the defaults the daemon applies written out, for comparing jobs by what they
// ran with rather than by what their files happened to spell out (`mpsctl compare`).
#ifndef MPSD_CLIENT_SPEC_DEFAULTS_H_
#define MPSD_CLIENT_SPEC_DEFAULTS_H_

#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::client {

// `request` with every unset field that has a documented default set to it: the defaults of
// mpsd.proto's comments and docs/job-files.md, which the trainer applies
// (trainer/train_job.cc, optimizers.cc, schedule.cc, bench.cc), including those that depend on
// another field (learning_rate 0.01 for sgd, else 0.001; weight_decay 0.01 for adamw; the
// schedule's own keys only for that schedule). Fields without a fixed default (seed, dataset
// root, a limit of 0 = all) stay as they are. Pure; thread-safe.
mpsd::v1::SubmitJobRequest WithDefaults(mpsd::v1::SubmitJobRequest request);

}  // namespace mpsd::client

#endif  // MPSD_CLIENT_SPEC_DEFAULTS_H_
