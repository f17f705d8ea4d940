// Learning-rate schedules in closed form: the learning rate (and, for OneCycleLR, the momentum)
// of optimizer step t is a function of t alone, so a resumed job needs only its step counter.
// Also a ScheduleSpec's validation. Torch-free, so the formulas are unit-testable without a
// device.
#ifndef MPSD_TRAINER_SCHEDULE_H_
#define MPSD_TRAINER_SCHEDULE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/field_checks.h"

namespace mpsd::trainer {

// Optimizer steps (updates) in one epoch of `train_examples` examples: the epoch has
// ceil(N / batch_size) batches (floor with drop_last), and every `grad_accumulation_steps`
// batches make one step. A partial accumulation group at the epoch's end still makes one step
// (with fewer batches; each batch's loss is still divided by grad_accumulation_steps, as the
// usual PyTorch loop does), so the count rounds up. 0 when the epoch has no batch. Arguments
// must be > 0 (train_examples >= 0).
int64_t StepsPerEpoch(int64_t train_examples, int64_t batch_size, bool drop_last,
                      int64_t grad_accumulation_steps);

enum class ScheduleKind { kConstant, kStep, kCosine, kOneCycle };

// A schedule's parameters with every default applied. Learning rates are plain floats (PyTorch's
// units); steps count optimizer updates.
struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::kConstant;
  // The optimizer's learning rate: constant's value, step's and cosine's starting point.
  double base_lr = 1e-3;
  // Optimizer steps in one epoch and in the whole job (StepsPerEpoch × epochs).
  int64_t steps_per_epoch = 1;
  int64_t total_steps = 1;
  // step (StepLR over epochs): lr × gamma^floor(epoch / step_size_epochs), epoch 0-based.
  int64_t step_size_epochs = 1;
  double gamma = 0.1;
  // cosine: linear warm-up over warmup_steps, then cosine annealing down to min_lr.
  int64_t warmup_steps = 0;
  double min_lr = 0;
  // onecycle (OneCycleLR's arguments).
  double max_lr = 1e-3;
  double pct_start = 0.3;
  double div_factor = 25;
  double final_div_factor = 1e4;
  bool anneal_cos = true;  // anneal_strategy "cos"; false = "linear"
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};

// "constant", "step", "cosine", "onecycle".
std::string ScheduleName(ScheduleKind kind);

// "onecycle (max_lr 0.1, pct_start 0.3, cos, cycling momentum)", "step (×0.1 every 2
// epoch(s))": the kind and its parameters for a job's log.
std::string DescribeSchedule(const ScheduleConfig& config);

// A ScheduleSpec resolved, before the job's steps are known: `config` without steps_per_epoch
// and total_steps (the caller fills them from the training split, and warmup_steps from
// warmup_epochs).
struct ScheduleSettings {
  ScheduleConfig config;
  // cosine's warm-up in epochs; < 0: unset.
  double warmup_epochs = -1;
};

// The kind and parameters of `spec` with OneCycleLR's and the proto's defaults; `base_lr` is the
// optimizer's learning rate (onecycle's max_lr defaults to it). INVALID_ARGUMENT from `fields`
// (the spec's path, "train_job.schedule") for an unknown name, a value out of range, or a field
// of another schedule ("gamma" for cosine). Thread-safe.
absl::StatusOr<ScheduleSettings> ResolveSchedule(const mpsd::v1::ScheduleSpec& spec, double base_lr,
                                                 const FieldChecks& fields);

// A schedule as a function of the step. Immutable, so any thread may use it.
class Schedule {
 public:
  // Checks the config's internal consistency: INVALID_ARGUMENT without a field path, e.g.
  // "onecycle needs at least 2 optimizer steps in all, got 1" (OneCycleLR divides by both
  // phases' lengths, so neither may be 0: total_steps >= 2 and pct_start × total_steps != 1),
  // "warm-up of 500 steps leaves no step of the job's 400 for the cosine".
  static absl::StatusOr<Schedule> Create(const ScheduleConfig& config);

  // The learning rate of optimizer step `step` (0-based: the first update uses LearningRate(0)),
  // i.e. what PyTorch's scheduler has set after `step` calls of scheduler.step():
  //   constant: base_lr.
  //   step:     base_lr × gamma^floor((step / steps_per_epoch) / step_size_epochs) (StepLR
  //             stepped once per epoch).
  //   cosine:   step < W: base_lr × step / W (linear warm-up from 0, as transformers'
  //             get_cosine_schedule_with_warmup); then with t = step − W, T = total_steps − W,
  //             min_lr + (base_lr − min_lr) × (1 + cos(π × min(t, T) / T)) / 2
  //             (CosineAnnealingLR's closed form with T_max = T, eta_min = min_lr).
  //   onecycle: PyTorch OneCycleLR.get_lr (three_phase=False): initial_lr = max_lr/div_factor,
  //             min_lr = initial_lr/final_div_factor; phase 1 ends at pct_start×total_steps − 1
  //             going initial_lr → max_lr, phase 2 ends at total_steps − 1 going max_lr →
  //             min_lr; within a phase pct = (step − phase start)/(phase end − phase start) and
  //             cos: end + (start − end)/2 × (1 + cos(π pct)), linear: start + (end − start) pct.
  // Any step >= 0 is allowed (past the end each formula continues as PyTorch's would, cosine
  // stays at min_lr).
  double LearningRate(int64_t step) const;

  // onecycle with cycle_momentum: the momentum (SGD) or beta1 (Adam/AdamW) of step `step`,
  // annealed like the learning rate between max_momentum (phase 1 start, phase 2 end) and
  // base_momentum (phase 1 end); nullopt otherwise (the optimizer's own value holds).
  std::optional<double> Momentum(int64_t step) const;

  const ScheduleConfig& config() const { return config_; }

 private:
  explicit Schedule(const ScheduleConfig& config) : config_(config) {}

  // OneCycleLR: anneals from `start` to `end` by the phase of `step`. `phase1_start` and
  // `phase1_end` are the phase-1 values (lr or momentum); phase 2 goes from phase1_end to
  // `phase2_end`.
  double OneCycle(int64_t step, double phase1_start, double phase1_end, double phase2_end) const;

  ScheduleConfig config_;
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_SCHEDULE_H_
