// The schedules' closed forms (formulas and their sources in schedule.h).
#include "trainer/schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace mpsd::trainer {
namespace {

constexpr double kPi = 3.14159265358979323846;

// OneCycleLR's _annealing_cos and _annealing_linear.
double AnnealCos(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1);
}

double AnnealLinear(double start, double end, double pct) { return (end - start) * pct + start; }

}  // namespace

int64_t StepsPerEpoch(int64_t train_examples, int64_t batch_size, bool drop_last,
                      int64_t grad_accumulation_steps) {
  const int64_t batches =
      drop_last ? train_examples / batch_size : (train_examples + batch_size - 1) / batch_size;
  return (batches + grad_accumulation_steps - 1) / grad_accumulation_steps;
}

std::string ScheduleName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kConstant:
      return "constant";
    case ScheduleKind::kStep:
      return "step";
    case ScheduleKind::kCosine:
      return "cosine";
    case ScheduleKind::kOneCycle:
      return "onecycle";
  }
  return "unknown";
}

absl::StatusOr<Schedule> Schedule::Create(const ScheduleConfig& config) {
  if (config.steps_per_epoch < 1 || config.total_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the job has no optimizer step (%d per epoch, %d in all)",
                        config.steps_per_epoch, config.total_steps));
  }
  switch (config.kind) {
    case ScheduleKind::kConstant:
    case ScheduleKind::kStep:
      break;
    case ScheduleKind::kCosine:
      if (config.warmup_steps >= config.total_steps && config.warmup_steps > 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "warm-up of %d steps leaves no step of the job's %d for the cosine",
            config.warmup_steps, config.total_steps));
      }
      break;
    case ScheduleKind::kOneCycle:
      if (config.total_steps < 2) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "onecycle needs at least 2 optimizer steps in all (one per phase), got %d",
            config.total_steps));
      }
      // Phase 1 would be 0 steps long and OneCycleLR would divide by zero at step 0.
      if (config.pct_start * static_cast<double>(config.total_steps) == 1.0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "onecycle's first phase is empty: pct_start %g × %d total steps = 1 (OneCycleLR "
            "divides by pct_start × total_steps − 1)",
            config.pct_start, config.total_steps));
      }
      break;
  }
  return Schedule(config);
}

double Schedule::OneCycle(int64_t step, double phase1_start, double phase1_end,
                          double phase2_end) const {
  const double total = static_cast<double>(config_.total_steps);
  const double phase1_last = config_.pct_start * total - 1;  // float, as in OneCycleLR
  const double phase2_last = total - 1;
  const auto anneal = config_.anneal_cos ? AnnealCos : AnnealLinear;
  const double t = static_cast<double>(step);
  if (t <= phase1_last) return anneal(phase1_start, phase1_end, t / phase1_last);
  if (phase2_last <= phase1_last) return phase2_end;  // pct_start 1: past the end, no phase 2
  return anneal(phase1_end, phase2_end, (t - phase1_last) / (phase2_last - phase1_last));
}

double Schedule::LearningRate(int64_t step) const {
  const ScheduleConfig& c = config_;
  switch (c.kind) {
    case ScheduleKind::kConstant:
      return c.base_lr;
    case ScheduleKind::kStep: {
      const int64_t epoch = step / c.steps_per_epoch;
      return c.base_lr * std::pow(c.gamma, static_cast<double>(epoch / c.step_size_epochs));
    }
    case ScheduleKind::kCosine: {
      if (step < c.warmup_steps) {
        return c.base_lr * static_cast<double>(step) / static_cast<double>(c.warmup_steps);
      }
      const double span = static_cast<double>(c.total_steps - c.warmup_steps);
      const double t = std::min(static_cast<double>(step - c.warmup_steps), span);
      return c.min_lr + (c.base_lr - c.min_lr) * (1 + std::cos(kPi * t / span)) / 2;
    }
    case ScheduleKind::kOneCycle: {
      const double initial_lr = c.max_lr / c.div_factor;
      const double min_lr = initial_lr / c.final_div_factor;
      return OneCycle(step, initial_lr, c.max_lr, min_lr);
    }
  }
  return c.base_lr;
}

std::optional<double> Schedule::Momentum(int64_t step) const {
  if (config_.kind != ScheduleKind::kOneCycle || !config_.cycle_momentum) return std::nullopt;
  return OneCycle(step, config_.max_momentum, config_.base_momentum, config_.max_momentum);
}

}  // namespace mpsd::trainer
