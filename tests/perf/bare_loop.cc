// Variant (3) of tests/perf/gpu_train_compare.sh: a bare LibTorch C++ training loop, the yardstick
// for mpsd's own overhead. The seed ConvNet (conv 1→32 3×3, ReLU, conv 32→64 3×3, ReLU, max-pool
// 2, Dropout2d 0.25, flatten 9216, linear 128, ReLU, Dropout 0.5, linear 10) on Fashion-MNIST
// resident on the device: decoded once, normalised there with mpsd's mean/std, each epoch a
// randperm on the device and index_select per batch (last partial batch kept), cross-entropy on
// the logits, torch::optim::Adam, no host sync inside an epoch; the test pass (batches of 1000,
// one sync) is not timed. Nothing of mpsd but its torch-free IDX reader.
//
// Variant (3g), mode "graphed" (issue 15, target 6): the yardstick for mpsd's own overhead on its
// CUDA fast path. The same training step as an mpsd TrainJob's: mpsd's zoo convnet and mpsd's
// GraphedStep (trainer/graphed_step.h: the batch gather, forward, loss, backward and fused Adam
// captured once in one CUDA graph, replayed for every full batch; the last partial batch eagerly
// through the same state), cuDNN's heuristics as an mpsd job has them by default, the same data
// layout (precision bf16 and memory format channels_last as a job sets them). What it leaves out
// is everything else mpsd does: each step's loss and correct count copied into a read-back
// ring and read back in groups of 32, step and epoch events, the executor process, the daemon,
// gRPC and SQLite. The difference between an mpsd job and this is mpsd's overhead.
//
// Usage: mpsd_bare_loop IDX_DIR JSON_OUT [epochs=3] [batch_size=128] [lr=1e-3] [seed=1] [device]
//                       [mode=eager|graphed] [precision=fp32|bf16]
//                       [memory_format=contiguous|channels_last] [cudnn=search|heuristics]
// cudnn: "heuristics" (the default: cuDNN's heuristic choice, PyTorch's default and an mpsd job's)
// or "search" (graphed runs only: cuDNN's benchmark mode, as a job with cudnn_benchmark: true),
// to measure what the search costs in peak memory and gains in speed.
// Writes {"variant": "3" (graphed: "3g"), "epoch_times_s": [...], "s_per_epoch": median of
//         epochs 2..N, "test_accuracies": [...], "test_accuracy": last, "peak_allocated_bytes":
//         the caching allocator's peak over the whole run (data, warm-up, capture, training and
//         the test passes), ...} to JSON_OUT.
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/device.h"
#include "trainer/graphed_step.h"
#include "trainer/idx.h"
#include "trainer/models.h"

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

// The eager step of variant (3): the bare loop's own Net and torch::optim::Adam.
class EagerStep {
 public:
  EagerStep(const Split& train, double lr, const torch::Device& device)
      : train_(train),
        optimizer_((model_->to(device), model_->parameters()), torch::optim::AdamOptions(lr)) {}
  void Step(const torch::Tensor& index) {
    optimizer_.zero_grad();
    torch::Tensor loss = F::cross_entropy(model_->forward(train_.images.index_select(0, index)),
                                          train_.labels.index_select(0, index));
    loss.backward();
    optimizer_.step();
  }
  torch::nn::Module& model() { return *model_; }
  torch::Tensor Forward(const torch::Tensor& x) { return model_->forward(x); }

 private:
  const Split& train_;
  Net model_;
  torch::optim::Adam optimizer_;
};

// Variant (3g): mpsd's convnet and mpsd's GraphedStep over the resident split.
class MpsdGraphStep {
 public:
  MpsdGraphStep(const Split& train, double lr, int64_t batch_size, int64_t total_steps, bool bf16,
                bool channels_last, const torch::Device& device)
      : model_(MakeConvnet(device, channels_last)),
        optimizer_(model_->parameters(), torch::optim::AdamOptions(lr)),
        graphed_(*model_, optimizer_, train.images, train.labels,
                 Options(lr, batch_size, total_steps, bf16)) {}
  void Step(const torch::Tensor& index) { graphed_.Step(index); }
  torch::nn::Module& model() { return *model_; }
  torch::Tensor Forward(const torch::Tensor& x) { return model_->forward(x); }

 private:
  static std::shared_ptr<mpsd::trainer::ClassifierImpl> MakeConvnet(const torch::Device& device,
                                                                    bool channels_last) {
    mpsd::trainer::ModelConfig config;
    config.input_shape = {1, 28, 28};
    config.num_classes = 10;
    std::shared_ptr<mpsd::trainer::ClassifierImpl> model =
        mpsd::trainer::FindModel("convnet")->make(config);
    model->to(device);
    if (channels_last) mpsd::trainer::ToChannelsLast(*model);
    return model;
  }
  static mpsd::trainer::GraphedStepOptions Options(double lr, int64_t batch_size,
                                                   int64_t total_steps, bool bf16) {
    mpsd::trainer::GraphedStepOptions options;
    options.optimizer = mpsd::trainer::OptimizerKind::kAdam;
    options.precision = bf16 ? mpsd::trainer::Precision::kBf16 : mpsd::trainer::Precision::kFp32;
    options.batch_size = batch_size;
    options.schedule = mpsd::trainer::TabulateSchedule(std::nullopt, lr, 0.0, total_steps);
    return options;
  }

  std::shared_ptr<mpsd::trainer::ClassifierImpl> model_;
  torch::optim::Adam optimizer_;
  mpsd::trainer::GraphedStep graphed_;
};

// Correct answers on the test split in batches of 1000, one sync.
template <typename Step>
double TestAccuracy(Step& step, const Split& test, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  step.model().eval();
  torch::Tensor correct =
      torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(device));
  const int64_t m = test.labels.size(0);
  for (int64_t i = 0; i < m; i += 1000) {
    const int64_t size = std::min<int64_t>(1000, m - i);
    correct += step.Forward(test.images.narrow(0, i, size))
                   .argmax(1)
                   .eq(test.labels.narrow(0, i, size))
                   .sum();
  }
  step.model().train();
  return correct.item<double>() / static_cast<double>(m);
}

// Trains `epochs` epochs, each a randperm on the device and one Step per batch (the last
// partial batch kept); no host sync inside an epoch. Returns each epoch's seconds and test
// accuracy.
template <typename Step>
void TrainEpochs(Step& step, const Split& train, const Split& test, int epochs, int64_t batch_size,
                 const torch::Device& device, std::vector<double>& times,
                 std::vector<double>& accuracies) {
  const int64_t n = train.labels.size(0);
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    Sync(device);
    const Clock::time_point start = Clock::now();
    const torch::Tensor order =
        torch::randperm(n, torch::TensorOptions().dtype(torch::kInt64).device(device));
    for (int64_t i = 0; i < n; i += batch_size) {
      step.Step(order.narrow(0, i, std::min(batch_size, n - i)));
    }
    Sync(device);
    times.push_back(Seconds(start));
    accuracies.push_back(TestAccuracy(step, test, device));
    std::printf("epoch %d: %.3f s, test accuracy %.4f\n", epoch, times.back(), accuracies.back());
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s IDX_DIR JSON_OUT [epochs] [batch] [lr] [seed] [device] "
                 "[eager|graphed] [fp32|bf16] [contiguous|channels_last] [search|heuristics]\n",
                 argv[0]);
    return 2;
  }
  const std::string dir = argv[1], out = argv[2];
  const int epochs = argc > 3 ? std::atoi(argv[3]) : 3;
  const int64_t batch_size = argc > 4 ? std::atoll(argv[4]) : 128;
  const double lr = argc > 5 ? std::atof(argv[5]) : 1e-3;
  const uint64_t seed = argc > 6 ? std::strtoull(argv[6], nullptr, 10) : 1;
  const torch::Device device(argc > 7 ? argv[7] : (torch::cuda::is_available() ? "cuda" : "cpu"));
  const std::string mode = argc > 8 ? argv[8] : "eager";
  const std::string precision = argc > 9 ? argv[9] : "fp32";
  const std::string memory_format = argc > 10 ? argv[10] : "contiguous";
  const std::string cudnn = argc > 11 ? argv[11] : "heuristics";
  if (cudnn != "search" && cudnn != "heuristics") {
    std::fprintf(stderr, "cudnn: search or heuristics\n");
    return 2;
  }
  if ((mode != "eager" && mode != "graphed") || (precision != "fp32" && precision != "bf16") ||
      (memory_format != "contiguous" && memory_format != "channels_last") ||
      (mode == "eager" && (precision != "fp32" || memory_format != "contiguous"))) {
    std::fprintf(stderr,
                 "mode eager (fp32 contiguous) or graphed [fp32|bf16] "
                 "[contiguous|channels_last]\n");
    return 2;
  }
  const bool graphed = mode == "graphed";
  const bool channels_last = memory_format == "channels_last";

  torch::manual_seed(seed);
  if (device.is_cuda()) {  // as mpsd's executor, unless told otherwise
    at::globalContext().setBenchmarkCuDNN(graphed && cudnn == "search");
  }
  mpsd::trainer::ResetPeakMemory(device);
  const Clock::time_point load_start = Clock::now();
  Split train = Load(dir, "train", device);
  Split test = Load(dir, "t10k", device);
  if (channels_last) {
    train.images = train.images.contiguous(at::MemoryFormat::ChannelsLast);
    test.images = test.images.contiguous(at::MemoryFormat::ChannelsLast);
  }
  Sync(device);
  const double load_s = Seconds(load_start);

  const int64_t n = train.labels.size(0);
  std::vector<double> epoch_times, accuracies;
  if (graphed) {
    const int64_t total_steps = (n + batch_size - 1) / batch_size * epochs;
    MpsdGraphStep step(train, lr, batch_size, total_steps, precision == "bf16", channels_last,
                       device);
    TrainEpochs(step, train, test, epochs, batch_size, device, epoch_times, accuracies);
  } else {
    EagerStep step(train, lr, device);
    TrainEpochs(step, train, test, epochs, batch_size, device, epoch_times, accuracies);
  }
  std::vector<double> steady(epoch_times.begin() + (epoch_times.size() > 1 ? 1 : 0),
                             epoch_times.end());
  std::sort(steady.begin(), steady.end());
  const size_t mid = steady.size() / 2;
  const double median = steady.size() % 2 == 1 ? steady[mid] : (steady[mid - 1] + steady[mid]) / 2;

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
               "{\"variant\": \"%s\", \"description\": \"%s\", \"precision\": \"%s\", "
               "\"memory_format\": \"%s\", "
               "\"epoch_times_s\": %s, \"s_per_epoch\": %.6f, \"test_accuracies\": %s, "
               "\"test_accuracy\": %.6f, \"data_load_s\": %.6f, \"torch\": \"%s\", "
               "\"device\": \"%s\", \"cudnn\": \"%s\", \"peak_allocated_bytes\": %lld}\n",
               graphed ? "3g" : "3",
               graphed ? "bare LibTorch C++ loop, data resident on the device, randperm per "
                         "epoch, mpsd's convnet and GraphedStep: the whole step in one CUDA graph "
                         "(fused Adam), no per-step read-back, no events"
                       : "bare LibTorch C++ loop, data resident on the device, randperm + "
                         "index_select per batch, torch::optim::Adam",
               precision.c_str(), memory_format.c_str(), list(epoch_times).c_str(), median,
               list(accuracies).c_str(), accuracies.back(), load_s, TORCH_VERSION,
               device.str().c_str(), cudnn.c_str(),
               static_cast<long long>(mpsd::trainer::ReadMemory(device).peak_allocated_bytes));
  std::fclose(f);
  return 0;
}
