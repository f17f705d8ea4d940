// Fault injection: the checks at submit and the sink wrapper that injects the fault.
#include "trainer/fault_injection.h"

#include <signal.h>
#include <sys/resource.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/log.h"

namespace mpsd::trainer {
namespace {

using mpsd::v1::FaultInjection;
using mpsd::v1::JobEvent;

constexpr int64_t kChunkBytes = int64_t{1} << 30;
// 1 PiB: an allocator that never fails would otherwise loop forever.
constexpr int64_t kMaxChunks = int64_t{1} << 20;

// The spec's fault and its field path ("train_job.fault_injection"); nullptr when none is set.
const FaultInjection* FaultOf(const mpsd::v1::SubmitJobRequest& spec, std::string* field) {
  if (spec.has_train_job() && spec.train_job().has_fault_injection()) {
    *field = "train_job.fault_injection";
    return &spec.train_job().fault_injection();
  }
  if (spec.has_bench_job() && spec.bench_job().has_fault_injection()) {
    *field = "bench_job.fault_injection";
    return &spec.bench_job().fault_injection();
  }
  return nullptr;
}

void NoCoreFiles() {
  const rlimit none{0, 0};
  setrlimit(RLIMIT_CORE, &none);
}

void AllocateUnbounded(const std::string& device, const EventSink& sink) {
  std::vector<torch::Tensor> held;
  try {
    const auto options = torch::dtype(torch::kUInt8).device(torch::Device(device));
    for (int64_t i = 0; i < kMaxChunks; ++i) held.push_back(torch::empty({kChunkBytes}, options));
  } catch (const c10::Error&) {
    const std::string text = absl::StrFormat(
        "fault injection allocate_unbounded: %d bytes (%d × 1 GiB) held on %s when the allocator "
        "failed",
        static_cast<int64_t>(held.size()) * kChunkBytes, held.size(), device);
    Log(LogLevel::kWarning, text);
    held.clear();
    JobEvent event;
    event.mutable_log()->set_level(mpsd::v1::LogLine::WARNING);
    event.mutable_log()->set_text(text);
    sink(std::move(event));
    throw;
  }
  TORCH_CHECK(false, "fault injection allocate_unbounded: 1 PiB allocated on ", device,
              " without the allocator failing");
}

void Inject(const FaultInjection& fault, const std::string& device, const EventSink& sink) {
  Log(LogLevel::kWarning, absl::StrCat("fault injection: ", fault.kind(), " before step ",
                                       std::max<int64_t>(fault.at_step(), 1)));
  if (fault.kind() == "abort") {
    NoCoreFiles();
    std::abort();
  } else if (fault.kind() == "segfault") {
    NoCoreFiles();
    raise(SIGSEGV);
  } else if (fault.kind() == "hang") {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  } else if (fault.kind() == "allocate_unbounded") {
    AllocateUnbounded(device, sink);
  }
}

}  // namespace

absl::Status CheckFaultInjection(const mpsd::v1::SubmitJobRequest& spec, bool allowed) {
  std::string field;
  const FaultInjection* fault = FaultOf(spec, &field);
  if (fault == nullptr) return absl::OkStatus();
  if (!allowed) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": accepted only when mpsd runs with --enable-fault-injection (for tests)"));
  }
  const std::string& kind = fault->kind();
  const bool nan_loss = kind == "nan_loss" && spec.has_train_job();
  if (kind != "abort" && kind != "segfault" && kind != "allocate_unbounded" && kind != "hang" &&
      kind != "segfault_in_check" && !nan_loss) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.kind: expected abort, segfault, allocate_unbounded, hang, segfault_in_check or "
        "(train_job) nan_loss, got \"%s\"",
        field, kind));
  }
  if (fault->steps() < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s.steps: must be >= 0 (0 = every step), got %d", field, fault->steps()));
  }
  if (kind == "segfault_in_check") {
    // The submit-time check itself crashes, as a file that crashes its reader would.
    Log(LogLevel::kWarning, "fault injection: segfault_in_check");
    NoCoreFiles();
    raise(SIGSEGV);
  }
  if (fault->at_step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s.at_step: must be >= 0 (0 = 1), got %d", field, fault->at_step()));
  }
  return absl::OkStatus();
}

EventSink WithFaultInjection(const mpsd::v1::SubmitJobRequest& spec, const std::string& device,
                             EventSink sink) {
  std::string field;
  const FaultInjection* found = FaultOf(spec, &field);
  // nan_loss is the training loop's own (TrainJobConfig::nan_loss_from).
  if (found == nullptr || found->kind() == "nan_loss") return sink;
  struct State {
    FaultInjection fault;
    int64_t rows = 0;
    bool done = false;
  };
  auto state = std::make_shared<State>();
  state->fault = *found;
  return [state, device, sink = std::move(sink)](JobEvent event) {
    const int64_t at_step = std::max<int64_t>(state->fault.at_step(), 1);
    bool trigger = at_step <= 1;
    if (event.has_step()) trigger = trigger || event.step().step() >= at_step - 1;
    if (event.has_bench_row()) trigger = trigger || ++state->rows >= at_step - 1;
    if (at_step <= 1 && !state->done) {
      // Before the job's first event: nothing of the job is reported yet.
      state->done = true;
      Inject(state->fault, device, sink);
    }
    sink(std::move(event));
    if (trigger && !state->done) {
      state->done = true;
      Inject(state->fault, device, sink);
    }
  };
}

}  // namespace mpsd::trainer
