// The per-element arithmetic of the ConvNet's fused layers (conv_ops.h: AddChannelBiasRelu_ and
// BiasMaxPool2x2Relu), written once for both of their implementations: the CUDA kernels
// (conv_kernels.cu, built where CMake finds the CUDA toolkit beside a CUDA LibTorch) and the CPU
// loops in conv_ops.cc, which are the kernels' reference. CI has no GPU: it runs these functions
// through the CPU loops against autograd's composition of the same layers
// (tests/trainer/conv_ops_test.cc); tests/perf/conv_kernels_check.cc runs the CUDA kernels
// against the CPU loops on the GPU machine.
//
// Each function reproduces the rounding of the composition it replaces, so values and input
// gradients are bitwise autograd's: the bias is cast to the activation's dtype T first
// (`bias.to(T)`, as AddChannelBias does), each sum is computed in float and rounded to T (ATen's
// add for bfloat16 and half), a window's maximum is its first largest value in row-major order
// with NaN winning (ATen's max_pool2d: `val > max || isnan(val)`, starting from -inf), and ReLU
// keeps NaN and passes a gradient wherever its output is not <= 0, NaN included (ATen's
// threshold_backward).
// Internal to trainer/: header-only, host and device; includes c10's scalar types, not torch.
// Pure functions of their arguments (thread-safe); no errors: callers check shapes first.
#ifndef MPSD_TRAINER_MODELS_CONV_KERNELS_H_
#define MPSD_TRAINER_MODELS_CONV_KERNELS_H_

#include <c10/macros/Macros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <limits>

namespace mpsd::trainer::conv_kernels {

// BiasMaxPool2x2Relu's saved choice per output element: the window position whose input gets
// the output's gradient (0: top left, 1: top right, 2: bottom left, 3: bottom right), or
// kNoGradient where ReLU passed none (an output <= 0).
constexpr uint8_t kNoGradient = 4;

C10_HOST_DEVICE inline bool IsNan(float v) { return v != v; }

// The bias as the composition adds it: cast to T, then read in float.
template <typename T>
C10_HOST_DEVICE inline float BiasAs(float bias) {
  return static_cast<float>(static_cast<T>(bias));
}

// x + bias rounded to T, read back in float (`output.add_(bias.to(T))` of one element).
template <typename T>
C10_HOST_DEVICE inline float BiasedValue(T x, float bias_as_t) {
  return static_cast<float>(static_cast<T>(static_cast<float>(x) + bias_as_t));
}

// ReLU of a value of T (held in float): itself if > 0 or NaN, else 0.
C10_HOST_DEVICE inline float Relu(float v) { return (v > 0.f || IsNan(v)) ? v : 0.f; }

// relu(x + bias) of one element, in T.
template <typename T>
C10_HOST_DEVICE inline T BiasRelu(T x, float bias_as_t) {
  return static_cast<T>(Relu(BiasedValue(x, bias_as_t)));
}

// One 2×2 window of the forward: `input` points at its top-left element, `row` and `column` are
// the input's strides (elements) along H and W. Writes relu(max(window + bias)) to *output and
// the window position that gets its gradient to *choice.
template <typename T>
C10_HOST_DEVICE inline void PoolWindowForward(const T* input, int64_t row, int64_t column,
                                              float bias_as_t, T* output, uint8_t* choice) {
  const int64_t offsets[4] = {0, column, row, row + column};
  float best = -std::numeric_limits<float>::infinity();
  uint8_t best_at = 0;
  for (uint8_t k = 0; k < 4; ++k) {
    const float v = BiasedValue(input[offsets[k]], bias_as_t);
    if (v > best || IsNan(v)) {
      best = v;
      best_at = k;
    }
  }
  *output = static_cast<T>(Relu(best));
  *choice = best <= 0.f ? kNoGradient : best_at;
}

// One 2×2 window of the backward: writes the output's gradient to the chosen input element and 0
// to the other three (`input_grad` points at the window's top-left element, strides as above).
// Returns the gradient the bias gets from this window, in float: the output's gradient where
// ReLU passed it, else 0.
template <typename T>
C10_HOST_DEVICE inline float PoolWindowBackward(T output_grad, uint8_t choice, T* input_grad,
                                                int64_t row, int64_t column) {
  const int64_t offsets[4] = {0, column, row, row + column};
  for (uint8_t k = 0; k < 4; ++k) {
    input_grad[offsets[k]] = k == choice ? output_grad : static_cast<T>(0.f);
  }
  return choice == kNoGradient ? 0.f : static_cast<float>(output_grad);
}

// Where output element `i` (in memory order) of a dense [N, C, Ho, Wo] tensor sits: NCHW
// (`channels_last` false) or NHWC order. Used by both implementations to walk the outputs in
// memory order, which is what coalesces the kernels' reads and writes. Index is the type of `i`
// and of the arithmetic: the kernels use 32 bits where the tensor has fewer than 2^31 elements
// (a GPU divides 32-bit integers several times faster than 64-bit ones).
template <typename Index>
struct Position {
  Index n, c, h, w;
};

template <typename Index>
C10_HOST_DEVICE inline Position<Index> PositionOf(Index i, Index channels, Index height,
                                                  Index width, bool channels_last) {
  Position<Index> p;
  if (channels_last) {
    p.c = i % channels;
    i /= channels;
    p.w = i % width;
    i /= width;
    p.h = i % height;
    p.n = i / height;
  } else {
    p.w = i % width;
    i /= width;
    p.h = i % height;
    i /= height;
    p.c = i % channels;
    p.n = i / channels;
  }
  return p;
}

// A tensor's strides along N, C, H and W, in elements.
template <typename Index>
struct Strides {
  Index n, c, h, w;
};

// The offset of the top-left input element of output position p's 2×2 window.
template <typename Index>
C10_HOST_DEVICE inline Index WindowOffset(const Position<Index>& p, const Strides<Index>& in) {
  return p.n * in.n + p.c * in.c + 2 * p.h * in.h + 2 * p.w * in.w;
}

}  // namespace mpsd::trainer::conv_kernels

#endif  // MPSD_TRAINER_MODELS_CONV_KERNELS_H_
