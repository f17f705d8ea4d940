// The fused training loop and what decides whether trials may use it.
#include "trainer/fused_train.h"

#include <google/protobuf/util/message_differencer.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/compat/autocast.h"
#include "trainer/device.h"
#include "trainer/early_stopping.h"
#include "trainer/fused_models.h"
#include "trainer/fused_optimizer.h"
#include "trainer/fused_step.h"
#include "trainer/job_summary.h"
#include "trainer/log.h"
#include "trainer/run_train_job_parts.h"
#include "trainer/torch_errors.h"
#include "trainer/train_loop_parts.h"

namespace mpsd::trainer {
namespace {

using Clock = std::chrono::steady_clock;
using google::protobuf::util::MessageDifferencer;
using mpsd::v1::JobEvent;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Records the path of the first difference MessageDifferencer reports.
class FirstDifference : public MessageDifferencer::Reporter {
 public:
  void ReportAdded(const google::protobuf::Message&, const google::protobuf::Message&,
                   const std::vector<MessageDifferencer::SpecificField>& path) override {
    Take(path);
  }
  void ReportDeleted(const google::protobuf::Message&, const google::protobuf::Message&,
                     const std::vector<MessageDifferencer::SpecificField>& path) override {
    Take(path);
  }
  void ReportModified(const google::protobuf::Message&, const google::protobuf::Message&,
                      const std::vector<MessageDifferencer::SpecificField>& path) override {
    Take(path);
  }
  const std::string& path() const { return path_; }

 private:
  void Take(const std::vector<MessageDifferencer::SpecificField>& path) {
    if (!path_.empty()) return;
    std::vector<std::string> names;
    for (const MessageDifferencer::SpecificField& field : path) {
      if (field.field == nullptr) continue;
      names.push_back(field.index >= 0 && field.field->is_repeated()
                          ? absl::StrCat(field.field->name(), "[", field.index, "]")
                          : field.field->name());
    }
    path_ = names.empty() ? "(unknown field)" : absl::StrJoin(names, ".");
  }

  std::string path_;
};

// `job` without the fields that change no shape (FusionDifference).
mpsd::v1::TrainJob ShapeFields(const mpsd::v1::TrainJob& job) {
  mpsd::v1::TrainJob shape = job;
  mpsd::v1::OptimizerSpec& optimizer = *shape.mutable_optimizer();
  optimizer.clear_learning_rate();
  optimizer.clear_weight_decay();
  optimizer.clear_momentum();
  optimizer.clear_betas();
  optimizer.clear_eps();
  shape.clear_label_smoothing();
  shape.mutable_model()->clear_dropout();
  shape.clear_schedule();
  shape.clear_seed();
  shape.clear_divergence_threshold();
  shape.clear_eval_every_epochs();
  shape.clear_evaluate_test();
  shape.clear_tensorboard();
  shape.clear_early_stopping();  // each trial's EarlyStopping is its own (EndEpoch)
  return shape;
}

// Whether `config` picks its examples with the job's seed (a stratified limit, a validation
// fraction, synthetic data): then trials of different seeds have different data.
bool SeedPicksData(const DatasetConfig& config) {
  const bool limited = config.limit_train > 0 || config.limit_test > 0;
  return (limited && config.subset == SubsetMode::kStratified) || config.validation_fraction > 0 ||
         config.info->name == "synthetic";
}

// One trial's state in the fused run.
struct Trial {
  const TrainJobConfig* job = nullptr;
  EventSink sink;      // the caller's
  EventSink observed;  // counts into `summary`, then `sink`
  const std::atomic<bool>* cancelled = nullptr;
  std::function<void(const absl::Status&)> done;
  int index = 0;
  std::unique_ptr<SummaryBuilder> summary;
  bool running = true;    // still training
  bool finished = false;  // summary emitted
  absl::Status status;
  const DeviceDataset* data = nullptr;
  std::optional<Schedule> schedule;
  std::shared_ptr<ClassifierImpl> model;  // the zoo model the weights are unfused into
  at::Generator generator;  // dropout's: the unfused job's default generator after the build
  at::Generator shuffle;
  std::unique_ptr<TaskLoss> task;
  std::unique_ptr<StepReadback> readback;
  TrainOptions options;                   // the evaluation's settings
  torch::Tensor order;                    // this epoch's permutation of the training set
  std::optional<EarlyStopping> stopping;  // TrainJob.early_stopping, when enabled
};

// Ends `trial` with `status`: the log line for a failure, its stop reason and memory figures,
// its summary (last) through its own sink.
void FinishTrial(Trial& trial, absl::Status status, const torch::Device& device,
                 Clock::time_point start) {
  if (trial.finished) return;
  trial.running = false;
  trial.finished = true;
  trial.status = std::move(status);
  if (!trial.status.ok()) {
    Log(LogLevel::kWarning,
        absl::StrCat("job ", trial.job->job_id, " ended: ",
                     trial.status.ToString(absl::StatusToStringMode::kWithNoExtraData)));
  }
  const absl::Status emitted = CatchTorchErrors([&] {
    mpsd::v1::JobSummary& summary = trial.summary->summary();
    SetStopReason(trial.status, summary);
    trial.summary->SetMemoryAfter(ReadMemory(device));
    JobEvent event;
    *event.mutable_summary() = trial.summary->Build(SecondsSince(start));
    trial.sink(std::move(event));
    return absl::OkStatus();
  });
  if (trial.status.ok()) trial.status = emitted;
  if (trial.done) trial.done(trial.status);
}

// A trial stopping at a step boundary: the steps that ran read back, then its divergence error
// if one diverged, else `otherwise`.
void StopTrial(Trial& trial, absl::Status otherwise, const torch::Device& device,
               Clock::time_point start) {
  trial.readback->Flush();
  FinishTrial(trial,
              trial.readback->diverged() ? trial.readback->DivergedError() : std::move(otherwise),
              device, start);
}

bool AnyRunning(const std::vector<std::unique_ptr<Trial>>& trials) {
  return std::any_of(trials.begin(), trials.end(), [](const auto& t) { return t->running; });
}

// Loads the trials' data (once per distinct seed where the seed picks it), records it in each
// trial's summary and log.
absl::Status LoadTrialData(std::vector<std::unique_ptr<Trial>>& trials,
                           std::map<uint64_t, std::unique_ptr<DeviceDataset>>& datasets) {
  const TrainJobConfig& first = *trials.front()->job;
  const bool per_seed = SeedPicksData(first.dataset);
  std::map<uint64_t, double> load_seconds;
  for (auto& trial : trials) {
    const uint64_t key = per_seed ? trial->job->seed : first.seed;
    auto it = datasets.find(key);
    if (it == datasets.end()) {
      const Clock::time_point load_start = Clock::now();
      absl::StatusOr<DeviceDataset> data =
          LoadDataset(trial->job->dataset, key, trial->job->device);
      if (!data.ok()) return data.status();
      if (data->train.streamed != nullptr) {
        return absl::InvalidArgumentError(
            "fused trials need the training set resident on the device; it is streamed from "
            "the host (train_job.dataset.placement)");
      }
      load_seconds[key] = SecondsSince(load_start);
      it = datasets.emplace(key, std::make_unique<DeviceDataset>(*std::move(data))).first;
    }
    trial->data = it->second.get();
    RecordLoadedData(*trial->job, *trial->data, load_seconds[key], trial->observed,
                     trial->summary->summary());
  }
  for (const auto& trial : trials) {
    if (trial->data->train.size() != trials.front()->data->train.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "fused trials need training splits of one size: trial 0 has %d examples, job %s %d",
          trials.front()->data->train.size(), trial->job->job_id, trial->data->train.size()));
    }
  }
  return absl::OkStatus();
}

// Builds each trial's schedule, zoo model (torch seeded with its seed, as RunTrainJob does), its
// dropout generator, task, read-back and evaluation settings; logs its settings.
absl::Status SetUpTrials(std::vector<std::unique_ptr<Trial>>& trials, const torch::Device& device,
                         int steps_per_readback, Clock::time_point start) {
  const int64_t train_examples = trials.front()->data->train.size();
  for (auto& trial : trials) {
    const TrainJobConfig& job = *trial->job;
    absl::StatusOr<Schedule> schedule = BuildSchedule(job, train_examples);
    if (!schedule.ok()) {
      FinishTrial(*trial, schedule.status(), device, start);
      continue;
    }
    trial->schedule = *std::move(schedule);
    torch::manual_seed(job.seed);
    trial->model = job.model->make(job.model_config);
    trial->model->to(device);
    trial->generator = at::globalContext().defaultGenerator(device).clone();
    trial->shuffle = MakeDeviceGenerator(device, job.seed);
    trial->task = std::make_unique<TaskLoss>(job.task, device);
    if (job.early_stopping.enabled) {
      trial->stopping.emplace(job.early_stopping);
      trial->summary->summary().set_monitor(job.early_stopping.monitor);
      if (std::string note =
              EarlyStoppingReachNote(job.early_stopping, job.epochs, job.eval_every_epochs);
          !note.empty()) {
        EmitLog(trial->observed, note);
      }
    }
    TrainOptions& options = trial->options;
    options.batch_size = job.batch_size;
    options.eval_batch_size = job.batch_size;  // as the unfused job's (MakeTrainOptions)
    options.epochs = job.epochs;
    options.seed = job.seed;
    options.task = job.task;
    options.eval_every_epochs = job.eval_every_epochs;
    options.evaluate_test = job.evaluate_test;
    const int64_t steps_per_epoch =
        StepsPerEpoch(train_examples, job.batch_size, job.drop_last, /*grad_accumulation=*/1);
    trial->readback =
        std::make_unique<StepReadback>(device, steps_per_readback, steps_per_epoch * job.epochs,
                                       LoopPosition{}, DivergenceCheck(job.divergence_threshold),
                                       trial->observed, trial->task->labels_per_example());
    mpsd::v1::JobSummary& summary = trial->summary->summary();
    summary.set_parameters(CountParameters(*trial->model));
    summary.set_optimizer(OptimizerName(job.optimizer.kind));
    summary.set_schedule(ScheduleName(job.schedule.config.kind));
    summary.set_precision(PrecisionName(job.precision));
    summary.set_task(TaskName(job.task.kind));
    EmitLog(trial->observed, DescribeTraining(job, *trial->schedule, summary.parameters()));
  }
  return absl::OkStatus();
}

// The running trials' hyperparameters for step `step` (0-based), their schedules applied.
std::vector<TrialHyperparameters> StepHyperparameters(
    const std::vector<std::unique_ptr<Trial>>& trials, int64_t step) {
  std::vector<TrialHyperparameters> hyper(trials.size());
  for (size_t k = 0; k < trials.size(); ++k) {
    const Trial& trial = *trials[k];
    TrialHyperparameters& h = hyper[k];
    h.active = trial.running;
    if (!trial.running) continue;
    const OptimizerConfig& o = trial.job->optimizer;
    h.learning_rate = trial.schedule->LearningRate(step);
    h.weight_decay = o.weight_decay;
    h.momentum = o.momentum;
    h.beta1 = o.beta1;
    h.beta2 = o.beta2;
    h.eps = o.eps;
    if (const std::optional<double> momentum = trial.schedule->Momentum(step)) {
      h.momentum = *momentum;  // OneCycleLR's cycle_momentum: SGD's momentum, Adam's beta1
      h.beta1 = *momentum;
    }
  }
  return hyper;
}

// The epoch's end: every step read back (the caller flushed), then each running trial's
// evaluation (its weights unfused into its zoo model) and epoch event.
void EndEpoch(std::vector<std::unique_ptr<Trial>>& trials, FusedModel& model, int epoch,
              const torch::Device& device, Clock::time_point start) {
  for (auto& trial : trials) {
    if (!trial->running) continue;
    trial->readback->Flush();
    if (trial->readback->diverged()) {
      FinishTrial(*trial, trial->readback->DivergedError(), device, start);
      continue;
    }
    const double epoch_seconds = trial->readback->epoch_seconds();
    model.Unfuse(trial->index, *trial->model);
    absl::StatusOr<EpochEvaluation> evaluation = EvaluateEpochSplits(
        *trial->model, *trial->data, trial->options, *trial->task, epoch, *trial->cancelled);
    if (!evaluation.ok()) {
      FinishTrial(*trial, evaluation.status(), device, start);
      continue;
    }
    JobEvent event;
    *event.mutable_epoch() =
        EpochMetricsOf(epoch, *trial->readback, *evaluation, epoch_seconds,
                       trial->schedule->LearningRate(trial->readback->steps()), *trial->task);
    // TrainJob.early_stopping, as the unfused job's hook decides before its epoch event: a new
    // best's weights (just unfused) saved as best.pt; once patience runs out, the test split
    // evaluated into this epoch (evaluate_test: end), then the trial ends here, SUCCEEDED with
    // stop reason early_stopped and its current weights as model.pt, its entry of the running
    // mask cleared by the caller's sync. The other trials go on.
    bool stop = false;
    std::string stop_note;
    if (trial->stopping.has_value()) {
      absl::StatusOr<EarlyStopping::Decision> decision =
          ObserveBestEpoch(*trial->job, *trial->stopping, *trial->model, trial->data->class_names,
                           /*save_best=*/true, event.epoch(), trial->summary->summary(), stop_note);
      absl::Status status = decision.status();
      stop = status.ok() && decision->stop;
      if (stop) {
        status = EvaluateTestOnEarlyEnd(*trial->model, *trial->data, trial->options, *trial->task,
                                        *trial->cancelled, *event.mutable_epoch());
      }
      if (!status.ok()) {
        FinishTrial(*trial, status, device, start);
        continue;
      }
    }
    trial->observed(std::move(event));
    if (!stop) continue;
    EmitLog(trial->observed, stop_note);
    FinishTrial(*trial,
                SaveFinishedModel(*trial->job, *trial->model, *trial->data, trial->observed,
                                  trial->summary->summary()),
                device, start);
  }
}

// Draws each trial's permutation of epoch `epoch` (shared: the first trial's for all).
void DrawOrders(std::vector<std::unique_ptr<Trial>>& trials, bool shared_data_order, int epoch,
                int64_t n, const torch::TensorOptions& index_options) {
  for (auto& trial : trials) {
    if (trial->running) trial->readback->StartEpoch(epoch, nullptr);
    if (shared_data_order && trial->index > 0) {
      trial->order = trials.front()->order;
      continue;
    }
    trial->shuffle.set_current_seed(EpochSeed(trial->job->seed, epoch));
    trial->order = torch::randperm(n, trial->shuffle, index_options);
  }
}

// Ends the running trials whose cancel flag is set (after `flush`, which reads back every
// pending step).
void StopCancelled(std::vector<std::unique_ptr<Trial>>& trials, const std::function<void()>& flush,
                   const torch::Device& device, Clock::time_point start) {
  for (auto& trial : trials) {
    if (!trial->running || !trial->cancelled->load(std::memory_order_relaxed)) continue;
    flush();
    if (!trial->running) continue;  // the read-back found it diverged
    FinishTrial(*trial,
                trial->readback->diverged()
                    ? trial->readback->DivergedError()
                    : absl::CancelledError(absl::StrFormat("cancelled after step %d of %d",
                                                           trial->readback->steps(),
                                                           trial->readback->total_steps())),
                device, start);
  }
}

// The epochs with the batched step (trainer/fused_step.h), in a CUDA graph where it can be: one
// step for all trials, their losses and correct counts copied into one [capacity, K, 2] device
// buffer per step and read back in one transfer for all trials.
void RunBatchedEpochs(std::vector<std::unique_ptr<Trial>>& trials, bool shared_data_order,
                      int steps_per_readback, FusedModel& model, FusedOptimizer& optimizer,
                      const torch::Device& device, Clock::time_point start) {
  const TrainJobConfig& first = *trials.front()->job;
  const auto k_trials = static_cast<int64_t>(trials.size());
  const int64_t n = trials.front()->data->train.size();
  const int64_t batch_size = first.batch_size;
  const int64_t batches = first.drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
  const int64_t total_steps = std::max<int64_t>(batches * first.epochs, 1);
  std::vector<std::vector<TrialHyperparameters>> per_step;
  per_step.reserve(total_steps);
  for (int64_t t = 0; t < total_steps; ++t) per_step.push_back(StepHyperparameters(trials, t));

  FusedGraphRequest request;
  request.device = device;
  request.cuda_graphs = std::all_of(trials.begin(), trials.end(),
                                    [](const auto& trial) { return trial->job->cuda_graphs; });
  std::string reason = FusedGraphUnsupportedReason(request);
  if (reason.empty() && n < batch_size) reason = "no full batch in the training set";
  FusedStepOptions options;
  options.batch_size = batch_size;
  options.task = first.task;
  options.augmentation = trials.front()->data->augmentation;
  options.capture = reason.empty();
  options.precision = first.precision;
  std::vector<torch::Tensor> images, labels;
  for (const auto& trial : trials) {
    options.label_smoothing.push_back(trial->job->task.label_smoothing);
    images.push_back(trial->data->train.images);
    labels.push_back(trial->data->train.labels);
    // Each trial's own draws with its own data order (its unfused run's crops and masks); the
    // shared order draws once for all.
    if (!shared_data_order) options.generators.push_back(trial->generator);
  }
  const Clock::time_point capture_start = Clock::now();
  FusedStep step(model, optimizer, std::move(images), std::move(labels),
                 optimizer.Tabulate(per_step).to(device), std::move(options));
  const double capture_seconds = SecondsSince(capture_start);
  const auto sync_mask = [&] {
    for (const auto& trial : trials) {
      if (!trial->running) step.Stop(trial->index);
    }
  };
  sync_mask();
  const char* draws = step.per_trial_draws()
                          ? "each trial's dropout masks and augmentation from its own generator "
                            "(as its run alone draws them)"
                          : "one dropout draw per layer for all trials";
  for (auto& trial : trials) {
    if (!trial->running) continue;
    EmitLog(trial->observed,
            step.captured()
                ? absl::StrFormat(
                      "fused step captured in one CUDA graph (%d trials, batch %d, %s, %s, %s; one "
                      "gather%s, %s, one loss, per-trial hyperparameters from a table on the "
                      "device; warm-up and capture %.2f s); a partial last batch runs eagerly",
                      k_trials, batch_size, OptimizerName(first.optimizer.kind),
                      PrecisionName(first.precision), CudnnChoiceName(),
                      step.shared_data() ? "" : " per trial (the trials' data differ)", draws,
                      capture_seconds)
                : absl::StrCat(
                      "fused step runs eagerly (batched over the trials): ", reason,
                      step.shared_data() ? "" : "; one gather per trial (the trials' data differ)",
                      "; ", draws));
  }

  const int capacity = std::max(steps_per_readback, 1);
  const torch::Tensor values =
      torch::zeros({capacity, k_trials, 2}, torch::TensorOptions().device(device));
  int pending = 0;
  const auto flush = [&] {
    if (pending == 0) return;
    const torch::Tensor host = values.narrow(/*dim=*/0, /*start=*/0, pending).to(torch::kCPU);
    pending = 0;
    for (auto& trial : trials) {
      if (!trial->running || trial->readback->pending() == 0) continue;
      trial->readback->FlushFrom(host.select(/*dim=*/1, trial->index));
      if (trial->readback->diverged()) {
        FinishTrial(*trial, trial->readback->DivergedError(), device, start);
      }
    }
  };
  const auto interval = std::chrono::milliseconds(TrainOptions().readback_interval_ms);
  const auto index_options = torch::TensorOptions().dtype(torch::kInt64).device(device);
  int64_t steps = 0;
  for (int epoch = 1; epoch <= first.epochs && AnyRunning(trials); ++epoch) {
    DrawOrders(trials, shared_data_order, epoch, n, index_options);
    torch::Tensor orders;  // [K, n]: row k trial k's permutation
    if (shared_data_order) {
      orders = trials.front()->order.unsqueeze(0).expand({k_trials, n});
    } else {
      std::vector<torch::Tensor> rows;
      for (const auto& trial : trials) rows.push_back(trial->order);
      orders = torch::stack(rows);
    }
    for (int64_t batch = 0; batch < batches; ++batch) {
      StopCancelled(trials, flush, device, start);
      if (!AnyRunning(trials)) break;
      sync_mask();
      const int64_t first_example = batch * batch_size;
      const int64_t size = std::min(batch_size, n - first_example);
      const torch::Tensor out = step.Step(orders.narrow(/*dim=*/1, first_example, size));
      values[pending].copy_(out);
      ++pending;
      bool due = pending == capacity;
      for (auto& trial : trials) {
        if (!trial->running) continue;
        trial->readback->RecordDeferred(size, trial->schedule->LearningRate(steps));
        due = due || trial->readback->due(interval);
      }
      ++steps;
      if (due) {
        flush();
        sync_mask();
      }
    }
    flush();
    EndEpoch(trials, model, epoch, device, start);
    sync_mask();
  }
}

// The whole fused run inside the exception firewall; trials that end early are finished here.
absl::Status TrainFused(std::vector<std::unique_ptr<Trial>>& trials, bool shared_data_order,
                        int steps_per_readback, FusedStepMode mode, const torch::Device& device,
                        Clock::time_point start) {
  std::map<uint64_t, std::unique_ptr<DeviceDataset>> datasets;
  if (absl::Status s = LoadTrialData(trials, datasets); !s.ok()) return s;
  if (absl::Status s = SetUpTrials(trials, device, steps_per_readback, start); !s.ok()) return s;
  if (!AnyRunning(trials)) return absl::OkStatus();

  // Trials whose setup failed still take part in the fused model (their slices frozen), so
  // that every trial keeps its index; their models are built here unseeded.
  const TrainJobConfig& first = *trials.front()->job;
  std::vector<std::shared_ptr<ClassifierImpl>> models;
  std::vector<at::Generator> generators;
  for (auto& trial : trials) {
    if (trial->model == nullptr) {
      trial->model = trial->job->model->make(trial->job->model_config);
      trial->generator = at::globalContext().defaultGenerator(device).clone();
      trial->shuffle = MakeDeviceGenerator(device, trial->job->seed);
    }
    models.push_back(trial->model);
    generators.push_back(trial->generator);
  }
  absl::StatusOr<std::unique_ptr<FusedModel>> fused =
      FusedModel::Create(first.model->name, models, device);
  if (!fused.ok()) return fused.status();
  FusedModel& model = **fused;
  FusedOptimizer optimizer(first.optimizer.kind, first.optimizer.nesterov, model.parameters(),
                           static_cast<int>(trials.size()));
  std::vector<std::string> ids;
  for (const auto& trial : trials) ids.push_back(trial->job->job_id);
  for (auto& trial : trials) {
    if (!trial->running) continue;
    EmitLog(trial->observed,
            absl::StrFormat("fused: jobs %s trained together as one horizontally fused model "
                            "and optimizer on %s (data order %s)",
                            absl::StrJoin(ids, ", "), DeviceString(device),
                            shared_data_order ? "shared: the first trial's" : "per trial"));
    if (device.is_cpu()) {
      // tests/perf/SWEEP_RESULTS.md: 2.4x one trial after another on one 2-vCPU VM, 0.84x on
      // another; an mlp's fused trials ran at half the samples/s of its trials alone.
      EmitLog(trial->observed,
              "fused on the CPU, where training trials together may be slower than one after "
              "another (it depends on the CPU and the model): compare samples/s with a sweep of "
              "sweep.fuse: off");
    }
  }

  const int64_t n = trials.front()->data->train.size();
  const int64_t batch_size = first.batch_size;
  const int64_t batches = first.drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
  const auto interval = std::chrono::milliseconds(TrainOptions().readback_interval_ms);
  const auto index_options = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const bool batched = mode == FusedStepMode::kBatched || device.is_cuda();
  if (batched) {
    RunBatchedEpochs(trials, shared_data_order, steps_per_readback, model, optimizer, device,
                     start);
  } else {
    for (auto& trial : trials) {
      if (!trial->running) continue;
      EmitLog(trial->observed,
              "fused step runs trial by trial (each trial's forward and loss its own calls, "
              "one update for all): each trial's dropout masks and augmentation from its own "
              "generator (as its run alone draws them)");
    }
  }
  int64_t steps = 0;
  for (int epoch = 1; !batched && epoch <= first.epochs && AnyRunning(trials); ++epoch) {
    DrawOrders(trials, shared_data_order, epoch, n, index_options);
    for (int64_t batch = 0; batch < batches; ++batch) {
      for (auto& trial : trials) {
        if (trial->running && trial->cancelled->load(std::memory_order_relaxed)) {
          StopTrial(*trial,
                    absl::CancelledError(absl::StrFormat("cancelled after step %d of %d",
                                                         trial->readback->steps(),
                                                         trial->readback->total_steps())),
                    device, start);
        }
      }
      if (!AnyRunning(trials)) break;
      const std::vector<TrialHyperparameters> hyper = StepHyperparameters(trials, steps);
      const int64_t first_example = batch * batch_size;
      const int64_t size = std::min(batch_size, n - first_example);
      std::vector<torch::Tensor> images;
      std::vector<torch::Tensor> labels;
      for (const auto& trial : trials) {
        const torch::Tensor index = trial->order.narrow(/*dim=*/0, first_example, size);
        const torch::Tensor gathered = GatherRows(trial->data->train.images, index);
        // From the trial's own generator before its dropout draws, as its unfused step draws
        // from the default generator: the same crops, flips and colours.
        const AugmentationOptions& augmentation = trial->data->augmentation;
        images.push_back(augmentation.enabled() ? Augment(gathered, augmentation, trial->generator)
                                                : gathered);
        labels.push_back(trial->data->train.labels.index_select(/*dim=*/0, index));
      }
      optimizer.ZeroGrad();
      torch::Tensor logits;  // [K, B, classes] float32
      {
        std::optional<compat::AutocastGuard> autocast;
        if (first.precision == Precision::kBf16) autocast.emplace(device.type(), torch::kBFloat16);
        // The loss in float32, as the unfused step has it.
        logits = model.Forward(torch::stack(images), generators).to(torch::kFloat32);
      }
      torch::Tensor total;
      std::vector<torch::Tensor> losses(trials.size());
      for (size_t k = 0; k < trials.size(); ++k) {
        if (!trials[k]->running) continue;
        losses[k] = trials[k]->task->Loss(logits[k], labels[k]);
        total = total.defined() ? total + losses[k] : losses[k];
      }
      total.backward();
      optimizer.Step(hyper);
      ++steps;
      for (size_t k = 0; k < trials.size(); ++k) {
        Trial& trial = *trials[k];
        if (!trial.running) continue;
        // As the unfused step: Σ loss × examples, divided by the examples.
        const torch::Tensor loss =
            losses[k].detach() * static_cast<double>(size) / static_cast<double>(size);
        const torch::Tensor correct = trial.task->Correct(logits[k].detach(), labels[k]);
        trial.readback->Record(loss, correct, size, hyper[k].learning_rate, 0, false);
        if (trial.readback->due(interval)) {
          trial.readback->Flush();
          if (trial.readback->diverged()) {
            FinishTrial(trial, trial.readback->DivergedError(), device, start);
          }
        }
      }
    }
    EndEpoch(trials, model, epoch, device, start);
  }
  // The finished trials' models, unfused into their zoo models, saved as unfused jobs save them.
  for (auto& trial : trials) {
    if (!trial->running) continue;
    model.Unfuse(trial->index, *trial->model);
    trial->status = SaveFinishedModel(*trial->job, *trial->model, *trial->data, trial->observed,
                                      trial->summary->summary());
    if (!trial->status.ok()) FinishTrial(*trial, trial->status, device, start);
  }
  return absl::OkStatus();
}

}  // namespace

std::string FusionRefusal(const TrainJobConfig& job) {
  if (job.model == nullptr) {
    return "model.torchscript: TorchScript models have no fused form";
  }
  if (!HasFusedForm(job.model->name)) {
    return absl::StrCat("model ", job.model->name,
                        " has no fused form yet (fused: ", FusedModelNames(), ")");
  }
  const auto unsupported = [](absl::string_view field) {
    return absl::StrCat("train_job.", field, " is not supported fused yet");
  };
  if (!job.fine_tune.weights.empty()) return unsupported("model.weights");
  if (!job.fine_tune.freeze.empty()) return unsupported("freeze");
  if (!job.fine_tune.trainable.empty()) return unsupported("trainable");
  if (!job.fine_tune.param_groups.empty()) return unsupported("param_groups");
  if (job.checkpoint_every_epochs > 0 || job.checkpoint_every_steps > 0 ||
      job.checkpoint_keep_best) {
    return unsupported("checkpoint");
  }
  if (!job.resume_path.empty()) return unsupported("resume_from (resuming a checkpoint)");
  if (job.distributed.enabled) return unsupported("distributed");
  if (job.profile.enabled()) return unsupported("profile");
  // fp16 would need a loss scale per trial (each its own GradScaler's skipped steps).
  if (job.precision == Precision::kFp16) return unsupported("precision fp16");
  if (job.channels_last) return unsupported("memory_format channels_last");
  if (job.grad_accumulation_steps > 1) return unsupported("grad_accumulation_steps");
  if (job.grad_clip_norm > 0) return unsupported("grad_clip_norm");
  if (job.nan_policy != NanPolicy::kFail) return unsupported("nan_policy skip_step");
  if (job.spec.has_fault_injection() || job.nan_loss_from > 0) {
    return unsupported("fault_injection");
  }
  if (!job.task.custom_loss_path.empty()) return unsupported("loss.torchscript");
  if (!job.task.metrics.empty()) return unsupported("metrics");
  if (job.task.kind != TaskKind::kClassification) {
    return unsupported(absl::StrCat("task ", TaskName(job.task.kind)));
  }
  // Per-image transforms fuse (each trial's from its own generator, or one draw for all in the
  // batched step); mixing pairs examples of one batch and makes probability targets, which the
  // batched step's loss does not take.
  if (job.dataset.augmentation.mixes()) return unsupported("dataset.augmentation mixup/cutmix");
  if (job.dataset.info->resolve != nullptr && job.dataset.own.placement != Placement::kResident) {
    return absl::StrCat("train_job.dataset.placement must be resident for fused trials (",
                        job.dataset.info->name, " data may be streamed from the host)");
  }
  return "";
}

std::string FusionDifference(const mpsd::v1::TrainJob& first, const mpsd::v1::TrainJob& trial) {
  FirstDifference reporter;
  MessageDifferencer differencer;
  differencer.ReportDifferencesTo(&reporter);
  if (differencer.Compare(ShapeFields(first), ShapeFields(trial))) return "";
  return reporter.path().empty() ? "(unknown field)" : reporter.path();
}

int64_t FusedTrialBytes(const TrainJobConfig& job) {
  if (job.model == nullptr) return 0;
  const int64_t parameters = job.model->parameters(job.model_config);
  int64_t states = 0;
  switch (job.optimizer.kind) {
    case OptimizerKind::kSgd:
      states = 1;
      break;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      states = 2;
      break;
  }
  int64_t input = 1;
  for (const int64_t size : job.dataset.ModelInputShape()) input *= size;
  constexpr int64_t kActivationsPerInput = 128;
  return 4 * (parameters * (2 + states) + job.batch_size * input * kActivationsPerInput);
}

std::vector<absl::Status> RunFusedTrainJobs(const std::vector<FusedTrial>& fused_trials,
                                            bool shared_data_order, int steps_per_readback,
                                            FusedStepMode mode) {
  const Clock::time_point start = Clock::now();
  std::vector<std::unique_ptr<Trial>> trials;
  for (size_t k = 0; k < fused_trials.size(); ++k) {
    auto trial = std::make_unique<Trial>();
    trial->job = fused_trials[k].job;
    trial->sink = fused_trials[k].sink;
    trial->cancelled = fused_trials[k].cancelled;
    trial->done = fused_trials[k].done;
    trial->index = static_cast<int>(k);
    trial->summary = std::make_unique<SummaryBuilder>(DeviceString(trial->job->device));
    Trial* raw = trial.get();
    trial->observed = [raw](JobEvent event) {
      raw->summary->Observe(event);
      raw->sink(std::move(event));
    };
    trials.push_back(std::move(trial));
  }
  std::vector<absl::Status> results;
  if (trials.empty()) return results;
  const torch::Device device = trials.front()->job->device;
  const absl::Status run = CatchTorchErrors([&] {
    at::init_num_threads();  // this thread may not be the one that created the executor
    ResetPeakMemory(device);
    for (auto& trial : trials) trial->summary->SetMemoryBefore(ReadMemory(device));
    // The trials agree on it (FusionDifference).
    const CudnnBenchmarkScope cudnn(trials.front()->job->cudnn_benchmark);
    return TrainFused(trials, shared_data_order, steps_per_readback, mode, device, start);
  });
  // The run's failure is every running trial's. The models go before the device is released.
  for (auto& trial : trials) {
    trial->model.reset();
    trial->readback.reset();
    trial->task.reset();
    trial->order = torch::Tensor();
    trial->data = nullptr;
  }
  const absl::Status released = CatchTorchErrors([&] {
    Synchronize(device);
    EmptyCache(device);
    return absl::OkStatus();
  });
  for (auto& trial : trials) {
    if (!trial->finished) {
      absl::Status status = !run.ok() ? run : trial->status;
      if (status.ok()) status = released;
      FinishTrial(*trial, status, device, start);
    }
    results.push_back(trial->status);
  }
  return results;
}

}  // namespace mpsd::trainer
