// Issue 31 on the CPU: K seed-ConvNet trials of a learning-rate sweep trained fused (one
// Executor::RunFused: one grouped-convolution / batched-matmul model and one update) against the
// same K trials one after another (K × Executor::Run), through the executor as the daemon calls
// it. Each trial: Fashion-MNIST, the first LIMIT training examples (subset "first", so the trials
// share one loaded dataset), 1000 test examples, batch 64, AdamW, EPOCHS epoch(s), its own seed
// and learning rate. Prints per way to run: wall time (the whole call: data load, training,
// evaluation, model.pt), the training time (the sum of each trial's epoch times for the
// sequential way; the fused way's epochs run at once, so its epoch time once), examples per
// second of training over all K trials, and each trial's final test accuracy.
//
// 2026-12-03, the 2-vCPU build machine (LibTorch 1.13 CPU, 2 intra-op threads), K=4, 6400
// examples, 1 epoch (100 steps per trial), another build partly running beside it:
//   one after another (Run)   wall 103.05 s, training 97.88 s, 262 examples/s
//   fused (RunFused)          wall  43.15 s, training 40.35 s, 634 examples/s
//   fused speed-up: wall 2.39x, training 2.43x. Test accuracy per trial 0.770 0.800 0.803
//   0.821 alone, 0.770 0.794 0.808 0.824 fused: with 2 threads the steps differ in the last
//   bits (trainer/fused_train.h), which 100 AdamW steps amplify; with 1 thread they are equal.
//   The first run, with the other build running throughout: 102.43 s against 52.00 s (1.97x).
//
// 2026-12-04, a 2-vCPU AMD EPYC (AVX-512) VM, nothing else running, same K, examples, epoch:
//   one after another (Run)   wall 28.12 s, training 25.10 s, 1020 examples/s
//   fused (RunFused)          wall 32.00 s, training 29.78 s,  860 examples/s
//   fused speed-up: wall 0.88x, training 0.84x (the unfused step 3.9x faster than above).
//
// Usage: mpsd_fused_cpu IDX_DIR [K=4] [LIMIT=6400] [EPOCHS=1]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/executor.h"
#include "trainer/torch_executor.h"

namespace {

using Clock = std::chrono::steady_clock;
using mpsd::trainer::CancelFlag;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

mpsd::v1::SubmitJobRequest Trial(const std::string& root, int64_t limit, int epochs, int k) {
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_model()->set_name("convnet");
  job.mutable_dataset()->set_name("fashion-mnist");
  job.mutable_dataset()->set_root(root);
  job.mutable_dataset()->set_limit_train(limit);
  job.mutable_dataset()->set_limit_test(1000);
  job.mutable_dataset()->set_subset("first");
  job.set_batch_size(64);
  job.set_epochs(epochs);
  job.mutable_optimizer()->set_name("adamw");
  job.mutable_optimizer()->set_learning_rate(3e-4 * (1 << k));
  job.set_seed(static_cast<uint64_t>(k + 1));
  job.set_device("cpu");
  return request;
}

struct Figures {
  double train_seconds = 0;
  double accuracy = 0;
  bool ok = true;
};

mpsd::trainer::EventSink Collect(Figures& figures) {
  return [&figures](mpsd::v1::JobEvent event) {
    if (event.has_epoch()) {
      figures.train_seconds += event.epoch().epoch_time_s();
      figures.accuracy = event.epoch().test_accuracy();
    }
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s IDX_DIR [K=4] [LIMIT=6400] [EPOCHS=1]\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  const int trials = argc > 2 ? std::atoi(argv[2]) : 4;
  const int64_t limit = argc > 3 ? std::atoll(argv[3]) : 6400;
  const int epochs = argc > 4 ? std::atoi(argv[4]) : 1;
  const std::filesystem::path artifacts =
      std::filesystem::temp_directory_path() / absl::StrCat("mpsd_fused_cpu_", getpid());
  mpsd::api::Executor::Options options;
  options.artifacts_dir = artifacts.string();
  auto executor = mpsd::trainer::CreateTorchExecutor(options);
  if (!executor.ok()) {
    std::fprintf(stderr, "%s\n", executor.status().ToString().c_str());
    return 1;
  }
  std::vector<mpsd::v1::SubmitJobRequest> specs;
  for (int k = 0; k < trials; ++k) specs.push_back(Trial(root, limit, epochs, k));
  const absl::StatusOr<std::vector<int>> plan = (*executor)->PlanFusion(specs, trials);
  if (!plan.ok() || static_cast<int>(plan->size()) != trials) {
    std::fprintf(stderr, "PlanFusion: %s\n",
                 plan.ok() ? "fewer trials" : plan.status().ToString().c_str());
    return 1;
  }
  const double examples = static_cast<double>(trials) * static_cast<double>(limit) * epochs;
  std::printf(
      "%d convnet trials, %lld Fashion-MNIST examples x %d epoch(s), batch 64, adamw, "
      "CPU threads %d\n",
      trials, static_cast<long long>(limit), epochs, at::get_num_threads());

  // Sequential: one Run per trial.
  std::vector<Figures> alone(trials);
  Clock::time_point start = Clock::now();
  for (int k = 0; k < trials; ++k) {
    CancelFlag cancelled;
    const absl::Status s =
        (*executor)->Run({absl::StrCat("seq", k), ""}, specs[k], Collect(alone[k]), cancelled);
    if (!s.ok()) std::fprintf(stderr, "trial %d: %s\n", k, s.ToString().c_str());
  }
  const double sequential_wall = SecondsSince(start);
  double sequential_train = 0;
  for (const Figures& f : alone) sequential_train += f.train_seconds;

  // Fused: one RunFused.
  std::vector<Figures> fused(trials);
  std::vector<std::unique_ptr<CancelFlag>> flags;
  std::vector<mpsd::api::TrialRun> runs;
  for (int k = 0; k < trials; ++k) {
    flags.push_back(std::make_unique<CancelFlag>());
    mpsd::api::TrialRun run;
    run.job.job_id = absl::StrCat("fused", k);
    run.spec = specs[k];
    run.sink = Collect(fused[k]);
    run.cancelled = flags.back().get();
    runs.push_back(std::move(run));
  }
  start = Clock::now();
  const std::vector<absl::Status> statuses = (*executor)->RunFused(runs, {});
  const double fused_wall = SecondsSince(start);
  for (int k = 0; k < trials; ++k) {
    if (!statuses[k].ok()) {
      std::fprintf(stderr, "fused %d: %s\n", k, statuses[k].ToString().c_str());
    }
  }
  const double fused_train = fused[0].train_seconds;

  std::printf("%-26s %10s %12s %14s   %s\n", "way", "wall s", "training s", "examples/s",
              "test accuracy per trial");
  const auto row = [&](const char* name, double wall, double train,
                       const std::vector<Figures>& figures) {
    std::string accuracies;
    for (const Figures& f : figures) absl::StrAppend(&accuracies, f.accuracy, " ");
    std::printf("%-26s %10.2f %12.2f %14.0f   %s\n", name, wall, train, examples / train,
                accuracies.c_str());
  };
  row("one after another (Run)", sequential_wall, sequential_train, alone);
  row("fused (RunFused)", fused_wall, fused_train, fused);
  std::printf("fused speed-up: wall %.2fx, training %.2fx\n", sequential_wall / fused_wall,
              sequential_train / fused_train);
  std::filesystem::remove_all(artifacts);
  return 0;
}
