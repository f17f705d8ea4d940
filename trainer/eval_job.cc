// EvalJob (eval_job.h): the model's training spec resolved again with the EvalJob's dataset, the
// data loaded as a TrainJob loads it, the weights of model.pt, and the TrainJob's own Evaluate.
#include "trainer/eval_job.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/decimal.h"
#include "api/error_cause.h"
#include "trainer/datasets.h"
#include "trainer/device.h"
#include "trainer/job_summary.h"
#include "trainer/log.h"
#include "trainer/models.h"
#include "trainer/task.h"
#include "trainer/torch_errors.h"
#include "trainer/torch_executor.h"
#include "trainer/train_job.h"
#include "trainer/train_loop.h"
#include "trainer/trained_model.h"

namespace mpsd::trainer {
namespace {

using Clock = std::chrono::steady_clock;
using mpsd::v1::JobEvent;

constexpr int kMaxBatchSize = 1 << 20;

const FieldChecks& Fields() {
  static const FieldChecks* const fields = new FieldChecks("eval_job");
  return *fields;
}

// `status` (from resolving the TrainJob made for the evaluation) with its field moved to the
// EvalJob's: train_job.dataset.* and train_job.device are the EvalJob's own; anything else is
// the stored model's spec that no longer resolves, or the dataset not fitting the model.
absl::Status AsEvalError(const absl::Status& status, const TrainedModel& card) {
  const std::string field = api::InvalidFieldOf(status);
  std::string message(status.message());
  for (const char* own : {"train_job.dataset", "train_job.device"}) {
    if (absl::StartsWith(field, own)) {
      // The text names the field as the cause does: say the EvalJob's.
      const std::string moved =
          absl::StrCat("eval_job", absl::string_view(own).substr(std::strlen("train_job")));
      if (absl::StartsWith(message, own)) message = moved + message.substr(std::strlen(own));
      const std::string moved_field = moved + field.substr(std::strlen(own));
      return api::WithInvalidField(absl::Status(status.code(), message), moved_field);
    }
  }
  return Fields().Error("dataset",
                        absl::StrFormat("does not fit the model of %s: %s", card.label, message));
}

// The TrainJob that builds the model of `card` and loads `job.dataset` as the model's training
// loaded its data: the stored spec with the EvalJob's dataset and device, the weights of
// model.pt instead of any pretrained file, and nothing that only training uses.
mpsd::v1::TrainJob EvalTrainJob(const mpsd::v1::EvalJob& job, const TrainedModel& card) {
  mpsd::v1::TrainJob spec;
  *spec.mutable_model() = card.spec.model();
  spec.mutable_model()->clear_weights();
  spec.mutable_model()->clear_strict();
  spec.mutable_model()->set_num_classes(static_cast<int32_t>(card.config.num_classes));
  if (card.entry == nullptr) spec.mutable_model()->set_torchscript(card.weights_path);
  *spec.mutable_dataset() = job.dataset();
  // image_folder and tensors: the model's normalisation, not statistics of this data.
  const std::string& name = job.dataset().name();
  if ((name == "image_folder" || name == "tensors") && job.dataset().mean().empty() &&
      job.dataset().std().empty() && !card.mean.empty() && !card.std.empty()) {
    for (float m : card.mean) spec.mutable_dataset()->add_mean(m);
    for (float s : card.std) spec.mutable_dataset()->add_std(s);
  }
  spec.mutable_dataset()->clear_augmentation();
  spec.set_device(job.device());
  spec.set_seed(card.spec.seed());
  spec.set_task(card.spec.task());
  *spec.mutable_loss() = card.spec.loss();
  spec.set_label_smoothing(card.spec.label_smoothing());
  spec.set_epochs(1);
  // The batch its evaluations ran in: the EvalJob's default batch_size.
  if (card.spec.has_batch_size()) spec.set_batch_size(card.spec.batch_size());
  return spec;
}

// "[1, 28, 28]".
std::string Bracketed(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Whether `config`'s data fits the model of `card` (shape, targets); INVALID_ARGUMENT naming
// eval_job.dataset otherwise.
absl::Status CheckFits(const DatasetConfig& data, const TrainedModel& card) {
  if (data.input_shape != card.config.input_shape) {
    return Fields().Error("dataset",
                          absl::StrFormat("one example is %s, but the model of %s takes %s",
                                          Bracketed(data.input_shape), card.label,
                                          Bracketed(card.config.input_shape)));
  }
  const bool classification = card.task == "classification";
  if (classification && data.float_targets) {
    return Fields().Error("dataset", absl::StrFormat("float targets, but the model of %s is a "
                                                     "classifier (class indices)",
                                                     card.label));
  }
  if (classification && data.num_classes > card.config.num_classes) {
    return Fields().Error(
        "dataset", absl::StrFormat("%d classes, but the model of %s has %d", data.num_classes,
                                   card.label, card.config.num_classes));
  }
  if (!classification && !data.float_targets) {
    return Fields().Error("dataset", absl::StrFormat("class indices, but the model of %s is %s "
                                                     "(float targets)",
                                                     card.label, card.task));
  }
  return absl::OkStatus();
}

// A resolved EvalJob.
struct EvalPlan {
  TrainedModel card;
  TrainJobConfig config;
  std::string split = "test";
  // EvalJob.batch_size; 0 until resolved: the TrainJob's batch_size, the batches its
  // evaluations ran in (TrainOptions::eval_batch_size).
  int batch_size = 0;
};

// split: val held out of the training split by a fraction (not a split of its own, `source`):
// only the TrainJob's own values of the fields that draw it (limit_train, subset,
// validation.fraction; the seed is the TrainJob's) give the examples it held out; other values
// would evaluate examples it trained on. A dataset other than the one it trained on is not
// checked.
absl::Status CheckHeldOut(const mpsd::v1::DatasetSpec& eval, const TrainedModel& card) {
  const mpsd::v1::DatasetSpec& trained = card.spec.dataset();
  if (!eval.validation().has_fraction() || eval.name() != trained.name()) {
    return absl::OkStatus();
  }
  const std::string advice =
      "examples the model trained on; use the TrainJob's dataset.limit_train, subset and "
      "validation.fraction, or split: test";
  if (!trained.validation().has_fraction()) {
    return Fields().Error(
        "dataset.validation.fraction",
        absl::StrFormat("%s trained without a validation fraction: split \"val\" held out "
                        "of its training split now holds %s",
                        card.label, advice));
  }
  const auto subset = [](const mpsd::v1::DatasetSpec& d) {
    return d.subset().empty() ? std::string("stratified") : d.subset();
  };
  const auto differs = [&](absl::string_view field, const std::string& ours,
                           const std::string& theirs) {
    return Fields().Error(
        absl::StrCat("dataset.", field),
        absl::StrFormat("%s, but %s held its validation examples out with %s: split \"val\" "
                        "drawn otherwise holds %s",
                        ours, card.label, theirs, advice));
  };
  if (eval.limit_train() != trained.limit_train()) {
    const auto limit = [](int64_t n) { return n > 0 ? absl::StrCat(n) : std::string("none"); };
    return differs("limit_train", limit(eval.limit_train()),
                   absl::StrCat("limit_train ", limit(trained.limit_train())));
  }
  if (subset(eval) != subset(trained)) {
    return differs("subset", subset(eval), absl::StrCat("subset ", subset(trained)));
  }
  if (eval.validation().fraction() != trained.validation().fraction()) {
    return differs(
        "validation.fraction", api::ShortestDecimal(eval.validation().fraction()),
        absl::StrCat("fraction ", api::ShortestDecimal(trained.validation().fraction())));
  }
  return absl::OkStatus();
}

absl::StatusOr<EvalPlan> ResolveEvalJob(const mpsd::v1::EvalJob& job,
                                        const DeviceInventory& inventory,
                                        const api::Executor::Options& options) {
  EvalPlan plan;
  if (!job.split().empty()) plan.split = job.split();
  if (plan.split != "test" && plan.split != "train" && plan.split != "val") {
    return Fields().Error(
        "split", absl::StrFormat("unknown \"%s\" (expected test, train or val)", plan.split));
  }
  if (job.has_batch_size()) {
    if (absl::Status s = Fields().InRange("batch_size", job.batch_size(), 1, kMaxBatchSize);
        !s.ok()) {
      return s;
    }
    plan.batch_size = job.batch_size();
  }
  absl::StatusOr<TrainedModel> card =
      ReadTrainedModel(job.model(), options.artifacts_dir, Fields());
  if (!card.ok()) return card.status();
  plan.card = *std::move(card);
  if (!job.has_dataset() || job.dataset().name().empty()) {
    return Fields().Error("dataset.name",
                          "required: the data to evaluate on (e.g. "
                          "fashion-mnist, image_folder with its root)");
  }
  const mpsd::v1::TrainJob spec = EvalTrainJob(job, plan.card);
  absl::StatusOr<DatasetConfig> data = ResolveDataset(spec.dataset());
  if (!data.ok()) return AsEvalError(data.status(), plan.card);
  if (absl::Status s = CheckFits(*data, plan.card); !s.ok()) return s;
  absl::StatusOr<TrainJobConfig> config =
      ResolveTrainJob(spec, inventory, options, /*context=*/nullptr);
  if (!config.ok()) return AsEvalError(config.status(), plan.card);
  plan.config = *std::move(config);
  if (plan.batch_size == 0) plan.batch_size = plan.config.batch_size;
  if (plan.split == "val" && !plan.config.dataset.has_validation()) {
    return Fields().Error("split",
                          "\"val\" needs a validation split: set "
                          "eval_job.dataset.validation (fraction or source)");
  }
  if (plan.split == "val") {
    if (absl::Status s = CheckHeldOut(job.dataset(), plan.card); !s.ok()) return s;
  }
  return plan;
}

void EmitLog(const EventSink& sink, std::string text) {
  Log(LogLevel::kInfo, text);
  JobEvent event;
  event.mutable_log()->set_level(mpsd::v1::LogLine::INFO);
  event.mutable_log()->set_text(std::move(text));
  sink(std::move(event));
}

const TensorSplit& SplitOf(const DeviceDataset& data, const std::string& split) {
  if (split == "train") return data.train;
  if (split == "val") return data.val;
  return data.test;
}

// "<split>_<metric>" for every figure of `result`, as a TrainJob's epoch events name them.
void PutMetrics(const EvalResult& result, const std::string& split, const TaskConfig& task,
                mpsd::v1::JobSummary& summary) {
  auto& metrics = *summary.mutable_metrics();
  if (task.kind != TaskKind::kClassification) {
    for (const auto& [name, value] : result.metrics) {
      metrics[absl::StrCat(split, "_", name)] = value;
    }
    return;
  }
  metrics[absl::StrCat(split, "_loss")] = result.loss;
  metrics[absl::StrCat(split, "_accuracy")] = result.accuracy;
  if (split == "test") {
    summary.set_test_loss(result.loss);
    summary.set_test_accuracy(result.accuracy);
  } else if (split == "val") {
    summary.set_val_loss(result.loss);
    summary.set_val_accuracy(result.accuracy);
  }
  // K × K counts: kept up to 256 classes (at most a few hundred KiB in every answer about the
  // job; beyond, the matrix would approach gRPC's 4 MiB message limit).
  constexpr int64_t kMaxConfusionClasses = 256;
  if (task.outputs <= kMaxConfusionClasses) {
    for (const int64_t count : result.confusion) summary.add_confusion_matrix(count);
    if (!result.confusion.empty()) summary.set_confusion_classes(task.outputs);
  }
}

// Loads, evaluates and fills `summary`; the part of RunEvalJob inside the exception firewall.
// `eval_seconds`: the evaluation pass's wall time (forward passes and the read-back).
absl::Status Evaluation(const EvalPlan& plan, const EventSink& sink,
                        const std::atomic<bool>& cancelled, mpsd::v1::JobSummary& summary,
                        double& eval_seconds) {
  const TrainJobConfig& config = plan.config;
  const Clock::time_point load_start = Clock::now();
  absl::StatusOr<DeviceDataset> data = LoadDataset(config.dataset, config.seed, config.device);
  if (!data.ok()) return data.status();
  summary.set_data_load_time_s(std::chrono::duration<double>(Clock::now() - load_start).count());
  for (const std::string& note : data->notes) EmitLog(sink, note);
  for (const std::string& name : data->class_names) summary.add_class_names(name);
  const TensorSplit& split = SplitOf(*data, plan.split);
  absl::StatusOr<std::shared_ptr<ClassifierImpl>> model =
      LoadTrainedModel(plan.card, config.device, Fields());
  if (!model.ok()) return model.status();
  summary.set_parameters(CountParameters(**model));
  EmitLog(sink, absl::StrFormat("evaluating %s on the %s split of %s: %d examples, batches of "
                                "%d on %s",
                                plan.card.label, plan.split, config.dataset.info->name,
                                split.size(), plan.batch_size, DeviceString(config.device)));
  const TaskLoss task(config.task, config.device);
  const bool classification = config.task.kind == TaskKind::kClassification;
  const Clock::time_point eval_start = Clock::now();
  absl::StatusOr<EvalResult> result =
      Evaluate(**model, split, plan.batch_size, cancelled, /*data_parallel=*/nullptr, &task,
               classification ? config.task.outputs : 0);
  if (!result.ok()) return result.status();
  const double seconds = std::chrono::duration<double>(Clock::now() - eval_start).count();
  eval_seconds = seconds;
  summary.set_eval_examples(split.size());
  if (split.size() == 0) {  // nothing measured: no figures (an unmeasured metric is absent)
    EmitLog(sink, absl::StrFormat("the %s split has no examples: nothing to evaluate", plan.split));
    return absl::OkStatus();
  }
  PutMetrics(*result, plan.split, config.task, summary);
  EmitLog(sink,
          absl::StrFormat("%s: loss %.4f%s over %d examples in %.3f s", plan.split, result->loss,
                          config.task.kind == TaskKind::kRegression
                              ? ""
                              : absl::StrFormat(", accuracy %.4f", result->accuracy),
                          split.size(), seconds));
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateEvalJob(const mpsd::v1::EvalJob& job, const DeviceInventory& inventory,
                             const api::Executor::Options& options) {
  return CatchTorchErrors([&] { return ResolveEvalJob(job, inventory, options).status(); });
}

absl::Status RunEvalJob(const mpsd::v1::EvalJob& job, const DeviceInventory& inventory,
                        const api::Executor::Options& options, const EventSink& sink,
                        const std::atomic<bool>& cancelled) {
  const Clock::time_point start = Clock::now();
  absl::StatusOr<EvalPlan> plan;
  if (absl::Status s = CatchTorchErrors(
          [&] { return (plan = ResolveEvalJob(job, inventory, options)).status(); });
      !s.ok()) {
    return s;
  }
  const torch::Device device = plan->config.device;
  SummaryBuilder summary(DeviceString(device));
  mpsd::v1::JobSummary& s = summary.summary();
  s.set_eval_split(plan->split);
  s.set_eval_model(job.model());
  s.set_eval_model_job_id(plan->card.job_id);
  s.set_task(TaskName(plan->config.task.kind));
  double eval_seconds = 0;
  const absl::Status status = CatchTorchErrors([&] {
    at::init_num_threads();  // this thread may not be the one that created the executor
    ResetPeakMemory(device);
    summary.SetMemoryBefore(ReadMemory(device));
    return Evaluation(*plan, sink, cancelled, s, eval_seconds);
  });
  if (!status.ok()) {
    Log(LogLevel::kWarning,
        absl::StrCat("job ended: ", status.ToString(absl::StatusToStringMode::kWithNoExtraData)));
  }
  const absl::Status cleanup = CatchTorchErrors([&] {
    Synchronize(device);
    EmptyCache(device);
    summary.SetMemoryAfter(ReadMemory(device));
    return absl::OkStatus();
  });
  const absl::Status emitted = CatchTorchErrors([&] {
    JobEvent event;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    *event.mutable_summary() = summary.Build(seconds);
    // Examples evaluated per second (the evaluation pass alone, data loading left out).
    if (eval_seconds > 0) {
      event.mutable_summary()->set_samples_per_second(
          static_cast<double>(event.summary().eval_examples()) / eval_seconds);
    }
    sink(std::move(event));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return cleanup.ok() ? emitted : cleanup;
}

}  // namespace mpsd::trainer
