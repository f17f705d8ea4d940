// mpsd-executor: the process that owns the device. Started and supervised by mpsd
// (server/executor/executor_supervisor.h), never by hand: parses flags, limits its own memory,
// starts LibTorch, measures the memory baseline, serves proto/mpsd/v1/executor.proto on a private
// unix socket, and exits on Shutdown or when its parent dies. With --validate-request it instead
// validates one job (one that runs user code) and exits.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "api/status.h"
#include "mpsd/v1/executor.pb.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "trainer/device_memory.h"
#include "trainer/executor_service.h"
#include "trainer/torch_executor.h"

namespace {

// Exits at once when the parent (mpsd) is gone, so that a killed daemon never leaves an
// executor holding the device. Linux: the kernel sends SIGKILL when the parent dies; the
// getppid() check closes the race with a parent that died before prctl. Elsewhere: a thread
// polls getppid() once a second.
void DieWithParent(pid_t parent) {
#if defined(__linux__)
  prctl(PR_SET_PDEATHSIG, SIGKILL);
#else
  std::thread([parent] {
    for (;;) {
      if (getppid() != parent) _exit(0);
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }).detach();
#endif
  if (parent > 0 && getppid() != parent) _exit(0);
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "mpsd-executor: %s\n", message.c_str());
  return 1;
}

// The one-shot mode (--validate-request): validates the SubmitJobRequest in `request_path`
// (binary protobuf) and writes executor.proto's Status of it to `result_path`, then exits. The
// daemon runs it for a job with user code, whose check may never return: it kills this process
// at its deadline, and no warm executor or queued job is touched (server/executor_supervisor.h).
int ValidateOnce(const mpsd::api::Executor::Options& options, const std::string& request_path,
                 const std::string& result_path) {
  mpsd::v1::executor::ValidateRequest request;
  {
    std::ifstream in(request_path, std::ios::binary);
    if (!in || !request.ParseFromIstream(&in)) return Fail("cannot read " + request_path);
  }
  absl::StatusOr<std::unique_ptr<mpsd::api::Executor>> executor =
      mpsd::trainer::CreateTorchExecutor(options);
  if (!executor.ok()) return Fail(std::string(executor.status().message()));
  const mpsd::v1::executor::Status result =
      mpsd::api::ToExecutorStatus((*executor)->Validate(request.spec()));
  {
    std::ofstream out(result_path, std::ios::binary | std::ios::trunc);
    if (!out || !result.SerializeToOstream(&out) || !out.flush()) {
      return Fail("cannot write " + result_path);
    }
  }
  std::fflush(nullptr);
  _exit(0);  // LibTorch's and gRPC's static destructors are not needed for this
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mpsd-executor: owns the device for mpsd (started by mpsd, not by hand)"};
  std::string socket_path, artifacts_dir, log_level = "info";
  std::string validate_request, validate_result;
  int parent_pid = 0;
  int64_t memory_limit_bytes = 0;
  mpsd::api::Executor::Options options;
  app.add_option("--socket", socket_path, "unix socket path to serve on");
  app.add_option("--validate-request", validate_request,
                 "validate the job in this file (a binary ValidateRequest) and exit");
  app.add_option("--validate-result", validate_result,
                 "where --validate-request writes its result (a binary executor Status)");
  app.add_option("--parent-pid", parent_pid, "exit when this process is no longer the parent");
  app.add_option("--cpu-threads", options.cpu_threads,
                 "intra-op threads; 0 = one per CPU this process may use");
  app.add_option("--steps-per-readback", options.steps_per_readback,
                 "training steps read back from the device in one transfer");
  app.add_option("--artifacts-dir", options.artifacts_dir, "checkpoints and finished models");
  app.add_option("--cache-dir", options.cache_dir, "decode caches of image_folder datasets");
  app.add_flag("--enable-fault-injection", options.allow_fault_injection,
               "accept fault_injection in job specs (tests only)");
  app.add_option("--memory-limit-bytes", memory_limit_bytes,
                 "RLIMIT_AS of this process, bytes; 0 = none");
  app.add_option("--max-file-bytes", options.input_limits.max_file_bytes,
                 "largest file a job may have read whole, bytes");
  app.add_option("--max-unpacked-bytes", options.input_limits.max_unpacked_bytes,
                 "most bytes one file may claim to unpack to");
  app.add_option("--max-image-pixels", options.input_limits.max_image_pixels,
                 "most pixels one image may claim");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  CLI11_PARSE(app, argc, argv);

  DieWithParent(static_cast<pid_t>(parent_pid));
  // A file size limit (RLIMIT_FSIZE) then fails a write with EFBIG, which the job reports as a
  // full disk (trainer/artifact_file.h), instead of killing the process.
  signal(SIGXFSZ, SIG_IGN);
  spdlog::set_default_logger(spdlog::stderr_color_mt("mpsd-executor"));
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (memory_limit_bytes > 0) {
    // Address space, not resident memory: on CPU an unbounded allocation then fails in the
    // allocator (out of memory) instead of the kernel's OOM killer ending the process.
    const rlimit limit{static_cast<rlim_t>(memory_limit_bytes),
                       static_cast<rlim_t>(memory_limit_bytes)};
    if (setrlimit(RLIMIT_AS, &limit) != 0) return Fail("cannot set RLIMIT_AS");
  }
  if (!validate_request.empty()) {
    if (validate_result.empty()) return Fail("--validate-request needs --validate-result");
    return ValidateOnce(options, validate_request, validate_result);
  }
  if (socket_path.empty()) return Fail("--socket is required");

  absl::StatusOr<std::unique_ptr<mpsd::api::Executor>> executor =
      mpsd::trainer::CreateTorchExecutor(options);
  if (!executor.ok()) return Fail(std::string(executor.status().message()));
  const std::string device = (*executor)->GetDevice().kind();
  absl::StatusOr<mpsd::api::MemoryFigures> baseline = mpsd::trainer::MeasureBaseline(device);
  if (!baseline.ok()) return Fail(std::string(baseline.status().message()));

  // Tests of a cancel that comes while the executor takes a job widen that moment with this.
  absl::Duration start_delay;
  if (const char* ms = std::getenv("MPSD_EXECUTOR_START_DELAY_MS");
      ms != nullptr && options.allow_fault_injection) {
    int64_t value = 0;
    if (absl::SimpleAtoi(ms, &value) && value > 0) start_delay = absl::Milliseconds(value);
  }
  mpsd::trainer::ExecutorService service(executor->get(), *baseline, start_delay);
  std::error_code ignored;
  std::filesystem::remove(socket_path, ignored);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  // Messages carry whole job specs and summaries with every bench row: no 4 MB cap.
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  // The socket is created with the process's umask: 0077 makes it 0600 from its first moment.
  const mode_t old_umask = umask(0077);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  umask(old_umask);
  if (server == nullptr) return Fail("cannot listen on unix://" + socket_path);
  chmod(socket_path.c_str(), 0600);
  spdlog::info("ready on unix://{} (pid {}, device {}, baseline {} bytes allocated, {} reserved)",
               socket_path, getpid(), device, baseline->allocated_bytes, baseline->reserved_bytes);

  service.WaitForShutdown();
  // No job runs any more and nothing is left to save: exit at once. A graceful gRPC shutdown
  // waits seconds for its idle polling threads, and that time is the daemon's stop time.
  std::filesystem::remove(socket_path, ignored);
  spdlog::info("stopped");
  spdlog::shutdown();
  std::fflush(nullptr);
  _exit(0);
}
