// TrainJob.profile: LibTorch's profiler over a range of training steps, written as a Chrome-trace
// JSON artifact. Torch-free header; the recording itself is compat::ProfilerSession.
#ifndef MPSD_TRAINER_PROFILER_H_
#define MPSD_TRAINER_PROFILER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace mpsd::trainer {

namespace compat {
class ProfilerSession;
}  // namespace compat

// The steps TrainJob.profile names, resolved. Steps are optimizer steps, 1-based as step
// events count them.
struct ProfileConfig {
  int64_t start_step = 1;
  int64_t steps = 0;  // 0 = no profiling
  bool enabled() const { return steps > 0; }
  int64_t last_step() const { return start_step + steps - 1; }
};

// The file name of the trace in the job's artifacts directory.
inline constexpr char kProfileFileName[] = "profile.json";

// Records steps [config.start_step, config.last_step()] of one job into `path`. The training
// loop calls BeforeStep and AfterStep around every optimizer step, on its own thread; the
// job's runner calls Finish once the loop returned (a job that ended inside the range writes
// what it recorded). Not thread-safe: one thread, one job.
class StepProfiler {
 public:
  // `synchronize` waits for the device (the kernels of the last recorded step belong in the
  // trace); `cuda` also records the device's kernels (LibTorch 2.x).
  StepProfiler(ProfileConfig config, std::string path, bool cuda,
               std::function<void()> synchronize);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // True for the steps to record: the loop then names the step's range "ProfilerStep#<step>"
  // (as torch.profiler.profile.step() does).
  bool Records(int64_t step) const {
    return step >= config_.start_step && step <= config_.last_step();
  }
  // Starts the recording before start_step. Throws c10::Error where LibTorch refuses.
  void BeforeStep(int64_t step);
  // After the range's last step: waits for the device, stops and writes the file.
  absl::Status AfterStep(int64_t step);
  // Stops and writes if still recording. OK when nothing was recorded.
  absl::Status Finish();

  // The steps recorded into the written file, [first_step, last_step]; 0 before it is written.
  int64_t first_step() const { return written_ ? first_ : 0; }
  int64_t last_step() const { return written_ ? last_ : 0; }
  bool written() const { return written_; }
  const std::string& path() const { return path_; }

 private:
  absl::Status Stop();

  const ProfileConfig config_;
  const std::string path_;
  const bool cuda_;
  const std::function<void()> synchronize_;
  std::unique_ptr<compat::ProfilerSession> session_;  // while recording
  int64_t first_ = 0;
  int64_t last_ = 0;
  bool written_ = false;
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_PROFILER_H_
