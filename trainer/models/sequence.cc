// The LSTM and Transformer classifiers, their parameter arithmetic and registry entries.
#include "trainer/models/sequence.h"

#include <array>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"
#include "trainer/compat/attention.h"
#include "trainer/models/layers.h"

namespace mpsd::trainer {
namespace {

namespace nn = torch::nn;

constexpr double kTransformerDropout = 0.1;
constexpr double kBertInitStd = 0.02;  // BERT's initializer_range

constexpr std::array<TransformerPreset, 2> kTransformerPresets = {{
    {"small", /*layers=*/4, /*hidden=*/256, /*heads=*/4, /*ffn=*/1024},
    {"bert_base", /*layers=*/12, /*hidden=*/768, /*heads=*/12, /*ffn=*/3072},
}};

const TransformerPreset& BertBase() { return kTransformerPresets[1]; }

// (T, F) of an input shape [T, F] or [C, H, W] (read as H steps of C × W features).
std::pair<int64_t, int64_t> SequenceDims(const std::vector<int64_t>& shape) {
  if (shape.size() == 3) return {shape[1], shape[0] * shape[2]};
  return {shape[0], shape[1]};
}

int64_t LstmParameters(const ModelConfig& config) {
  const int64_t features = SequenceDims(config.input_shape).second;
  constexpr int64_t h = LstmClassifierImpl::kHiddenSize;
  int64_t count = layers::LstmLayerParameters(features, h);
  for (int64_t layer = 1; layer < LstmClassifierImpl::kLayers; ++layer) {
    count += layers::LstmLayerParameters(h, h);
  }
  return count + layers::LinearParameters(h, config.num_classes);
}

absl::Status CheckTransformer(absl::string_view name, const ModelConfig& config) {
  const int64_t steps = SequenceDims(config.input_shape).first;
  if (steps <= TransformerClassifierImpl::kMaxPositions) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s cannot take input %s: %d steps, but it has position embeddings for at most %d", name,
      FormatShape(config.input_shape), steps, TransformerClassifierImpl::kMaxPositions));
}

int64_t TransformerParameters(const TransformerPreset& preset, const ModelConfig& config) {
  const int64_t h = preset.hidden;
  return layers::LinearParameters(SequenceDims(config.input_shape).second, h) +
         TransformerClassifierImpl::kMaxPositions * h + layers::NormParameters(h) +
         preset.layers * TransformerEncoderLayerImpl::Parameters(h, preset.ffn) +
         layers::LinearParameters(h, config.num_classes);
}

// BERT's _init_weights.
void InitLikeBert(nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (const std::shared_ptr<nn::Module>& module : model.modules(/*include_self=*/false)) {
    if (auto* linear = module->as<nn::Linear>()) {
      nn::init::normal_(linear->weight, /*mean=*/0, kBertInitStd);
      nn::init::zeros_(linear->bias);
    } else if (auto* embedding = module->as<nn::Embedding>()) {
      nn::init::normal_(embedding->weight, /*mean=*/0, kBertInitStd);
    } else if (auto* norm = module->as<nn::LayerNorm>()) {
      nn::init::ones_(norm->weight);
      nn::init::zeros_(norm->bias);
    }
  }
}

std::shared_ptr<ClassifierImpl> MakeTransformer(const ModelConfig& config) {
  return TransformerClassifier(*FindTransformerPreset(config.preset), config).ptr();
}

}  // namespace

torch::Tensor AsSequence(const torch::Tensor& inputs) {
  if (inputs.dim() != 4) return inputs;
  return inputs.permute({0, 2, 1, 3})
      .reshape({inputs.size(0), inputs.size(2), inputs.size(1) * inputs.size(3)});
}

const TransformerPreset* FindTransformerPreset(absl::string_view name) {
  if (name.empty()) return &kTransformerPresets[0];
  for (const TransformerPreset& preset : kTransformerPresets) {
    if (preset.name == name) return &preset;
  }
  return nullptr;
}

LstmClassifierImpl::LstmClassifierImpl(const ModelConfig& config) {
  const int64_t features = SequenceDims(config.input_shape).second;
  lstm_ = register_module(
      "lstm",
      nn::LSTM(nn::LSTMOptions(features, kHiddenSize).num_layers(kLayers).batch_first(true)));
  fc_ = register_module("fc", nn::Linear(kHiddenSize, config.num_classes));
}

torch::Tensor LstmClassifierImpl::forward(torch::Tensor inputs) {
  // h_n: [layers, N, hidden]; the top layer's state after the last step.
  const torch::Tensor h_n = std::get<0>(std::get<1>(lstm_->forward(AsSequence(inputs))));
  return fc_->forward(h_n.select(/*dim=*/0, /*index=*/-1));
}

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(int64_t hidden, int64_t heads, int64_t ffn,
                                                         double dropout)
    : heads_(heads), dropout_(dropout) {
  in_proj_ = register_module("in_proj", nn::Linear(hidden, 3 * hidden));
  out_proj_ = register_module("out_proj", nn::Linear(hidden, hidden));
  norm1_ = register_module("norm1", nn::LayerNorm(nn::LayerNormOptions({hidden}).eps(1e-12)));
  linear1_ = register_module("linear1", nn::Linear(hidden, ffn));
  linear2_ = register_module("linear2", nn::Linear(ffn, hidden));
  norm2_ = register_module("norm2", nn::LayerNorm(nn::LayerNormOptions({hidden}).eps(1e-12)));
}

int64_t TransformerEncoderLayerImpl::Parameters(int64_t hidden, int64_t ffn) {
  return layers::LinearParameters(hidden, 3 * hidden) + layers::LinearParameters(hidden, hidden) +
         layers::LinearParameters(hidden, ffn) + layers::LinearParameters(ffn, hidden) +
         2 * layers::NormParameters(hidden);
}

torch::Tensor TransformerEncoderLayerImpl::forward(torch::Tensor x) {
  const int64_t n = x.size(0);
  const int64_t steps = x.size(1);
  const int64_t hidden = x.size(2);
  const double p = is_training() ? dropout_ : 0.0;
  // [N, T, 3 × hidden] → [3, N, heads, T, head size]: q, k, v.
  const torch::Tensor qkv =
      in_proj_->forward(x).view({n, steps, 3, heads_, hidden / heads_}).permute({2, 0, 3, 1, 4});
  torch::Tensor attention = compat::ScaledDotProductAttention(qkv[0], qkv[1], qkv[2], p);
  attention = attention.transpose(/*dim0=*/1, /*dim1=*/2).reshape({n, steps, hidden});
  x = norm1_->forward(x + torch::dropout(out_proj_->forward(attention), p, is_training()));
  const torch::Tensor inner = torch::gelu(linear1_->forward(x));
  return norm2_->forward(x + torch::dropout(linear2_->forward(inner), p, is_training()));
}

TransformerClassifierImpl::TransformerClassifierImpl(const TransformerPreset& preset,
                                                     const ModelConfig& config) {
  const int64_t h = preset.hidden;
  input_proj_ =
      register_module("input_proj", nn::Linear(SequenceDims(config.input_shape).second, h));
  positions_ = register_module("positions", nn::Embedding(kMaxPositions, h));
  norm_ = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({h}).eps(1e-12)));
  const double dropout = DropoutOr(config, kTransformerDropout);
  dropout_ = register_module("dropout", nn::Dropout(dropout));
  layers_ = register_module("layers", nn::ModuleList());
  for (int64_t i = 0; i < preset.layers; ++i) {
    layers_->push_back(TransformerEncoderLayer(h, preset.heads, preset.ffn, dropout));
  }
  classifier_ = register_module("classifier", nn::Linear(h, config.num_classes));
  InitLikeBert(*this);
}

torch::Tensor TransformerClassifierImpl::forward(torch::Tensor inputs) {
  torch::Tensor x = AsSequence(inputs);
  const torch::Tensor steps =
      torch::arange(x.size(1), torch::TensorOptions().dtype(torch::kInt64).device(x.device()));
  x = dropout_->forward(norm_->forward(input_proj_->forward(x) + positions_->forward(steps)));
  for (const std::shared_ptr<nn::Module>& layer : *layers_) {
    x = layer->as<TransformerEncoderLayer>()->forward(x);
  }
  return classifier_->forward(x.mean(/*dim=*/1));
}

std::vector<ModelEntry> SequenceModels() {
  return {
      {"lstm",
       "LSTM, 2 layers × 512, over T steps of F features (images: a row per step)",
       InputKind::kSequence,
       {128, 128},
       10,
       {},
       [](const ModelConfig&) { return absl::OkStatus(); },
       LstmParameters,
       [](const ModelConfig& c) -> std::shared_ptr<ClassifierImpl> {
         return LstmClassifier(c).ptr();
       }},
      {"transformer",
       "post-LN Transformer encoder; preset small: 4 layers × 256, 4 heads, FFN 1024",
       InputKind::kSequence,
       {128, 256},
       10,
       {"small", "bert_base"},
       [](const ModelConfig& c) { return CheckTransformer("transformer", c); },
       [](const ModelConfig& c) {
         return TransformerParameters(*FindTransformerPreset(c.preset), c);
       },
       MakeTransformer},
      {"bert_base",
       "transformer preset bert_base: 12 layers × 768, 12 heads, FFN 3072",
       InputKind::kSequence,
       {128, 768},
       2,
       {},
       [](const ModelConfig& c) { return CheckTransformer("bert_base", c); },
       [](const ModelConfig& c) { return TransformerParameters(BertBase(), c); },
       [](const ModelConfig& c) -> std::shared_ptr<ClassifierImpl> {
         return TransformerClassifier(BertBase(), c).ptr();
       }},
  };
}

}  // namespace mpsd::trainer
