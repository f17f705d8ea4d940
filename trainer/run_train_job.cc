// A resolved TrainJob run to its end (run_train_job.h): the data, model, optimizer and the
// loop's options set up from the config, checkpoints restored and written, the finished model
// saved, and the summary.
#include "trainer/run_train_job.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/epoch_metric.h"
#include "api/executor.h"
#include "api/failure_reason.h"
#include "trainer/artifact_file.h"
#include "trainer/checkpoint.h"
#include "trainer/device.h"
#include "trainer/distributed.h"
#include "trainer/early_stopping.h"
#include "trainer/fine_tune.h"
#include "trainer/grad_scaler.h"
#include "trainer/job_summary.h"
#include "trainer/log.h"
#include "trainer/model_export.h"
#include "trainer/models.h"
#include "trainer/models/torchscript.h"
#include "trainer/profiler.h"
#include "trainer/run_train_job_parts.h"
#include "trainer/torch_errors.h"
#include "trainer/train_job.h"
#include "trainer/train_loop.h"

namespace mpsd::trainer {
namespace {

using Clock = std::chrono::steady_clock;
using mpsd::v1::JobEvent;

// The loop's state besides model and optimizer that a checkpoint keeps: fp16's loss scale...
constexpr char kScaleName[] = "grad_scaler_scale";
constexpr char kGrowthTrackerName[] = "grad_scaler_growth_tracker";
// ...the position inside an epoch and its running figures (LoopPosition), the divergence
// check's counters and the early-stopping state. Absent from older checkpoints: then zero.
constexpr char kEpochLossSumName[] = "loop_epoch_loss_sum";            // [] float64
constexpr char kEpochCorrectName[] = "loop_epoch_correct";             // [] int64
constexpr char kEpochExamplesName[] = "loop_epoch_examples";           // [] int64
constexpr char kEpochSkippedName[] = "loop_epoch_skipped";             // [] int64
constexpr char kEpochSecondsName[] = "loop_epoch_seconds";             // [] float64
constexpr char kSkippedName[] = "divergence_skipped";                  // [] int64
constexpr char kHasFiniteName[] = "divergence_has_finite";             // [] int64, 0 or 1
constexpr char kLastFiniteLossName[] = "divergence_last_finite_loss";  // [] float64
constexpr char kLastFiniteStepName[] = "divergence_last_finite_step";  // [] int64
constexpr char kBestName[] = "early_stopping_best";                    // [] float64, NaN = none yet
constexpr char kBestEpochName[] = "early_stopping_best_epoch";         // [] int64
constexpr char kWaitedName[] = "early_stopping_waited";                // [] int64

// An MPS job's log says what an operator the MPS backend lacks does: PyTorch reads
// PYTORCH_ENABLE_MPS_FALLBACK (mpsd's config executor.mps_fallback sets it for the executor).
std::string MpsFallbackText() {
  const char* value = std::getenv("PYTORCH_ENABLE_MPS_FALLBACK");
  const bool on = value != nullptr && std::string(value) == "1";
  return absl::StrCat("MPS fallback ", on ? "on" : "off",
                      " (PYTORCH_ENABLE_MPS_FALLBACK=", value != nullptr ? value : "",
                      "): an operator MPS lacks ", on ? "runs on the CPU" : "fails the job");
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

void EmitLog(const EventSink& sink, std::string text) {
  Log(LogLevel::kInfo, text);
  JobEvent event;
  event.mutable_log()->set_level(mpsd::v1::LogLine::INFO);
  event.mutable_log()->set_text(std::move(text));
  sink(std::move(event));
}

void RecordLoadedData(const TrainJobConfig& job, const DeviceDataset& data, double load_seconds,
                      const EventSink& sink, mpsd::v1::JobSummary& summary) {
  summary.set_train_examples(data.train.size());
  summary.set_test_examples(data.test.size());
  summary.set_val_examples(data.val.size());
  summary.set_validation(data.validation);
  summary.set_data_load_time_s(load_seconds);
  for (const std::string& note : data.notes) EmitLog(sink, note);
  EmitLog(sink, absl::StrFormat(
                    "loaded %s: %d train, %s%d test examples in %.2f s on %s",
                    job.dataset.info->name, data.train.size(),
                    data.val.size() > 0
                        ? absl::StrFormat("%d validation (%s), ", data.val.size(), data.validation)
                        : std::string(),
                    data.test.size(), load_seconds, DeviceString(job.device)));
  // image_folder and tensors: the class names (index = class), where the data lives, and what
  // on_bad_image: skip left out.
  for (const std::string& name : data.class_names) summary.add_class_names(name);
  for (const int64_t count : data.train_class_counts) summary.add_train_class_counts(count);
  summary.set_data_placement(data.placement);
  summary.set_skipped_images(data.skipped_images);
  if (job.device.is_mps()) EmitLog(sink, MpsFallbackText());
}

namespace {

std::string DescribeStep(const TrainJobConfig& job) {
  std::string step = absl::StrFormat("batch size %d", job.batch_size);
  if (job.grad_accumulation_steps > 1) {
    absl::StrAppendFormat(&step, " × %d accumulated", job.grad_accumulation_steps);
  }
  if (job.grad_clip_norm > 0) absl::StrAppendFormat(&step, ", clip norm %g", job.grad_clip_norm);
  absl::StrAppendFormat(&step, ", task %s, loss %s", TaskName(job.task.kind), job.task.Describe());
  if (job.drop_last) absl::StrAppend(&step, ", drop_last");
  return step;
}

}  // namespace

// The job's settings as resolved, for the log line at its start.
std::string DescribeTraining(const TrainJobConfig& job, const Schedule& schedule,
                             int64_t parameters) {
  const ScheduleConfig& c = schedule.config();
  return absl::StrFormat(
      "training %s (%d parameters): %s, schedule %s, precision %s, %s, %d epoch(s) of %d "
      "step(s), seed %d",
      job.model != nullptr ? job.model->name : absl::string_view(job.torchscript_path), parameters,
      DescribeOptimizer(job.optimizer), DescribeSchedule(c), PrecisionName(job.precision),
      DescribeStep(job), job.epochs, c.steps_per_epoch, job.seed);
}

namespace {

// The class names as a JSON array of strings: protobuf's JSON mapping of a ListValue, which
// escapes as RFC 8259 asks.
absl::StatusOr<std::string> ClassNamesJson(const std::vector<std::string>& names) {
  google::protobuf::ListValue list;
  for (const std::string& name : names) list.add_values()->set_string_value(name);
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(list, &json);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("class names as JSON: ", status.ToString()));
  }
  return json;
}

}  // namespace

// Writes `model` as <job_dir>/<file_name> (atomically: a temporary file renamed) and returns
// the path: the TorchScript module as TorchScript, a zoo model as a LibTorch archive
// (torch::save; torch::load into the same zoo model reads it). The class names travel with the
// model, so its predictions can be mapped back: an extra file of the TorchScript archive
// (torch.jit.load(..., _extra_files={"class_names.json": ""})), or the entry "class_names" (a
// list of strings) of the LibTorch archive.
absl::StatusOr<std::string> SaveModelFile(const TrainJobConfig& job, ClassifierImpl& model,
                                          const std::vector<std::string>& class_names,
                                          const std::string& file_name) {
  std::error_code ec;
  std::filesystem::create_directories(job.job_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(job.job_dir, ": cannot create: ", ec.message()));
  const std::string path = (std::filesystem::path(job.job_dir) / file_name).string();
  // Serialised in memory first, so that its size is known before the disk is touched and a full
  // disk fails the job clearly (trainer/artifact_file.h) instead of inside LibTorch's writer.
  std::ostringstream bytes;
  // The config says which kind of model the job built, so no cast recovers it.
  const bool torchscript = job.model == nullptr;
  if (torchscript) {
    torch::jit::ExtraFilesMap extra;
    if (!class_names.empty()) {
      absl::StatusOr<std::string> json = ClassNamesJson(class_names);
      if (!json.ok()) return json.status();
      extra["class_names.json"] = *std::move(json);
    }
    // Saved in eval mode, as a model is used (dropout off, BatchNorm's running statistics);
    // best.pt is written mid-training, which then goes on in training mode.
    const bool training = model.is_training();
    model.eval();
    static_cast<TorchScriptClassifierImpl&>(model).script().save(bytes, extra);
    model.train(training);
  } else {
    torch::serialize::OutputArchive archive;
    model.save(archive);
    if (!class_names.empty()) {
      c10::List<std::string> names;
      for (const std::string& name : class_names) names.push_back(name);
      archive.write("class_names", c10::IValue(names));
    }
    archive.save_to(bytes);
  }
  if (absl::Status s = WriteArtifactFile(path, bytes.str()); !s.ok()) return s;
  return path;
}

// The finished model as model.pt (SaveModelFile) and what travels with it (model.json, the
// state dict, the check: trainer/model_export.h), named in the summary; the log says how long
// the files beside model.pt took.
absl::Status SaveFinishedModel(const TrainJobConfig& job, ClassifierImpl& model,
                               const DeviceDataset& data, const EventSink& sink,
                               mpsd::v1::JobSummary& summary) {
  if (job.job_dir.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> path = SaveModelFile(job, model, data.class_names, "model.pt");
  if (!path.ok()) return path.status();
  summary.set_model_path(*path);
  summary.set_model_format(job.model == nullptr ? "torchscript" : "libtorch_archive");
  const Clock::time_point start = Clock::now();
  if (absl::Status s = WriteModelArtifacts(job, model, data, summary); !s.ok()) return s;
  EmitLog(sink, absl::StrFormat("model saved as %s with %s%s and %s in %.3f s (using it: "
                                "docs/job-files.md, \"Using a trained model\")",
                                *path, kModelJsonFile,
                                job.model != nullptr ? absl::StrCat(", ", kStateDictFile) : "",
                                kModelCheckFile, SecondsSince(start)));
  return absl::OkStatus();
}

absl::StatusOr<EarlyStopping::Decision> ObserveBestEpoch(
    const TrainJobConfig& job, EarlyStopping& stopping, ClassifierImpl& model,
    const std::vector<std::string>& class_names, bool save_best,
    const mpsd::v1::EpochMetrics& epoch, mpsd::v1::JobSummary& summary, std::string& stop_note) {
  const EarlyStoppingConfig& config = stopping.config();
  const std::optional<double> value = api::EpochMetricValue(config.monitor, epoch);
  if (!value.has_value()) return EarlyStopping::Decision{};  // not evaluated this epoch
  EarlyStopping::Decision decision = stopping.Observe(epoch.epoch(), *value);
  if (decision.improved) {
    summary.set_best_epoch(epoch.epoch());
    summary.set_best_value(*value);
    if (save_best && !job.job_dir.empty()) {
      absl::StatusOr<std::string> path = SaveModelFile(job, model, class_names, "best.pt");
      if (!path.ok()) return path.status();
      summary.set_best_model_path(*path);
    }
  }
  decision.stop = decision.stop && job.early_stopping.enabled;
  if (decision.stop) {
    summary.set_stop_reason("early_stopped");
    stop_note = absl::StrFormat(
        "early stopping after epoch %d: %s did not improve by more than %g for %d evaluated "
        "epoch(s); best epoch %d (%s %.6g)",
        epoch.epoch(), config.monitor, config.min_delta, config.patience, stopping.best_epoch(),
        config.monitor, stopping.best_value().value_or(0));
  }
  return decision;
}

void SetStopReason(const absl::Status& status, mpsd::v1::JobSummary& s) {
  if (!s.stop_reason().empty()) return;  // early stopping sets its own
  if (status.ok()) {
    s.set_stop_reason("epochs_completed");
  } else if (api::FailureReasonOf(status) == mpsd::v1::Job::DIVERGED) {
    s.set_stop_reason("diverged");
  } else if (status.code() == absl::StatusCode::kCancelled) {
    s.set_stop_reason("cancelled");
  }
}

namespace {

// What one job works with once its data is loaded and its model built.
struct JobState {
  // A distributed job's process group, connected before anything else; nullptr otherwise.
  std::unique_ptr<DataParallel> data_parallel;
  DeviceDataset data;
  Schedule schedule;
  std::shared_ptr<ClassifierImpl> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  GradScaler grad_scaler;
  // Each parameter group's learning rate over the optimizer's (TrainJob.param_groups).
  std::vector<double> learning_rate_scales;
  int64_t train_examples() const { return data.train.size(); }
};

absl::StatusOr<DeviceDataset> LoadData(const TrainJobConfig& job, const EventSink& sink,
                                       mpsd::v1::JobSummary& summary) {
  const Clock::time_point load_start = Clock::now();
  absl::StatusOr<DeviceDataset> data = LoadDataset(job.dataset, job.seed, job.device);
  if (!data.ok()) return data.status();
  RecordLoadedData(job, *data, SecondsSince(load_start), sink, summary);
  return data;
}

// A fresh model for the job, on its device: the zoo's, or the user's TorchScript module.
absl::StatusOr<std::shared_ptr<ClassifierImpl>> MakeModel(const TrainJobConfig& job) {
  if (job.model != nullptr) {
    std::shared_ptr<ClassifierImpl> model = job.model->make(job.model_config);
    model->to(job.device);
    return model;
  }
  absl::StatusOr<std::shared_ptr<TorchScriptClassifierImpl>> script = LoadTorchScriptClassifier(
      job.torchscript_path, job.device, TrainJobFields().Path("model.torchscript"));
  if (!script.ok()) {
    return TrainJobFields().Error("model.torchscript", script.status().message());
  }
  return std::shared_ptr<ClassifierImpl>(*std::move(script));
}

// A distributed job's rendezvous and process group (trainer/distributed.h); nullptr for one
// process. Logs the rank's place in the job.
absl::StatusOr<std::unique_ptr<DataParallel>> ConnectRanks(const TrainJobConfig& job,
                                                           const EventSink& sink) {
  DistributedConfig d = job.distributed;
  if (!d.enabled) return std::unique_ptr<DataParallel>();
  // One node: the ranks meet through a file only this host can open, not a TCP port.
  if (d.nnodes == 1 && !job.job_dir.empty()) {
    d.store_file = absl::StrCat(job.job_dir, "/", api::kRendezvousFileName);
  }
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::unique_ptr<DataParallel>> connected = DataParallel::Connect(d, job.device);
  if (!connected.ok()) return connected.status();
  EmitLog(sink,
          absl::StrFormat("distributed: rank %d of %d (node %d of %d, local rank %d) on %s, %s, "
                          "rendezvous %s in %.2f s",
                          d.rank, d.world_size, d.node_rank, d.nnodes, d.local_rank,
                          DeviceString(job.device), DistributedBackendName(d.backend),
                          d.store_file.empty()
                              ? absl::StrFormat("%s:%d", d.master_addr, d.master_port)
                              : "through a file (one node: nothing listens on the network)",
                          SecondsSince(start)));
  return connected;
}

// Loads the data, builds the schedule for it, then the model (torch seeded with job.seed) and
// its optimizer; logs the settings.
absl::StatusOr<std::unique_ptr<JobState>> SetUp(const TrainJobConfig& job, const EventSink& sink,
                                                mpsd::v1::JobSummary& summary) {
  absl::StatusOr<std::unique_ptr<DataParallel>> data_parallel = ConnectRanks(job, sink);
  if (!data_parallel.ok()) return data_parallel.status();
  absl::StatusOr<DeviceDataset> data = LoadData(job, sink, summary);
  if (!data.ok()) return data.status();
  if (job.channels_last) {  // once: the loop gathers NHWC batches from these (GatherRows)
    for (TensorSplit* split : {&data->train, &data->test, &data->val}) {
      if (split->images.defined() && split->images.dim() == 4) {
        split->images = ChannelsLastStrides(split->images);
      }
    }
    EmitLog(sink, "memory_format channels_last: weights and resident images in NHWC");
  }
  absl::StatusOr<Schedule> schedule = BuildSchedule(job, data->train.size());
  if (!schedule.ok()) return schedule.status();
  torch::manual_seed(job.seed);
  absl::StatusOr<std::shared_ptr<ClassifierImpl>> model = MakeModel(job);
  if (!model.ok()) return model.status();
  std::optional<ParameterGroups> groups;
  if (job.fine_tune.enabled()) {
    std::vector<std::string> notes;
    absl::StatusOr<ParameterGroups> prepared =
        PrepareFineTune(job.fine_tune, job.optimizer, **model, TrainJobFields(), notes);
    if (!prepared.ok()) return prepared.status();
    groups = *std::move(prepared);
    for (std::string& note : notes) EmitLog(sink, std::move(note));
  }
  if (job.channels_last) ToChannelsLast(**model);  // before the optimizer sees the parameters
  auto state = std::unique_ptr<JobState>(new JobState{*std::move(data_parallel),
                                                      *std::move(data),
                                                      *std::move(schedule),
                                                      *std::move(model),
                                                      nullptr,
                                                      {},
                                                      {}});
  if (state->data_parallel != nullptr) {
    // DDP's construction: every rank starts from rank 0's weights; each evaluates its part.
    state->data_parallel->Broadcast(*state->model);
    for (TensorSplit* split : {&state->data.test, &state->data.val}) {
      if (split->streamed == nullptr && split->labels.defined()) {
        *split = state->data_parallel->ShardSplit(*split);
      }
    }
  }
  summary.set_parameters(CountParameters(*state->model));
  if (groups.has_value()) {
    state->learning_rate_scales = groups->learning_rate_scales;
    state->optimizer = MakeOptimizer(std::move(groups->groups), job.optimizer);
  } else {
    state->optimizer = MakeOptimizer(state->model->parameters(), job.optimizer);
  }
  summary.set_optimizer(OptimizerName(job.optimizer.kind));
  summary.set_schedule(ScheduleName(job.schedule.config.kind));
  summary.set_precision(PrecisionName(job.precision));
  summary.set_task(TaskName(job.task.kind));
  EmitLog(sink, DescribeTraining(job, state->schedule, summary.parameters()));
  return state;
}

TrainOptions MakeTrainOptions(const TrainJobConfig& job, int steps_per_readback, JobState& state) {
  TrainOptions options;
  options.learning_rate_scales = state.learning_rate_scales;
  options.batch_size = job.batch_size;
  options.eval_batch_size = job.batch_size;
  options.epochs = job.epochs;
  options.seed = job.seed;
  options.steps_per_readback = steps_per_readback;
  options.grad_accumulation_steps = job.grad_accumulation_steps;
  options.drop_last = job.drop_last;
  options.grad_clip_norm = job.grad_clip_norm;
  options.task = job.task;
  options.channels_last = job.channels_last;
  options.cuda_graphs = job.cuda_graphs;
  options.eval_every_epochs = job.eval_every_epochs;
  options.divergence_threshold = job.divergence_threshold;
  options.nan_policy = job.nan_policy;
  options.max_skipped_steps = job.max_skipped_steps;
  options.nan_loss_from = job.nan_loss_from;
  options.nan_loss_steps = job.nan_loss_steps;
  options.checkpoint_every_steps = job.checkpoint_every_steps;
  options.evaluate_test = job.evaluate_test;
  options.precision = job.precision;
  options.optimizer = job.optimizer.kind;
  options.schedule = state.schedule;
  options.grad_scaler = &state.grad_scaler;
  options.data_parallel = state.data_parallel.get();
  return options;
}

ExtraState SaveExtraState(const GradScaler& grad_scaler, const LoopPosition& position,
                          const EarlyStopping::State& best) {
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  const DivergenceCheck::State& d = position.divergence;
  return {
      {kScaleName, torch::full({}, grad_scaler.scale(), f64)},
      {kGrowthTrackerName, torch::full({}, grad_scaler.growth_tracker(), i64)},
      {kEpochLossSumName, torch::full({}, position.epoch_loss_sum, f64)},
      {kEpochCorrectName, torch::full({}, position.epoch_correct, i64)},
      {kEpochExamplesName, torch::full({}, position.epoch_examples, i64)},
      {kEpochSkippedName, torch::full({}, position.epoch_skipped, i64)},
      {kEpochSecondsName, torch::full({}, position.epoch_seconds, f64)},
      {kSkippedName, torch::full({}, d.skipped, i64)},
      {kHasFiniteName, torch::full({}, d.has_finite ? 1 : 0, i64)},
      {kLastFiniteLossName, torch::full({}, d.last_finite_loss, f64)},
      {kLastFiniteStepName, torch::full({}, d.last_finite_step, i64)},
      {kBestName,
       torch::full({}, best.best.value_or(std::numeric_limits<double>::quiet_NaN()), f64)},
      {kBestEpochName, torch::full({}, static_cast<int64_t>(best.best_epoch), i64)},
      {kWaitedName, torch::full({}, static_cast<int64_t>(best.waited), i64)},
  };
}

// What a checkpoint restored into the loop and the early-stopping state.
void RestoreExtraState(const ExtraState& extra, const CheckpointInfo& info, LoopPosition& position,
                       EarlyStopping::State& best) {
  const auto f64 = [&extra](const char* name) {
    const torch::Tensor& t = extra.at(name);
    return t.defined() ? t.item<double>() : 0.0;
  };
  const auto i64 = [&extra](const char* name) {
    const torch::Tensor& t = extra.at(name);
    return t.defined() ? t.item<int64_t>() : int64_t{0};
  };
  position.epoch = info.epoch + 1;
  position.step = info.step;
  position.epoch_steps = info.epoch_step;
  position.epoch_loss_sum = f64(kEpochLossSumName);
  position.epoch_correct = i64(kEpochCorrectName);
  position.epoch_examples = i64(kEpochExamplesName);
  position.epoch_skipped = i64(kEpochSkippedName);
  position.epoch_seconds = f64(kEpochSecondsName);
  position.divergence.skipped = i64(kSkippedName);
  position.divergence.has_finite = i64(kHasFiniteName) != 0;
  position.divergence.last_finite_loss = f64(kLastFiniteLossName);
  position.divergence.last_finite_step = i64(kLastFiniteStepName);
  const double value =
      extra.at(kBestName).defined() ? f64(kBestName) : std::numeric_limits<double>::quiet_NaN();
  best.best = std::isnan(value) ? std::nullopt : std::optional<double>(value);
  best.best_epoch = static_cast<int>(i64(kBestEpochName));
  best.waited = static_cast<int>(i64(kWaitedName));
}

// A job resumed from another job's checkpoint whose best epoch lies before it: that job's
// best.pt and checkpoint-best.pt (beside the checkpoint) are copied into this job's folder, so
// that the best epoch the summary names has its files here. Best effort: a file that cannot be
// copied is left (the summary then names no best_model_path until a new best epoch).
void CarryBestFiles(const TrainJobConfig& job) {
  namespace fs = std::filesystem;
  if (job.job_dir.empty()) return;
  std::error_code ec;
  const fs::path from = fs::path(job.resume_path).parent_path();
  if (fs::equivalent(from, job.job_dir, ec)) return;
  fs::create_directories(job.job_dir, ec);
  for (const char* name : {"best.pt", kBestCheckpointName}) {
    if (!fs::exists(from / name, ec) || fs::exists(fs::path(job.job_dir) / name, ec)) continue;
    fs::copy_file(from / name, fs::path(job.job_dir) / name, ec);
  }
}

// Restores job.resume_path into the model, optimizer, GradScaler and `best`, and sets where
// `options` starts (the checkpoint's position: an epoch's start, or inside it).
absl::Status RestoreCheckpoint(const TrainJobConfig& job, JobState& state, TrainOptions& options,
                               EarlyStopping& best, const EventSink& sink,
                               mpsd::v1::JobSummary& summary) {
  if (job.resume_path.empty()) return absl::OkStatus();
  absl::StatusOr<CheckpointInfo> checked =
      CheckResumeCheckpoint(job, state.train_examples(), "resume_from");
  if (!checked.ok()) return checked.status();
  ExtraState extra;
  for (const char* name :
       {kScaleName, kGrowthTrackerName, kEpochLossSumName, kEpochCorrectName, kEpochExamplesName,
        kEpochSkippedName, kEpochSecondsName, kSkippedName, kHasFiniteName, kLastFiniteLossName,
        kLastFiniteStepName, kBestName, kBestEpochName, kWaitedName}) {
    extra[name] = torch::Tensor();
  }
  absl::StatusOr<RestoredCheckpoint> restored =
      LoadCheckpoint(job.resume_path, *state.model, *state.optimizer, extra, job.device);
  if (!restored.ok()) return TrainJobFields().Error("resume_from", restored.status().message());
  if (extra[kScaleName].defined() && extra[kGrowthTrackerName].defined()) {
    state.grad_scaler.Restore(extra[kScaleName].item<double>(),
                              extra[kGrowthTrackerName].item<int64_t>());
  }
  LoopPosition position;
  EarlyStopping::State best_state;
  RestoreExtraState(extra, restored->info, position, best_state);
  best.Restore(best_state);
  options.start_epoch = position.epoch;
  options.start_step = position.step;
  options.resume = position;
  summary.set_resumed_at_step(restored->info.step);
  // Steps skipped before the checkpoint (nan_policy skip_step); this attempt's step events add
  // the rest, so the summary counts the whole run's, as max_skipped_steps does.
  summary.set_skipped_steps(position.divergence.skipped);
  if (best_state.best_epoch > 0 && best_state.best.has_value()) {
    summary.set_best_epoch(best_state.best_epoch);
    summary.set_best_value(*best_state.best);
    CarryBestFiles(job);
    const std::filesystem::path best_model = std::filesystem::path(job.job_dir) / "best.pt";
    std::error_code ec;
    if (!job.job_dir.empty() && std::filesystem::exists(best_model, ec)) {
      summary.set_best_model_path(best_model.string());
    }
  }
  EmitLog(sink, absl::StrFormat("resumed from %s: epoch %d, step %d%s", job.resume_path,
                                position.epoch, position.step,
                                position.epoch_steps > 0
                                    ? absl::StrFormat(" (step %d of the epoch, in its order)",
                                                      position.epoch_steps)
                                    : std::string(" (the epoch's start)")));
  return absl::OkStatus();
}

// TrainJob.checkpoint's writer (rank 0's: every rank holds the same weights and optimizer
// state, DDP's practice): takes the loop's offers (TrainOptions::on_checkpoint) as every_epochs,
// every_steps and keep_best say, writes with keep_last's pruning, emits each `checkpoint` event.
// A stopping job (cancelled, or mpsd stopping) gets a checkpoint at its step boundary when it
// writes periodic ones and has none at that step. The loop's shuffle order is a function of seed
// and epoch, so there is no shuffle generator to keep.
class Checkpointer {
 public:
  Checkpointer(const TrainJobConfig& job, JobState& state, const EarlyStopping& best,
               const EventSink& sink)
      : job_(job), state_(state), best_(best), sink_(sink) {}

  // Set by the best-epoch hook when the epoch just evaluated is the best so far.
  void MarkBest() { best_epoch_pending_ = true; }
  // The step a resumed job starts at is already in a checkpoint.
  void SetWritten(int64_t step) { written_step_ = step; }

  CheckpointHook Hook() {
    const bool periodic = job_.checkpoint_every_epochs > 0 || job_.checkpoint_every_steps > 0;
    if (job_.distributed.rank != 0 || (!periodic && !job_.checkpoint_keep_best)) return nullptr;
    return [this](const LoopPosition& position, CheckpointMoment moment) {
      return Offer(position, moment);
    };
  }

 private:
  absl::Status Offer(const LoopPosition& position, CheckpointMoment moment) {
    bool periodic = false;
    bool best = false;
    switch (moment) {
      case CheckpointMoment::kEpochEnd: {
        const int epoch = position.epoch - 1;  // the epoch that ended
        periodic =
            (job_.checkpoint_every_epochs > 0 && epoch % job_.checkpoint_every_epochs == 0) ||
            (job_.checkpoint_every_steps > 0 && position.step % job_.checkpoint_every_steps == 0);
        best = job_.checkpoint_keep_best && best_epoch_pending_;
        best_epoch_pending_ = false;
        break;
      }
      case CheckpointMoment::kSteps:
        periodic = true;
        break;
      case CheckpointMoment::kStopping:
        periodic = (job_.checkpoint_every_epochs > 0 || job_.checkpoint_every_steps > 0) &&
                   position.step > 0 && position.step != written_step_;
        break;
    }
    if (job_.checkpoint_keep_last == 0) periodic = false;
    if (!periodic && !best) return absl::OkStatus();
    if (job_.job_dir.empty()) {
      return TrainJobFields().Error("checkpoint", "the job has no id to name its directory");
    }
    CheckpointInfo info = JobCheckpointInfo(job_, state_.train_examples());
    info.epoch = position.epoch - 1;
    info.step = position.step;
    info.epoch_step = position.epoch_steps;
    CheckpointFiles files;
    files.keep_last = job_.checkpoint_keep_last;
    files.best = best;
    absl::StatusOr<mpsd::v1::CheckpointSaved> saved = SaveCheckpoint(
        job_.job_dir, info, *state_.model, *state_.optimizer, at::Generator(),
        SaveExtraState(state_.grad_scaler, position, best_.state()), job_.device, files);
    if (!saved.ok()) return saved.status();
    written_step_ = position.step;
    if (moment == CheckpointMoment::kStopping) {
      EmitLog(sink_,
              absl::StrFormat("stopping: checkpoint at step %d (epoch %d, step %d of it) "
                              "written as %s",
                              position.step, position.epoch, position.epoch_steps, saved->path()));
    }
    JobEvent event;
    *event.mutable_checkpoint() = *saved;
    sink_(std::move(event));
    return absl::OkStatus();
  }

  const TrainJobConfig& job_;
  JobState& state_;
  const EarlyStopping& best_;
  const EventSink& sink_;
  bool best_epoch_pending_ = false;
  int64_t written_step_ = -1;
};

// The best epoch by a monitored metric: TrainJob.early_stopping's, or val_loss (min) for
// checkpoint.keep_best alone, which never stops training.
EarlyStoppingConfig BestEpochConfig(const TrainJobConfig& job) {
  EarlyStoppingConfig config = job.early_stopping;
  if (!config.enabled && job.checkpoint_keep_best) {
    config.monitor = "val_loss";
    config.maximize = false;
    config.min_delta = 0;
    config.patience = std::numeric_limits<int>::max();
  }
  return config;
}

// The hook of TrainJob.early_stopping (trainer/early_stopping.h) and checkpoint.keep_best: each
// epoch's monitored value; the best epoch's model saved as best.pt (rank 0, as it writes
// checkpoints) and named in the summary, and `checkpointer` told to keep that epoch's
// checkpoint; true once early stopping's patience runs out. nullptr with neither.
// The early-stopping line goes to `stop_note`, for the caller to log after the epoch's event
// (which the hook's decision precedes).
AfterEvaluationHook BestEpochHook(const TrainJobConfig& job, JobState& state,
                                  EarlyStopping& stopping, Checkpointer& checkpointer,
                                  std::string& stop_note, mpsd::v1::JobSummary& summary) {
  if (!job.early_stopping.enabled && !job.checkpoint_keep_best) return nullptr;
  summary.set_monitor(stopping.config().monitor);
  return [&job, &state, &stopping, &checkpointer, &stop_note,
          &summary](const mpsd::v1::EpochMetrics& epoch) -> absl::StatusOr<bool> {
    absl::StatusOr<EarlyStopping::Decision> decision =
        ObserveBestEpoch(job, stopping, *state.model, state.data.class_names,
                         /*save_best=*/job.distributed.rank == 0, epoch, summary, stop_note);
    if (!decision.ok()) return decision.status();
    if (decision->improved) checkpointer.MarkBest();
    return decision->stop;
  };
}

// TrainJob.profile's recorder, writing <job_dir>/profile.json; nullptr when not asked for.
std::unique_ptr<StepProfiler> MakeProfiler(const TrainJobConfig& job) {
  if (!job.profile.enabled() || job.job_dir.empty()) return nullptr;
  const torch::Device device = job.device;
  return std::make_unique<StepProfiler>(
      job.profile, (std::filesystem::path(job.job_dir) / kProfileFileName).string(),
      device.is_cuda(), [device] { Synchronize(device); });
}

// Writes what the profiler still holds (a job that ended inside the range), names the trace
// in the summary and the log.
absl::Status FinishProfile(const TrainJobConfig& job, StepProfiler* profiler, const EventSink& sink,
                           mpsd::v1::JobSummary& summary) {
  if (profiler == nullptr) return absl::OkStatus();
  if (absl::Status s = profiler->Finish(); !s.ok()) return s;
  if (!profiler->written()) {
    EmitLog(sink, "profile: the job ended before its first profiled step; no trace written");
    return absl::OkStatus();
  }
  summary.set_profile_path(profiler->path());
  summary.set_profile_first_step(profiler->first_step());
  summary.set_profile_last_step(profiler->last_step());
  EmitLog(sink, absl::StrFormat("profile: steps %d-%d recorded by LibTorch's profiler into %s "
                                "(Chrome trace: chrome://tracing or ui.perfetto.dev; "
                                "mpsctl download %s %s)",
                                profiler->first_step(), profiler->last_step(), profiler->path(),
                                job.job_id, kProfileFileName));
  return absl::OkStatus();
}

// Sets up, restores, trains and saves. The data, model and optimizer are released on return.
absl::Status TrainInScope(const TrainJobConfig& job, int steps_per_readback, const EventSink& sink,
                          const std::atomic<bool>& cancelled, SummaryBuilder& summary) {
  absl::StatusOr<std::unique_ptr<JobState>> state = SetUp(job, sink, summary.summary());
  if (!state.ok()) return state.status();
  JobState& s = **state;
  TrainOptions options = MakeTrainOptions(job, steps_per_readback, s);
  EarlyStopping stopping(BestEpochConfig(job));
  if (absl::Status restored = RestoreCheckpoint(job, s, options, stopping, sink, summary.summary());
      !restored.ok()) {
    return restored;
  }
  Checkpointer checkpointer(job, s, stopping, sink);
  if (options.resume.has_value()) checkpointer.SetWritten(options.resume->step);
  options.on_checkpoint = checkpointer.Hook();
  std::string stop_note;
  options.after_evaluation =
      BestEpochHook(job, s, stopping, checkpointer, stop_note, summary.summary());
  if (std::string note =
          EarlyStoppingReachNote(job.early_stopping, job.epochs, job.eval_every_epochs);
      !note.empty())
    EmitLog(sink, note);
  options.on_epoch_end = [&sink, &stop_note](int, int64_t) {
    if (!stop_note.empty()) EmitLog(sink, std::exchange(stop_note, ""));
    return absl::OkStatus();
  };
  const std::unique_ptr<StepProfiler> profiler = MakeProfiler(job);
  options.profiler = profiler.get();
  absl::Status status = Train(*s.model, *s.optimizer, s.data, options, sink, cancelled);
  if (absl::Status profiled = FinishProfile(job, profiler.get(), sink, summary.summary());
      status.ok()) {
    status = profiled;
  }
  if (job.precision == Precision::kFp16) {
    summary.summary().set_final_loss_scale(static_cast<float>(s.grad_scaler.scale()));
  }
  if (status.ok() && s.data_parallel != nullptr) {
    uint64_t fingerprint = 0;
    const bool agree = s.data_parallel->WeightsAgree(*s.model, fingerprint);
    EmitLog(sink,
            absl::StrFormat("distributed: final weights %s across %d ranks (rank %d's "
                            "fingerprint %016x)",
                            agree ? "bitwise identical" : "DIFFER", s.data_parallel->world_size(),
                            s.data_parallel->rank(), fingerprint));
    if (!agree) status = absl::InternalError("distributed: the ranks' final weights differ");
  }
  if (status.ok() && job.distributed.rank == 0) {
    status = SaveFinishedModel(job, *s.model, s.data, sink, summary.summary());
  }
  return status;
}

// Waits for the device, returns the caching allocator's free blocks to the driver and records
// what is left. Runs after the job's tensors went out of scope.
absl::Status ReleaseDevice(const torch::Device& device, SummaryBuilder& summary) {
  return CatchTorchErrors([&] {
    Synchronize(device);
    EmptyCache(device);
    summary.SetMemoryAfter(ReadMemory(device));
    return absl::OkStatus();
  });
}

}  // namespace

absl::Status RunTrainJob(const TrainJobConfig& job, int steps_per_readback, const EventSink& sink,
                         const EventSink& summary_sink, const std::atomic<bool>& cancelled) {
  const Clock::time_point start = Clock::now();
  const torch::Device device = job.device;
  SummaryBuilder summary(DeviceString(device));
  const EventSink observed = [&](JobEvent event) {
    summary.Observe(event);
    sink(std::move(event));
  };
  const absl::Status status = CatchTorchErrors([&] {
    at::init_num_threads();  // this thread may not be the one that created the executor
    ResetPeakMemory(device);
    summary.SetMemoryBefore(ReadMemory(device));
    const CudnnBenchmarkScope cudnn(job.cudnn_benchmark);
    if (job.cudnn_benchmark && !device.is_cuda()) {
      EmitLog(observed, absl::StrCat("cudnn_benchmark: no effect on ", DeviceString(device),
                                     " (cuDNN runs CUDA convolutions only)"));
    }
    return TrainInScope(job, steps_per_readback, observed, cancelled, summary);
  });
  if (!status.ok()) {
    // Code and message: the payloads (causes, reasons) are for code, not for the log.
    const std::string ended = status.ToString(absl::StatusToStringMode::kWithNoExtraData);
    Log(LogLevel::kWarning, absl::StrCat("job ended: ", ended));
  }
  mpsd::v1::JobSummary& s = summary.summary();
  SetStopReason(status, s);

  const absl::Status cleanup = ReleaseDevice(device, summary);
  const absl::Status emitted = CatchTorchErrors([&] {
    JobEvent event;
    *event.mutable_summary() = summary.Build(SecondsSince(start));
    summary_sink(std::move(event));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return cleanup.ok() ? emitted : cleanup;
}

}  // namespace mpsd::trainer
