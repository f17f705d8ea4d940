// DataRoots and uploads: upload:NAME resolves to the submitter's own area for every path field,
// and the check lets a job read its own submitter's uploads (an admin's: anyone's), refusing
// another's with the same message whether it exists. Real directories in a temp dir.
#include "server/access/data_roots.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "api/error_cause.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace mpsd::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class DataRootsUploadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = std::filesystem::weakly_canonical(dir_.path() / "state").string();
    std::filesystem::create_directories(state_ + "/uploads/alice/ds");
    std::filesystem::create_directories(state_ + "/uploads/alice/models");
    std::ofstream(state_ + "/uploads/alice/net.pt") << "x";
    std::filesystem::create_directories(dir_.path() / "data");
  }
  mpsd::testing::TempDir dir_;
  std::string state_;
};

TEST_F(DataRootsUploadsTest, EveryPathFieldResolvesToTheSubmittersArea) {
  DataRoots roots({(dir_.path() / "data").string()}, state_);
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::TrainJob* job = request.mutable_train_job();
  job->mutable_dataset()->set_root("upload:ds");
  job->mutable_model()->set_torchscript("upload:models/net.pt");
  job->mutable_model()->set_weights("upload:@bob/w.pt");
  job->set_resume_from("12");
  ASSERT_TRUE(roots.ResolveUploads(&request, "alice").ok());
  EXPECT_EQ(job->dataset().root(), state_ + "/uploads/alice/ds");
  EXPECT_EQ(job->model().torchscript(), state_ + "/uploads/alice/models/net.pt");
  EXPECT_EQ(job->model().weights(), state_ + "/uploads/bob/w.pt");
  EXPECT_EQ(job->resume_from(), "12");  // Not an upload: as it was.
  EXPECT_FALSE(job->has_loss());        // None given, none made (mpsctl get showed `loss: {}`).

  mpsd::v1::SubmitJobRequest bench;
  bench.mutable_bench_job()->add_models("resnet18");
  bench.mutable_bench_job()->add_models("upload:net.pt");
  ASSERT_TRUE(roots.ResolveUploads(&bench, "alice").ok());
  EXPECT_EQ(bench.bench_job().models(0), "resnet18");
  EXPECT_EQ(bench.bench_job().models(1), state_ + "/uploads/alice/net.pt");

  mpsd::v1::SubmitJobRequest bad;
  bad.mutable_train_job()->set_resume_from("upload:../x");
  absl::Status status = roots.ResolveUploads(&bad, "alice");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(api::InvalidFieldOf(status), "train_job.resume_from");

  // One's own upload that is not there is named as such (not as a state dir path); another
  // submitter's resolves either way (CheckPath refuses it without saying whether it exists).
  mpsd::v1::SubmitJobRequest missing;
  missing.mutable_train_job()->mutable_dataset()->set_root("upload:nope/train");
  status = roots.ResolveUploads(&missing, "alice");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(api::InvalidFieldOf(status), "train_job.dataset.root");
  EXPECT_EQ(status.message(),
            "train_job.dataset.root: upload:nope/train: you have no upload "
            "named \"nope\" (mpsctl uploads lists yours)");
  missing.mutable_train_job()->mutable_dataset()->set_root("upload:@bob/nope");
  EXPECT_TRUE(roots.ResolveUploads(&missing, "alice").ok());
}

TEST_F(DataRootsUploadsTest, OwnUploadsOnlyAndAdminAll) {
  // The state dir under a root (the daemon user's home, say): still refused but for uploads.
  DataRoots roots({dir_.path().string()}, state_);
  const Principal alice{"alice", Role::kSubmitter}, bob{"bob", Role::kSubmitter},
      admin{"root", Role::kAdmin};
  const std::string ds = state_ + "/uploads/alice/ds";
  const std::string none = state_ + "/uploads/alice/none";
  EXPECT_TRUE(roots.CheckPath("f", ds, &alice).ok());
  EXPECT_TRUE(roots.CheckPath("f", ds, &admin).ok());
  EXPECT_TRUE(roots.CheckPath("f", dir_.path().string() + "/data", &bob).ok());
  absl::Status exists = roots.CheckPath("f", ds, &bob);
  absl::Status missing = roots.CheckPath("f", none, &bob);
  EXPECT_EQ(exists.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(exists.message(), HasSubstr("f: \"upload:@alice/ds\" is another submitter's "
                                          "upload: a job may read only its submitter's uploads"));
  EXPECT_THAT(exists.message(), Not(HasSubstr(state_)));
  EXPECT_EQ(absl::StrReplaceAll(exists.message(), {{"/ds\"", "/X\""}}),
            absl::StrReplaceAll(missing.message(), {{"/none\"", "/X\""}}));
  // No principal (and the rest of the state dir) reads no uploads.
  EXPECT_EQ(roots.CheckPath("f", ds).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(roots.CheckPath("f", state_ + "/uploads", &alice).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(roots.CheckPath("f", state_ + "/mpsd.db", &admin).code(),
            absl::StatusCode::kPermissionDenied);
  // A symlink inside an upload that leads to another's is refused as its target would be.
  std::filesystem::create_directories(state_ + "/uploads/bob/mine");
  std::filesystem::create_symlink(ds, state_ + "/uploads/bob/mine/link");
  EXPECT_EQ(roots.CheckTree("f", state_ + "/uploads/bob/mine", &bob).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(roots.CheckTree("f", state_ + "/uploads/bob/mine", &admin).ok());
}

// An EvalJob's model and dataset, and a PredictJob's model and inputs, are paths like a TrainJob's:
// uploads resolve to the submitter's area, and each must lie under a root (a job id is no path).
TEST_F(DataRootsUploadsTest, EvalAndPredictJobPathsAreCheckedLikeATrainJobs) {
  DataRoots roots({(dir_.path() / "data").string()}, state_);
  const Principal alice{"alice", Role::kSubmitter};
  const std::string outside = (dir_.path() / "elsewhere").string();
  std::filesystem::create_directories(outside);

  mpsd::v1::SubmitJobRequest eval;
  eval.mutable_eval_job()->set_model("upload:models/model.pt");
  eval.mutable_eval_job()->mutable_dataset()->set_root("upload:ds");
  ASSERT_TRUE(roots.ResolveUploads(&eval, "alice").ok());
  EXPECT_EQ(eval.eval_job().model(), state_ + "/uploads/alice/models/model.pt");
  EXPECT_EQ(eval.eval_job().dataset().root(), state_ + "/uploads/alice/ds");
  EXPECT_TRUE(roots.Check(eval, &alice).ok());
  eval.mutable_eval_job()->mutable_dataset()->set_root(outside);
  absl::Status status = roots.Check(eval, &alice);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("eval_job.dataset.root: \"" + outside + "\""));
  eval.mutable_eval_job()->mutable_dataset()->set_root("");
  eval.mutable_eval_job()->set_model("7");  // a job id: the scheduler checks it
  eval.mutable_eval_job()->mutable_dataset()->set_name("mnist");
  status = roots.Check(eval, &alice);  // the default root, /usr/share/datasets/mnist
  EXPECT_THAT(status.message(), HasSubstr("eval_job.dataset.root (default)"));
  eval.mutable_eval_job()->mutable_dataset()->set_name("synthetic");
  EXPECT_TRUE(roots.Check(eval, &alice).ok());

  mpsd::v1::SubmitJobRequest predict;
  predict.mutable_predict_job()->set_model("7");
  predict.mutable_predict_job()->add_inputs("upload:ds");
  predict.mutable_predict_job()->add_inputs(outside + "/shoe.png");
  ASSERT_TRUE(roots.ResolveUploads(&predict, "alice").ok());
  EXPECT_EQ(predict.predict_job().inputs(0), state_ + "/uploads/alice/ds");
  status = roots.Check(predict, &alice);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("predict_job.inputs[1]: \"" + outside + "/shoe.png\""));
  predict.mutable_predict_job()->set_inputs(1, (dir_.path() / "data" / "shoe.png").string());
  EXPECT_TRUE(roots.Check(predict, &alice).ok());
  predict.mutable_predict_job()->set_model(outside + "/model.pt");
  EXPECT_THAT(roots.Check(predict, &alice).message(), HasSubstr("predict_job.model: "));
}

// A relative path over TCP names nothing the submitter can know (the daemon's working
// directory): refused as such, naming the field, even where it would resolve under a root.
TEST_F(DataRootsUploadsTest, RelativePathsAreRefusedNamingTheField) {
  DataRoots roots({(dir_.path() / "data").string(), "/"}, state_);
  const Principal alice{"alice", Role::kSubmitter};
  mpsd::v1::SubmitJobRequest train;
  train.mutable_train_job()->mutable_dataset()->set_name("fashion-mnist");
  train.mutable_train_job()->mutable_dataset()->set_root("data/fmnist");
  absl::Status status = roots.Check(train, &alice);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "train_job.dataset.root: \"data/fmnist\" is a relative path: a job submitted over "
            "TCP must name absolute paths");
  EXPECT_EQ(api::InvalidFieldOf(status), "train_job.dataset.root");
  train.mutable_train_job()->mutable_dataset()->set_root((dir_.path() / "data").string());
  train.mutable_train_job()->mutable_model()->set_torchscript("../net.pt");
  EXPECT_THAT(roots.Check(train, &alice).message(),
              HasSubstr("train_job.model.torchscript: \"../net.pt\" is a relative path"));
  train.mutable_train_job()->mutable_model()->clear_torchscript();
  train.mutable_train_job()->mutable_loss()->set_torchscript("focal.pt");
  EXPECT_THAT(roots.Check(train, &alice).message(),
              HasSubstr("train_job.loss.torchscript: \"focal.pt\" is a relative path"));
  // A loss file is held to the roots as a model is.
  train.mutable_train_job()->mutable_loss()->set_torchscript("/etc/focal.pt");
  DataRoots narrow({(dir_.path() / "data").string()}, state_);
  EXPECT_EQ(narrow.Check(train, &alice).code(), absl::StatusCode::kPermissionDenied);
  train.mutable_train_job()->mutable_loss()->set_torchscript("upload:net.pt");
  ASSERT_TRUE(narrow.ResolveUploads(&train, "alice").ok());
  EXPECT_EQ(train.train_job().loss().torchscript(), state_ + "/uploads/alice/net.pt");
  EXPECT_TRUE(narrow.Check(train, &alice).ok());
  // So are the metrics' files, each named by its index.
  train.mutable_train_job()->add_metrics()->set_torchscript("upload:net.pt");
  train.mutable_train_job()->add_metrics()->set_torchscript("count.pt");
  ASSERT_TRUE(narrow.ResolveUploads(&train, "alice").ok());
  EXPECT_EQ(train.train_job().metrics(0).torchscript(), state_ + "/uploads/alice/net.pt");
  status = narrow.Check(train, &alice);
  EXPECT_THAT(status.message(),
              HasSubstr("train_job.metrics[1].torchscript: \"count.pt\" is a relative path"));
  EXPECT_EQ(api::InvalidFieldOf(status), "train_job.metrics[1].torchscript");
  train.mutable_train_job()->mutable_metrics(1)->set_torchscript("/etc/count.pt");
  EXPECT_EQ(narrow.Check(train, &alice).code(), absl::StatusCode::kPermissionDenied);
  train.mutable_train_job()->mutable_metrics(1)->set_torchscript(
      (dir_.path() / "data" / "count.pt").string());
  EXPECT_TRUE(narrow.Check(train, &alice).ok());
}

}  // namespace
}  // namespace mpsd::server
