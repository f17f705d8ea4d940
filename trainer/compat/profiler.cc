// LibTorch's profiler across versions (trainer/compat/profiler.h).
#include "trainer/compat/profiler.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <set>
#include <utility>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#else
#include <torch/csrc/autograd/profiler_legacy.h>
#endif

namespace mpsd::trainer::compat {

struct ProfilerSession::Recording {
#if TORCH_VERSION_MAJOR < 2
  std::unique_ptr<torch::autograd::profiler::RecordProfile> legacy;
#endif
};

ProfilerSession::ProfilerSession(std::string path, bool cuda) : path_(std::move(path)) {
  auto recording = std::make_unique<Recording>();
#if TORCH_VERSION_MAJOR >= 2
  namespace impl = torch::profiler::impl;
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
  if (cuda) activities.insert(impl::ActivityType::CUDA);
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
#else
  (void)cuda;  // 1.13's legacy profiler records host operators only
  recording->legacy = std::make_unique<torch::autograd::profiler::RecordProfile>(path_);
#endif
  running_ = std::move(recording);
}

ProfilerSession::~ProfilerSession() {
  try {
    Stop();
  } catch (const std::exception&) {  // a destructor does not throw; Stop's caller sees errors
  }
}

void ProfilerSession::Stop() {
  if (running_ == nullptr) return;
  std::unique_ptr<Recording> recording = std::move(running_);
#if TORCH_VERSION_MAJOR >= 2
  torch::autograd::profiler::disableProfiler()->save(path_);
#else
  recording->legacy.reset();  // RecordProfile writes its file when destroyed
#endif
}

}  // namespace mpsd::trainer::compat
