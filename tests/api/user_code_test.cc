// api/user_code.h: which files of a job are user code, the first one and all of them.
#include "api/user_code.h"

#include "gtest/gtest.h"

namespace mpsd::api {
namespace {

TEST(UserCodeTest, ATrainJobsModelLossAndMetricsAreAllUserCodeInCheckOrder) {
  v1::SubmitJobRequest request;
  v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_model()->set_name("mlp");
  EXPECT_FALSE(UserCodeOf(request).has_value());
  EXPECT_TRUE(AllUserCodeOf(request).empty());
  job.mutable_loss()->set_torchscript("/d/loss.pt");
  job.add_metrics()->set_name("builtin_like");  // no file: not user code
  v1::MetricSpec* hang = job.add_metrics();
  hang->set_name("hang");
  hang->set_torchscript("/d/hang.pt");
  ASSERT_TRUE(UserCodeOf(request).has_value());
  EXPECT_EQ(UserCodeOf(request)->field, "train_job.loss.torchscript");
  const std::vector<UserCode> all = AllUserCodeOf(request);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].field, "train_job.loss.torchscript");
  EXPECT_EQ(all[1].field, "train_job.metrics[1].torchscript");
  EXPECT_EQ(all[1].path, "/d/hang.pt");
}

TEST(UserCodeTest, OtherKindsHaveAtMostTheirOne) {
  v1::SubmitJobRequest eval;
  eval.mutable_eval_job()->set_model("/d/model.pt");
  ASSERT_EQ(AllUserCodeOf(eval).size(), 1u);
  EXPECT_EQ(AllUserCodeOf(eval)[0].field, "eval_job.model");
  eval.mutable_eval_job()->set_model("12");  // a job id: the daemon's own model
  EXPECT_TRUE(AllUserCodeOf(eval).empty());
}

}  // namespace
}  // namespace mpsd::api
