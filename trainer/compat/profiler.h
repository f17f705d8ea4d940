// LibTorch's profiler across versions (the `profile:` setting, trainer/profiler.h). Internal to
// trainer/.
#ifndef MPSD_TRAINER_COMPAT_PROFILER_H_
#define MPSD_TRAINER_COMPAT_PROFILER_H_

#include <memory>
#include <string>

namespace mpsd::trainer::compat {

// One recording of LibTorch's profiler, from construction to Stop (or destruction): the
// operators run on the constructing thread and the autograd threads it starts, and with `cuda`
// (LibTorch 2.x) the device's kernels and copies. Stop writes a Chrome-trace JSON file to
// `path` (chrome://tracing, https://ui.perfetto.dev): Kineto's trace ({"traceEvents": [...]})
// in 2.x (torch.profiler's engine; on CUDA also the kernels, through CUPTI), the legacy
// profiler's event array in 1.13 (Debian builds it without Kineto: host operators only). One at
// a time per process; not thread-safe. Throws c10::Error where LibTorch refuses (a profiler
// already running).
class ProfilerSession {
 public:
  ProfilerSession(std::string path, bool cuda);
  ~ProfilerSession();
  ProfilerSession(const ProfilerSession&) = delete;
  ProfilerSession& operator=(const ProfilerSession&) = delete;

  // Stops recording and writes the trace; later calls do nothing.
  void Stop();

 private:
  struct Recording;  // the version's profiler state (compat/profiler.cc)
  const std::string path_;
  std::unique_ptr<Recording> running_;  // null once stopped
};

}  // namespace mpsd::trainer::compat

#endif  // MPSD_TRAINER_COMPAT_PROFILER_H_
