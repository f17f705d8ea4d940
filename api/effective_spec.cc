// The documented defaults, written into a spec (api/effective_spec.h).
#include "api/effective_spec.h"

#include <optional>
#include <string>

#include "api/epoch_metric.h"

namespace mpsd::api {
namespace {

void DefaultString(std::string* value, const char* fallback) {
  if (value->empty()) *value = fallback;
}

void OptimizerDefaults(v1::OptimizerSpec& o) {
  DefaultString(o.mutable_name(), "adam");
  const bool sgd = o.name() == "sgd";
  if (!o.has_learning_rate()) o.set_learning_rate(sgd ? 1e-2 : 1e-3);  // torch.optim's
  if (!o.has_weight_decay()) o.set_weight_decay(o.name() == "adamw" ? 1e-2 : 0);
  if (sgd) {
    if (!o.has_momentum()) o.set_momentum(0);
    return;
  }
  if (o.betas().empty()) {
    o.add_betas(0.9);
    o.add_betas(0.999);
  }
  if (!o.has_eps()) o.set_eps(1e-8);
}

void ScheduleDefaults(v1::ScheduleSpec& s, double learning_rate) {
  DefaultString(s.mutable_name(), "constant");
  if (s.name() == "step") {
    if (!s.has_step_size_epochs()) s.set_step_size_epochs(1);
    if (!s.has_gamma()) s.set_gamma(0.1);
  } else if (s.name() == "cosine") {
    if (!s.has_warmup_steps() && !s.has_warmup_epochs()) s.set_warmup_steps(0);
    if (!s.has_min_lr()) s.set_min_lr(0);
  } else if (s.name() == "onecycle") {  // OneCycleLR's defaults
    if (!s.has_max_lr()) s.set_max_lr(learning_rate);
    if (!s.has_pct_start()) s.set_pct_start(0.3);
    if (!s.has_div_factor()) s.set_div_factor(25);
    if (!s.has_final_div_factor()) s.set_final_div_factor(1e4);
    DefaultString(s.mutable_anneal_strategy(), "cos");
    if (!s.has_cycle_momentum()) s.set_cycle_momentum(true);
    if (!s.has_base_momentum()) s.set_base_momentum(0.85);
    if (!s.has_max_momentum()) s.set_max_momentum(0.95);
  }
}

void TrainJobDefaults(v1::TrainJob& job) {
  if (!job.has_batch_size()) job.set_batch_size(64);
  if (!job.has_epochs()) job.set_epochs(1);
  if (!job.has_grad_accumulation_steps()) job.set_grad_accumulation_steps(1);
  if (!job.has_eval_every_epochs()) job.set_eval_every_epochs(1);
  DefaultString(job.mutable_device(), "auto");
  DefaultString(job.mutable_precision(), "fp32");
  DefaultString(job.mutable_memory_format(), "contiguous");
  DefaultString(job.mutable_restart_policy(), "none");
  DefaultString(job.mutable_nan_policy(), "fail");
  if (job.nan_policy() == "skip_step" && !job.has_max_skipped_steps()) {
    job.set_max_skipped_steps(10);
  }
  if (job.has_checkpoint() && !job.checkpoint().has_keep_last()) {
    job.mutable_checkpoint()->set_keep_last(1);
  }
  // The task's default loss (trainer/task.cc) and its settings; a TorchScript loss (the user's
  // own) has none, and a built-in loss's settings beside it are refused.
  DefaultString(job.mutable_task(), "classification");
  if (job.loss().torchscript().empty()) {
    v1::LossSpec& loss = *job.mutable_loss();
    DefaultString(loss.mutable_type(), job.task() == "multilabel"   ? "bce_with_logits"
                                       : job.task() == "regression" ? "mse"
                                                                    : "cross_entropy");
    if (loss.type() == "smooth_l1" && !loss.has_beta()) loss.set_beta(1);
    if (loss.type() == "huber" && !loss.has_delta()) loss.set_delta(1);
  }
  // Each metric of the user's own reduces as a mean unless it says otherwise (trainer/task.cc).
  for (v1::MetricSpec& metric : *job.mutable_metrics()) {
    DefaultString(metric.mutable_reduction(), "mean");
  }
  OptimizerDefaults(*job.mutable_optimizer());
  ScheduleDefaults(*job.mutable_schedule(), job.optimizer().learning_rate());
  v1::DatasetSpec& dataset = *job.mutable_dataset();
  DefaultString(dataset.mutable_root(), DefaultDatasetRoot(dataset.name()).c_str());
  if (dataset.name() != "synthetic") DefaultString(dataset.mutable_subset(), "stratified");
  DefaultString(job.mutable_evaluate_test(), dataset.has_validation() ? "end" : "every_epoch");
  if (job.has_early_stopping()) {
    v1::EarlyStoppingSpec& e = *job.mutable_early_stopping();
    DefaultString(e.mutable_monitor(), "val_loss");
    // A job's own metric (val_top2) has no known direction: its mode stays for the job to say.
    if (const std::optional<bool> higher = HigherIsBetter(e.monitor())) {
      DefaultString(e.mutable_mode(), *higher ? "max" : "min");
    }
    if (!e.has_patience()) e.set_patience(3);
  }
  if (dataset.name() == "image_folder" || dataset.name() == "tensors") {
    DefaultString(dataset.mutable_placement(), "auto");
  }
  if (dataset.has_image_folder()) {
    v1::ImageFolderSpec& folder = *dataset.mutable_image_folder();
    if (!folder.has_channels()) folder.set_channels(3);
    DefaultString(folder.mutable_on_bad_image(), "fail");
  }
}

void BenchJobDefaults(v1::BenchJob& job) {
  if (!job.has_warmup_iters()) job.set_warmup_iters(5);
  if (!job.has_iters()) job.set_iters(20);
  DefaultString(job.mutable_mode(), "inference");
  if (job.devices().empty()) job.add_devices("all");
  if (job.precisions().empty()) job.add_precisions("fp32");
  if (job.memory_formats().empty()) job.add_memory_formats("contiguous");
}

void EvalJobDefaults(v1::EvalJob& job) {
  if (job.has_dataset()) {
    v1::DatasetSpec& dataset = *job.mutable_dataset();
    DefaultString(dataset.mutable_root(), DefaultDatasetRoot(dataset.name()).c_str());
  }
  DefaultString(job.mutable_split(), "test");
  // batch_size stays unset: its default is the evaluated TrainJob's batch_size (the batches its
  // evaluations ran in), which only the executor reads (trainer/eval_job.cc).
  DefaultString(job.mutable_device(), "auto");
}

}  // namespace

std::string DefaultDatasetRoot(absl::string_view dataset_name) {
  for (const char* published : {"fashion-mnist", "mnist", "cifar10"}) {
    if (dataset_name == published) return std::string("/usr/share/datasets/") + published;
  }
  return "";
}

v1::SubmitJobRequest EffectiveSpec(v1::SubmitJobRequest request) {
  if (request.has_train_job()) TrainJobDefaults(*request.mutable_train_job());
  if (request.has_bench_job()) BenchJobDefaults(*request.mutable_bench_job());
  if (request.has_eval_job()) EvalJobDefaults(*request.mutable_eval_job());
  return request;
}

v1::SubmitJobRequest EffectiveSpecOf(const v1::Job& job) {
  if (job.has_effective_spec()) return job.effective_spec();
  if (job.kind() == v1::Job::SWEEP) return job.spec();
  return EffectiveSpec(job.spec());
}

}  // namespace mpsd::api
