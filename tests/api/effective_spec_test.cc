// api/effective_spec.h: the defaults written out, the fields that depend on others, and that a
// field already set is kept and a second application changes nothing.
#include "api/effective_spec.h"

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace mpsd::api {
namespace {

using google::protobuf::util::MessageDifferencer;

v1::SubmitJobRequest TrainJob(const std::string& optimizer, const std::string& schedule) {
  v1::SubmitJobRequest request;
  v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_model()->set_name("convnet");
  job.mutable_dataset()->set_name("fashion-mnist");
  if (!optimizer.empty()) job.mutable_optimizer()->set_name(optimizer);
  if (!schedule.empty()) job.mutable_schedule()->set_name(schedule);
  return request;
}

TEST(EffectiveSpecTest, AnEmptyTrainJobGetsTheDocumentedDefaults) {
  const v1::TrainJob job = EffectiveSpec(TrainJob("", "")).train_job();
  EXPECT_EQ(job.batch_size(), 64);
  EXPECT_EQ(job.epochs(), 1);
  EXPECT_EQ(job.device(), "auto");
  EXPECT_EQ(job.precision(), "fp32");
  EXPECT_EQ(job.task(), "classification");
  EXPECT_EQ(job.loss().type(), "cross_entropy");
  EXPECT_EQ(job.optimizer().name(), "adam");
  EXPECT_DOUBLE_EQ(job.optimizer().learning_rate(), 1e-3);
  ASSERT_EQ(job.optimizer().betas_size(), 2);
  EXPECT_DOUBLE_EQ(job.optimizer().betas(1), 0.999);
  EXPECT_EQ(job.schedule().name(), "constant");
  EXPECT_EQ(job.dataset().subset(), "stratified");
  EXPECT_EQ(job.evaluate_test(), "every_epoch");
}

TEST(EffectiveSpecTest, DefaultsThatDependOnAnotherFieldFollowIt) {
  const v1::TrainJob sgd = EffectiveSpec(TrainJob("sgd", "")).train_job();
  EXPECT_DOUBLE_EQ(sgd.optimizer().learning_rate(), 1e-2);  // torch.optim.SGD's
  EXPECT_EQ(sgd.optimizer().betas_size(), 0);               // SGD has none
  const v1::TrainJob adamw = EffectiveSpec(TrainJob("adamw", "")).train_job();
  EXPECT_DOUBLE_EQ(adamw.optimizer().weight_decay(), 1e-2);
  v1::SubmitJobRequest onecycle = TrainJob("sgd", "onecycle");
  onecycle.mutable_train_job()->mutable_optimizer()->set_learning_rate(0.05);
  const v1::TrainJob one = EffectiveSpec(onecycle).train_job();
  EXPECT_DOUBLE_EQ(one.schedule().max_lr(), 0.05);
  EXPECT_DOUBLE_EQ(one.schedule().pct_start(), 0.3);  // OneCycleLR's
  EXPECT_FALSE(one.schedule().has_gamma());           // step's key, not onecycle's
  v1::SubmitJobRequest regression = TrainJob("", "");
  regression.mutable_train_job()->set_task("regression");
  EXPECT_EQ(EffectiveSpec(regression).train_job().loss().type(), "mse");
  v1::SubmitJobRequest own_loss = TrainJob("", "");
  own_loss.mutable_train_job()->mutable_loss()->set_torchscript("/data/loss.pt");
  EXPECT_EQ(EffectiveSpec(own_loss).train_job().loss().type(), "");  // the user's, not ours
  v1::SubmitJobRequest validated = TrainJob("", "");
  validated.mutable_train_job()->mutable_dataset()->mutable_validation()->set_fraction(0.1);
  EXPECT_EQ(EffectiveSpec(validated).train_job().evaluate_test(), "end");
  // Early stopping's mode follows its monitor's known direction; a job's own metric gets none.
  const auto mode_for = [](const std::string& monitor) {
    v1::SubmitJobRequest request = TrainJob("", "");
    request.mutable_train_job()->mutable_early_stopping()->set_monitor(monitor);
    return EffectiveSpec(request).train_job().early_stopping().mode();
  };
  EXPECT_EQ(mode_for("val_loss"), "min");
  EXPECT_EQ(mode_for("val_r2"), "max");
  EXPECT_EQ(mode_for("val_mae"), "min");
  EXPECT_EQ(mode_for("val_top2"), "");
}

// The user's own loss takes no type or settings, so it gets none (the trainer refuses a loss with
// both); the user's metrics reduce as a mean unless they say otherwise.
TEST(EffectiveSpecTest, TheUsersLossGetsNoTypeAndTheirMetricsAMeanReduction) {
  v1::SubmitJobRequest request = TrainJob("", "");
  request.mutable_train_job()->mutable_loss()->set_torchscript("/losses/focal.pt");
  request.mutable_train_job()->add_metrics()->set_name("top2");
  v1::MetricSpec* count = request.mutable_train_job()->add_metrics();
  count->set_name("count");
  count->set_reduction("sum");
  const v1::TrainJob job = EffectiveSpec(request).train_job();
  EXPECT_EQ(job.loss().type(), "");
  EXPECT_FALSE(job.loss().has_beta());
  EXPECT_EQ(job.loss().torchscript(), "/losses/focal.pt");
  EXPECT_EQ(job.metrics(0).reduction(), "mean");
  EXPECT_EQ(job.metrics(1).reduction(), "sum");
}

TEST(EffectiveSpecTest, SetFieldsAreKeptAndASecondApplicationChangesNothing) {
  v1::SubmitJobRequest request = TrainJob("adamw", "cosine");
  v1::TrainJob& job = *request.mutable_train_job();
  job.set_batch_size(7);
  job.mutable_optimizer()->set_learning_rate(0.5);
  job.mutable_optimizer()->set_weight_decay(0);  // adamw's default is 0.01
  const v1::SubmitJobRequest once = EffectiveSpec(request);
  EXPECT_EQ(once.train_job().batch_size(), 7);
  EXPECT_DOUBLE_EQ(once.train_job().optimizer().learning_rate(), 0.5);
  EXPECT_DOUBLE_EQ(once.train_job().optimizer().weight_decay(), 0);
  EXPECT_TRUE(MessageDifferencer::Equals(EffectiveSpec(once), once));
  v1::SubmitJobRequest bench;
  bench.mutable_bench_job();
  EXPECT_TRUE(
      MessageDifferencer::Equals(EffectiveSpec(EffectiveSpec(bench)), EffectiveSpec(bench)));
}

TEST(EffectiveSpecTest, BenchAndEvalJobsGetTheirs) {
  v1::SubmitJobRequest bench;
  bench.mutable_bench_job();
  const v1::BenchJob b = EffectiveSpec(bench).bench_job();
  EXPECT_EQ(b.mode(), "inference");
  EXPECT_EQ(b.iters(), 20);
  ASSERT_EQ(b.precisions_size(), 1);
  EXPECT_EQ(b.precisions(0), "fp32");
  v1::SubmitJobRequest eval;
  eval.mutable_eval_job();
  EXPECT_EQ(EffectiveSpec(eval).eval_job().split(), "test");
  // Its default is the evaluated TrainJob's batch_size, which the executor reads from model.json.
  EXPECT_FALSE(EffectiveSpec(eval).eval_job().has_batch_size());
}

}  // namespace
}  // namespace mpsd::api
