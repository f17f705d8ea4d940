// The schedules' closed forms (formulas and their sources in schedule.h), and ScheduleSpec's
// validation.
#include "trainer/schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/error_cause.h"

namespace mpsd::trainer {
namespace {

constexpr double kPi = 3.14159265358979323846;

// OneCycleLR's _annealing_cos and _annealing_linear.
double AnnealCos(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1);
}

double AnnealLinear(double start, double end, double pct) { return (end - start) * pct + start; }

// ---- Validation -------------------------------------------------------------------------------

constexpr Interval kMomentumInterval = {0, true, 1, false};  // [0, 1)
constexpr Interval kPctStartInterval = {0, true, 1, true};   // [0, 1]

absl::StatusOr<ScheduleKind> ParseScheduleName(const std::string& name, const FieldChecks& fields) {
  if (name.empty()) return ScheduleKind::kConstant;
  for (const ScheduleKind kind : {ScheduleKind::kConstant, ScheduleKind::kStep,
                                  ScheduleKind::kCosine, ScheduleKind::kOneCycle}) {
    if (name == ScheduleName(kind)) return kind;
  }
  return fields.Error("name",
                      absl::StrFormat("unknown schedule \"%s\" %s", name,
                                      KnownNames({"constant", "step", "cosine", "onecycle"})));
}

bool HasOneCycleField(const mpsd::v1::ScheduleSpec& spec) {
  return spec.has_max_lr() || spec.has_pct_start() || spec.has_div_factor() ||
         spec.has_final_div_factor() || !spec.anneal_strategy().empty() ||
         spec.has_cycle_momentum() || spec.has_base_momentum() || spec.has_max_momentum();
}

// Rejects a field set for a schedule that does not use it.
absl::Status CheckFieldsUsed(const mpsd::v1::ScheduleSpec& spec, ScheduleKind kind,
                             const FieldChecks& fields) {
  const std::string name = ScheduleName(kind);
  if (kind != ScheduleKind::kStep) {
    if (spec.has_step_size_epochs()) return fields.NotFor("step_size_epochs", "step", name);
    if (spec.has_gamma()) return fields.NotFor("gamma", "step", name);
  }
  if (kind != ScheduleKind::kCosine) {
    if (spec.has_warmup_steps()) return fields.NotFor("warmup_steps", "cosine", name);
    if (spec.has_warmup_epochs()) return fields.NotFor("warmup_epochs", "cosine", name);
    if (spec.has_min_lr()) return fields.NotFor("min_lr", "cosine", name);
  }
  if (kind != ScheduleKind::kOneCycle && HasOneCycleField(spec)) {
    return fields.Error("", absl::StrFormat("max_lr, pct_start, div_factor, final_div_factor, "
                                            "anneal_strategy and *_momentum are onecycle's, "
                                            "not %s's",
                                            name));
  }
  return absl::OkStatus();
}

absl::Status ResolveStep(const mpsd::v1::ScheduleSpec& spec, const FieldChecks& fields,
                         ScheduleSettings& settings) {
  ScheduleConfig& config = settings.config;
  if (spec.has_step_size_epochs()) {
    if (absl::Status s = fields.Positive("step_size_epochs", spec.step_size_epochs()); !s.ok()) {
      return s;
    }
    config.step_size_epochs = spec.step_size_epochs();
  }
  if (spec.has_gamma()) {
    config.gamma = spec.gamma();
    return fields.PositiveFinite("gamma", config.gamma);
  }
  return absl::OkStatus();
}

absl::Status ResolveCosine(const mpsd::v1::ScheduleSpec& spec, const FieldChecks& fields,
                           ScheduleSettings& settings) {
  ScheduleConfig& config = settings.config;
  if (spec.has_warmup_steps() && spec.has_warmup_epochs()) {
    return fields.Error("warmup_epochs", "set at most one of warmup_steps and warmup_epochs");
  }
  if (spec.has_warmup_steps()) {
    if (absl::Status s = fields.AtLeast("warmup_steps", spec.warmup_steps(), 0); !s.ok()) {
      return s;
    }
    config.warmup_steps = spec.warmup_steps();
  }
  if (spec.has_warmup_epochs()) {
    settings.warmup_epochs = spec.warmup_epochs();
    if (absl::Status s = fields.NonNegativeFinite("warmup_epochs", settings.warmup_epochs);
        !s.ok()) {
      return s;
    }
  }
  if (spec.has_min_lr()) {
    config.min_lr = spec.min_lr();
    return fields.NonNegativeFinite("min_lr", config.min_lr);
  }
  return absl::OkStatus();
}

// onecycle's learning rates: max_lr, pct_start, div_factor, final_div_factor, anneal_strategy.
absl::Status ResolveOneCycleRates(const mpsd::v1::ScheduleSpec& spec, const FieldChecks& fields,
                                  ScheduleConfig& config) {
  config.max_lr = spec.has_max_lr() ? spec.max_lr() : config.base_lr;
  if (absl::Status s = fields.PositiveFinite("max_lr", config.max_lr); !s.ok()) return s;
  if (spec.has_pct_start()) {
    config.pct_start = spec.pct_start();
    if (absl::Status s = fields.InRange("pct_start", config.pct_start, kPctStartInterval);
        !s.ok()) {
      return s;
    }
  }
  if (spec.has_div_factor()) {
    config.div_factor = spec.div_factor();
    if (absl::Status s = fields.PositiveFinite("div_factor", config.div_factor); !s.ok()) return s;
  }
  if (spec.has_final_div_factor()) {
    config.final_div_factor = spec.final_div_factor();
    if (absl::Status s = fields.PositiveFinite("final_div_factor", config.final_div_factor);
        !s.ok()) {
      return s;
    }
  }
  if (spec.anneal_strategy() == "linear") {
    config.anneal_cos = false;
  } else if (!spec.anneal_strategy().empty() && spec.anneal_strategy() != "cos") {
    return fields.Error(
        "anneal_strategy",
        absl::StrFormat("must be \"cos\" or \"linear\", got \"%s\"", spec.anneal_strategy()));
  }
  return absl::OkStatus();
}

// onecycle's momentum: cycle_momentum, base_momentum, max_momentum.
absl::Status ResolveOneCycleMomentum(const mpsd::v1::ScheduleSpec& spec, const FieldChecks& fields,
                                     ScheduleConfig& config) {
  config.cycle_momentum = !spec.has_cycle_momentum() || spec.cycle_momentum();
  if (spec.has_base_momentum()) config.base_momentum = spec.base_momentum();
  if (spec.has_max_momentum()) config.max_momentum = spec.max_momentum();
  if (absl::Status s = fields.InRange("base_momentum", config.base_momentum, kMomentumInterval);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = fields.InRange("max_momentum", config.max_momentum, kMomentumInterval);
      !s.ok()) {
    return s;
  }
  if (config.base_momentum > config.max_momentum) {
    return fields.Error("base_momentum",
                        absl::StrCat("must be <= max_momentum ", config.max_momentum, ", got ",
                                     config.base_momentum));
  }
  return absl::OkStatus();
}

absl::Status ResolveOneCycle(const mpsd::v1::ScheduleSpec& spec, const FieldChecks& fields,
                             ScheduleSettings& settings) {
  if (absl::Status s = ResolveOneCycleRates(spec, fields, settings.config); !s.ok()) return s;
  return ResolveOneCycleMomentum(spec, fields, settings.config);
}

}  // namespace

absl::StatusOr<ScheduleSettings> ResolveSchedule(const mpsd::v1::ScheduleSpec& spec, double base_lr,
                                                 const FieldChecks& fields) {
  ScheduleSettings settings;
  settings.config.base_lr = base_lr;
  absl::StatusOr<ScheduleKind> kind = ParseScheduleName(spec.name(), fields);
  if (!kind.ok()) return kind.status();
  settings.config.kind = *kind;
  if (absl::Status s = CheckFieldsUsed(spec, *kind, fields); !s.ok()) return s;
  absl::Status status;
  switch (*kind) {
    case ScheduleKind::kConstant:
      break;
    case ScheduleKind::kStep:
      status = ResolveStep(spec, fields, settings);
      break;
    case ScheduleKind::kCosine:
      status = ResolveCosine(spec, fields, settings);
      break;
    case ScheduleKind::kOneCycle:
      status = ResolveOneCycle(spec, fields, settings);
      break;
  }
  if (!status.ok()) return status;
  return settings;
}

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

std::string DescribeSchedule(const ScheduleConfig& c) {
  std::string text = ScheduleName(c.kind);
  switch (c.kind) {
    case ScheduleKind::kConstant:
      break;
    case ScheduleKind::kStep:
      absl::StrAppendFormat(&text, " (×%g every %d epoch(s))", c.gamma, c.step_size_epochs);
      break;
    case ScheduleKind::kCosine:
      absl::StrAppendFormat(&text, " (warm-up %d step(s), min_lr %g)", c.warmup_steps, c.min_lr);
      break;
    case ScheduleKind::kOneCycle:
      absl::StrAppendFormat(&text, " (max_lr %g, pct_start %g, %s%s)", c.max_lr, c.pct_start,
                            c.anneal_cos ? "cos" : "linear",
                            c.cycle_momentum ? ", cycling momentum" : "");
      break;
  }
  return text;
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
        return absl::InvalidArgumentError(
            absl::StrFormat("warm-up of %d steps leaves no step of the job's %d for the cosine",
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
        return api::WithInvalidField(
            absl::InvalidArgumentError(absl::StrFormat(
                "onecycle's first phase is empty: pct_start %g × %d total steps = 1 (OneCycleLR "
                "divides by pct_start × total_steps − 1)",
                config.pct_start, config.total_steps)),
            "pct_start");
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
