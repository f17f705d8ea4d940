// Tests trainer/fault_injection.cc: which specs are accepted, and that the sink wrapper leaves
// a job without a fault alone. (The faults themselves kill or hang the process: they are tested
// end to end, against a real executor process, in tests/e2e/executor_e2e_test.cc.)
#include "trainer/fault_injection.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mpsd::trainer {
namespace {

using ::testing::HasSubstr;

mpsd::v1::SubmitJobRequest TrainWithFault(const std::string& kind, int64_t at_step) {
  mpsd::v1::SubmitJobRequest spec;
  spec.mutable_train_job()->mutable_fault_injection()->set_kind(kind);
  spec.mutable_train_job()->mutable_fault_injection()->set_at_step(at_step);
  return spec;
}

TEST(FaultInjectionTest, NoFaultIsAlwaysAccepted) {
  mpsd::v1::SubmitJobRequest spec;
  spec.mutable_train_job()->set_epochs(1);
  EXPECT_TRUE(CheckFaultInjection(spec, /*allowed=*/false).ok());
  EXPECT_TRUE(CheckFaultInjection(spec, /*allowed=*/true).ok());
}

TEST(FaultInjectionTest, AFaultNeedsTheDaemonsFlag) {
  const absl::Status status = CheckFaultInjection(TrainWithFault("abort", 3), false);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("train_job.fault_injection: accepted only when mpsd "
                                          "runs with --enable-fault-injection"));
  mpsd::v1::SubmitJobRequest bench;
  bench.mutable_bench_job()->mutable_fault_injection()->set_kind("hang");
  EXPECT_THAT(CheckFaultInjection(bench, false).message(),
              HasSubstr("bench_job.fault_injection: accepted only"));
}

TEST(FaultInjectionTest, KindsAndStepsAreChecked) {
  for (const std::string kind : {"abort", "segfault", "allocate_unbounded", "hang", "nan_loss"}) {
    EXPECT_TRUE(CheckFaultInjection(TrainWithFault(kind, 0), true).ok()) << kind;
  }
  EXPECT_THAT(CheckFaultInjection(TrainWithFault("explode", 1), true).message(),
              HasSubstr("train_job.fault_injection.kind: expected abort, segfault, "
                        "allocate_unbounded, hang, segfault_in_check or (train_job) nan_loss, got "
                        "\"explode\""));
  EXPECT_THAT(CheckFaultInjection(TrainWithFault("abort", -1), true).message(),
              HasSubstr("train_job.fault_injection.at_step: must be >= 0"));
}

TEST(FaultInjectionTest, WithoutAFaultTheSinkPassesEveryEventOn) {
  std::vector<int64_t> steps;
  const EventSink sink = WithFaultInjection(
      mpsd::v1::SubmitJobRequest(), "cpu",
      [&steps](mpsd::v1::JobEvent event) { steps.push_back(event.step().step()); });
  for (int64_t step = 1; step <= 3; ++step) {
    mpsd::v1::JobEvent event;
    event.mutable_step()->set_step(step);
    sink(event);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3}));
}

}  // namespace
}  // namespace mpsd::trainer
