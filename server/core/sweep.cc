// Sweep expansion: field paths resolved by the spec's descriptors, values parsed by the field's
// type, grid points as an odometer, random draws from mt19937_64 (its output sequence is fixed
// by the C++ standard, unlike std::uniform_real_distribution's, so a seed means the same trials
// with libstdc++ and libc++).
#include "server/core/sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "api/decimal.h"
#include "api/effective_spec.h"
#include "api/field_text.h"
#include "server/core/trial_stopping.h"

namespace mpsd::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using mpsd::v1::SubmitJobRequest;
using mpsd::v1::SweepParameter;

// The message of the spec oneof (TrainJob, BenchJob or EvalJob) inside `request`.
Message* SpecOf(SubmitJobRequest& request) {
  const google::protobuf::OneofDescriptor* spec =
      SubmitJobRequest::descriptor()->FindOneofByName("spec");
  const FieldDescriptor* set = request.GetReflection()->GetOneofFieldDescriptor(request, spec);
  if (set == nullptr) return nullptr;
  return request.GetReflection()->MutableMessage(&request, set);
}

// A swept field: the messages on its path are created as needed in `spec`.
struct Target {
  Message* message = nullptr;
  const FieldDescriptor* field = nullptr;
};

// "optimizer.learning_rate" for "learning_rate" in TrainJob: the one message field of `type`
// whose message has a field `name` (a grid key written without its message's prefix); nullopt
// where none or several do.
std::optional<std::string> NestedFieldPath(const google::protobuf::Descriptor& type,
                                           const std::string& name) {
  std::optional<std::string> found;
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor& field = *type.field(i);
    if (field.is_repeated() || field.message_type() == nullptr ||
        field.message_type()->FindFieldByName(name) == nullptr) {
      continue;
    }
    if (found.has_value()) return std::nullopt;
    found = absl::StrCat(field.name(), ".", name);
  }
  return found;
}

absl::StatusOr<Target> Resolve(Message& spec, const std::string& path, const std::string& where) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"", path, "\": ", why));
  };
  if (path.empty()) return bad("empty path (e.g. optimizer.learning_rate)");
  Message* message = &spec;
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const Descriptor& type = *message->GetDescriptor();
    const FieldDescriptor* field = type.FindFieldByName(parts[i]);
    if (field == nullptr) {
      std::optional<std::string> meant = api::ClosestName(parts[i], api::FieldNames(type));
      if (!meant.has_value()) meant = NestedFieldPath(type, parts[i]);
      return bad(
          absl::StrCat(type.name(), " has no field \"", parts[i], "\"",
                       meant.has_value() ? absl::StrCat(" (did you mean \"", *meant, "\"?)") : ""));
    }
    if (field->is_repeated()) {
      return bad(absl::StrCat(parts[i], " is a list; only single values can be swept"));
    }
    const bool last = i + 1 == parts.size();
    const bool is_message = field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (last && is_message) {
      return bad(absl::StrCat(parts[i], " is a message; name one of its fields"));
    }
    if (!last && !is_message) return bad(absl::StrCat(parts[i], " has no fields"));
    if (last) return Target{message, field};
    message = message->GetReflection()->MutableMessage(message, field);
  }
  return bad("empty path");
}

bool IsInteger(const FieldDescriptor& field) {
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return true;
    default:
      return false;
  }
}

// Sets the field from `text` read as its type, by the rules job files use (api/field_text.h:
// "yes" is true here as in a job file); the error says where and what was expected.
absl::Status SetFromText(const Target& target, const std::string& text, const std::string& where) {
  absl::Status set = api::SetFieldFromText(*target.message, *target.field, text);
  if (set.ok()) return set;
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", api::QuoteText(text),
                                                 " is not a value of ", target.field->full_name(),
                                                 " (", set.message(), ")"));
}

// A parameter as checked: where it is in the request, which field it sets, how it is drawn.
struct Axis {
  std::string where;  // "sweep.grid[0]"
  const SweepParameter* parameter = nullptr;
  const FieldDescriptor* field = nullptr;
  // Grid values, or random choices; empty for a range.
  std::vector<std::string> values;
  bool log = false;  // log_uniform
  double low = 0, high = 0;
};

absl::Status CheckRange(const google::protobuf::RepeatedField<double>& range, bool log,
                        const std::string& where, Axis& axis) {
  if (range.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": expected [low, high], two numbers, got ", range.size(), " number(s)"));
  }
  if (!std::isfinite(range[0]) || !std::isfinite(range[1]) || !(range[0] < range[1])) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected [low, high] with low < high"));
  }
  if (log && range[0] <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": low must be > 0 (log scale)"));
  }
  if (!IsInteger(*axis.field) && axis.field->cpp_type() != FieldDescriptor::CPPTYPE_DOUBLE &&
      axis.field->cpp_type() != FieldDescriptor::CPPTYPE_FLOAT) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": a range needs a number field; ",
                                                   axis.field->full_name(), " is not one"));
  }
  axis.log = log;
  axis.low = range[0];
  axis.high = range[1];
  return absl::OkStatus();
}

// Checks one parameter against a scratch copy of the spec: its path and every listed value.
absl::StatusOr<Axis> CheckParameter(const SweepParameter& p, const std::string& where, bool random,
                                    const SubmitJobRequest& request) {
  SubmitJobRequest scratch = request;
  Message* spec = SpecOf(scratch);
  if (spec == nullptr) {
    return absl::InvalidArgumentError("spec: a sweep needs train_job, bench_job or eval_job");
  }
  absl::StatusOr<Target> target = Resolve(*spec, p.path(), absl::StrCat(where, ".path"));
  if (!target.ok()) return target.status();
  Axis axis;
  axis.where = where;
  axis.parameter = &p;
  axis.field = target->field;
  const int kinds = (p.values_size() > 0) + (p.choice_size() > 0) + (p.uniform_size() > 0) +
                    (p.log_uniform_size() > 0);
  if (!random) {
    if (kinds == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " (", p.path(), "): no values; a grid parameter takes a non-empty list of them"));
    }
    if (p.values_size() == 0 || kinds != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " (", p.path(),
                       "): a grid parameter takes a list of values, nothing else (choice, "
                       "uniform and log_uniform are for sweep.random's parameters)"));
    }
  } else if (kinds != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " (", p.path(), "): set exactly one of values, choice, uniform, log_uniform",
        kinds == 0 ? " (an empty list sets none)" : ""));
  }
  if (p.uniform_size() > 0) {
    if (absl::Status s =
            CheckRange(p.uniform(), false, absl::StrCat(where, ".uniform (", p.path(), ")"), axis);
        !s.ok()) {
      return s;
    }
    return axis;
  }
  if (p.log_uniform_size() > 0) {
    if (absl::Status s = CheckRange(p.log_uniform(), true,
                                    absl::StrCat(where, ".log_uniform (", p.path(), ")"), axis);
        !s.ok()) {
      return s;
    }
    return axis;
  }
  const auto& listed = p.values_size() > 0 ? p.values() : p.choice();
  const char* name = p.values_size() > 0 ? "values" : "choice";
  // A grid's values as set in the field (0.01 and 1e-2 are one value): a repeat would train the
  // same trial twice. A random choice may repeat a value to draw it more often.
  std::map<std::string, int> grid_values;
  for (int i = 0; i < listed.size(); ++i) {
    const std::string at = absl::StrCat(where, ".", name, "[", i, "] (", p.path(), ")");
    if (absl::Status s = SetFromText(*target, listed[i], at); !s.ok()) return s;
    if (!random) {
      const auto [first, added] =
          grid_values.emplace(target->message->SerializePartialAsString(), i);
      if (!added) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ": ", api::QuoteText(listed[i]), " is the value of values[", first->second, "] (",
            api::QuoteText(listed[first->second]), ") again; a grid trains each value once"));
      }
    }
    axis.values.push_back(listed[i]);
  }
  return axis;
}

// A draw u in [0, 1): the top 53 bits of the generator's next output.
double Uniform01(std::mt19937_64& generator) {
  return static_cast<double>(generator() >> 11) * 0x1.0p-53;
}

std::string Draw(const Axis& axis, std::mt19937_64& generator) {
  const double u = Uniform01(generator);
  if (!axis.values.empty()) {
    size_t i = static_cast<size_t>(u * static_cast<double>(axis.values.size()));
    if (i >= axis.values.size()) i = axis.values.size() - 1;
    return axis.values[i];
  }
  const double x =
      axis.log ? std::exp(std::log(axis.low) + u * (std::log(axis.high) - std::log(axis.low)))
               : axis.low + u * (axis.high - axis.low);
  // Rounded as a double: a range beyond int64 draws a value the field's range check refuses,
  // never one llround wrapped around.
  if (IsInteger(*axis.field)) return absl::StrFormat("%.0f", std::round(x));
  return api::ShortestDecimal(x);
}

absl::StatusOr<std::vector<Axis>> CheckAxes(const SubmitJobRequest& request,
                                            std::vector<Axis>& grid) {
  const mpsd::v1::SweepSpec& sweep = request.sweep();
  std::set<std::string> paths;
  auto once = [&](const Axis& axis) -> absl::Status {
    if (paths.insert(axis.parameter->path()).second) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(axis.where, ".path: \"", axis.parameter->path(), "\" is swept twice"));
  };
  for (int i = 0; i < sweep.grid_size(); ++i) {
    absl::StatusOr<Axis> axis =
        CheckParameter(sweep.grid(i), absl::StrCat("sweep.grid[", i, "]"), false, request);
    if (!axis.ok()) return axis.status();
    if (absl::Status s = once(*axis); !s.ok()) return s;
    grid.push_back(*std::move(axis));
  }
  std::vector<Axis> random;
  for (int i = 0; i < sweep.random().parameters_size(); ++i) {
    absl::StatusOr<Axis> axis =
        CheckParameter(sweep.random().parameters(i),
                       absl::StrCat("sweep.random.parameters[", i, "]"), true, request);
    if (!axis.ok()) return axis.status();
    if (absl::Status s = once(*axis); !s.ok()) return s;
    random.push_back(*std::move(axis));
  }
  if (grid.empty() && random.empty()) {
    return absl::InvalidArgumentError(
        "sweep: no parameters (set grid: or random: {trials, seed, parameters})");
  }
  if (!random.empty() && sweep.random().trials() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sweep.random.trials: must be >= 1, got ", sweep.random().trials()));
  }
  if (random.empty() && sweep.random().trials() != 0) {
    return absl::InvalidArgumentError("sweep.random.parameters: trials given but no parameters");
  }
  return random;
}

// Grid points × random trials, bounded before anything is built.
absl::StatusOr<int64_t> TrialCount(const std::vector<Axis>& grid, const std::vector<Axis>& random,
                                   int32_t trials) {
  // As a double: the product of a few huge lists does not overflow.
  double count = random.empty() ? 1 : trials;
  std::vector<std::string> factors;
  for (const Axis& axis : grid) {
    count *= static_cast<double>(axis.values.size());
    factors.push_back(absl::StrCat(axis.values.size()));
  }
  if (!random.empty()) factors.push_back(absl::StrCat(trials));
  if (count > kMaxSweepTrials) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sweep: ", absl::StrFormat("%.0f", count), " trials (", absl::StrJoin(factors, " × "), ": ",
        grid.empty() ? "" : "grid values per parameter",
        !grid.empty() && !random.empty() ? " × " : "", random.empty() ? "" : "random.trials",
        "), more than the ", kMaxSweepTrials, " a sweep may have"));
  }
  return static_cast<int64_t>(count);
}

// SweepSpec.scheduler against the trials' epochs (the largest: Ray Tune's max_t).
absl::Status CheckScheduler(const mpsd::v1::SweepSpec& sweep,
                            const std::vector<SweepTrialRequest>& trials) {
  if (!sweep.has_scheduler()) return absl::OkStatus();
  absl::StatusOr<std::optional<TrialStoppingConfig>> config =
      ReadTrialStopping(sweep, MaxTrialEpochs(trials));
  if (!config.ok() || !config->has_value()) return config.status();
  const TrialStoppingConfig& rule = **config;
  // median_stopping judges a trial against the others that reached its epoch: with too few
  // trials it could never stop one, and would say nothing.
  const int64_t others = static_cast<int64_t>(trials.size()) - 1;
  if (rule.rule == TrialStoppingConfig::Rule::kMedianStopping &&
      others < rule.min_samples_required) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sweep.scheduler.min_samples_required: median_stopping judges a trial only against ",
        rule.min_samples_required, " or more other trials (min_samples_required, default 3), ",
        "and this sweep has ", trials.size(), " trial(s), so it would never stop one: sweep at ",
        "least ", rule.min_samples_required + 1, " trials or lower min_samples_required"));
  }
  return absl::OkStatus();
}

}  // namespace

int MaxTrialEpochs(const std::vector<SweepTrialRequest>& trials) {
  int epochs = 1;
  for (const SweepTrialRequest& trial : trials) {
    epochs = std::max(epochs, api::EffectiveSpec(trial.request).train_job().epochs());
  }
  return epochs;
}

std::string DescribeTrial(const mpsd::v1::SweepTrial& trial) {
  std::vector<std::string> parts;
  for (const auto& p : trial.parameters()) parts.push_back(absl::StrCat(p.path(), "=", p.value()));
  return absl::StrJoin(parts, ", ");
}

absl::StatusOr<SweepFusion> ReadSweepFusion(const mpsd::v1::SweepSpec& sweep) {
  SweepFusion fusion;
  const std::string& fuse = sweep.fuse();
  int k = 0;
  // YAML 1.1 readers (PyYAML) turn an unquoted `off` into false: taken as meant.
  if (fuse == "off" || fuse == "false") {
    fusion.max_trials = 1;
  } else if (!fuse.empty() && fuse != "auto" && fuse != "true") {
    if (!absl::SimpleAtoi(fuse, &k) || k < 2 || k > kMaxFusedTrials) {
      return absl::InvalidArgumentError(
          absl::StrCat("sweep.fuse: must be auto, off or a number of trials in [2, ",
                       kMaxFusedTrials, "], got \"", absl::CHexEscape(fuse.substr(0, 64)), "\""));
    }
    fusion.max_trials = k;
  }
  const std::string& order = sweep.data_order();
  if (order == "shared") {
    fusion.shared_data_order = true;
  } else if (!order.empty() && order != "per_trial") {
    return absl::InvalidArgumentError(
        absl::StrCat("sweep.data_order: must be per_trial or shared, got \"",
                     absl::CHexEscape(order.substr(0, 64)), "\""));
  }
  if (fusion.shared_data_order && fusion.max_trials == 1) {
    return absl::InvalidArgumentError(
        "sweep.data_order: shared is for trials trained fused, and sweep.fuse is off: each "
        "trial runs alone, in its own order");
  }
  return fusion;
}

absl::StatusOr<std::vector<SweepTrialRequest>> ExpandSweep(const SubmitJobRequest& request) {
  if (absl::StatusOr<SweepFusion> fusion = ReadSweepFusion(request.sweep()); !fusion.ok()) {
    return fusion.status();
  }
  if (!request.has_train_job()) {
    for (const auto& [field, value] : {std::pair{"fuse", &request.sweep().fuse()},
                                       std::pair{"data_order", &request.sweep().data_order()}}) {
      if (!value->empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sweep.", field, ": only a TrainJob's trials are trained fused; leave it out here"));
      }
    }
    if (request.sweep().has_scheduler()) {
      return absl::InvalidArgumentError(
          "sweep.scheduler: only a TrainJob's trials report epochs to stop them by; leave it "
          "out here");
    }
  }
  std::vector<Axis> grid;
  absl::StatusOr<std::vector<Axis>> random = CheckAxes(request, grid);
  if (!random.ok()) return random.status();
  absl::StatusOr<int64_t> count = TrialCount(grid, *random, request.sweep().random().trials());
  if (!count.ok()) return count.status();

  SubmitJobRequest base = request;
  base.clear_sweep();
  base.clear_request_id();
  std::mt19937_64 generator(request.sweep().random().seed());
  std::vector<size_t> odometer(grid.size(), 0);
  const int per_point = random->empty() ? 1 : request.sweep().random().trials();
  std::vector<SweepTrialRequest> trials;
  trials.reserve(static_cast<size_t>(*count));
  for (int64_t index = 0; index < *count; ++index) {
    if (index > 0 && index % per_point == 0) {
      for (size_t d = grid.size(); d-- > 0;) {  // the last parameter varies fastest
        if (++odometer[d] < grid[d].values.size()) break;
        odometer[d] = 0;
      }
    }
    SweepTrialRequest& t = trials.emplace_back();
    t.request = base;
    t.trial.set_index(static_cast<int32_t>(index));
    if (!request.name().empty()) t.request.set_name(absl::StrCat(request.name(), "/", index));
    auto assign = [&](const Axis& axis, const std::string& value) -> absl::Status {
      absl::StatusOr<Target> target =
          Resolve(*SpecOf(t.request), axis.parameter->path(), absl::StrCat(axis.where, ".path"));
      if (!target.ok()) return target.status();
      mpsd::v1::SweepAssignment* a = t.trial.add_parameters();
      a->set_path(axis.parameter->path());
      a->set_value(value);
      return SetFromText(*target, value, axis.where);
    };
    for (size_t d = 0; d < grid.size(); ++d) {
      if (absl::Status s = assign(grid[d], grid[d].values[odometer[d]]); !s.ok()) return s;
    }
    for (const Axis& axis : *random) {
      if (absl::Status s = assign(axis, Draw(axis, generator)); !s.ok()) return s;
    }
  }
  if (absl::Status s = CheckScheduler(request.sweep(), trials); !s.ok()) return s;
  return trials;
}

}  // namespace mpsd::server
