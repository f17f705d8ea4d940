// Training K trials of a sweep together, horizontally fused (HFTA: Wang et al., MLSys 2021), on
// one device: the trials' zoo models as one FusedModel (trainer/fused_models.h), their optimizers
// as one FusedOptimizer (trainer/fused_optimizer.h), each trial with its own data order, dropout
// masks, learning-rate schedule, loss, metrics, events, evaluation, model.pt and summary, exactly
// as its unfused job (trainer/run_train_job.h) would have them up to floating-point rounding.
// What Executor::PlanFusion / RunFused (api/executor.h) run for TrainJobs. Internal to trainer/:
// includes torch.
//
// How exact: on the CPU with one intra-op thread (Executor::Options::cpu_threads 1) and fp32, a
// fused trial's steps are bit-identical to its unfused job's (tests/trainer/fused_train_test.cc):
// the fused operators compute each trial's values in the same order, the fused update rounds as
// LibTorch's scalar one (trainer/fused_optimizer.h), each trial's dropout draws from a copy of
// the generator its unfused job would use, and the first convolution of 1-channel input runs per
// trial (trainer/fused_models.h). With more CPU threads, oneDNN divides a grouped convolution's
// weight-gradient sum among them otherwise than the trial's own convolution's: last-bit
// differences, which training amplifies (Adam the most). On CUDA the dropout masks differ from
// the unfused job's (its dropout is one fused kernel with its own draw order) and cuDNN's
// algorithms differ per shape: same distribution, not the same numbers.
//
// Two step paths (FusedStepMode): the per-trial fused step above (each trial's gather, dropout
// masks, loss and read-back on its own: the CPU's and MPS's, and the bit-identical one), and the
// batched step (trainer/fused_step.h: one gather, one dropout draw per layer, one loss, one
// read-back copy for all K trials; per-trial hyperparameters in a device table), which CUDA uses
// and captures in one CUDA graph where FusedGraphUnsupportedReason allows (a log line per trial
// says whether: "fused step captured in one CUDA graph (...)" or "fused step runs eagerly
// (batched over the trials): <reason>", naming a per-trial gather where the trials' data differ).
//
// Thread-safety: RunFusedTrainJobs runs on the calling thread and owns the device meanwhile (not
// thread-safe with itself or RunTrainJob); FusionRefusal and FusionDifference are pure.
#ifndef MPSD_TRAINER_FUSED_TRAIN_H_
#define MPSD_TRAINER_FUSED_TRAIN_H_

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/torch_executor.h"
#include "trainer/train_job.h"

namespace mpsd::trainer {

// Why `job` (resolved, for a run or validation) cannot train fused, naming the model or the
// field ("model vgg11 has no fused form yet", "train_job.checkpoint is not supported fused
// yet"); "" when it can. The features the fused loop does not implement are refused here, so that
// such trials run unfused, as before: TorchScript models and zoo models without a fused form
// (FusedModelNames: mlp, convnet, cifar_cnn, the resnets, lstm, transformer and bert_base);
// model.weights, freeze, trainable, param_groups; checkpoint (every_epochs, every_steps,
// keep_best) and resuming;
// distributed; profile; precision fp16 (bf16 fuses: the forward under autocast, as unfused);
// memory_format channels_last;
// grad_accumulation_steps > 1; grad_clip_norm; nan_policy skip_step; fault_injection;
// loss.torchscript; metrics; tasks other than classification; dataset.augmentation mixup and
// cutmix (per-image transforms fuse); image_folder and tensors data not placed resident.
std::string FusionRefusal(const TrainJobConfig& job);

// The first field in which `trial` differs from `first` once the fields that change no shape are
// cleared (optimizer learning_rate, weight_decay, momentum, betas, eps; label_smoothing;
// model.dropout; the whole schedule; seed; divergence_threshold; eval_every_epochs;
// evaluate_test; tensorboard; early_stopping), as a path below TrainJob ("batch_size",
// "optimizer.name"); "" when they match.
std::string FusionDifference(const mpsd::v1::TrainJob& first, const mpsd::v1::TrainJob& trial);

// A rough upper bound of the device memory one fused trial of `job` adds: its parameters,
// gradients and optimizer state (4 bytes each) and 128 input-sized float32 activations per
// example of a batch. Arithmetic only.
int64_t FusedTrialBytes(const TrainJobConfig& job);

// Which fused step RunFusedTrainJobs takes. kAuto: the batched step (trainer/fused_step.h;
// captured in a CUDA graph where FusedGraphUnsupportedReason allows and the trials'
// TrainJobConfig::cuda_graphs is true) on CUDA, the per-trial step elsewhere (bit-identical to
// the unfused jobs on the CPU). kBatched: the batched step on every device (tests compare it with
// the per-trial step on the CPU: tests/trainer/fused_step_test.cc).
enum class FusedStepMode { kAuto, kBatched };

// One trial of a fused run.
struct FusedTrial {
  const TrainJobConfig* job = nullptr;  // resolved with the trial's context (job_id, job_dir)
  EventSink sink;                       // the trial's events, its summary last
  const std::atomic<bool>* cancelled = nullptr;
  // May be empty: called once, as soon as the trial has ended (after its summary), with the
  // status RunFusedTrainJobs returns for it (api::TrialRun::done).
  std::function<void(const absl::Status&)> done;
};

// Trains `trials` (each FusionRefusal-free, FusionDifference-free against trials[0], all on the
// same device) together and returns one status per trial, as RunTrainJob would have returned
// for it alone. Loads each distinct dataset once (once per seed where the seed picks the data:
// a seeded limit_train / limit_test subset, a validation fraction, synthetic data), builds each
// trial's zoo model with torch seeded by its seed and fuses them, then per step: each trial's
// batch from its own seeded permutation of the epoch (shared_data_order: trials[0]'s for all),
// one fused forward [K, N, ...] → [K, N, classes], each trial's mean loss, the sum of the
// running trials' losses backward (so each trial's gradient is its own loss's), one fused
// update. Each trial emits through its sink what its unfused job emits: the data and settings
// log lines (plus one naming the trials it was fused with), its step events (read back in groups
// of steps_per_readback), epoch events with its own evaluation (its weights unfused into its zoo
// model), the model.pt log line and, last, its summary.
//
// A trial whose cancel flag is set ends CANCELLED at the next step boundary (or during its
// evaluation), one whose loss diverges ends with the divergence error (ABORTED, DIVERGED), one
// whose model fails to save with that error: alone, its parameters frozen from then on, its
// summary emitted when it ends; the others go on. A LibTorch failure of the fused step (out of
// memory: RESOURCE_EXHAUSTED; else INTERNAL) or of loading the data fails every trial still
// running. Never throws. `mode`: FusedStepMode (the executor's calls: kAuto).
std::vector<absl::Status> RunFusedTrainJobs(const std::vector<FusedTrial>& trials,
                                            bool shared_data_order, int steps_per_readback,
                                            FusedStepMode mode = FusedStepMode::kAuto);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_FUSED_TRAIN_H_
