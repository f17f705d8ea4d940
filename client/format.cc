// Text for people: numbers, durations, progress and epoch lines, summaries, tables.
#include "client/format.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/time_util.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "api/job_id.h"
#include "api/job_state.h"
#include "api/json_text.h"
#include "client/bench_table.h"
#include "client/job_file.h"
#include "client/text_table.h"

namespace mpsd::client {
namespace {

constexpr double kBytesPerMiB = 1024.0 * 1024.0;

absl::Time ToTime(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

bool IsSet(const google::protobuf::Timestamp& ts) { return ts.seconds() != 0 || ts.nanos() != 0; }

// "2024-05-01 12:00:03 (5m ago)" in local time; "-" when unset.
std::string FormatTimestamp(const google::protobuf::Timestamp& ts, absl::Time now) {
  if (!IsSet(ts)) return "-";
  const absl::Time t = ToTime(ts);
  return absl::StrCat(absl::FormatTime("%Y-%m-%d %H:%M:%S", t, absl::LocalTimeZone()), " (",
                      FormatAge(now - t), " ago)");
}

std::string ModelName(const v1::SubmitJobRequest& spec) {
  if (spec.has_train_job()) return spec.train_job().model().name();
  if (spec.has_bench_job()) return absl::StrJoin(spec.bench_job().models(), ",");
  if (spec.has_eval_job() || spec.has_predict_job()) {
    const std::string& model =
        spec.has_eval_job() ? spec.eval_job().model() : spec.predict_job().model();
    return api::IsJobId(model) ? absl::StrCat("job ", model) : model;
  }
  return "";
}

std::string Plural(int64_t n, absl::string_view word) {
  return absl::StrCat(FormatThousands(n), " ", word, n == 1 ? "" : "s");
}

// multilabel and regression, or any job with the user's metrics (a metrics map): "<split> loss
// 0.1234 mse 0.1234 r2 0.987 top2 0.5" per split measured, in the order train, val, test, each's
// built-in metrics in a fixed order, then the user's by name.
std::string TaskMetricsText(const google::protobuf::Map<std::string, double>& metrics) {
  constexpr const char* kBuiltIn[] = {"loss", "accuracy", "macro_f1", "mse", "mae", "r2"};
  // The user's metrics (TrainJob.metrics) after the built-in ones, by name.
  const std::map<std::string, double> sorted(metrics.begin(), metrics.end());
  std::vector<std::string> parts;
  for (const char* split : {"train", "val", "test"}) {
    std::string part;
    const auto add = [&part](absl::string_view metric, double value) {
      absl::StrAppendFormat(&part, "%s%s %.4f", part.empty() ? "" : " ",
                            metric == "accuracy" ? "acc" : metric, value);
    };
    for (const char* metric : kBuiltIn) {
      const auto found = metrics.find(absl::StrCat(split, "_", metric));
      if (found != metrics.end()) add(metric, found->second);
    }
    const std::string prefix = absl::StrCat(split, "_");
    for (const auto& [name, value] : sorted) {
      if (!absl::StartsWith(name, prefix)) continue;
      const absl::string_view metric = absl::string_view(name).substr(prefix.size());
      if (std::find(std::begin(kBuiltIn), std::end(kBuiltIn), metric) == std::end(kBuiltIn)) {
        add(metric, value);
      }
    }
    if (!part.empty()) parts.push_back(absl::StrCat(split, " ", part));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

std::string FormatConfusionMatrix(const v1::JobSummary& s, absl::string_view indent) {
  const int64_t k = s.confusion_classes();
  if (k <= 0 || s.confusion_matrix_size() != k * k) return "";
  // Row labels: "3 Dress" (index and class name, when known); counts right-aligned.
  // Every count column as wide as the widest count; the totals one wider.
  const std::string corner = "true \\ predicted";
  std::vector<std::string> labels;
  size_t label_width = DisplayWidth(corner);
  for (int64_t t = 0; t < k; ++t) {
    std::string label = absl::StrCat(t);
    if (t < s.class_names_size()) absl::StrAppend(&label, " ", s.class_names(t));
    label_width = std::max(label_width, DisplayWidth(label));
    labels.push_back(std::move(label));
  }
  size_t width = std::to_string(k - 1).size();
  for (const int64_t count : s.confusion_matrix()) {
    width = std::max(width, std::to_string(count).size());
  }
  width = std::max(width, std::string("total").size() - 1);
  std::string out = absl::StrCat(indent,
                                 "confusion matrix (examples; rows: true class, columns: "
                                 "predicted class):\n");
  absl::StrAppend(&out, indent, PadRight(corner, label_width));
  for (int64_t p = 0; p < k; ++p) absl::StrAppend(&out, " ", PadLeft(absl::StrCat(p), width));
  absl::StrAppend(&out, " ", PadLeft("total", width + 1), "\n");
  for (int64_t t = 0; t < k; ++t) {
    absl::StrAppend(&out, indent, PadRight(labels[t], label_width));
    int64_t total = 0;
    for (int64_t p = 0; p < k; ++p) {
      const int64_t count = s.confusion_matrix(static_cast<int>(t * k + p));
      total += count;
      absl::StrAppend(&out, " ", PadLeft(absl::StrCat(count), width));
    }
    absl::StrAppend(&out, " ", PadLeft(absl::StrCat(total), width + 1), "\n");
  }
  return out;
}

namespace {

// The model an EvalJob or PredictJob used: "job 12's model", "job 12's best.pt" when another
// of the job's files was named by path, or the path of a model from elsewhere.
std::string ModelText(const v1::JobSummary& s) {
  if (s.eval_model_job_id().empty()) return s.eval_model();
  const absl::string_view path = s.eval_model();
  const absl::string_view file =
      path.rfind('/') == absl::string_view::npos ? path : path.substr(path.rfind('/') + 1);
  return absl::StrCat("job ", s.eval_model_job_id(), "'s ",
                      absl::EndsWith(file, ".pt") && file != "model.pt" ? file : "model");
}

// An EvalJob's lines: the model, the split and its metrics, the confusion matrix.
std::string EvalLines(const v1::JobSummary& s, absl::string_view indent) {
  const std::string model = ModelText(s);
  std::string out =
      absl::StrCat(indent, "evaluated ", model, " (", s.task(), ") on the ", s.eval_split(),
                   " split: ", Plural(s.eval_examples(), "example"), "\n");
  const std::string metrics = TaskMetricsText(s.metrics());
  if (!metrics.empty()) absl::StrAppend(&out, indent, metrics, "\n");
  std::vector<std::string> work;
  if (s.samples_per_second() > 0) work.push_back(FormatRate(s.samples_per_second()));
  if (s.data_load_time_s() > 0) {
    work.push_back(absl::StrCat("data load ", FormatSeconds(s.data_load_time_s())));
  }
  if (s.parameters() > 0) work.push_back(Plural(s.parameters(), "parameter"));
  if (!work.empty()) absl::StrAppend(&out, indent, absl::StrJoin(work, ", "), "\n");
  absl::StrAppend(&out, FormatConfusionMatrix(s, indent));
  return out;
}

// The summary's lines after the first, each starting with `indent` and ending in '\n'.
std::string SummaryLines(const v1::JobSummary& s, absl::string_view indent) {
  if (!s.eval_split().empty()) return EvalLines(s, indent);
  if (s.predictions_size() > 0) {  // a PredictJob
    return absl::StrCat(indent, "predicted ", Plural(s.predictions_size(), "input"), " with ",
                        ModelText(s), " (", s.task(), "): forward passes ",
                        absl::StrFormat("%.3f ms", s.forward_time_ms()), "\n");
  }
  std::string out;
  // Only what was measured: an unevaluated split has no figures, not zeros.
  if (s.epochs() > 0 && !s.metrics().empty()) {  // multilabel, regression, the user's metrics
    absl::StrAppend(&out, indent, s.task(), ": ", TaskMetricsText(s.metrics()), "\n");
  } else if (s.epochs() > 0) {
    std::vector<std::string> figures;
    if (s.has_val_accuracy()) {
      figures.push_back(
          absl::StrFormat("val accuracy %.4f, val loss %.4f", s.val_accuracy(), s.val_loss()));
    }
    figures.push_back(s.has_test_accuracy() ? absl::StrFormat("test accuracy %.4f, test loss %.4f",
                                                              s.test_accuracy(), s.test_loss())
                                            : std::string("test not evaluated"));
    figures.push_back(absl::StrFormat("final train loss %.4f", s.final_train_loss()));
    absl::StrAppend(&out, indent, absl::StrJoin(figures, ", "), "\n");
  }
  std::vector<std::string> work = {Plural(s.epochs(), "epoch"), Plural(s.steps(), "step")};
  if (s.bench_rows_size() > 0) work = {FormatBenchRowCounts(s)};  // a BenchJob trains nothing
  if (s.train_examples() > 0) {
    work.push_back(absl::StrCat(
        FormatThousands(s.train_examples()), " train / ",
        s.val_examples() > 0 ? absl::StrCat(FormatThousands(s.val_examples()), " val / ") : "",
        FormatThousands(s.test_examples()), " test examples"));
  }
  if (s.samples_per_second() > 0) work.push_back(FormatRate(s.samples_per_second()));
  if (s.median_epoch_time_s() > 0) {
    work.push_back(absl::StrCat("median epoch ", FormatSeconds(s.median_epoch_time_s())));
  }
  if (s.data_load_time_s() > 0) {
    work.push_back(absl::StrCat("data load ", FormatSeconds(s.data_load_time_s())));
  }
  if (s.parameters() > 0) work.push_back(Plural(s.parameters(), "parameter"));
  // nan_policy skip_step's and fp16's skipped optimizer steps: left out of the figures above.
  if (s.skipped_steps() > 0) work.push_back(Plural(s.skipped_steps(), "step") + " skipped");
  absl::StrAppend(&out, indent, absl::StrJoin(work, ", "), "\n");
  if (s.resumed_at_step() > 0) {
    absl::StrAppend(&out, indent, "resumed at step ", s.resumed_at_step(), "\n");
  }
  if (s.stop_reason() == "early_stopped" || s.best_epoch() > 0) {
    std::string line = absl::StrCat(indent, "stopped: ", s.stop_reason());
    if (s.best_epoch() > 0) {
      absl::StrAppendFormat(&line, "; best epoch %d (%s %.4f)", s.best_epoch(), s.monitor(),
                            s.best_value());
    }
    if (!s.best_model_path().empty()) absl::StrAppend(&line, ", ", s.best_model_path());
    absl::StrAppend(&out, line, "\n");
  }
  if (!s.model_path().empty()) {
    absl::StrAppend(&out, indent, "model: ", s.model_path(), " (", s.model_format(), ")\n");
  }
  if (!s.checkpoint_path().empty()) {
    absl::StrAppend(&out, indent, "checkpoint: ", s.checkpoint_path(), "\n");
  }
  if (!s.profile_path().empty()) {
    absl::StrAppend(&out, indent, "profile: ", s.profile_path(), " (steps ", s.profile_first_step(),
                    "-", s.profile_last_step(), ", Chrome trace)\n");
  }

  const v1::MemoryStats& m = s.memory();
  const bool no_memory = m.allocated_before_bytes() == 0 && m.peak_allocated_bytes() == 0 &&
                         m.allocated_after_bytes() == 0 && m.reserved_before_bytes() == 0 &&
                         m.reserved_after_bytes() == 0;
  if (no_memory) {
    absl::StrAppend(&out, indent, "memory: not tracked on ",
                    s.device().empty() ? "this device" : s.device(), "\n");
  } else {
    absl::StrAppend(
        &out, indent, "memory: allocated before ", FormatMiB(m.allocated_before_bytes()), ", peak ",
        FormatMiB(m.peak_allocated_bytes()), ", after ", FormatMiB(m.allocated_after_bytes()),
        "; reserved before ", FormatMiB(m.reserved_before_bytes()), ", after ",
        FormatMiB(m.reserved_after_bytes()), "\n");
  }
  return out;
}

}  // namespace

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// The shortest text that reads back as the same value; JSON's strings for what it has no number
// for, as protobuf's mapping writes them.
std::string JsonNumber(double value, bool is_float) {
  if (std::isnan(value)) return "\"NaN\"";
  if (std::isinf(value)) return value > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  for (int digits = is_float ? 6 : 15;; ++digits) {
    std::string text = absl::StrFormat("%.*g", digits, value);
    const double back = std::strtod(text.c_str(), nullptr);
    const bool same =
        is_float ? static_cast<float>(back) == static_cast<float>(value) : back == value;
    if (same || digits >= 17) return text;
  }
}

void AppendJson(const Message& message, std::string& out);

// One value of `field` (element `index` of a repeated field, or the singular value for -1).
void AppendJsonValue(const Message& message, const FieldDescriptor& field, int index,
                     std::string& out) {
  const Reflection& r = *message.GetReflection();
  const bool rep = index >= 0;
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      absl::StrAppend(
          &out, rep ? r.GetRepeatedInt32(message, &field, index) : r.GetInt32(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      absl::StrAppend(
          &out, rep ? r.GetRepeatedInt64(message, &field, index) : r.GetInt64(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      absl::StrAppend(
          &out, rep ? r.GetRepeatedUInt32(message, &field, index) : r.GetUInt32(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      absl::StrAppend(
          &out, rep ? r.GetRepeatedUInt64(message, &field, index) : r.GetUInt64(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      out += JsonNumber(
          rep ? r.GetRepeatedDouble(message, &field, index) : r.GetDouble(message, &field), false);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      out += JsonNumber(
          rep ? r.GetRepeatedFloat(message, &field, index) : r.GetFloat(message, &field), true);
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      out += (rep ? r.GetRepeatedBool(message, &field, index) : r.GetBool(message, &field))
                 ? "true"
                 : "false";
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* value =
          rep ? r.GetRepeatedEnum(message, &field, index) : r.GetEnum(message, &field);
      out += api::JsonString(value->name());
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string scratch;
      const std::string& text = rep ? r.GetRepeatedStringReference(message, &field, index, &scratch)
                                    : r.GetStringReference(message, &field, &scratch);
      out += api::JsonString(field.type() == FieldDescriptor::TYPE_BYTES ? absl::Base64Escape(text)
                                                                         : text);
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      AppendJson(rep ? r.GetRepeatedMessage(message, &field, index) : r.GetMessage(message, &field),
                 out);
      break;
  }
}

// protobuf's JSON mapping with proto field names and "always print primitive fields", except
// that 64-bit integers are numbers; google.protobuf.Timestamp as its RFC 3339 string.
void AppendJson(const Message& message, std::string& out) {
  const google::protobuf::Descriptor& descriptor = *message.GetDescriptor();
  const Reflection& r = *message.GetReflection();
  if (descriptor.full_name() == "google.protobuf.Timestamp") {
    const auto& t = static_cast<const google::protobuf::Timestamp&>(message);
    out += api::JsonString(google::protobuf::util::TimeUtil::ToString(t));
    return;
  }
  out.push_back('{');
  bool first = true;
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const FieldDescriptor& field = *descriptor.field(i);
    // Absent: an unset field with presence (a message, an optional, a oneof member).
    if (!field.is_repeated() && field.has_presence() && !r.HasField(message, &field)) continue;
    if (!first) out.push_back(',');
    first = false;
    absl::StrAppend(&out, api::JsonString(field.name()), ":");
    if (field.is_map()) {
      const FieldDescriptor& key = *field.message_type()->map_key();
      const FieldDescriptor& value = *field.message_type()->map_value();
      out.push_back('{');
      const int size = r.FieldSize(message, &field);
      for (int e = 0; e < size; ++e) {
        const Message& entry = r.GetRepeatedMessage(message, &field, e);
        if (e > 0) out.push_back(',');
        std::string key_text;
        AppendJsonValue(entry, key, -1, key_text);
        if (key_text.empty() || key_text[0] != '"') key_text = api::JsonString(key_text);
        absl::StrAppend(&out, key_text, ":");
        AppendJsonValue(entry, value, -1, out);
      }
      out.push_back('}');
    } else if (field.is_repeated()) {
      out.push_back('[');
      const int size = r.FieldSize(message, &field);
      for (int e = 0; e < size; ++e) {
        if (e > 0) out.push_back(',');
        AppendJsonValue(message, field, e, out);
      }
      out.push_back(']');
    } else {
      AppendJsonValue(message, field, -1, out);
    }
  }
  out.push_back('}');
}

}  // namespace

std::string ToJsonLine(const google::protobuf::Message& message) {
  std::string out;
  AppendJson(message, out);
  return out;
}

std::string FormatThousands(int64_t n) {
  const uint64_t magnitude = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  const std::string digits = absl::StrCat(magnitude);
  std::string out = n < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string ExactNumber(double value) {
  for (int digits = 6;; ++digits) {
    std::string text = absl::StrFormat("%.*g", digits, value);
    if (digits >= 17 || std::strtod(text.c_str(), nullptr) == value) return text;
  }
}

std::string FormatRate(double samples_per_second) {
  return absl::StrCat(FormatThousands(std::llround(samples_per_second)), " samples/s");
}

std::string FormatClock(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e9) return "-:--";
  const int64_t total = std::llround(seconds);
  const int64_t h = total / 3600, m = total % 3600 / 60, s = total % 60;
  if (h > 0) return absl::StrFormat("%d:%02d:%02d", h, m, s);
  return absl::StrFormat("%d:%02d", m, s);
}

std::string FormatSeconds(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  if (seconds < 59.95) return absl::StrFormat("%.1f s", seconds);
  const int64_t total = std::llround(seconds);
  if (total < 3600) return absl::StrFormat("%dm %02ds", total / 60, total % 60);
  return absl::StrFormat("%dh %02dm", total / 3600, total % 3600 / 60);
}

std::string FormatAge(absl::Duration age) {
  const int64_t s = std::max<int64_t>(0, absl::ToInt64Seconds(age));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrCat(s / 60, "m");
  if (s < 86400) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

std::string FormatMiB(int64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / kBytesPerMiB);
}

std::string FormatSize(int64_t bytes) {
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  const double b = static_cast<double>(bytes);
  if (b < kBytesPerMiB) return absl::StrFormat("%.1f KiB", b / 1024.0);
  if (b < kBytesPerMiB * 1024.0) return absl::StrFormat("%.1f MiB", b / kBytesPerMiB);
  return absl::StrFormat("%.1f GiB", b / (kBytesPerMiB * 1024.0));
}

std::string KindName(const v1::SubmitJobRequest& spec) {
  const auto* oneof = v1::SubmitJobRequest::descriptor()->FindOneofByName("spec");
  const auto* field = spec.GetReflection()->GetOneofFieldDescriptor(spec, oneof);
  return field == nullptr ? "-" : field->message_type()->name();
}

int TotalEpochs(const v1::SubmitJobRequest& spec) {
  if (!spec.has_train_job()) return 0;
  return spec.train_job().has_epochs() ? spec.train_job().epochs() : 1;
}

bool HasStepAccuracy(const v1::SubmitJobRequest& spec) {
  return !spec.has_train_job() || spec.train_job().task() != "regression";
}

std::string FormatProgress(const v1::StepMetrics& step, int total_epochs, bool with_eta,
                           bool with_accuracy) {
  std::string line = absl::StrCat("epoch ", step.epoch());
  if (total_epochs > 0) absl::StrAppend(&line, "/", total_epochs);
  absl::StrAppend(&line, "  step ", step.step());
  if (step.total_steps() > 0) absl::StrAppend(&line, "/", step.total_steps());
  absl::StrAppendFormat(&line, "  loss %.4f", step.loss());
  if (with_accuracy) absl::StrAppendFormat(&line, "  acc %.3f", step.accuracy());
  if (step.learning_rate() > 0) absl::StrAppendFormat(&line, "  lr %.3g", step.learning_rate());
  if (step.loss_scale() > 0) absl::StrAppendFormat(&line, "  scale %g", step.loss_scale());
  if (step.skipped()) absl::StrAppend(&line, " (skipped: inf/NaN gradients)");
  if (step.samples_per_second() > 0) {
    absl::StrAppend(&line, "  ", FormatRate(step.samples_per_second()));
  }
  if (with_eta && step.total_steps() > 0 && step.step_time_ms() > 0) {
    const double left_s =
        static_cast<double>(step.total_steps() - step.step()) * step.step_time_ms() / 1000.0;
    absl::StrAppend(&line, "  ETA ", FormatClock(left_s));
  }
  return line;
}

std::string FormatEpoch(const v1::EpochMetrics& e) {
  if (!e.metrics().empty()) {
    std::string line = absl::StrFormat("epoch %d: %s", e.epoch(), TaskMetricsText(e.metrics()));
    absl::StrAppend(&line, ", ", FormatSeconds(e.epoch_time_s()));
    if (e.samples_per_second() > 0) {
      absl::StrAppend(&line, ", ", FormatRate(e.samples_per_second()));
    }
    return line;
  }
  std::string line = absl::StrFormat("epoch %d: train loss %.4f acc %.3f", e.epoch(),
                                     e.train_loss(), e.train_accuracy());
  if (e.has_val_loss()) {
    absl::StrAppendFormat(&line, ", val loss %.4f acc %.3f", e.val_loss(), e.val_accuracy());
  }
  if (e.evaluated()) {
    absl::StrAppendFormat(&line, ", test loss %.4f acc %.3f", e.test_loss(), e.test_accuracy());
  }
  absl::StrAppend(&line, ", ", FormatSeconds(e.epoch_time_s()));
  if (e.samples_per_second() > 0) absl::StrAppend(&line, ", ", FormatRate(e.samples_per_second()));
  return line;
}

std::string FormatLog(const v1::LogLine& log) {
  switch (log.level()) {
    case v1::LogLine::WARNING:
      return absl::StrCat("warning: ", log.text());
    case v1::LogLine::ERROR:
      return absl::StrCat("error: ", log.text());
    default:
      return log.text();
  }
}

std::string FormatFinal(const std::string& job_id, const v1::StateChange& state,
                        const v1::JobSummary* summary) {
  std::string out = absl::StrCat("job ", job_id, " ", v1::Job::State_Name(state.state()));
  if (state.state() == v1::Job::FAILED ||
      state.failure_reason() != v1::Job::FAILURE_REASON_UNSPECIFIED) {
    absl::StrAppend(&out, " (", v1::Job::FailureReason_Name(state.failure_reason()), ")");
  }
  if (summary != nullptr && summary->total_time_s() > 0) {
    absl::StrAppend(&out, " in ", FormatSeconds(summary->total_time_s()));
  }
  if (summary != nullptr && !summary->device().empty()) {
    absl::StrAppend(&out, " on ", summary->device());
  }
  absl::StrAppend(&out, state.message().empty() ? "" : absl::StrCat(": ", state.message()), "\n");
  if (summary != nullptr) absl::StrAppend(&out, SummaryLines(*summary, "  "));
  return out;
}

std::string FormatCheckpoint(const v1::CheckpointSaved& checkpoint) {
  return absl::StrCat("checkpoint ", checkpoint.path(), " (epoch ", checkpoint.epoch(), ", step ",
                      checkpoint.step(), ", ", FormatMiB(checkpoint.size_bytes()), ")");
}

std::string StateCell(const v1::Job& job) {
  if (job.state() == v1::Job::CANCELLED && job.failure_reason() == v1::Job::EARLY_STOPPED) {
    return "EARLY_STOPPED";
  }
  return v1::Job::State_Name(job.state());
}

std::string FormatJobProgress(const v1::Job& job) {
  if (job.state() == v1::Job::SUCCEEDED) return "100%";
  const v1::StepMetrics& step = job.last_step();
  if (step.total_steps() <= 0 || step.step() <= 0) return "-";
  return absl::StrCat(std::min<int64_t>(100, step.step() * 100 / step.total_steps()), "%");
}

std::string FormatLabels(const v1::SubmitJobRequest& spec) {
  std::map<std::string, std::string> sorted(spec.labels().begin(), spec.labels().end());
  std::vector<std::string> parts;
  for (const auto& [key, value] : sorted) parts.push_back(absl::StrCat(key, "=", value));
  return absl::StrJoin(parts, ",");
}

std::string FormatJobTable(const std::vector<v1::Job>& jobs, absl::Time now) {
  if (jobs.empty()) return "no jobs\n";
  // Who submitted each job, when the daemon recorded it for any of them (Job.submitted_by).
  const bool by = std::any_of(jobs.begin(), jobs.end(),
                              [](const v1::Job& job) { return !job.submitted_by().empty(); });
  // NAME and LABELS only when some job has them (SubmitJobRequest.name, .labels).
  const bool named = std::any_of(jobs.begin(), jobs.end(),
                                 [](const v1::Job& job) { return !job.spec().name().empty(); });
  const bool labelled = std::any_of(
      jobs.begin(), jobs.end(), [](const v1::Job& job) { return job.spec().labels_size() > 0; });
  TextTable table;
  table.header = {"ID"};
  if (named) table.header.push_back("NAME");
  for (const char* h : {"KIND", "STATE", "MODEL", "PROGRESS", "AGE"}) table.header.push_back(h);
  if (labelled) table.header.push_back("LABELS");
  if (by) table.header.push_back("BY");
  for (const v1::Job& job : jobs) {
    std::string kind = KindName(job.spec());
    if (kind == "-" && job.kind() != v1::Job::KIND_UNSPECIFIED)
      kind = v1::Job::Kind_Name(job.kind());
    if (job.kind() == v1::Job::SWEEP) kind = "Sweep";
    const std::string model = ModelName(job.spec());
    std::vector<std::string> row = {job.id()};
    if (named) row.push_back(job.spec().name().empty() ? "-" : job.spec().name());
    for (std::string cell :
         {kind, StateCell(job), model.empty() ? "-" : model,
          job.kind() == v1::Job::SWEEP ? absl::StrCat(job.trial_job_ids_size(), " trials")
                                       : FormatJobProgress(job),
          IsSet(job.created_at()) ? FormatAge(now - ToTime(job.created_at())) : "-"}) {
      row.push_back(std::move(cell));
    }
    if (labelled) row.push_back(job.spec().labels_size() > 0 ? FormatLabels(job.spec()) : "-");
    if (by) row.push_back(job.submitted_by().empty() ? "-" : job.submitted_by());
    table.rows.push_back(std::move(row));
  }
  return RenderAligned(table);
}

std::string FormatJobDetails(const v1::Job& job, absl::Time now) {
  std::string out;
  auto line = [&out](absl::string_view label, absl::string_view value) {
    absl::StrAppend(&out, PadRight(label, 11), " ", value, "\n");
  };
  line("id", job.id());
  if (!job.spec().name().empty()) line("name", job.spec().name());
  line("kind", job.kind() == v1::Job::SWEEP ? "Sweep" : KindName(job.spec()));
  if (job.spec().labels_size() > 0) line("labels", FormatLabels(job.spec()));
  if (job.spec().after_size() > 0) line("after", absl::StrJoin(job.spec().after(), ", "));
  if (job.has_trial()) {
    line("trial", absl::StrCat(job.trial().index(), " of sweep ", job.trial().sweep_id()));
  }
  if (job.kind() == v1::Job::SWEEP) {
    line("trials",
         absl::StrCat(absl::StrJoin(job.trial_job_ids(), ", "), " (mpsctl sweep ", job.id(), ")"));
  }
  std::string state = v1::Job::State_Name(job.state());
  if (job.state() == v1::Job::FAILED ||
      job.failure_reason() != v1::Job::FAILURE_REASON_UNSPECIFIED) {
    absl::StrAppend(&state, " (", v1::Job::FailureReason_Name(job.failure_reason()), ")");
  }
  if (!job.message().empty()) absl::StrAppend(&state, ": ", job.message());
  line("state", state);
  if (!job.submitted_by().empty()) line("by", job.submitted_by());
  line("created", FormatTimestamp(job.created_at(), now));
  line("started", FormatTimestamp(job.started_at(), now));
  line("finished", FormatTimestamp(job.finished_at(), now));
  if (job.last_step().step() > 0) {
    line("progress",
         FormatProgress(job.last_step(), TotalEpochs(job.spec()),
                        /*with_eta=*/!api::IsTerminal(job.state()), HasStepAccuracy(job.spec())));
  }
  if (job.last_epoch().epoch() > 0) line("last epoch", FormatEpoch(job.last_epoch()));
  line("events", absl::StrCat(job.last_seq()));
  if (job.has_summary()) {
    const v1::JobSummary& s = job.summary();
    line("summary", absl::StrCat(FormatSeconds(s.total_time_s()), " on ", s.device()));
    absl::StrAppend(&out, SummaryLines(s, "            "));
  }
  const std::string spec = FormatJobFile(job.spec());
  if (!spec.empty()) {
    absl::StrAppend(&out, "spec:\n");
    for (absl::string_view l : absl::StrSplit(absl::StripSuffix(spec, "\n"), '\n')) {
      absl::StrAppend(&out, "  ", l, "\n");
    }
  }
  return out;
}

std::string FormatDevice(const v1::DeviceInfo& d) {
  std::string out;
  auto line = [&out](absl::string_view label, absl::string_view value) {
    absl::StrAppend(&out, PadRight(label, 12), " ", value, "\n");
  };
  line("device", d.kind());
  if (!d.name().empty() && d.name() != d.kind()) line("name", d.name());
  line("available", absl::StrJoin(d.available(), ", "));
  std::string memory;
  if (d.total_memory_bytes() > 0)
    absl::StrAppend(&memory, "total ", FormatMiB(d.total_memory_bytes()), ", ");
  absl::StrAppend(&memory, "allocated ", FormatMiB(d.allocated_bytes()), ", reserved ",
                  FormatMiB(d.reserved_bytes()));
  line("memory", memory);
  line("torch", d.torch_version().empty() ? "-" : d.torch_version());
  if (d.cpu_threads() > 0) line("cpu threads", absl::StrCat(d.cpu_threads()));
  line("jobs run", absl::StrCat(d.jobs_run()));
  // The executor process (mpsd-executor); a daemon without one (or between two) reports pid 0.
  if (d.executor_pid() > 0) {
    line("baseline", absl::StrCat("allocated ", FormatMiB(d.baseline_allocated_bytes()),
                                  ", reserved ", FormatMiB(d.baseline_reserved_bytes())));
    line(
        "executor",
        absl::StrCat("pid ", d.executor_pid(), ", up ", FormatSeconds(d.executor_uptime_s()), ", ",
                     d.executor_jobs_run(), d.executor_jobs_run() == 1 ? " job" : " jobs", ", ",
                     d.executor_restarts(), d.executor_restarts() == 1 ? " restart" : " restarts"));
  }
  return out;
}

std::string FormatServerStatus(const v1::ServerStatus& s) {
  std::string out;
  auto line = [&out](absl::string_view label, absl::string_view value) {
    absl::StrAppend(&out, PadRight(label, 11), " ", value, "\n");
  };
  line("streams", absl::StrCat(FormatThousands(s.open_streams()), " open, ",
                               FormatThousands(s.event_watches()), " waiting for events"));
  line("queue", absl::StrCat(FormatThousands(s.queued_jobs()), " queued, ",
                             s.running_job_id().empty()
                                 ? std::string("no job running")
                                 : absl::StrCat("job ", s.running_job_id(), " running"),
                             s.queue_paused() ? "; paused (mpsctl resume)" : ""));
  line("jobs", FormatThousands(s.jobs_total()));
  line("artifacts", absl::StrCat(FormatMiB(s.artifacts_bytes()),
                                 s.artifacts_deleted_bytes() > 0
                                     ? absl::StrCat("; ", FormatMiB(s.artifacts_deleted_bytes()),
                                                    " deleted since start")
                                     : std::string()));
  line("memory", s.rss_bytes() > 0 ? absl::StrCat(FormatMiB(s.rss_bytes()), " resident")
                                   : std::string("unknown"));
  line("uptime", FormatSeconds(s.uptime_s()));
  std::string events = absl::StrCat(FormatThousands(s.events_stored()), " stored in ",
                                    Plural(s.event_commits(), "commit"), ", ",
                                    FormatThousands(s.events_pending()), " pending");
  if (s.commit_time_s() > 0) {
    absl::StrAppend(&events, "; ",
                    FormatThousands(std::llround(s.events_stored() / s.commit_time_s())),
                    " events/s of commit time");
  }
  line("events", events);
  if (s.heartbeat_interval_s() > 0) {
    line("streams", absl::StrCat("heartbeat after ", FormatSeconds(s.heartbeat_interval_s()),
                                 " idle; client keepalive every ",
                                 FormatSeconds(s.min_keepalive_interval_s()), " or slower"));
  }
  return out;
}

std::string FormatDeletedArtifacts(const v1::DeleteArtifactsResponse& response, bool dry_run) {
  std::string out;
  for (const auto& deleted : response.deleted()) {
    absl::StrAppend(
        &out, "job ", deleted.job_id(), ": ", dry_run ? "would delete " : "deleted ",
        Plural(deleted.files(), "file"), ", ", FormatMiB(deleted.bytes()),
        deleted.reason() == "requested" ? "" : absl::StrCat(" (", deleted.reason(), ")"), "\n");
  }
  if (response.deleted().empty()) absl::StrAppend(&out, "nothing to delete\n");
  absl::StrAppend(&out, dry_run ? "would free " : "freed ", FormatMiB(response.freed_bytes()), "; ",
                  FormatMiB(response.artifacts_bytes()), " of artifacts ",
                  dry_run ? "now\n" : "left\n");
  return out;
}

std::string FormatArtifacts(const v1::ListArtifactsResponse& response) {
  if (response.artifacts().empty()) return "no artifacts\n";
  TextTable table;
  table.header = {"NAME", "SIZE", "KIND", "SHA256"};
  for (const v1::Artifact& a : response.artifacts()) {
    table.rows.push_back({a.name(), FormatSize(a.size_bytes()), a.kind(), a.sha256()});
  }
  AlignOptions align;
  align.right_aligned = {false, /*SIZE=*/true};
  return RenderAligned(table, align);
}

std::string FormatModelTable(const v1::ListModelsResponse& response) {
  if (response.models().empty()) return "no models\n";
  TextTable table;
  table.header = {"NAME", "PARAMETERS", "INPUT", "CLASSES", "DESCRIPTION"};
  for (const v1::ModelInfo& m : response.models()) {
    const bool fits = m.unsupported().empty();
    table.rows.push_back({m.name(), fits ? FormatThousands(m.parameters()) : "-",
                          absl::StrJoin(m.input_shape(), "×"), absl::StrCat(m.num_classes()),
                          fits ? m.description() : m.unsupported()});
  }
  AlignOptions align;
  align.right_aligned = {false, /*PARAMETERS=*/true, false, /*CLASSES=*/true};
  return RenderAligned(table, align);
}

}  // namespace mpsd::client
