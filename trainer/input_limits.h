// The executor process's input limits (api/input_limits.h), read where files are opened.
// Torch-free (mpsd_trainer_base).
//
// A process-wide setting like LibTorch's thread count: mpsd-executor sets it once from its
// flags before it serves anything (executor_main.cc), and every reader of a file a job names
// reads it (state dicts, tensors files, TorchScript models, checkpoints, IDX files, images).
// Tests set it before the readers run.
#ifndef MPSD_TRAINER_INPUT_LIMITS_H_
#define MPSD_TRAINER_INPUT_LIMITS_H_

#include "api/input_limits.h"

namespace mpsd::trainer {

// Replaces the process's limits. Thread-safe (readers see the old or the new value whole).
void SetInputLimits(const api::InputLimits& limits);

// The process's limits; api::InputLimits' defaults until SetInputLimits. Thread-safe.
api::InputLimits CurrentInputLimits();

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_INPUT_LIMITS_H_
