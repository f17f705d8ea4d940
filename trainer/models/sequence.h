// Sequence classifiers: an LSTM and a BERT-style Transformer encoder. Both take features
// [N, T, F] float32 (T steps of F features; no token embedding: a benchmark or a caller feeds
// embeddings or any per-step features), or images [N, C, H, W] read row by row as T = H steps
// of F = C × W features. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_MODELS_SEQUENCE_H_
#define MPSD_TRAINER_MODELS_SEQUENCE_H_

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainer/models.h"

namespace mpsd::trainer {

// [N, T, F] as is; [N, C, H, W] → [N, H, C × W].
torch::Tensor AsSequence(const torch::Tensor& inputs);

// nn::LSTM (F → 512 hidden units, 2 layers, batch first, biases), then the top layer's hidden
// state after the last step → linear 512→num_classes. The LSTM's input weights are the input
// projection. 3,421,194 parameters at its natural input (T = 128, F = 128) and 10 classes.
class LstmClassifierImpl : public ClassifierImpl {
 public:
  static constexpr int64_t kHiddenSize = 512;
  static constexpr int64_t kLayers = 2;
  explicit LstmClassifierImpl(const ModelConfig& config);
  torch::Tensor forward(torch::Tensor inputs) override;

 private:
  torch::nn::LSTM lstm_{nullptr};
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(LstmClassifier);

// The sizes of a Transformer encoder.
struct TransformerPreset {
  absl::string_view name;
  int64_t layers;
  int64_t hidden;  // d_model
  int64_t heads;
  int64_t ffn;  // inner size of the feed-forward block
};

// The presets in registry order, the default ("small": 4 layers, 256 hidden, 4 heads, FFN 1024)
// first; "bert_base": 12 layers, 768 hidden, 12 heads, FFN 3072. nullptr for an unknown name;
// "" is the default.
const TransformerPreset* FindTransformerPreset(absl::string_view name);

// One post-LayerNorm encoder layer as in BERT: x = LayerNorm(x + Dropout(SelfAttention(x))),
// x = LayerNorm(x + Dropout(Linear(GELU(Linear(x))))). Attention has a fused q/k/v input
// projection (hidden → 3 × hidden, with bias) and an output projection (with bias), dropout 0.1
// on the attention probabilities and on both residual branches. Parameters:
// 4·h² + 4·h (attention) + 2·h·ffn + ffn + h (feed-forward) + 4·h (two LayerNorms); 7,087,872
// for bert_base. (torch::nn::TransformerEncoderLayer has the same parameters but wants
// [T, N, h] and, in LibTorch 1.13, has no pre/post-LN choice; this one is batch first and uses
// scaled_dot_product_attention where LibTorch has it, see trainer/compat/attention.h.)
class TransformerEncoderLayerImpl : public torch::nn::Module {
 public:
  TransformerEncoderLayerImpl(int64_t hidden, int64_t heads, int64_t ffn, double dropout);
  // x: [N, T, hidden] → [N, T, hidden].
  torch::Tensor forward(torch::Tensor x);
  static int64_t Parameters(int64_t hidden, int64_t ffn);
  // What the fused form (trainer/fused_models.h) reads: the attention heads and the one
  // dropout probability of the layer's three dropouts (applied in training only).
  int64_t heads() const { return heads_; }
  double dropout() const { return dropout_; }

 private:
  const int64_t heads_;
  const double dropout_;
  torch::nn::Linear in_proj_{nullptr};
  torch::nn::Linear out_proj_{nullptr};
  torch::nn::LayerNorm norm1_{nullptr};
  torch::nn::Linear linear1_{nullptr};
  torch::nn::Linear linear2_{nullptr};
  torch::nn::LayerNorm norm2_{nullptr};
};
TORCH_MODULE(TransformerEncoderLayer);

// An encoder classifier: input projection (linear F→hidden), plus learned position embeddings
// (512 positions, so T <= 512), LayerNorm and Dropout 0.1 (BERT's embedding block without the
// token table), the preset's encoder layers, mean over the T steps, linear hidden→num_classes.
// Initialised as BERT: linear and embedding weights normal(0, 0.02), biases 0, LayerNorm 1 and 0.
class TransformerClassifierImpl : public ClassifierImpl {
 public:
  static constexpr int64_t kMaxPositions = 512;
  TransformerClassifierImpl(const TransformerPreset& preset, const ModelConfig& config);
  torch::Tensor forward(torch::Tensor inputs) override;

 private:
  torch::nn::Linear input_proj_{nullptr};
  torch::nn::Embedding positions_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  torch::nn::ModuleList layers_{nullptr};
  torch::nn::Linear classifier_{nullptr};
};
TORCH_MODULE(TransformerClassifier);

// Registry entries: lstm; transformer (presets small, bert_base); bert_base (the transformer
// with preset bert_base, so that benchmarks can name it).
std::vector<ModelEntry> SequenceModels();

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_MODELS_SEQUENCE_H_
