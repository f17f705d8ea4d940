// Tests for trainer/field_checks.cc: the messages every job field's check produces, with the
// field's path.
#include "trainer/field_checks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace mpsd::trainer {
namespace {

std::string Message(const absl::Status& status) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  return std::string(status.message());
}

TEST(FieldChecksTest, PathsNameTheFieldInItsMessage) {
  const FieldChecks job("train_job");
  EXPECT_EQ(job.Path("batch_size"), "train_job.batch_size");
  EXPECT_EQ(job.Path(""), "train_job");
  EXPECT_EQ(job.Sub("optimizer").Path("eps"), "train_job.optimizer.eps");
  EXPECT_EQ(Message(job.Sub("schedule").Error("", "bad")), "train_job.schedule: bad");
  EXPECT_EQ(Indexed("betas", 1), "betas[1]");
  EXPECT_EQ(KnownNames({"a", "b"}), "(known: a, b)");
}

TEST(FieldChecksTest, IntegerChecks) {
  const FieldChecks bench("bench_job");
  EXPECT_TRUE(bench.Positive("iters", 1).ok());
  EXPECT_EQ(Message(bench.Positive("iters", 0)), "bench_job.iters: must be > 0, got 0");
  EXPECT_TRUE(bench.AtLeast("warmup_iters", 0, 0).ok());
  EXPECT_EQ(Message(bench.AtLeast("warmup_iters", -1, 0)),
            "bench_job.warmup_iters: must be >= 0, got -1");
  EXPECT_TRUE(bench.InRange("cpu_threads", 4096, 1, 4096).ok());
  EXPECT_EQ(Message(bench.InRange("cpu_threads", 4097, 1, 4096)),
            "bench_job.cpu_threads: must be in [1, 4096], got 4097");
  EXPECT_EQ(*bench.PositiveOr("epochs", false, 0, 7), 7);
  EXPECT_EQ(*bench.PositiveOr("epochs", true, 3, 7), 3);
  EXPECT_EQ(Message(bench.PositiveOr("epochs", true, 0, 7).status()),
            "bench_job.epochs: must be > 0, got 0");
}

TEST(FieldChecksTest, DoubleChecksRejectNaNAndInfinity) {
  const FieldChecks job("train_job");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(job.PositiveFinite("lr", 0.5).ok());
  EXPECT_EQ(Message(job.PositiveFinite("lr", 0)), "train_job.lr: must be > 0, got 0");
  EXPECT_EQ(Message(job.PositiveFinite("lr", nan)), "train_job.lr: must be > 0, got nan");
  EXPECT_EQ(Message(job.PositiveFinite("lr", inf)), "train_job.lr: must be finite, got inf");
  EXPECT_TRUE(job.NonNegativeFinite("wd", 0).ok());
  EXPECT_EQ(Message(job.NonNegativeFinite("wd", -1)), "train_job.wd: must be >= 0, got -1");
  const Interval unit = {0, true, 1, false};
  EXPECT_TRUE(job.InRange("m", 0.0, unit).ok());
  EXPECT_EQ(Message(job.InRange("m", 1.0, unit)), "train_job.m: must be in [0, 1), got 1");
  EXPECT_EQ(Message(job.InRange("m", nan, unit)), "train_job.m: must be in [0, 1), got nan");
  EXPECT_EQ(Message(job.InRange("p", -0.5, Interval{0, false, 1, true})),
            "train_job.p: must be in (0, 1], got -0.5");
}

TEST(FieldChecksTest, NotForNamesWhoTakesTheField) {
  const FieldChecks optimizer("train_job.optimizer");
  EXPECT_EQ(Message(optimizer.NotFor("momentum", "sgd", "adam")),
            "train_job.optimizer.momentum: only sgd takes it, not adam");
  EXPECT_EQ(Message(optimizer.NotFor("eps", "adam and adamw", "sgd")),
            "train_job.optimizer.eps: only adam and adamw take it, not sgd");
}

}  // namespace
}  // namespace mpsd::trainer
