// A user's own model: a TorchScript module (torch.jit.save / torch::jit::Module::save) trained
// as a zoo model is, through the ClassifierImpl interface. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_MODELS_TORCHSCRIPT_H_
#define MPSD_TRAINER_MODELS_TORCHSCRIPT_H_

#include <torch/script.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/models.h"

namespace mpsd::trainer {

// Wraps a loaded TorchScript module: its parameters and buffers are registered on this module
// (the same tensors, so the optimizer updates the script module in place, and module.save /
// load of checkpoints see them, named with '.' replaced by '_'); train()/eval() reach the
// script module too. forward calls the script's forward. Not thread-safe (one job, one
// instance).
class TorchScriptClassifierImpl : public ClassifierImpl {
 public:
  // `module` should already be on the job's device. `field` names it in the job's spec
  // ("train_job.model.torchscript", "eval_job.model") and `path` is its file, for errors.
  TorchScriptClassifierImpl(torch::jit::Module module, std::string field, std::string path);

  // inputs: [N, C, H, W] float32 → logits [N, classes] float32 (whatever the script returns;
  // CheckTorchScriptModel checked the shape at submit). An exception the script raises, or a
  // value that is not a tensor, throws UserCodeError naming `field` (trainer/torch_errors.h).
  torch::Tensor forward(torch::Tensor inputs) override;
  void train(bool on = true) override;

  // The script module, e.g. to save the finished model with torch::jit::Module::save.
  torch::jit::Module& script() { return module_; }

 private:
  torch::jit::Module module_;
  const std::string field_;
  const std::string path_;
};

// Loads `path` with torch::jit::load onto `device` and wraps it; `field` names it in the job's
// spec (run-time errors of its forward name it). INVALID_ARGUMENT naming the file when it is
// missing or not a TorchScript archive. Not thread-safe with a running job on the same device
// only in the sense that it allocates there.
absl::StatusOr<std::shared_ptr<TorchScriptClassifierImpl>> LoadTorchScriptClassifier(
    const std::string& path, const torch::Device& device, const std::string& field);

// Submit-time check of a TorchScript model on the CPU: the file exists and is TorchScript, its
// forward runs in eval mode without autograd on one zero example [1, ...input_shape] float32,
// and returns a tensor [1, K] with K >= num_classes. Returns the model's trainable parameter
// count. INVALID_ARGUMENT without a field path (the caller adds train_job.model.torchscript),
// naming the file. Thread-safe (each call loads its own copy).
absl::StatusOr<int64_t> CheckTorchScriptModel(const std::string& path,
                                              const std::vector<int64_t>& input_shape,
                                              int64_t num_classes);

struct TaskConfig;  // trainer/task.h

// A user's loss (LossSpec.torchscript, config.custom_loss_path): loads the module onto `device`
// (its operators checked as a model's: no file access) and tries its forward on a probe batch of
// two examples, logits [2, config.outputs] float32 (zeros, requiring grad) and targets
// [2, ...config.target_shape] (int64 zeros for classification, float32 zeros otherwise): it must
// return a scalar float tensor that depends on the logits. INVALID_ARGUMENT naming the file and
// the shapes (no field path; the caller adds train_job.loss.torchscript). Thread-safe (each call
// loads its own copy).
absl::StatusOr<torch::jit::Module> LoadTorchScriptLoss(const TaskConfig& config,
                                                       const torch::Device& device);

// A user's metric (TaskConfig::metrics' `path`): loads the module onto `device` (operators
// checked as a model's) and tries its forward in eval mode without autograd on the probe batch
// LoadTorchScriptLoss uses (logits without requires_grad): it must return a scalar tensor, float
// or integer (not bool or complex). INVALID_ARGUMENT naming the file and the shapes (no field
// path; the caller adds train_job.metrics[i].torchscript). Thread-safe as LoadTorchScriptLoss.
absl::StatusOr<torch::jit::Module> LoadTorchScriptMetric(const TaskConfig& config,
                                                         const std::string& path,
                                                         const torch::Device& device);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_MODELS_TORCHSCRIPT_H_
