// libFuzzer target: SubmitJobRequest from raw bytes (the wire form any gRPC client may send),
// through the torch-free layers that validate and keep it: the daemon's Scheduler::Submit
// (spec and request_id checks, the request_id index, the SQLite store; the executor's own
// Validate is LibTorch's and is replaced by tests/server's FakeExecutor), and the client's job
// file form (FormatJobFile, then ParseJobFile gives the request back, as job_file.h promises,
// a NaN as any NaN).
// Every accepted request must read back from the scheduler byte for byte.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/message_differencer.h>
#include <spdlog/spdlog.h>

#include "client/job_file.h"
#include "server/core/job_store.h"
#include "server/core/scheduler.h"
#include "tests/fuzz/fuzz_file.h"
#include "tests/server/fake_executor.h"

namespace {

struct Daemon {
  mpsd::testing::FakeExecutor executor;
  std::unique_ptr<mpsd::server::JobStore> store;
  std::unique_ptr<mpsd::server::Scheduler> scheduler;
};

Daemon& TheDaemon() {
  static Daemon* daemon = [] {
    auto* d = new Daemon();
    mpsd::server::JobStore::Options store_options;
    store_options.path = mpsd::fuzz::ScratchDir() + "/mpsd.db";
    auto store = mpsd::server::JobStore::Open(store_options);
    if (!store.ok()) std::abort();
    d->store = *std::move(store);
    mpsd::server::Scheduler::Options options;
    options.max_queued = 1 << 30;
    auto scheduler = mpsd::server::Scheduler::Create(options, d->store.get(), &d->executor);
    if (!scheduler.ok()) std::abort();
    d->scheduler = *std::move(scheduler);
    // libFuzzer ends with exit(): static destructors then free spdlog's registry while the
    // scheduler's executor thread may still be logging the queued jobs' ends (a SEGV in
    // spdlog's sink, reported against an empty input). Joining that thread from an atexit
    // handler registered after the registry exists runs it before the registry's destructor.
    // The registry is libspdlog's, which the server logs through: this file is compiled with
    // SPDLOG_COMPILED_LIB (tests/fuzz/CMakeLists.txt); header-only, the call below made a
    // registry of its own, the server's was made at the first log, after the handler, and
    // destroyed first (a use-after-free in a job's last log line at exit, now and then).
    spdlog::default_logger_raw();
    std::atexit([] { TheDaemon().scheduler->Shutdown(); });
    return d;
  }();
  return *daemon;
}

void CheckJobFileRoundTrip(const mpsd::v1::SubmitJobRequest& request) {
  const std::string formatted = mpsd::client::FormatJobFile(request);
  if (formatted.empty()) return;  // No spec: nothing to write.
  absl::StatusOr<mpsd::v1::SubmitJobRequest> again =
      mpsd::client::ParseJobFile(formatted, "formatted.yaml");
  if (!again.ok()) {
    // A request a client could not have written as a job file (e.g. a string YAML cannot
    // hold) may be refused, but only with a message naming the problem.
    if (again.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return;
  }
  // Equal field by field, floats exactly; a NaN reads back as YAML's one .nan, so NaNs are
  // equal whatever their sign and payload bits.
  google::protobuf::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);
  google::protobuf::util::MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  if (!differencer.Compare(*again, request)) {
    std::fprintf(stderr, "job file round trip changed the request:\n%s\n", formatted.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mpsd::v1::SubmitJobRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  request.DiscardUnknownFields();
  Daemon& daemon = TheDaemon();
  absl::StatusOr<mpsd::v1::Job> job = daemon.scheduler->Submit(request);
  if (job.ok()) {
    absl::StatusOr<mpsd::v1::Job> stored = daemon.scheduler->Get(job->id());
    if (!stored.ok()) std::abort();
    // A repeated request_id returns the earlier job, whose spec is this request too.
    if (stored->spec().SerializeAsString() != request.SerializeAsString()) std::abort();
  } else if (job.status().code() != absl::StatusCode::kInvalidArgument &&
             job.status().code() != absl::StatusCode::kAlreadyExists) {
    std::fprintf(stderr, "Submit: %s\n", job.status().ToString().c_str());
    std::abort();
  }
  CheckJobFileRoundTrip(request);
  return 0;
}
