// Writes finished jobs and their events straight into a JobStore (server/core/job_store.h), so that
// a dashboard measurement can open an mpsd on a state dir with 1,000 jobs, or with one job of
// 100,000 steps, without training them (tests/perf/dashboard_perf.py).
//
//   mpsd_fill_store --db STATE_DIR/mpsd.db --jobs 1000 --steps 0
//   mpsd_fill_store --db STATE_DIR/mpsd.db --jobs 1 --steps 100000 --epochs 10
//
// Every job is a SUCCEEDED TrainJob (convnet on fashion-mnist) with the events a real one has:
// QUEUED, RUNNING, a log line, `steps` step events (a decaying noisy loss with a spike every
// 9,973 steps), one epoch event per epoch, the summary and SUCCEEDED; one millisecond of event
// time per step.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/core/job_store.h"

namespace {

using mpsd::v1::Job;
using mpsd::v1::JobEvent;

int64_t FlagValue(int argc, char** argv, const std::string& name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    int64_t value = 0;
    if (argv[i] == name && absl::SimpleAtoi(argv[i + 1], &value)) return value;
  }
  return fallback;
}

std::string DbPath(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--db") return argv[i + 1];
  }
  return "";
}

void SetTime(google::protobuf::Timestamp* t, int64_t micros) {
  t->set_seconds(micros / 1000000);
  t->set_nanos(static_cast<int32_t>(micros % 1000000) * 1000);
}

Job NewJob(int64_t steps, int epochs, int64_t start_us) {
  Job job;
  job.set_kind(Job::TRAIN_JOB);
  job.set_state(Job::SUCCEEDED);
  SetTime(job.mutable_created_at(), start_us);
  SetTime(job.mutable_started_at(), start_us);
  SetTime(job.mutable_finished_at(), start_us + steps * 1000 + 1000);
  auto* train = job.mutable_spec()->mutable_train_job();
  train->mutable_model()->set_name("convnet");
  train->mutable_dataset()->set_name("fashion-mnist");
  train->mutable_dataset()->set_limit_train(steps * 4 / epochs);
  train->set_batch_size(4);
  train->set_epochs(epochs);
  train->mutable_optimizer()->set_name("adam");
  train->mutable_optimizer()->set_learning_rate(0.001);
  train->set_device("cpu");
  return job;
}

// The events of one job, seq 1..N, in commit-sized batches.
class EventWriter {
 public:
  EventWriter(mpsd::server::JobStore* store, Job* job) : store_(store), job_(job) {}

  void Add(JobEvent event, int64_t time_us) {
    event.set_job_id(job_->id());
    event.set_seq(++seq_);
    SetTime(event.mutable_time(), time_us);
    if (event.has_step()) *job_->mutable_last_step() = event.step();
    if (event.has_epoch()) *job_->mutable_last_epoch() = event.epoch();
    if (event.has_summary()) *job_->mutable_summary() = event.summary();
    batch_.push_back(std::move(event));
    if (batch_.size() >= 2000) Commit();
  }

  void Commit() {
    job_->set_last_seq(seq_);
    absl::Status status = store_->Commit({*job_}, batch_);
    if (!status.ok()) {
      std::fprintf(stderr, "fill_store: %s\n", status.ToString().c_str());
      std::exit(1);
    }
    batch_.clear();
  }

 private:
  mpsd::server::JobStore* const store_;
  Job* const job_;
  std::vector<JobEvent> batch_;
  int64_t seq_ = 0;
};

JobEvent StateEvent(Job::State state) {
  JobEvent event;
  event.mutable_state()->set_state(state);
  return event;
}

void WriteJob(mpsd::server::JobStore* store, int64_t steps, int epochs, int64_t start_us,
              std::mt19937* rng) {
  Job job = NewJob(steps, epochs, start_us);
  job.set_state(Job::QUEUED);
  absl::StatusOr<Job> inserted = store->InsertJob(job);
  if (!inserted.ok()) {
    std::fprintf(stderr, "fill_store: %s\n", inserted.status().ToString().c_str());
    std::exit(1);
  }
  job = *inserted;
  job.set_state(Job::SUCCEEDED);
  EventWriter writer(store, &job);
  writer.Add(StateEvent(Job::QUEUED), start_us);
  writer.Add(StateEvent(Job::RUNNING), start_us);
  JobEvent log;
  log.mutable_log()->set_level(mpsd::v1::LogLine::INFO);
  log.mutable_log()->set_text("training convnet (written by mpsd_fill_store)");
  writer.Add(log, start_us);
  std::normal_distribution<double> noise(0.0, 0.05);
  const int64_t per_epoch = std::max<int64_t>(1, steps / epochs);
  for (int64_t step = 1; step <= steps; ++step) {
    JobEvent event;
    auto* s = event.mutable_step();
    s->set_epoch(static_cast<int32_t>((step - 1) / per_epoch + 1));
    s->set_step(step);
    s->set_total_steps(steps);
    double loss = 2.3 * std::exp(-3.0 * step / steps) + 0.2 + noise(*rng);
    if (step % 9973 == 0) loss += 5.0;  // A spike the downsampling must keep.
    s->set_loss(static_cast<float>(loss));
    s->set_accuracy(static_cast<float>(1.0 - loss / 2.5));
    s->set_learning_rate(0.001);
    s->set_samples_per_second(4000);
    s->set_step_time_ms(1.0);
    s->set_batch_size(4);
    writer.Add(event, start_us + step * 1000);
    if (step % per_epoch == 0 || step == steps) {
      JobEvent epoch;
      auto* e = epoch.mutable_epoch();
      e->set_epoch(s->epoch());
      e->set_train_loss(loss);
      e->set_train_accuracy(1.0 - loss / 2.5);
      e->set_test_loss(loss * 1.1);
      e->set_test_accuracy(1.0 - loss / 2.3);
      e->set_evaluated(true);
      writer.Add(epoch, start_us + step * 1000);
    }
  }
  JobEvent summary;
  summary.mutable_summary()->set_device("cpu");
  summary.mutable_summary()->set_steps(steps);
  summary.mutable_summary()->set_test_accuracy(job.last_epoch().test_accuracy());
  writer.Add(summary, start_us + steps * 1000 + 1000);
  writer.Add(StateEvent(Job::SUCCEEDED), start_us + steps * 1000 + 1000);
  writer.Commit();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string db = DbPath(argc, argv);
  if (db.empty()) {
    std::fprintf(stderr, "usage: mpsd_fill_store --db FILE [--jobs N] [--steps N] [--epochs N]\n");
    return 2;
  }
  const int64_t jobs = FlagValue(argc, argv, "--jobs", 1);
  const int64_t steps = FlagValue(argc, argv, "--steps", 100);
  const int epochs = static_cast<int>(FlagValue(argc, argv, "--epochs", 1));
  absl::StatusOr<std::unique_ptr<mpsd::server::JobStore>> store =
      mpsd::server::JobStore::Open({db});
  if (!store.ok()) {
    std::fprintf(stderr, "fill_store: %s\n", store.status().ToString().c_str());
    return 1;
  }
  std::mt19937 rng(1);
  const int64_t start_us = 1764576000LL * 1000000;  // 2025-12-01.
  for (int64_t i = 0; i < jobs; ++i) {
    WriteJob(store->get(), steps, epochs, start_us + i * 60000000LL, &rng);
  }
  std::printf("wrote %lld jobs of %lld steps into %s\n", static_cast<long long>(jobs),
              static_cast<long long>(steps), db.c_str());
  return 0;
}
