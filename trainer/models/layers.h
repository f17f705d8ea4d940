// Shape and parameter arithmetic of the layers the zoo is built from, so that a model's
// parameter count and the input sizes it accepts are known without building it (building draws
// from torch's default generator, which a running job uses for dropout). Each formula is that of
// the LibTorch module of the same name; tests/trainer/models_test.cc checks every model's count
// against the built module.
#ifndef MPSD_TRAINER_MODELS_LAYERS_H_
#define MPSD_TRAINER_MODELS_LAYERS_H_

#include <cstdint>

namespace mpsd::trainer::layers {

// Output size of one spatial dimension of a convolution or pooling window, as
// torch::nn::Conv2d and MaxPool2d (floor mode) compute it; 0 when the window does not fit.
constexpr int64_t WindowOutputSize(int64_t size, int64_t kernel, int64_t stride = 1,
                                   int64_t padding = 0) {
  const int64_t padded = size + 2 * padding;
  return padded < kernel ? 0 : (padded - kernel) / stride + 1;
}

constexpr int64_t Conv2dParameters(int64_t in_channels, int64_t out_channels, int64_t kernel,
                                   bool bias) {
  return in_channels * out_channels * kernel * kernel + (bias ? out_channels : 0);
}

constexpr int64_t LinearParameters(int64_t in_features, int64_t out_features) {
  return in_features * out_features + out_features;
}

// BatchNorm and LayerNorm: a weight and a bias per channel (running statistics are buffers).
constexpr int64_t NormParameters(int64_t channels) { return 2 * channels; }

// One layer of torch::nn::LSTM with biases: four gates' input and hidden weights and two biases.
constexpr int64_t LstmLayerParameters(int64_t input_size, int64_t hidden_size) {
  return 4 * hidden_size * (input_size + hidden_size) + 2 * 4 * hidden_size;
}

}  // namespace mpsd::trainer::layers

#endif  // MPSD_TRAINER_MODELS_LAYERS_H_
