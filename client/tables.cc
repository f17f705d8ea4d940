// Sweep and compare tables, as text, Markdown, CSV or JSON (keys in column order).
#include "client/tables.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <google/protobuf/descriptor.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "api/effective_spec.h"
#include "api/epoch_metric.h"
#include "api/field_text.h"
#include "api/job_state.h"
#include "client/format.h"

namespace mpsd::client {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::string Number(double value, int precision = 4) {
  return absl::StrFormat("%.*g", precision, value);
}

// A trial's metrics, from its summary once finished, else its newest epoch.
struct TrialMetrics {
  std::optional<double> val_accuracy, val_loss, test_accuracy, test_loss, train_loss,
      samples_per_second, epoch_time_s, peak_memory, time_s;
  // early_stopping / checkpoint.keep_best: the best epoch (whose model best.pt holds) and its
  // monitored value.
  std::optional<double> best_epoch, best_value;
  // multilabel and regression: the task's metrics by name (JobSummary / EpochMetrics .metrics:
  // val_r2, test_macro_f1, ...).
  std::map<std::string, double> task;
};

TrialMetrics MetricsOf(const v1::Job& job) {
  TrialMetrics m;
  const bool eval = job.spec().has_eval_job();    // its one evaluation, no epochs
  const bool bench = job.spec().has_bench_job();  // its rows, no epochs
  if (job.has_summary() && (job.summary().epochs() > 0 || eval || bench)) {
    const v1::JobSummary& s = job.summary();
    // Unmeasured figures stay unset (ranked last), never 0.
    if (s.has_val_accuracy()) m.val_accuracy = s.val_accuracy();
    if (s.has_val_loss()) m.val_loss = s.val_loss();
    if (s.has_test_accuracy()) m.test_accuracy = s.test_accuracy();
    if (s.has_test_loss()) m.test_loss = s.test_loss();
    if (s.memory().peak_allocated_bytes() > 0) {
      m.peak_memory = static_cast<double>(s.memory().peak_allocated_bytes());
    }
    m.time_s = s.total_time_s();
    m.task.insert(s.metrics().begin(), s.metrics().end());
    if (bench) {
      // The fastest row that ran.
      for (const v1::BenchRow& row : s.bench_rows()) {
        if (row.status() != v1::BenchRow::OK || row.samples_per_second() <= 0) continue;
        if (!m.samples_per_second.has_value() || row.samples_per_second() > *m.samples_per_second) {
          m.samples_per_second = row.samples_per_second();
        }
      }
    } else if (eval) {
      if (s.samples_per_second() > 0) m.samples_per_second = s.samples_per_second();
      // An evaluation of the training split: its loss in the TRAIN_LOSS column (its accuracy
      // is a metric of its own, train_accuracy).
      if (const auto loss = s.metrics().find("train_loss"); loss != s.metrics().end()) {
        m.train_loss = loss->second;
      }
    } else {
      m.train_loss = s.final_train_loss();
      m.samples_per_second = s.samples_per_second();
      m.epoch_time_s = s.median_epoch_time_s();
      if (s.best_epoch() > 0) {
        m.best_epoch = s.best_epoch();
        if (s.has_best_value()) m.best_value = s.best_value();
      }
    }
  } else if (job.last_epoch().epoch() > 0) {
    const v1::EpochMetrics& e = job.last_epoch();
    if (e.evaluated()) {
      m.test_accuracy = e.test_accuracy();
      m.test_loss = e.test_loss();
    }
    if (e.has_val_accuracy()) m.val_accuracy = e.val_accuracy();
    if (e.has_val_loss()) m.val_loss = e.val_loss();
    m.train_loss = e.train_loss();
    m.samples_per_second = e.samples_per_second();
    m.epoch_time_s = e.epoch_time_s();
    m.task.insert(e.metrics().begin(), e.metrics().end());
  }
  return m;
}

// The task metrics a sweep's table shows as columns, and ranks by: those of any trial other
// than the losses and accuracies the fixed columns show, sorted by name.
std::vector<std::string> TaskMetricNames(
    const std::vector<std::pair<const v1::Job*, TrialMetrics>>& trials) {
  std::set<std::string> names;
  for (const auto& entry : trials) {
    for (const auto& [name, value] : entry.second.task) {
      // train_accuracy (an EvalJob of the training split) has no column of its own.
      if (name == "train_accuracy" ||
          (!absl::EndsWith(name, "_loss") && !absl::EndsWith(name, "_accuracy"))) {
        names.insert(name);
      }
    }
  }
  return std::vector<std::string>(names.begin(), names.end());
}

struct MetricSpec {
  const char* name;
  const char* header;  // its column; --metric takes it too, in any case ("val_acc")
  std::optional<double> TrialMetrics::*value;
  bool higher_is_better;
  // Equal values are ordered by this metric of kMetrics, lowest first: an accuracy by its
  // split's loss (on a small validation split many trials tie).
  const char* tie_break = nullptr;
};

constexpr MetricSpec kMetrics[] = {
    {"val_accuracy", "VAL_ACC", &TrialMetrics::val_accuracy, true, "val_loss"},
    {"val_loss", "VAL_LOSS", &TrialMetrics::val_loss, false},
    {"test_accuracy", "TEST_ACC", &TrialMetrics::test_accuracy, true, "test_loss"},
    {"test_loss", "TEST_LOSS", &TrialMetrics::test_loss, false},
    {"train_loss", "TRAIN_LOSS", &TrialMetrics::train_loss, false},
    {"samples_per_second", "SAMPLES/S", &TrialMetrics::samples_per_second, true},
    {"epoch_time_s", "S/EPOCH", &TrialMetrics::epoch_time_s, false},
    {"peak_memory", "PEAK_MEM", &TrialMetrics::peak_memory, false},
    {"time_s", "TIME_S", &TrialMetrics::time_s, false},
};

const MetricSpec* FindMetric(absl::string_view name) {
  for (const MetricSpec& m : kMetrics) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

// The column of kMetrics' `name`.
std::string Header(absl::string_view name) {
  const MetricSpec* m = FindMetric(name);
  return m != nullptr ? m->header : absl::AsciiStrToUpper(name);
}

// Text of one scalar (or element of a repeated field).
std::string ScalarText(const Message& message, const FieldDescriptor& field, int index) {
  const Reflection& r = *message.GetReflection();
  const bool rep = field.is_repeated();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(rep ? r.GetRepeatedInt32(message, &field, index)
                              : r.GetInt32(message, &field));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(rep ? r.GetRepeatedInt64(message, &field, index)
                              : r.GetInt64(message, &field));
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(rep ? r.GetRepeatedUInt32(message, &field, index)
                              : r.GetUInt32(message, &field));
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrCat(rep ? r.GetRepeatedUInt64(message, &field, index)
                              : r.GetUInt64(message, &field));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return Number(
          rep ? r.GetRepeatedDouble(message, &field, index) : r.GetDouble(message, &field), 10);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return Number(rep ? r.GetRepeatedFloat(message, &field, index) : r.GetFloat(message, &field),
                    7);
    case FieldDescriptor::CPPTYPE_BOOL:
      return (rep ? r.GetRepeatedBool(message, &field, index) : r.GetBool(message, &field))
                 ? "true"
                 : "false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return (rep ? r.GetRepeatedEnum(message, &field, index) : r.GetEnum(message, &field))->name();
    case FieldDescriptor::CPPTYPE_STRING:
      return rep ? r.GetRepeatedString(message, &field, index) : r.GetString(message, &field);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return "";
}

void Flatten(const Message& message, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  const Reflection& r = *message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r.ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string path =
        prefix.empty() ? field->name() : absl::StrCat(prefix, ".", field->name());
    if (field->is_map()) {
      for (int i = 0; i < r.FieldSize(message, field); ++i) {
        const Message& entry = r.GetRepeatedMessage(message, field, i);
        const auto* key = field->message_type()->map_key();
        const auto* value = field->message_type()->map_value();
        out[absl::StrCat(path, ".", ScalarText(entry, *key, 0))] = ScalarText(entry, *value, 0);
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (field->is_repeated()) {
        for (int i = 0; i < r.FieldSize(message, field); ++i) {
          Flatten(r.GetRepeatedMessage(message, field, i), absl::StrCat(path, "[", i, "]"), out);
        }
      } else {
        Flatten(r.GetMessage(message, field), path, out);
      }
    } else if (field->is_repeated()) {
      std::vector<std::string> items;
      for (int i = 0; i < r.FieldSize(message, field); ++i) {
        items.push_back(ScalarText(message, *field, i));
      }
      out[path] = absl::StrJoin(items, ",");
    } else {
      out[path] = ScalarText(message, *field, 0);
    }
  }
}

// Each trial's best epoch's value of the metric it monitored (early_stopping.monitor): the value
// of the model its best.pt holds. Its direction is the monitored metric's (RankingOf).
constexpr MetricSpec kBestValue = {"best_value", "BEST_VALUE", &TrialMetrics::best_value, false};

// What `mpsctl sweep` ranks by: a metric of kMetrics or kBestValue (`spec`) or a task or user
// metric by name, and its direction.
struct Ranking {
  std::string metric;
  const MetricSpec* spec = nullptr;  // null for a task or user metric
  bool higher_is_better = true;
  std::string monitor;  // best_value: the metric the trials monitored
};

// --metric best_value (or its column's header, BEST_VALUE or BEST_<MONITOR>): the trials that
// kept a best epoch must have monitored one metric, whose direction ranks them.
absl::StatusOr<Ranking> BestValueRanking(
    const std::vector<std::pair<const v1::Job*, TrialMetrics>>& trials, const std::string& metric,
    const std::string& mode) {
  std::set<std::string> monitors;
  for (const auto& [job, m] : trials) {
    if (m.best_epoch.has_value()) monitors.insert(job->summary().monitor());
  }
  if (monitors.empty()) {
    const bool running = std::any_of(trials.begin(), trials.end(), [](const auto& entry) {
      return !api::IsTerminal(entry.first->state());
    });
    return absl::InvalidArgumentError(absl::StrCat(
        "--metric ", metric,
        running ? ": no trial has ended with a best epoch yet (a trial's summary names it when "
                  "it ends; early_stopping or checkpoint.keep_best keep one); meanwhile rank "
                  "by the monitored metric's last value, e.g. --metric val_loss"
                : ": no trial kept a best epoch (early_stopping or checkpoint.keep_best do)"));
  }
  if (monitors.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metric ", metric, ": the trials monitored different metrics (",
        absl::StrJoin(monitors, ", "), "), whose best values do not compare; rank by one of them"));
  }
  Ranking ranking;
  ranking.metric = kBestValue.name;
  ranking.spec = &kBestValue;
  ranking.monitor = *monitors.begin();
  if (!absl::EqualsIgnoreCase(metric, kBestValue.name) &&
      !absl::EqualsIgnoreCase(metric, kBestValue.header) &&
      !absl::EqualsIgnoreCase(metric, absl::StrCat("best_", ranking.monitor))) {
    return absl::InvalidArgumentError(absl::StrCat("--metric ", metric, ": the trials monitored ",
                                                   ranking.monitor, " (--metric best_value)"));
  }
  const std::optional<bool> known = mode == "min" || mode == "max"
                                        ? std::optional<bool>(mode == "max")
                                        : api::HigherIsBetter(ranking.monitor);
  if (!known.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metric ", metric, ": whether a higher ", ranking.monitor,
                     " is better is the job's own metric's to say; add --mode max or --mode min"));
  }
  ranking.higher_is_better = *known;
  return ranking;
}

// `metric` "auto" (or empty) picked, checked against what the trials measured, and its direction:
// `mode` "min" or "max", else ("auto" or empty) the metric's known one.
absl::StatusOr<Ranking> RankingOf(
    const std::vector<std::pair<const v1::Job*, TrialMetrics>>& trials,
    const std::vector<std::string>& task_metrics, std::string metric, const std::string& mode) {
  const auto measured = [&](const std::string& name) {
    return std::find(task_metrics.begin(), task_metrics.end(), name) != task_metrics.end();
  };
  if (mode != "auto" && mode != "min" && mode != "max" && !mode.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode: unknown \"", mode, "\" (expected auto, min or max)"));
  }
  const bool named = !metric.empty() && metric != "auto";
  if (!named) {
    // Model selection on validation data whenever a trial has it; the test split otherwise.
    // Regression by r2, multilabel by macro_f1 (the task's own figure of merit).
    // Before any epoch ends a trial's spec says whether it validates.
    metric = "test_accuracy";
    // A sweep of BenchJobs measures speed: its trials' fastest rows.
    if (!trials.empty() && std::all_of(trials.begin(), trials.end(), [](const auto& entry) {
          return entry.first->spec().has_bench_job();
        })) {
      metric = "samples_per_second";
    }
    for (const auto& entry : trials) {
      if (entry.second.val_accuracy.has_value() ||
          entry.first->spec().train_job().dataset().has_validation()) {
        metric = "val_accuracy";
      }
    }
    // EvalJobs of the training split alone: their accuracy.
    if (measured("train_accuracy") &&
        std::none_of(trials.begin(), trials.end(), [](const auto& entry) {
          return entry.second.test_accuracy.has_value() || entry.second.val_accuracy.has_value();
        })) {
      metric = "train_accuracy";
    }
    for (const char* name : {"test_macro_f1", "val_macro_f1", "test_r2", "val_r2"}) {
      if (measured(name)) metric = name;
    }
  }
  if (named && absl::StartsWithIgnoreCase(metric, "best_")) {
    return BestValueRanking(trials, metric, mode);
  }
  Ranking ranking;
  ranking.metric = metric;
  for (const MetricSpec& m : kMetrics) {
    if (metric == m.name || absl::EqualsIgnoreCase(metric, m.header)) {
      ranking.spec = &m;
      ranking.metric = metric = m.name;
    }
  }
  if (ranking.spec == nullptr && !measured(metric)) {
    std::vector<std::string> known = SweepMetrics();
    known.insert(known.end(), task_metrics.begin(), task_metrics.end());
    // Columns' headers are names too (VAL_ACC): a typo of one is matched in lower case.
    std::vector<std::string> names = known;
    for (const MetricSpec& m : kMetrics) names.push_back(absl::AsciiStrToLower(m.header));
    const std::optional<std::string> near = api::ClosestName(absl::AsciiStrToLower(metric), names);
    return absl::InvalidArgumentError(
        absl::StrCat("--metric: unknown \"", metric, "\"",
                     near.has_value() ? absl::StrCat(" (did you mean \"", *near, "\"?)") : "",
                     "; expected one of ", absl::StrJoin(known, ", "),
                     ", or a metric column's header as the table shows it (VAL_ACC)"));
  }
  // A metric named that finished trials never measured ranks nothing: say so, not trial order.
  const bool finished = std::any_of(trials.begin(), trials.end(), [](const auto& entry) {
    return entry.first->state() == v1::Job::SUCCEEDED;
  });
  const bool measured_by_any = std::any_of(trials.begin(), trials.end(), [&](const auto& entry) {
    return ranking.spec != nullptr ? (entry.second.*(ranking.spec->value)).has_value()
                                   : entry.second.task.count(metric) > 0;
  });
  if (named && finished && !measured_by_any) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metric ", metric, ": no trial measured it",
        absl::StartsWith(metric, "val_")
            ? " (val_* need a validation split: dataset.validation)"
            : (metric == "peak_memory" ? " (peak device memory is measured on cuda and mps, "
                                         "not on the cpu)"
                                       : "")));
  }
  if (mode == "min" || mode == "max") {
    ranking.higher_is_better = mode == "max";
    return ranking;
  }
  const std::optional<bool> known = ranking.spec != nullptr
                                        ? std::optional<bool>(ranking.spec->higher_is_better)
                                        : api::HigherIsBetter(metric);
  if (!known.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metric ", metric,
        ": whether higher is better is the job's own metric's to say; add --mode max or "
        "--mode min"));
  }
  ranking.higher_is_better = *known;
  return ranking;
}

}  // namespace

std::vector<std::string> SweepMetrics() {
  std::vector<std::string> names;
  for (const MetricSpec& m : kMetrics) names.push_back(m.name);
  names.push_back(kBestValue.name);
  return names;
}

absl::StatusOr<TextTable> SweepTable(const std::vector<v1::Job>& trials, std::string metric,
                                     bool exact, const std::string& mode, std::string* ranked_by) {
  std::vector<std::pair<const v1::Job*, TrialMetrics>> ranked;
  for (const v1::Job& trial : trials) ranked.emplace_back(&trial, MetricsOf(trial));
  const std::vector<std::string> task_metrics = TaskMetricNames(ranked);
  absl::StatusOr<Ranking> ranking = RankingOf(ranked, task_metrics, std::move(metric), mode);
  if (!ranking.ok()) return ranking.status();
  // NaN ranks as unmeasured (last, in trial order): it orders against nothing.
  const auto value_of = [&](const TrialMetrics& m) -> std::optional<double> {
    std::optional<double> value;
    if (ranking->spec != nullptr) {
      value = m.*(ranking->spec->value);
    } else if (const auto found = m.task.find(ranking->metric); found != m.task.end()) {
      value = found->second;
    }
    if (value.has_value() && std::isnan(*value)) return std::nullopt;
    return value;
  };
  const bool higher_is_better = ranking->higher_is_better;
  // A BenchJob trial's samples/s is its fastest row that ran; other figures a trial's last.
  const bool benches = std::all_of(trials.begin(), trials.end(), [](const v1::Job& trial) {
    return trial.spec().has_bench_job();
  });
  const char* what = benches && ranking->metric == "samples_per_second"
                         ? "fastest benchmark row that ran"
                         : "final value";
  if (ranked_by != nullptr) {
    *ranked_by = ranking->spec == &kBestValue
                     ? absl::StrCat("best_value (each trial's best ", ranking->monitor,
                                    ": the epoch its best.pt holds), ",
                                    higher_is_better ? "highest" : "lowest", " first")
                     : absl::StrCat(ranking->metric, higher_is_better ? ", highest" : ", lowest",
                                    " first (each trial's ", what, ")");
  }
  std::vector<std::string> paths;
  for (const v1::Job& trial : trials) {
    for (const auto& p : trial.trial().parameters()) {
      if (std::find(paths.begin(), paths.end(), p.path()) == paths.end()) paths.push_back(p.path());
    }
  }
  const MetricSpec* tie_break = ranking->spec != nullptr && ranking->spec->tie_break != nullptr
                                    ? FindMetric(ranking->spec->tie_break)
                                    : nullptr;
  bool tie_broken = false;
  std::stable_sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) {
    const std::optional<double> x = value_of(a.second);
    const std::optional<double> y = value_of(b.second);
    if (x.has_value() != y.has_value()) return x.has_value();
    if (!x.has_value()) return false;
    if (*x != *y || tie_break == nullptr) return higher_is_better ? *x > *y : *x < *y;
    const std::optional<double> u = a.second.*(tie_break->value);
    const std::optional<double> v = b.second.*(tie_break->value);
    const bool has_u = u.has_value() && !std::isnan(*u);
    const bool has_v = v.has_value() && !std::isnan(*v);
    tie_broken = tie_broken || (has_u && has_v && *u != *v);
    if (has_u != has_v) return has_u;
    return has_u && *u < *v;
  });
  if (ranked_by != nullptr && tie_broken) {
    absl::StrAppend(ranked_by, "; ties by ", tie_break->name, ", lowest first");
  }
  // Trials without the value (queued, stopped before it was measured) get no rank: last, "-".
  const int unranked = static_cast<int>(std::count_if(
      ranked.begin(), ranked.end(), [&](const auto& entry) { return !value_of(entry.second); }));
  if (ranked_by != nullptr && unranked > 0) {
    absl::StrAppend(ranked_by, "; ", unranked,
                    " trial(s) without a value of it unranked (-), last");
  }
  // The validation columns only where a trial measured them: a sweep without a validation
  // split reads as it always did, without two columns of "-".
  bool validated = false;
  bool best = false;  // a trial kept a best epoch: its epoch and monitored value as columns
  // A trial's training ended before its epochs did (early_stopping, divergence, a cancel):
  // epochs trained and why training ended as columns, or a stopped trial reads SUCCEEDED
  // like the ones that trained every epoch.
  bool stopped = false;
  for (const auto& [job, m] : ranked) {
    validated = validated || m.val_accuracy.has_value() || m.val_loss.has_value();
    best = best || m.best_epoch.has_value();
    const std::string& reason = job->summary().stop_reason();
    stopped = stopped || (!reason.empty() && reason != "epochs_completed");
  }
  TextTable table;
  const auto column = [&table](std::string header, std::string key, bool text = false) {
    table.header.push_back(std::move(header));
    table.keys.push_back(std::move(key));
    table.text_columns.push_back(text);
  };
  column("RANK", "rank");
  column("TRIAL", "trial");
  column("JOB", "job_id", /*text=*/true);
  for (const std::string& path : paths) column(path, path);
  column("STATE", "state");
  if (stopped) {
    column("EPOCHS", "epochs");
    column("STOP_REASON", "stop_reason", /*text=*/true);
  }
  if (validated) {
    column(Header("val_accuracy"), "val_accuracy");
    column(Header("val_loss"), "val_loss");
  }
  if (best) {
    // BEST_VAL_LOSS where every trial that kept one monitored val_loss; else BEST_VALUE.
    std::optional<std::string> monitor;
    for (const auto& [job, m] : ranked) {
      if (!m.best_epoch.has_value()) continue;
      const std::string& name = job->summary().monitor();
      monitor = !monitor.has_value() || *monitor == name ? name : "";
    }
    column("BEST_EPOCH", "best_epoch");
    column(monitor.value_or("").empty() ? "BEST_VALUE" : absl::AsciiStrToUpper("best_" + *monitor),
           "best_value");
  }
  for (const std::string& name : task_metrics) column(absl::AsciiStrToUpper(name), name);
  column(Header("test_accuracy"), "test_accuracy");
  column(Header("test_loss"), "test_loss");
  column(Header("train_loss"), "train_loss");
  column(Header("samples_per_second"), "samples_per_second");
  column(Header("epoch_time_s"), "epoch_time_s");
  column(Header("peak_memory"), "peak_allocated_bytes");
  column(Header("time_s"), "time_s");
  const auto cell = [exact](const std::optional<double>& value, int precision = 4) {
    if (!value.has_value()) return std::string("-");
    return exact ? ExactNumber(*value) : Number(*value, precision);
  };
  int rank = 0;
  for (const auto& [job, m] : ranked) {
    std::vector<std::string> row = {
        value_of(m).has_value() ? absl::StrCat(++rank) : std::string("-"),
        absl::StrCat(job->trial().index()), job->id()};
    for (const std::string& path : paths) {
      std::string value = "-";
      for (const auto& p : job->trial().parameters()) {
        if (p.path() == path) value = p.value();
      }
      row.push_back(value);
    }
    row.push_back(StateCell(*job));
    if (stopped) {
      const v1::JobSummary& summary = job->summary();
      row.push_back(job->has_summary() ? absl::StrCat(summary.epochs()) : std::string("-"));
      // A trial the sweep's scheduler stopped ended "cancelled" as far as its training knew.
      const bool scheduler = StateCell(*job) == "EARLY_STOPPED";
      row.push_back(scheduler                       ? std::string("sweep.scheduler")
                    : summary.stop_reason().empty() ? std::string("-")
                                                    : summary.stop_reason());
    }
    if (validated) {
      row.push_back(cell(m.val_accuracy));
      row.push_back(cell(m.val_loss));
    }
    if (best) {
      row.push_back(m.best_epoch.has_value() ? absl::StrCat(static_cast<int>(*m.best_epoch))
                                             : std::string("-"));
      row.push_back(cell(m.best_value));
    }
    for (const std::string& name : task_metrics) {
      const auto found = m.task.find(name);
      row.push_back(
          cell(found == m.task.end() ? std::nullopt : std::optional<double>(found->second)));
    }
    row.push_back(cell(m.test_accuracy));
    row.push_back(cell(m.test_loss));
    row.push_back(cell(m.train_loss));
    row.push_back(cell(m.samples_per_second, 6));
    row.push_back(cell(m.epoch_time_s));
    row.push_back(cell(m.peak_memory, 12));
    row.push_back(cell(m.time_s));
    table.rows.push_back(std::move(row));
  }
  return table;
}

std::map<std::string, std::string> FlattenSpec(const v1::SubmitJobRequest& request) {
  std::map<std::string, std::string> out;
  if (request.has_train_job()) Flatten(request.train_job(), "", out);
  if (request.has_bench_job()) Flatten(request.bench_job(), "", out);
  if (request.has_eval_job()) Flatten(request.eval_job(), "", out);
  if (request.has_predict_job()) Flatten(request.predict_job(), "", out);
  // Request-level fields (priority, name, labels, after) through the same walk.
  v1::SubmitJobRequest outside = request;
  outside.clear_train_job();
  outside.clear_bench_job();
  outside.clear_eval_job();
  outside.clear_predict_job();
  outside.clear_sweep();
  Flatten(outside, "", out);
  return out;
}

TextTable CompareTable(const std::vector<v1::Job>& jobs) {
  TextTable table;
  table.header = {"KEY"};
  for (const v1::Job& job : jobs) table.header.push_back(absl::StrCat("job ", job.id()));
  std::vector<std::map<std::string, std::string>> specs;
  std::set<std::string> keys;
  for (const v1::Job& job : jobs) {
    specs.push_back(FlattenSpec(api::EffectiveSpecOf(job)));
    // Bookkeeping, not a setting: request_id is unique per job (mpsctl makes one up for each
    // submit), so it would always differ.
    specs.back().erase("request_id");
    for (const auto& [key, value] : specs.back()) keys.insert(key);
  }
  auto add_row = [&table](const std::string& key, std::vector<std::string> values) {
    std::vector<std::string> row = {key};
    for (std::string& v : values) row.push_back(v.empty() ? "-" : std::move(v));
    table.rows.push_back(std::move(row));
  };
  std::vector<std::string> kinds;
  for (const v1::Job& job : jobs) kinds.push_back(v1::Job::Kind_Name(job.kind()));
  if (std::set<std::string>(kinds.begin(), kinds.end()).size() > 1) add_row("kind", kinds);
  for (const std::string& key : keys) {
    std::vector<std::string> values;
    for (const auto& spec : specs) {
      auto it = spec.find(key);
      values.push_back(it == spec.end() ? "-" : it->second);
    }
    if (std::set<std::string>(values.begin(), values.end()).size() > 1) add_row(key, values);
  }
  auto metric = [&](const std::string& name, auto get) {
    std::vector<std::string> values;
    for (const v1::Job& job : jobs) values.push_back(get(job));
    add_row(name, values);
  };
  metric("state", [](const v1::Job& j) { return StateCell(j); });
  auto summary = [](double v, const v1::Job& j) {
    return j.has_summary() && j.summary().epochs() > 0 ? Number(v) : std::string("-");
  };
  // Unmeasured: "-", never 0. Validation first: it is what models are chosen by.
  auto measured = [](bool has, double v) { return has ? Number(v) : std::string("-"); };
  bool any_val = false;
  for (const v1::Job& job : jobs) any_val |= job.summary().has_val_accuracy();
  if (any_val) {
    metric("val_accuracy", [&](const v1::Job& j) {
      return measured(j.summary().has_val_accuracy(), j.summary().val_accuracy());
    });
    metric("val_loss", [&](const v1::Job& j) {
      return measured(j.summary().has_val_loss(), j.summary().val_loss());
    });
  }
  metric("test_accuracy", [&](const v1::Job& j) {
    return measured(j.summary().has_test_accuracy(), j.summary().test_accuracy());
  });
  metric("test_loss", [&](const v1::Job& j) {
    return measured(j.summary().has_test_loss(), j.summary().test_loss());
  });
  metric("final_train_loss",
         [&](const v1::Job& j) { return summary(j.summary().final_train_loss(), j); });
  metric("samples_per_second",
         [&](const v1::Job& j) { return summary(j.summary().samples_per_second(), j); });
  metric("total_time_s", [&](const v1::Job& j) {
    return j.has_summary() ? Number(j.summary().total_time_s()) : std::string("-");
  });
  // The summary's other metrics (the task's: test_r2, val_macro_f1, ...; the user's own:
  // test_top2, ...), by name; those the rows above show already are not repeated.
  const std::set<std::string> shown = {"val_accuracy",    "val_loss",   "test_accuracy",
                                       "test_loss",       "train_loss", "train_accuracy",
                                       "final_train_loss"};
  std::set<std::string> names;
  for (const v1::Job& job : jobs) {
    for (const auto& [name, unused] : job.summary().metrics()) {
      if (!shown.count(name)) names.insert(name);
    }
  }
  for (const std::string& name : names) {
    metric(name, [&](const v1::Job& j) {
      const auto found = j.summary().metrics().find(name);
      return found == j.summary().metrics().end() ? std::string("-") : Number(found->second);
    });
  }
  return table;
}

}  // namespace mpsd::client
