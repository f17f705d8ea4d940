// Variant (3) of tests/perf/gpu_train_compare.sh: a bare LibTorch C++ training loop, the yardstick
// for mpsd's own overhead. The seed ConvNet (conv 1→32 3×3, ReLU, conv 32→64 3×3, ReLU, max-pool
// 2, Dropout2d 0.25, flatten 9216, linear 128, ReLU, Dropout 0.5, linear 10) on Fashion-MNIST
// resident on the device: decoded once, normalised there with mpsd's mean/std, each epoch a
// randperm on the device and index_select per batch (last partial batch kept), cross-entropy on
// the logits, torch::optim::Adam, no host sync inside an epoch; the test pass (batches of 1000,
// one sync) is not timed. Nothing of mpsd but its torch-free IDX reader.
//
// Usage: mpsd_bare_loop IDX_DIR JSON_OUT [epochs=3] [batch_size=128] [lr=1e-3] [seed=1] [device]
// Writes {"variant": "3", "epoch_times_s": [...], "s_per_epoch": median of epochs 2..N,
//         "test_accuracies": [...], "test_accuracy": last, ...} to JSON_OUT.
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "trainer/idx.h"

namespace {

namespace F = torch::nn::functional;
using Clock = std::chrono::steady_clock;

constexpr float kMean = 0.2860f;  // Fashion-MNIST training pixels in [0, 1], as mpsd uses
constexpr float kStd = 0.3530f;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)))),
        dropout1(register_module("dropout1", torch::nn::Dropout2d(0.25))),
        dropout2(register_module("dropout2", torch::nn::Dropout(0.5))),
        fc1(register_module("fc1", torch::nn::Linear(9216, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv1(x));
    x = torch::relu(conv2(x));
    x = dropout1(torch::max_pool2d(x, 2));
    x = dropout2(torch::relu(fc1(x.flatten(1))));
    return fc2(x);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Dropout2d dropout1;
  torch::nn::Dropout dropout2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

struct Split {
  torch::Tensor images;  // [N, 1, 28, 28] float32 on the device
  torch::Tensor labels;  // [N] int64 on the device
};

Split Load(const std::string& dir, const std::string& prefix, const torch::Device& device) {
  auto split = mpsd::trainer::ReadIdxSplit(dir, prefix, /*limit=*/0, /*num_classes=*/10);
  if (!split.ok()) {
    std::fprintf(stderr, "%s\n", std::string(split.status().message()).c_str());
    std::exit(1);
  }
  const int64_t n = split->labels.dims[0];
  torch::Tensor images =
      torch::from_blob(split->images.data.data(), {n, 1, 28, 28}, torch::kUInt8).to(device);
  torch::Tensor labels =
      torch::from_blob(split->labels.data.data(), {n}, torch::kUInt8).to(device).to(torch::kInt64);
  return {images.to(torch::kFloat32).div_(255).sub_(kMean).div_(kStd), labels};
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void Sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? 0 : device.index());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s IDX_DIR JSON_OUT [epochs] [batch] [lr] [seed] [device]\n",
                 argv[0]);
    return 2;
  }
  const std::string dir = argv[1], out = argv[2];
  const int epochs = argc > 3 ? std::atoi(argv[3]) : 3;
  const int64_t batch_size = argc > 4 ? std::atoll(argv[4]) : 128;
  const double lr = argc > 5 ? std::atof(argv[5]) : 1e-3;
  const uint64_t seed = argc > 6 ? std::strtoull(argv[6], nullptr, 10) : 1;
  const torch::Device device(argc > 7 ? argv[7] : (torch::cuda::is_available() ? "cuda" : "cpu"));

  torch::manual_seed(seed);
  const Clock::time_point load_start = Clock::now();
  const Split train = Load(dir, "train", device);
  const Split test = Load(dir, "t10k", device);
  Sync(device);
  const double load_s = Seconds(load_start);

  Net model;
  model->to(device);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(lr));
  const int64_t n = train.labels.size(0);
  std::vector<double> epoch_times, accuracies;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    Sync(device);
    const Clock::time_point start = Clock::now();
    const torch::Tensor order =
        torch::randperm(n, torch::TensorOptions().dtype(torch::kInt64).device(device));
    for (int64_t i = 0; i < n; i += batch_size) {
      const torch::Tensor index = order.narrow(0, i, std::min(batch_size, n - i));
      optimizer.zero_grad();
      torch::Tensor loss = F::cross_entropy(model->forward(train.images.index_select(0, index)),
                                            train.labels.index_select(0, index));
      loss.backward();
      optimizer.step();
    }
    Sync(device);
    epoch_times.push_back(Seconds(start));
    {
      torch::NoGradGuard no_grad;
      model->eval();
      torch::Tensor correct = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(device));
      const int64_t m = test.labels.size(0);
      for (int64_t i = 0; i < m; i += 1000) {
        const int64_t size = std::min<int64_t>(1000, m - i);
        correct += model->forward(test.images.narrow(0, i, size))
                       .argmax(1)
                       .eq(test.labels.narrow(0, i, size))
                       .sum();
      }
      accuracies.push_back(correct.item<double>() / static_cast<double>(m));
      model->train();
    }
    std::printf("epoch %d: %.3f s, test accuracy %.4f\n", epoch, epoch_times.back(),
                accuracies.back());
    std::fflush(stdout);
  }
  std::vector<double> steady(epoch_times.begin() + (epoch_times.size() > 1 ? 1 : 0),
                             epoch_times.end());
  std::sort(steady.begin(), steady.end());
  const size_t mid = steady.size() / 2;
  const double median =
      steady.size() % 2 == 1 ? steady[mid] : (steady[mid - 1] + steady[mid]) / 2;

  FILE* f = std::fopen(out.c_str(), "w");
  if (f == nullptr) {
    std::perror(out.c_str());
    return 1;
  }
  auto list = [&](const std::vector<double>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  std::fprintf(f,
               "{\"variant\": \"3\", \"description\": \"bare LibTorch C++ loop, data resident on "
               "the device, randperm + index_select per batch, torch::optim::Adam\", "
               "\"epoch_times_s\": %s, \"s_per_epoch\": %.6f, \"test_accuracies\": %s, "
               "\"test_accuracy\": %.6f, \"data_load_s\": %.6f, \"torch\": \"%s\", "
               "\"device\": \"%s\"}\n",
               list(epoch_times).c_str(), median, list(accuracies).c_str(), accuracies.back(),
               load_s, TORCH_VERSION, device.str().c_str());
  std::fclose(f);
  return 0;
}
