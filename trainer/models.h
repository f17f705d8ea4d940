// The model zoo's common interface and the registry that names its models. Every model is a
// classifier: a batch of inputs [N, ...input_shape] float32 in, logits [N, num_classes] float32
// out (no softmax; the loss is cross-entropy on logits). Image models take [N, C, H, W]; sequence
// models take [N, T, F] (T steps of F features) and also images, reading each image row as one
// step (T = H, F = C × W). The architectures are in trainer/models/. Internal to trainer/:
// includes torch.
#ifndef MPSD_TRAINER_MODELS_H_
#define MPSD_TRAINER_MODELS_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::trainer {

// The interface the training loop sees. Modules are not thread-safe; one job uses one instance.
class ClassifierImpl : public torch::nn::Module {
 public:
  // inputs: [N, ...input_shape] float32 → logits [N, num_classes] float32.
  virtual torch::Tensor forward(torch::Tensor inputs) = 0;
  // train(true) leaves the modules KeepInEvalMode named in eval mode.
  void train(bool on = true) override;
  // Submodules (the BatchNorm layers of frozen blocks: TrainJob.freeze) that stay in eval mode
  // whatever train() is asked, so that their running statistics stay as loaded.
  void KeepInEvalMode(std::vector<std::shared_ptr<torch::nn::Module>> modules);

 private:
  std::vector<std::shared_ptr<torch::nn::Module>> eval_only_;
};

// What a model is built for.
struct ModelConfig {
  // One example, without the batch dimension: [C, H, W] for images, [T, F] for sequences.
  std::vector<int64_t> input_shape;
  int64_t num_classes = 10;
  // A named size of the architecture (transformer: "small", "bert_base"); "" = the model's
  // default. Models without presets accept only "".
  std::string preset;
  // ModelSpec.dropout: the probability of every dropout layer, in [0, 1); nullopt = each
  // architecture's own (DropoutOr).
  std::optional<double> dropout;
};

// config.dropout when set, else the architecture's `default_p`.
inline double DropoutOr(const ModelConfig& config, double default_p) {
  return config.dropout.value_or(default_p);
}

enum class InputKind {
  kImage,     // [C, H, W]
  kSequence,  // [T, F], or [C, H, W] read row by row as [H, C × W]
  kAny,       // any shape of 1 to 3 dimensions, flattened
};

// One registry entry. Entries live for the whole process and are safe to use from any thread:
// `check` and `parameters` are arithmetic on shapes (no tensors, no generator), so validating a
// job or listing models never disturbs a job that is running.
struct ModelEntry {
  absl::string_view name;
  // A short line on the architecture (at most ~80 columns, for `mpsctl models`).
  absl::string_view description;
  InputKind input_kind;
  // The input and class count the architecture was designed for (ListModels' default).
  std::vector<int64_t> natural_input_shape;
  int64_t natural_num_classes;
  // Accepted presets, the default first; empty for models without presets.
  std::vector<absl::string_view> presets;
  // OK when the model can be built for and run on `config` (input rank and size, preset);
  // INVALID_ARGUMENT saying what does not fit, without a field path (callers add theirs).
  absl::Status (*check)(const ModelConfig& config);
  // Trainable parameters of the model `make` builds for `config`; `config` must pass `check`.
  int64_t (*parameters)(const ModelConfig& config);
  // A freshly initialised model on the CPU, drawing its initial weights from torch's default
  // generator (seed it first for reproducible weights). `config` must pass `check`.
  std::shared_ptr<ClassifierImpl> (*make)(const ModelConfig& config);
};

// Every model, in registry order.
const std::vector<ModelEntry>& Models();
// nullptr for an unknown name.
const ModelEntry* FindModel(absl::string_view name);
// Known names in registry order ("mlp", "convnet", …), for error messages.
std::vector<std::string> ModelNames();

// The checks of CheckModelConfig one by one, for callers that name a field for each. All return
// INVALID_ARGUMENT without a field path.
// 1 to 3 dimensions, each in [1, 2^20], at most 2^31 elements in all.
absl::Status CheckInputShape(const std::vector<int64_t>& shape);
// In [1, 2^20].
absl::Status CheckNumClasses(int64_t num_classes);
// "" or one of entry.presets.
absl::Status CheckPreset(const ModelEntry& entry, absl::string_view preset);

// Checks `config` against `entry`: the class count, the preset, the input shape, its rank for
// the entry's input kind, then the entry's own check (e.g. vgg16's five max-pools need 32×32).
// Cheap (arithmetic only). INVALID_ARGUMENT without a field path.
absl::Status CheckModelConfig(const ModelEntry& entry, const ModelConfig& config);

// Executor::ListModels: every model at the request's input shape and class count (each at its
// natural ones by default), with its parameter count, or `unsupported` saying why it cannot take
// them. Arithmetic only: builds no model. INVALID_ARGUMENT whose message starts with the field
// ("input_shape: ...", "num_classes: ..."). Thread-safe.
absl::StatusOr<mpsd::v1::ListModelsResponse> ListModels(const mpsd::v1::ListModelsRequest& request);

// "3×224×224".
std::string FormatShape(const std::vector<int64_t>& shape);

// A zero batch of `batch_size` inputs for `config`: [batch_size, ...input_shape] float32.
torch::Tensor ZeroInputs(const ModelConfig& config, int64_t batch_size,
                         const torch::TensorOptions& options = {});

// Trainable scalars in `module` and its submodules.
int64_t CountParameters(const torch::nn::Module& module);

// Converts every 4-D parameter (convolution weights) of `module` to NHWC in place
// (ChannelsLastStrides), as PyTorch's Module.to(memory_format=torch.channels_last) does; the
// parameters stay the same tensors (set_data), so an optimizer built over them keeps working.
// Not thread-safe against other users of the module.
void ToChannelsLast(torch::nn::Module& module);

// A 4-D `t` [N, C, H, W] in NHWC with NHWC's strides: t.contiguous(ChannelsLast), except that
// a tensor that is dense in both orders (C == 1, or H == W == 1: the same memory either way) gets
// NHWC's strides on the same memory instead of keeping NCHW's. contiguous() keeps NCHW's strides
// there, and cuDNN picks a convolution's layout from its input's and weight's strides, so a
// 1-channel ConvNet's first convolution ran in NCHW and every step converted its [N, 32, H, W]
// output to NHWC for the next convolution and its gradient back (tests/perf/RESULTS.md, issue
// 32). Other ranks are returned unchanged.
torch::Tensor ChannelsLastStrides(const torch::Tensor& t);

// Whether `t` is a 4-D tensor dense in NHWC with NHWC's strides (what ChannelsLastStrides returns;
// a tensor dense in both orders counts only with NHWC's strides). Walking such a tensor's memory
// in order visits C fastest, then W, H, N.
bool HasChannelsLastStrides(const torch::Tensor& t);

// rows.index_select(0, index), keeping NHWC: a 4-D `rows` with NHWC strides
// (ChannelsLastStrides) gives a batch with NHWC strides (gathered as [N, H, W, C] rows, then
// viewed as [B, C, H, W]), where index_select alone returns a contiguous NCHW copy. index: [B]
// int64 on rows' device.
torch::Tensor GatherRows(const torch::Tensor& rows, const torch::Tensor& index);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_MODELS_H_
