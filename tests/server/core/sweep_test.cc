// ExpandSweep: trial order, values set by the field's type, reproducible random draws, and
// errors that name the field.
#include "server/core/sweep.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mpsd::server {
namespace {

using mpsd::v1::SubmitJobRequest;
using mpsd::v1::SweepParameter;
using ::testing::HasSubstr;

SubmitJobRequest Base() {
  SubmitJobRequest request;
  request.mutable_train_job()->mutable_model()->set_name("mlp");
  request.mutable_train_job()->mutable_optimizer()->set_learning_rate(0.5);
  request.set_name("base");
  request.set_request_id("r1");
  request.set_priority(3);
  return request;
}

SweepParameter* Grid(SubmitJobRequest& request, const std::string& path,
                     const std::vector<std::string>& values) {
  SweepParameter* p = request.mutable_sweep()->add_grid();
  p->set_path(path);
  for (const std::string& v : values) p->add_values(v);
  return p;
}

// "0", "1", ..., the n distinct values of an integer grid.
std::vector<std::string> Numbers(int n) {
  std::vector<std::string> values;
  for (int i = 0; i < n; ++i) values.push_back(std::to_string(i));
  return values;
}

std::string Message(const absl::StatusOr<std::vector<SweepTrialRequest>>& trials) {
  return std::string(trials.status().message());
}

TEST(SweepTest, GridEnumeratesEveryCombinationFirstParameterSlowest) {
  SubmitJobRequest request = Base();
  Grid(request, "optimizer.learning_rate", {"0.1", "0.01", "0.001"});
  Grid(request, "batch_size", {"32", "64"});
  Grid(request, "model.name", {"convnet"});
  absl::StatusOr<std::vector<SweepTrialRequest>> trials = ExpandSweep(request);
  ASSERT_TRUE(trials.ok()) << trials.status();
  ASSERT_EQ(trials->size(), 6u);
  const double lrs[] = {0.1, 0.1, 0.01, 0.01, 0.001, 0.001};
  const int batches[] = {32, 64, 32, 64, 32, 64};
  for (int i = 0; i < 6; ++i) {
    const SweepTrialRequest& t = (*trials)[i];
    EXPECT_EQ(t.trial.index(), i);
    EXPECT_DOUBLE_EQ(t.request.train_job().optimizer().learning_rate(), lrs[i]);
    EXPECT_EQ(t.request.train_job().batch_size(), batches[i]);
    EXPECT_EQ(t.request.train_job().model().name(), "convnet");
    EXPECT_FALSE(t.request.has_sweep());
    EXPECT_TRUE(t.request.request_id().empty());
    EXPECT_EQ(t.request.priority(), 3);
    EXPECT_EQ(t.request.name(), "base/" + std::to_string(i));
    EXPECT_EQ(DescribeTrial(t.trial),
              "optimizer.learning_rate=" + request.sweep().grid(0).values(i / 2) +
                  ", batch_size=" + std::to_string(batches[i]) + ", model.name=convnet");
  }
}

SubmitJobRequest RandomRequest(uint64_t seed, int trials) {
  SubmitJobRequest request = Base();
  mpsd::v1::RandomSearch* random = request.mutable_sweep()->mutable_random();
  random->set_trials(trials);
  random->set_seed(seed);
  SweepParameter* lr = random->add_parameters();
  lr->set_path("optimizer.learning_rate");
  lr->add_log_uniform(1e-4);
  lr->add_log_uniform(1e-1);
  SweepParameter* momentum = random->add_parameters();
  momentum->set_path("optimizer.momentum");
  momentum->add_uniform(0.5);
  momentum->add_uniform(0.9);
  SweepParameter* batch = random->add_parameters();
  batch->set_path("batch_size");
  batch->add_uniform(16);
  batch->add_uniform(128);
  SweepParameter* optimizer = random->add_parameters();
  optimizer->set_path("optimizer.name");
  optimizer->add_choice("adam");
  optimizer->add_choice("sgd");
  return request;
}

TEST(SweepTest, RandomDrawsAreReproducibleFromTheSeedAndInRange) {
  auto a = ExpandSweep(RandomRequest(42, 50));
  auto b = ExpandSweep(RandomRequest(42, 50));
  auto c = ExpandSweep(RandomRequest(43, 50));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status();
  ASSERT_EQ(a->size(), 50u);
  std::set<std::string> names;
  bool differs = false;
  for (size_t i = 0; i < a->size(); ++i) {
    const auto& ja = (*a)[i].request.train_job();
    EXPECT_EQ(ja.optimizer().learning_rate(),
              (*b)[i].request.train_job().optimizer().learning_rate());
    EXPECT_EQ(ja.batch_size(), (*b)[i].request.train_job().batch_size());
    differs |=
        ja.optimizer().learning_rate() != (*c)[i].request.train_job().optimizer().learning_rate();
    EXPECT_GE(ja.optimizer().learning_rate(), 1e-4);
    EXPECT_LT(ja.optimizer().learning_rate(), 1e-1);
    EXPECT_GE(ja.optimizer().momentum(), 0.5);
    EXPECT_LT(ja.optimizer().momentum(), 0.9);
    EXPECT_GE(ja.batch_size(), 16);
    EXPECT_LE(ja.batch_size(), 128);
    names.insert(ja.optimizer().name());
    // The text shown is the value set.
    EXPECT_EQ(std::stod((*a)[i].trial.parameters(0).value()), ja.optimizer().learning_rate());
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(names, (std::set<std::string>{"adam", "sgd"}));
}

TEST(SweepTest, GridTimesRandomDrawsTrialsPerGridPoint) {
  SubmitJobRequest request = RandomRequest(1, 3);
  Grid(request, "epochs", {"1", "2"});
  auto trials = ExpandSweep(request);
  ASSERT_TRUE(trials.ok()) << trials.status();
  ASSERT_EQ(trials->size(), 6u);
  EXPECT_EQ((*trials)[2].request.train_job().epochs(), 1);
  EXPECT_EQ((*trials)[3].request.train_job().epochs(), 2);
}

// A random range beyond the integer field's: the drawn value is refused as out of range, as
// drawn, never wrapped around to a number the user never wrote (llround overflowed here).
TEST(SweepTest, AnIntegerRangeBeyondTheFieldIsRefusedAsDrawn) {
  SubmitJobRequest request = Base();
  mpsd::v1::RandomSearch* random = request.mutable_sweep()->mutable_random();
  random->set_trials(2);
  random->set_seed(7);
  SweepParameter* batch = random->add_parameters();
  batch->set_path("batch_size");
  batch->add_uniform(1e29);
  batch->add_uniform(1e30);
  const std::string message = Message(ExpandSweep(request));
  EXPECT_THAT(message, HasSubstr("is out of range for int32"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("-9223372036854775808")));
}

TEST(SweepTest, ErrorsNameTheField) {
  SubmitJobRequest request = Base();
  Grid(request, "optimizer.lr", {"0.1"});
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("sweep.grid[0].path: \"optimizer.lr\": OptimizerSpec has no field \"lr\""));

  request = Base();
  Grid(request, "optimizer.learning_rat", {"0.1"});
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("OptimizerSpec has no field \"learning_rat\" (did you mean "
                        "\"learning_rate\"?)"));
  // A field written without its message's prefix: the one message that has it is named.
  request = Base();
  Grid(request, "weight_decay", {"0.1"});
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("TrainJob has no field \"weight_decay\" (did you mean "
                        "\"optimizer.weight_decay\"?)"));
  request = Base();
  Grid(request, "learning_rate", {"0.1"});  // param_groups' is a list's: not a candidate
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("(did you mean \"optimizer.learning_rate\"?)"));

  request = Base();
  Grid(request, "batch_size", {"32", "sixty"});
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("sweep.grid[0].values[1] (batch_size): \"sixty\""));

  request = Base();
  Grid(request, "optimizer", {"x"});
  EXPECT_THAT(Message(ExpandSweep(request)), HasSubstr("is a message"));

  request = Base();
  Grid(request, "optimizer.betas", {"0.9"});
  EXPECT_THAT(Message(ExpandSweep(request)), HasSubstr("is a list"));

  request = Base();
  Grid(request, "batch_size", {"32"});
  Grid(request, "batch_size", {"64"});
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("sweep.grid[1].path: \"batch_size\" is swept twice"));

  request = Base();
  request.mutable_sweep();
  EXPECT_THAT(Message(ExpandSweep(request)), HasSubstr("sweep: no parameters"));

  request = RandomRequest(1, 0);
  EXPECT_THAT(Message(ExpandSweep(request)), HasSubstr("sweep.random.trials: must be >= 1"));

  request = RandomRequest(1, 2);
  request.mutable_sweep()->mutable_random()->mutable_parameters(0)->set_log_uniform(0, -1);
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("sweep.random.parameters[0].log_uniform (optimizer.learning_rate): low "
                        "must be > 0"));

  request = RandomRequest(1, 2);
  request.mutable_sweep()->mutable_random()->mutable_parameters(1)->set_uniform(1, 0.1);
  EXPECT_THAT(
      Message(ExpandSweep(request)),
      HasSubstr(
          "sweep.random.parameters[1].uniform (optimizer.momentum): expected [low, high] with "
          "low < high"));

  request = RandomRequest(1, 2);
  request.mutable_sweep()->mutable_random()->mutable_parameters(3)->add_uniform(1);
  EXPECT_THAT(Message(ExpandSweep(request)), HasSubstr("set exactly one of"));

  request = RandomRequest(1, 2);
  request.mutable_sweep()->mutable_random()->mutable_parameters(3)->clear_choice();
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("sweep.random.parameters[3] (optimizer.name): set exactly one of values, "
                        "choice, uniform, log_uniform (an empty list sets none)"));
  request = RandomRequest(1, 2);
  request.mutable_sweep()->mutable_random()->mutable_parameters(1)->add_uniform(0.95);
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("sweep.random.parameters[1].uniform (optimizer.momentum): expected [low, "
                        "high], two numbers, got 3 number(s)"));

  request = Base();
  Grid(request, "seed", Numbers(1001));
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("sweep: 1001 trials (1001: grid values per parameter), more than the "
                        "1000 a sweep may have"));
  request = RandomRequest(1, 2);
  Grid(request, "seed", Numbers(4));
  request.mutable_sweep()->mutable_random()->set_trials(300);
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("sweep: 1200 trials (4 × 300: grid values per parameter × "
                        "random.trials), more than the 1000 a sweep may have"));

  request = Base();
  Grid(request, "batch_size", {});
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("sweep.grid[0] (batch_size): no values; a grid parameter takes a "
                        "non-empty list of them"));

  // A repeated grid value, also written another way, would train one trial twice.
  request = Base();
  Grid(request, "optimizer.learning_rate", {"0.01", "0.1", "1e-2"});
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("sweep.grid[0].values[2] (optimizer.learning_rate): \"1e-2\" is the "
                        "value of values[0] (\"0.01\") again; a grid trains each value once"));
}

TEST(SweepTest, FusionSettingsAreReadAndNonsenseIsRefusedNamingTheField) {
  mpsd::v1::SweepSpec sweep;
  for (const char* off : {"off", "false"}) {
    sweep.set_fuse(off);
    absl::StatusOr<SweepFusion> fusion = ReadSweepFusion(sweep);
    ASSERT_TRUE(fusion.ok()) << off << ": " << fusion.status();
    EXPECT_EQ(fusion->max_trials, 1) << off;
  }
  sweep.set_fuse("8");
  EXPECT_EQ(ReadSweepFusion(sweep)->max_trials, 8);
  for (const char* bad : {"0", "1", "65", "-2", "many"}) {
    sweep.set_fuse(bad);
    EXPECT_THAT(std::string(ReadSweepFusion(sweep).status().message()),
                HasSubstr("sweep.fuse: must be auto, off or a number of trials in [2, 64]"))
        << bad;
  }
  // A shared order means nothing when every trial runs alone.
  sweep.set_fuse("off");
  sweep.set_data_order("shared");
  EXPECT_THAT(std::string(ReadSweepFusion(sweep).status().message()),
              HasSubstr("sweep.data_order: shared is for trials trained fused"));
  sweep.set_data_order("per_trial");
  EXPECT_TRUE(ReadSweepFusion(sweep).ok());
}

TEST(SweepTest, FusionSettingsOnASweepOfAnotherJobKindAreRefused) {
  SubmitJobRequest request;
  request.mutable_bench_job()->add_models("mlp");
  Grid(request, "iters", {"5", "10"});
  for (const char* field : {"fuse", "data_order"}) {
    SubmitJobRequest with = request;
    if (std::string(field) == "fuse") {
      with.mutable_sweep()->set_fuse("auto");
    } else {
      with.mutable_sweep()->set_data_order("per_trial");
    }
    EXPECT_EQ(Message(ExpandSweep(with)),
              absl::StrCat("sweep.", field,
                           ": only a TrainJob's trials are trained fused; leave it out here"));
  }
}

// sweep.scheduler is read against the trials' epochs, the largest of them when epochs is swept
// (a trial of fewer epochs simply ends sooner); only a TrainJob's trials take it.
TEST(SweepTest, TheSchedulerIsCheckedAgainstTheTrialsEpochs) {
  SubmitJobRequest request = Base();
  Grid(request, "optimizer.learning_rate", {"0.1", "0.01"});
  mpsd::v1::SweepScheduler* scheduler = request.mutable_sweep()->mutable_scheduler();
  scheduler->set_type("asha");
  scheduler->set_metric("val_loss");
  // epochs unset: 1, its default: no epoch before the last to stop a trial at.
  EXPECT_THAT(Message(ExpandSweep(request)),
              HasSubstr("sweep.scheduler.grace_period: 1 leaves no epoch to stop a trial at"));
  request.mutable_train_job()->set_epochs(2);
  EXPECT_TRUE(ExpandSweep(request).ok());
  scheduler->set_grace_period(2);
  EXPECT_THAT(Message(ExpandSweep(request)), HasSubstr("sweep.scheduler.grace_period: 2 leaves"));
  Grid(request, "epochs", {"1", "3"});
  absl::StatusOr<std::vector<SweepTrialRequest>> trials = ExpandSweep(request);
  ASSERT_TRUE(trials.ok()) << trials.status();
  EXPECT_EQ(MaxTrialEpochs(*trials), 3);
  EXPECT_FALSE(trials->front().request.has_sweep());
  scheduler->set_reduction_factor(1);
  EXPECT_EQ(Message(ExpandSweep(request)), "sweep.scheduler.reduction_factor: must be >= 2, got 1");

  // median_stopping with fewer other trials than min_samples_required could never stop one.
  SubmitJobRequest median = Base();
  median.mutable_train_job()->set_epochs(4);
  Grid(median, "optimizer.learning_rate", {"0.1", "0.01", "0.001"});
  median.mutable_sweep()->mutable_scheduler()->set_type("median_stopping");
  median.mutable_sweep()->mutable_scheduler()->set_metric("val_loss");
  EXPECT_THAT(Message(ExpandSweep(median)),
              HasSubstr("sweep.scheduler.min_samples_required: median_stopping judges a trial "
                        "only against 3 or more other trials (min_samples_required, default 3), "
                        "and this sweep has 3 trial(s), so it would never stop one"));
  median.mutable_sweep()->mutable_scheduler()->set_min_samples_required(2);
  EXPECT_TRUE(ExpandSweep(median).ok());

  SubmitJobRequest bench;
  bench.mutable_bench_job()->add_models("mlp");
  Grid(bench, "iters", {"5", "10"});
  bench.mutable_sweep()->mutable_scheduler()->set_type("asha");
  EXPECT_THAT(Message(ExpandSweep(bench)),
              HasSubstr("sweep.scheduler: only a TrainJob's trials report epochs"));
}

}  // namespace
}  // namespace mpsd::server
