// A job's summary (job_summary.h).
#include "trainer/job_summary.h"

#include <algorithm>
#include <utility>

namespace mpsd::trainer {

void SetMemoryBefore(const api::MemoryFigures& before, mpsd::v1::MemoryStats& stats) {
  stats.set_allocated_before_bytes(before.allocated_bytes);
  stats.set_reserved_before_bytes(before.reserved_bytes);
}

void SetMemoryAfter(const api::MemoryFigures& after, mpsd::v1::MemoryStats& stats) {
  stats.set_allocated_after_bytes(after.allocated_bytes);
  stats.set_reserved_after_bytes(after.reserved_bytes);
  stats.set_peak_reserved_bytes(
      std::max({stats.peak_reserved_bytes(), after.peak_reserved_bytes,
                stats.reserved_before_bytes(), stats.reserved_after_bytes()}));
}

void SummaryBuilder::Observe(const mpsd::v1::JobEvent& event) {
  if (event.has_step()) ObserveStep(event.step());
  if (event.has_epoch()) ObserveEpoch(event.epoch());
  if (event.has_checkpoint()) summary_.set_checkpoint_path(event.checkpoint().path());
}

void SummaryBuilder::SetMemoryBefore(const api::MemoryFigures& before) {
  trainer::SetMemoryBefore(before, *summary_.mutable_memory());
}

void SummaryBuilder::SetMemoryAfter(const api::MemoryFigures& after) {
  trainer::SetMemoryAfter(after, *summary_.mutable_memory());
  device_peak_bytes_ = after.peak_allocated_bytes;
}

mpsd::v1::JobSummary SummaryBuilder::Build(double total_seconds) {
  summary_.set_total_time_s(total_seconds);
  if (!epoch_seconds_.empty()) {
    std::vector<double> sorted = epoch_seconds_;
    std::sort(sorted.begin(), sorted.end());
    const size_t mid = sorted.size() / 2;
    summary_.set_median_epoch_time_s(sorted.size() % 2 == 1 ? sorted[mid]
                                                            : (sorted[mid - 1] + sorted[mid]) / 2);
  } else {
    summary_.set_final_train_loss(last_step_loss_);
  }
  summary_.set_samples_per_second(train_seconds_ > 0 ? train_examples_ / train_seconds_ : 0);
  mpsd::v1::MemoryStats& m = *summary_.mutable_memory();
  m.set_peak_allocated_bytes(std::max({device_peak_bytes_, max_step_allocated_,
                                       m.allocated_before_bytes(), m.allocated_after_bytes()}));
  return summary_;
}

void SummaryBuilder::ObserveStep(const mpsd::v1::StepMetrics& step) {
  // The run's step counter, which a resumed job continues: the whole run's steps.
  summary_.set_steps(std::max(summary_.steps() + 1, step.step()));
  if (step.skipped()) summary_.set_skipped_steps(summary_.skipped_steps() + 1);
  last_step_loss_ = step.loss();
  // Each step of a read-back group carries the group's mean step time.
  train_seconds_ += step.step_time_ms() / 1000.0;
  train_examples_ += step.batch_size();
  max_step_allocated_ = std::max(max_step_allocated_, step.allocated_bytes());
}

void SummaryBuilder::ObserveEpoch(const mpsd::v1::EpochMetrics& epoch) {
  summary_.set_epochs(epoch.epoch());
  summary_.set_final_train_loss(epoch.train_loss());
  // Only what was measured: an epoch that skipped an evaluation leaves the newest one standing.
  if (epoch.evaluated()) {
    summary_.set_test_loss(epoch.test_loss());
    summary_.set_test_accuracy(epoch.test_accuracy());
  }
  if (epoch.has_val_loss()) {
    summary_.set_val_loss(epoch.val_loss());
    summary_.set_val_accuracy(epoch.val_accuracy());
  }
  // multilabel and regression: the newest of each metric; regression measures no accuracy.
  for (const auto& [name, value] : epoch.metrics()) (*summary_.mutable_metrics())[name] = value;
  if (epoch.metrics().contains("train_loss") && !epoch.metrics().contains("train_accuracy")) {
    summary_.clear_test_accuracy();
    summary_.clear_val_accuracy();
  }
  epoch_seconds_.push_back(epoch.epoch_time_s());
}

}  // namespace mpsd::trainer
