// TrainJob.profile's recorder (profiler.h).
#include "trainer/profiler.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "trainer/compat/profiler.h"

namespace mpsd::trainer {

StepProfiler::StepProfiler(ProfileConfig config, std::string path, bool cuda,
                           std::function<void()> synchronize)
    : config_(config), path_(std::move(path)), cuda_(cuda), synchronize_(std::move(synchronize)) {}

StepProfiler::~StepProfiler() = default;

void StepProfiler::BeforeStep(int64_t step) {
  if (session_ != nullptr || written_ || !Records(step)) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  first_ = step;
  last_ = step;
  session_ = std::make_unique<compat::ProfilerSession>(path_, cuda_);
}

absl::Status StepProfiler::AfterStep(int64_t step) {
  if (session_ == nullptr) return absl::OkStatus();
  last_ = step;
  if (step < config_.last_step()) return absl::OkStatus();
  return Stop();
}

absl::Status StepProfiler::Finish() {
  if (session_ == nullptr) return absl::OkStatus();
  return Stop();
}

absl::Status StepProfiler::Stop() {
  if (synchronize_) synchronize_();
  session_->Stop();
  session_.reset();
  std::error_code ec;
  const auto size = std::filesystem::file_size(path_, ec);
  if (ec || size == 0) {
    return absl::InternalError(
        absl::StrCat("profile: LibTorch's profiler wrote no trace to ", path_,
                     ec ? absl::StrCat(" (", ec.message(), ")") : std::string(" (an empty file)"),
                     "; a LibTorch built without Kineto records nothing"));
  }
  written_ = true;
  return absl::OkStatus();
}

}  // namespace mpsd::trainer
