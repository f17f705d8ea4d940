// Tests for trainer/early_stopping.h (torch-free): Keras' and Lightning's improvement rule
// (min_delta, mode) and patience on scripted metric sequences. Which epoch metric a monitor reads:
// tests/api/epoch_metric_test.cc.
#include "trainer/early_stopping.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace mpsd::trainer {
namespace {

// Feeds values for epochs 1, 2, …; returns the epoch after which training stops (0: never).
int StopEpoch(EarlyStopping& stopping, const std::vector<double>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (stopping.Observe(static_cast<int>(i) + 1, values[i]).stop) return static_cast<int>(i) + 1;
  }
  return 0;
}

TEST(EarlyStoppingTest, StopsAfterPatienceEpochsWithoutImprovementAndKeepsTheBest) {
  EarlyStoppingConfig config;
  config.patience = 2;
  EarlyStopping stopping(config);  // val_loss, min
  // Best at epoch 3 (0.5); epochs 4 and 5 do not improve: stop after 5.
  EXPECT_EQ(StopEpoch(stopping, {1.0, 0.8, 0.5, 0.6, 0.5, 0.1}), 5);
  EXPECT_EQ(stopping.best_epoch(), 3);
  EXPECT_EQ(stopping.best_value(), 0.5);
}

TEST(EarlyStoppingTest, AnImprovementResetsThePatience) {
  EarlyStoppingConfig config;
  config.patience = 2;
  EarlyStopping stopping(config);
  EXPECT_EQ(StopEpoch(stopping, {1.0, 1.1, 0.9, 1.0, 0.8, 0.85}), 0);
  EXPECT_EQ(stopping.best_epoch(), 5);
}

TEST(EarlyStoppingTest, MinDeltaAndModeMaxAsKeras) {
  EarlyStoppingConfig config;
  config.monitor = "val_accuracy";
  config.maximize = true;
  config.patience = 1;
  config.min_delta = 0.01;
  EarlyStopping stopping(config);
  EXPECT_TRUE(stopping.Observe(1, 0.50).improved);
  EXPECT_TRUE(stopping.Observe(2, 0.52).improved);                   // 0.52 > 0.50 + 0.01
  const EarlyStopping::Decision small = stopping.Observe(3, 0.525);  // not by more than 0.01
  EXPECT_FALSE(small.improved);
  EXPECT_TRUE(small.stop);
  EXPECT_EQ(stopping.best_epoch(), 2);
}

TEST(EarlyStoppingTest, ANanNeverImproves) {
  EarlyStoppingConfig config;
  config.patience = 1;
  EarlyStopping stopping(config);
  const EarlyStopping::Decision first = stopping.Observe(1, std::nan(""));
  EXPECT_FALSE(first.improved);
  EXPECT_TRUE(first.stop);
  EXPECT_EQ(stopping.best_epoch(), 0);
}

// The note agrees with EarlyStopping itself: for each schedule of evaluated epochs, a metric
// that never improves stops before the last epoch exactly when no note is given.
TEST(EarlyStoppingTest, TheReachNoteSaysWhenPatienceCannotEndTheJobEarly) {
  for (int patience = 1; patience <= 3; ++patience) {
    for (int epochs = 1; epochs <= 7; ++epochs) {
      for (int every = 1; every <= 3; ++every) {
        EarlyStoppingConfig config;
        config.enabled = true;
        config.patience = patience;
        EarlyStopping stopping(config);
        int stopped = 0;
        for (int epoch = 1; epoch <= epochs && stopped == 0; ++epoch) {
          if (epoch % every != 0 && epoch != epochs) continue;  // not evaluated
          if (stopping.Observe(epoch, 1.0).stop) stopped = epoch;
        }
        const bool early = stopped != 0 && stopped < epochs;
        EXPECT_EQ(EarlyStoppingReachNote(config, epochs, every).empty(), early)
            << "patience " << patience << ", epochs " << epochs << ", every " << every;
      }
    }
  }
  EarlyStoppingConfig config;
  config.enabled = true;
  config.patience = 2;
  EXPECT_EQ(EarlyStoppingReachNote(config, 3, 5),
            "early stopping cannot end this job early: 1 of its 3 epoch(s) is evaluated "
            "(eval_every_epochs 5), and patience 2 needs at least 4; the best epoch is still kept");
  config.enabled = false;
  EXPECT_EQ(EarlyStoppingReachNote(config, 3, 5), "");
}

}  // namespace
}  // namespace mpsd::trainer
