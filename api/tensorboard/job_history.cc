#include "api/tensorboard/job_history.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/job_state.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace mpsd::tensorboard {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using google::protobuf::Value;

Value NumberValue(double number) {
  Value value;
  value.set_number_value(number);
  return value;
}

Value StringValue(std::string text) {
  Value value;
  value.set_string_value(std::move(text));
  return value;
}

// One element (index >= 0) or the singular value (index < 0) of a scalar field, as text.
std::string FieldText(const Message& message, const FieldDescriptor* field, int index) {
  const Reflection* r = message.GetReflection();
  const bool rep = index >= 0;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(rep ? r->GetRepeatedInt32(message, field, index)
                              : r->GetInt32(message, field));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(rep ? r->GetRepeatedInt64(message, field, index)
                              : r->GetInt64(message, field));
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(rep ? r->GetRepeatedUInt32(message, field, index)
                              : r->GetUInt32(message, field));
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrCat(rep ? r->GetRepeatedUInt64(message, field, index)
                              : r->GetUInt64(message, field));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return absl::StrCat(rep ? r->GetRepeatedDouble(message, field, index)
                              : r->GetDouble(message, field));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return absl::StrCat(rep ? r->GetRepeatedFloat(message, field, index)
                              : r->GetFloat(message, field));
    case FieldDescriptor::CPPTYPE_BOOL:
      return (rep ? r->GetRepeatedBool(message, field, index) : r->GetBool(message, field))
                 ? "true"
                 : "false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return (rep ? r->GetRepeatedEnum(message, field, index) : r->GetEnum(message, field))->name();
    case FieldDescriptor::CPPTYPE_STRING:
      return rep ? r->GetRepeatedString(message, field, index) : r->GetString(message, field);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return "";
}

Value ScalarValue(const Message& message, const FieldDescriptor* field) {
  const Reflection* r = message.GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return NumberValue(r->GetInt32(message, field));
    case FieldDescriptor::CPPTYPE_INT64:
      return NumberValue(static_cast<double>(r->GetInt64(message, field)));
    case FieldDescriptor::CPPTYPE_UINT32:
      return NumberValue(r->GetUInt32(message, field));
    case FieldDescriptor::CPPTYPE_UINT64:
      return NumberValue(static_cast<double>(r->GetUInt64(message, field)));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return NumberValue(r->GetDouble(message, field));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return NumberValue(r->GetFloat(message, field));
    case FieldDescriptor::CPPTYPE_BOOL: {
      Value value;
      value.set_bool_value(r->GetBool(message, field));
      return value;
    }
    default:
      return StringValue(FieldText(message, field, -1));
  }
}

// Every set field of `message` under `prefix`, recursively (maps and repeated messages are
// skipped: they hold no hyperparameter a run is compared by).
void Flatten(const Message& message, const std::string& prefix, std::map<std::string, Value>* out) {
  std::vector<const FieldDescriptor*> fields;
  message.GetReflection()->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string name = prefix + field->name();
    if (field->is_map()) continue;
    if (field->is_repeated()) {
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) continue;
      std::vector<std::string> items;
      const int size = message.GetReflection()->FieldSize(message, field);
      for (int i = 0; i < size; ++i) items.push_back(FieldText(message, field, i));
      (*out)[name] = StringValue(absl::StrJoin(items, ","));
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      Flatten(message.GetReflection()->GetMessage(message, field), name + ".", out);
    } else {
      (*out)[name] = ScalarValue(message, field);
    }
  }
}

// Whether a metrics map's `name` is one the fixed fields (train_loss, test_accuracy, ...) carry
// already; the rest (a task's mse, the user's metrics) get tags of their own.
bool CarriedByFields(const std::string& name) {
  for (const char* split : {"train_", "val_", "test_"}) {
    for (const char* metric : {"loss", "accuracy"}) {
      if (name == absl::StrCat(split, metric)) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<TaggedValue> StepScalars(const mpsd::v1::StepMetrics& step) {
  std::vector<TaggedValue> values = {
      {"train/loss", step.loss()},
      {"train/accuracy", step.accuracy()},
      {"train/learning_rate", step.learning_rate()},
      {"train/samples_per_second", step.samples_per_second()},
      {"train/step_time_ms", step.step_time_ms()},
      {"train/allocated_bytes", static_cast<double>(step.allocated_bytes())},
      {"train/batch_size", static_cast<double>(step.batch_size())},
  };
  if (step.loss_scale() != 0) {
    values.push_back({"train/loss_scale", step.loss_scale()});
    values.push_back({"train/skipped", step.skipped() ? 1.0 : 0.0});
  }
  return values;
}

std::vector<TaggedValue> EpochScalars(const mpsd::v1::EpochMetrics& epoch) {
  std::vector<TaggedValue> values = {
      {"epoch/epoch", static_cast<double>(epoch.epoch())},
      {"epoch/train_loss", epoch.train_loss()},
      {"epoch/train_accuracy", epoch.train_accuracy()},
      {"epoch/learning_rate", epoch.learning_rate()},
      {"epoch/epoch_time_s", epoch.epoch_time_s()},
      {"epoch/samples_per_second", epoch.samples_per_second()},
  };
  if (epoch.evaluated()) {
    values.push_back({"epoch/test_loss", epoch.test_loss()});
    values.push_back({"epoch/test_accuracy", epoch.test_accuracy()});
  }
  if (epoch.has_val_loss()) values.push_back({"epoch/val_loss", epoch.val_loss()});
  if (epoch.has_val_accuracy()) values.push_back({"epoch/val_accuracy", epoch.val_accuracy()});
  // multilabel and regression: the task's own metrics (val_r2, test_macro_f1, ...), sorted;
  // regression measures no accuracy (its *_accuracy fields are 0).
  const std::map<std::string, double> task(epoch.metrics().begin(), epoch.metrics().end());
  if (!task.empty() && !task.count("train_accuracy")) {
    values.erase(
        std::remove_if(values.begin(), values.end(),
                       [](const TaggedValue& v) { return absl::EndsWith(v.tag, "_accuracy"); }),
        values.end());
  }
  for (const auto& [name, value] : task) {
    if (!CarriedByFields(name)) values.push_back({"epoch/" + name, value});
  }
  return values;
}

std::vector<TaggedValue> SummaryScalars(const mpsd::v1::JobSummary& summary) {
  std::vector<TaggedValue> values = {
      {"final/train_loss", summary.final_train_loss()},
      {"final/total_time_s", summary.total_time_s()},
      {"final/samples_per_second", summary.samples_per_second()},
  };
  if (summary.has_test_loss()) values.push_back({"final/test_loss", summary.test_loss()});
  if (summary.has_test_accuracy()) {
    values.push_back({"final/test_accuracy", summary.test_accuracy()});
  }
  if (summary.has_val_loss()) values.push_back({"final/val_loss", summary.val_loss()});
  if (summary.has_val_accuracy()) values.push_back({"final/val_accuracy", summary.val_accuracy()});
  if (summary.best_epoch() > 0) {
    values.push_back({"final/best_epoch", static_cast<double>(summary.best_epoch())});
  }
  if (summary.has_best_value()) values.push_back({"final/best_value", summary.best_value()});
  const std::map<std::string, double> task(summary.metrics().begin(), summary.metrics().end());
  for (const auto& [name, value] : task) {
    if (!CarriedByFields(name)) values.push_back({"final/" + name, value});
  }
  return values;
}

std::map<std::string, Value> HParamsOf(const mpsd::v1::SubmitJobRequest& spec,
                                       const mpsd::v1::JobSummary* summary) {
  std::map<std::string, Value> hparams;
  if (spec.has_train_job()) Flatten(spec.train_job(), "", &hparams);
  if (spec.has_bench_job()) Flatten(spec.bench_job(), "", &hparams);
  for (const auto& [key, value] : spec.labels()) hparams["labels." + key] = StringValue(value);
  if (summary == nullptr) return hparams;
  const std::pair<const char*, const std::string*> resolved[] = {
      {"optimizer.name", &summary->optimizer()},
      {"schedule.name", &summary->schedule()},
      {"precision", &summary->precision()},
      {"device", &summary->device()},
  };
  for (const auto& [name, text] : resolved) {
    if (!text->empty()) hparams[name] = StringValue(*text);
  }
  return hparams;
}

std::string RunName(const mpsd::v1::Job& job, bool with_id) {
  const std::string& name = job.spec().name();
  if (name.empty()) return job.id();
  std::string safe = name;
  for (char& c : safe) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      c = '_';
    }
  }
  if (safe == "." || safe == "..") safe = "_";
  return with_id ? absl::StrCat(safe, "-", job.id()) : safe;
}

hparams::Status SessionStatusOf(mpsd::v1::Job::State state) {
  switch (state) {
    case mpsd::v1::Job::SUCCEEDED:
      return hparams::STATUS_SUCCESS;
    case mpsd::v1::Job::FAILED:
    case mpsd::v1::Job::CANCELLED:
    case mpsd::v1::Job::INTERRUPTED:
      return hparams::STATUS_FAILURE;
    default:
      return hparams::STATUS_RUNNING;
  }
}

bool JobHistory::Add(const mpsd::v1::JobEvent& event) {
  const double time = WallTimeOf(event);
  if (start_time_ == 0) start_time_ = time;
  bool new_attempt = false;
  switch (event.payload_case()) {
    case mpsd::v1::JobEvent::kStep: {
      if (marks_.Add(event)) {
        new_attempt = true;
        const api::AttemptStart& start = marks_.starts().back();
        steps_.erase(steps_.lower_bound(start.step), steps_.end());
        epochs_.erase(epochs_.lower_bound(start.epoch), epochs_.end());
      }
      steps_[event.step().step()] = Step{event.step(), time};
      break;
    }
    case mpsd::v1::JobEvent::kEpoch:
      epochs_[event.epoch().epoch()] = Epoch{event.epoch(), time, last_step()};
      break;
    case mpsd::v1::JobEvent::kSummary:
      summary_ = event.summary();
      break;
    case mpsd::v1::JobEvent::kState:
      state_ = event.state().state();
      state_time_ = time;
      break;
    default:
      break;
  }
  return new_attempt;
}

absl::Status WriteHistory(const JobHistory& history, const std::map<std::string, Value>& hparams,
                          EventFileWriter* writer) {
  absl::Status status = writer->WriteSessionStart(hparams, history.start_time());
  auto epoch = history.epochs().begin();
  const auto write_epochs_through = [&](int64_t step) {
    for (; status.ok() && epoch != history.epochs().end() && epoch->second.step <= step; ++epoch) {
      status = writer->WriteScalars(epoch->second.step, epoch->second.wall_time,
                                    EpochScalars(epoch->second.metrics));
    }
  };
  for (const auto& [step, kept] : history.steps()) {
    write_epochs_through(step - 1);
    if (status.ok()) status = writer->WriteScalars(step, kept.wall_time, StepScalars(kept.metrics));
  }
  write_epochs_through(INT64_MAX);
  if (status.ok() && history.summary().has_value()) {
    status = writer->WriteScalars(history.last_step(), history.state_time(),
                                  SummaryScalars(*history.summary()));
  }
  if (status.ok() && mpsd::api::IsTerminal(history.state())) {
    status = writer->WriteSessionEnd(SessionStatusOf(history.state()), history.state_time());
  }
  return status;
}

}  // namespace mpsd::tensorboard
