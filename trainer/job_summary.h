// A job's closing `summary` event (mpsd.proto's JobSummary): what both job kinds put into its
// memory figures, and the builder a TrainJob's summary is made with. Torch-free.
#ifndef MPSD_TRAINER_JOB_SUMMARY_H_
#define MPSD_TRAINER_JOB_SUMMARY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "api/memory.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::trainer {

// The device's memory at the job's start, in bytes: allocated_before, reserved_before.
void SetMemoryBefore(const api::MemoryFigures& before, mpsd::v1::MemoryStats& stats);

// The device's memory after the job's cleanup (synchronize, release, empty_cache), in bytes:
// allocated_after, reserved_after, and peak_reserved as the largest of the figure already there,
// the device's peak since the job's reset (CUDA keeps one; MPS's equals reserved now) and both
// reserved figures, so that peak_reserved >= reserved_before, reserved_after.
void SetMemoryAfter(const api::MemoryFigures& after, mpsd::v1::MemoryStats& stats);

// Builds a TrainJob's summary from the events it emitted (so the summary agrees with what
// clients saw) plus what only the executor knows: data sizes, parameters, memory. Used on the
// job's thread only; not thread-safe.
class SummaryBuilder {
 public:
  // `device`: the job's device as DeviceString gives it ("cuda:0").
  explicit SummaryBuilder(std::string device) { summary_.set_device(std::move(device)); }

  // Counts a `step` event (steps, skipped steps, the last loss, throughput, allocated memory),
  // an `epoch` event (epochs, the latest losses and accuracy, epoch times) and a `checkpoint`
  // event (its path); other events are ignored.
  void Observe(const mpsd::v1::JobEvent& event);

  // For the fields only the executor knows (train_examples, parameters, optimizer, ...).
  mpsd::v1::JobSummary& summary() { return summary_; }

  void SetMemoryBefore(const api::MemoryFigures& before);
  // Also keeps the device's peak allocated figure for Build.
  void SetMemoryAfter(const api::MemoryFigures& after);

  // The summary with the job's wall time `total_seconds`: the median epoch time, samples/s over
  // the training steps, and the peak allocated memory (the device's own peak where it keeps one,
  // else the most seen at any read-back). With no epoch finished, final_train_loss is the last
  // step's loss.
  mpsd::v1::JobSummary Build(double total_seconds);

 private:
  void ObserveStep(const mpsd::v1::StepMetrics& step);
  void ObserveEpoch(const mpsd::v1::EpochMetrics& epoch);

  mpsd::v1::JobSummary summary_;
  std::vector<double> epoch_seconds_;
  double train_seconds_ = 0;
  int64_t train_examples_ = 0;
  float last_step_loss_ = 0;
  int64_t max_step_allocated_ = 0;  // bytes
  int64_t device_peak_bytes_ = 0;   // bytes
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_JOB_SUMMARY_H_
