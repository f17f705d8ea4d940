// Tests for client/event_printer.cc: what follow mode prints on a terminal, in a log, as JSON.
#include "client/event_printer.h"

#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"

namespace mpsd::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// A TrainJob's events: QUEUED, RUNNING, a log line, `steps` steps, an epoch, a summary, SUCCEEDED.
std::vector<v1::JobEvent> TrainEvents(int steps) {
  std::vector<v1::JobEvent> events;
  auto add = [&events]() -> v1::JobEvent& {
    v1::JobEvent& e = events.emplace_back();
    e.set_job_id("42");
    e.set_seq(static_cast<int64_t>(events.size()));
    return e;
  };
  add().mutable_state()->set_state(v1::Job::QUEUED);
  add().mutable_state()->set_state(v1::Job::RUNNING);
  add().mutable_log()->set_text("loaded fashion-mnist");
  for (int i = 1; i <= steps; ++i) {
    v1::StepMetrics& s = *add().mutable_step();
    s.set_epoch(1);
    s.set_step(i);
    s.set_total_steps(steps);
    s.set_loss(1.0f / i);
  }
  v1::EpochMetrics& epoch = *add().mutable_epoch();
  epoch.set_epoch(1);
  epoch.set_test_accuracy(0.8612);
  v1::JobSummary& summary = *add().mutable_summary();
  summary.set_device("cpu");
  summary.set_epochs(1);
  summary.set_steps(steps);
  summary.set_test_accuracy(0.8612);
  summary.set_test_examples(500);
  add().mutable_state()->set_state(v1::Job::SUCCEEDED);
  return events;
}

std::string PrintAll(const std::vector<v1::JobEvent>& events, EventPrinter::Options options,
                     std::optional<v1::Job::State>* final_state = nullptr) {
  std::ostringstream out;
  EventPrinter printer("42", options, out);
  for (const v1::JobEvent& e : events) printer.Print(e);
  printer.Finish();
  if (final_state != nullptr) *final_state = printer.final_state();
  return out.str();
}

TEST(EventPrinterTest, NiceStepInterval) {
  EXPECT_EQ(NiceStepInterval(938, 10), 100);
  EXPECT_EQ(NiceStepInterval(32, 10), 5);
  EXPECT_EQ(NiceStepInterval(0, 10), 1);
  EXPECT_EQ(NiceStepInterval(9380, 10), 1000);
  EXPECT_EQ(NiceStepInterval(1500, 10), 200);
}

TEST(EventPrinterTest, PlainOutputPrintsEveryNthStep) {
  std::optional<v1::Job::State> final_state;
  const std::string out = PrintAll(TrainEvents(100), {}, &final_state);
  EXPECT_EQ(final_state, v1::Job::SUCCEEDED);
  EXPECT_THAT(out, StartsWith("job 42 QUEUED\njob 42 RUNNING\nloaded fashion-mnist\n"));
  EXPECT_THAT(out, HasSubstr("epoch 1  step 10/100  loss 0.1000"));
  EXPECT_THAT(out, HasSubstr("step 100/100"));
  EXPECT_THAT(out, Not(HasSubstr("step 11/100")));
  EXPECT_THAT(out, HasSubstr("epoch 1: train loss"));
  EXPECT_THAT(out, HasSubstr("job 42 SUCCEEDED on cpu\n  test accuracy 0.8612"));
  EXPECT_THAT(out, Not(HasSubstr("\r")));
  const std::vector<std::string> lines = absl::StrSplit(out, '\n');
  EXPECT_EQ(lines.size(), 3 + 10 + 1 + 4 + 1);  // states, log; steps; epoch; final block; ""
}

TEST(EventPrinterTest, PlainStepEveryOption) {
  EventPrinter::Options options;
  options.plain_step_every = 25;
  options.total_epochs = 1;
  const std::string out = PrintAll(TrainEvents(100), options);
  EXPECT_THAT(out, HasSubstr("epoch 1/1  step 25/100"));
  EXPECT_THAT(out, Not(HasSubstr("step 10/100")));
}

TEST(EventPrinterTest, LiveOutputRedrawsOneLine) {
  EventPrinter::Options options;
  options.live = true;
  const std::string out = PrintAll(TrainEvents(3), options);
  EXPECT_THAT(out, HasSubstr("\r\x1b[Kepoch 1  step 1/3  loss 1.0000"));
  EXPECT_THAT(out, HasSubstr("\r\x1b[Kepoch 1  step 3/3"));
  // The epoch line erases the progress line, then the progress line comes back below it.
  EXPECT_THAT(out, HasSubstr("step 3/3  loss 0.3333  acc 0.000\r\x1b[Kepoch 1: train loss"));
  EXPECT_THAT(out, HasSubstr("0.0 s\n\r\x1b[Kepoch 1  step 3/3"));
  // The summary replaces the progress line; nothing is left to finish.
  EXPECT_THAT(out, HasSubstr("\r\x1b[Kjob 42 SUCCEEDED"));
  EXPECT_THAT(out, testing::EndsWith("memory: not tracked on cpu\n"));
}

TEST(EventPrinterTest, LiveLineIsCutToTheTerminalWidth) {
  EventPrinter::Options options;
  options.live = true;
  options.width = 22;
  std::vector<v1::JobEvent> events = TrainEvents(1);
  events.resize(4);  // ... up to the first step: the job is still running
  const std::string out = PrintAll(events, options);
  EXPECT_THAT(out, testing::EndsWith("\r\x1b[Kepoch 1  step 1/1\n"));  // not "... 1/1  lo"
}

TEST(EventPrinterTest, JsonPrintsEveryEventOnItsOwnLine) {
  EventPrinter::Options options;
  options.json = true;
  options.live = true;  // ignored: JSON is for programs
  std::optional<v1::Job::State> final_state;
  const std::string out = PrintAll(TrainEvents(5), options, &final_state);
  EXPECT_EQ(final_state, v1::Job::SUCCEEDED);
  std::vector<std::string> lines = absl::StrSplit(out, '\n');
  ASSERT_EQ(lines.size(), 3 + 5 + 3 + 1);
  // Numbers as numbers, zero values kept (programs read every field), proto field order.
  EXPECT_EQ(lines[0], R"({"job_id":"42","seq":1,"state":{"state":"QUEUED","failure_reason":)"
                      R"("FAILURE_REASON_UNSPECIFIED","message":""}})");
  EXPECT_EQ(lines[3],
            R"({"job_id":"42","seq":4,"step":{"epoch":1,"step":1,"total_steps":5,"loss":1,)"
            R"("accuracy":0,"learning_rate":0,"samples_per_second":0,"step_time_ms":0,)"
            R"("allocated_bytes":0,"batch_size":0,"loss_scale":0,"skipped":false}})");
  EXPECT_THAT(out, Not(HasSubstr("\r")));
}

// A heartbeat as the daemon sends it on an idle stream: seq 0.
v1::JobEvent Heartbeat(v1::Job::State state, int position) {
  v1::JobEvent e;
  e.set_job_id("42");
  e.mutable_heartbeat()->set_state(state);
  e.mutable_heartbeat()->set_queue_position(position);
  return e;
}

TEST(EventPrinterTest, LiveLineShowsTheQueuePositionUntilTheJobRuns) {
  EventPrinter::Options options;
  options.live = true;
  std::vector<v1::JobEvent> events = TrainEvents(1);
  events.insert(events.begin() + 1, {Heartbeat(v1::Job::QUEUED, 3), Heartbeat(v1::Job::QUEUED, 2)});
  events.insert(events.begin() + 5, Heartbeat(v1::Job::RUNNING, 0));  // ignored
  std::ostringstream out;
  EventPrinter printer("42", options, out);
  int64_t seq = 0;  // heartbeats leave last_seq() at the last real event's
  for (const v1::JobEvent& e : events) {
    printer.Print(e);
    if (!e.has_heartbeat()) seq = e.seq();
    EXPECT_EQ(printer.last_seq(), seq);
  }
  printer.Finish();
  EXPECT_THAT(out.str(), HasSubstr("job 42 QUEUED\n\r\x1b[Kqueued, position 3"
                                   "\r\x1b[Kqueued, position 2"
                                   "\r\x1b[Kjob 42 RUNNING\n"));
  EXPECT_EQ(printer.last_seq(), events.back().seq());
}

TEST(EventPrinterTest, HeartbeatsAreNeitherPrintedNorCountedOffALiveTerminal) {
  std::vector<v1::JobEvent> events = TrainEvents(2);
  events.insert(events.begin() + 1, Heartbeat(v1::Job::QUEUED, 1));
  events.insert(events.begin() + 4, Heartbeat(v1::Job::RUNNING, 0));
  std::vector<v1::JobEvent> without = TrainEvents(2);
  for (bool json : {false, true}) {
    EventPrinter::Options options;
    options.json = json;
    options.live = json;  // JSON ignores live
    EXPECT_EQ(PrintAll(events, options), PrintAll(without, options)) << "json " << json;
  }
}

TEST(EventPrinterTest, FailedJob) {
  std::vector<v1::JobEvent> events = TrainEvents(2);
  events.back().mutable_state()->set_state(v1::Job::FAILED);
  events.back().mutable_state()->set_failure_reason(v1::Job::OUT_OF_MEMORY);
  events.back().mutable_state()->set_message("CUDA out of memory");
  std::optional<v1::Job::State> final_state;
  const std::string out = PrintAll(events, {}, &final_state);
  EXPECT_EQ(final_state, v1::Job::FAILED);
  EXPECT_THAT(out, HasSubstr("job 42 FAILED (OUT_OF_MEMORY) on cpu: CUDA out of memory\n"));
}

TEST(EventPrinterTest, UnfinishedLiveLineGetsItsNewline) {
  EventPrinter::Options options;
  options.live = true;
  std::vector<v1::JobEvent> events = TrainEvents(2);
  events.resize(5);
  std::optional<v1::Job::State> final_state;
  const std::string out = PrintAll(events, options, &final_state);
  EXPECT_FALSE(final_state.has_value());
  EXPECT_THAT(out, testing::EndsWith("step 2/2  loss 0.5000  acc 0.000\n"));
}

// A BenchJob's events: each row is printed when it arrives, the table before the final lines.
TEST(EventPrinterTest, BenchRowsArePrintedAsTheyArriveAndTheTableAtTheEnd) {
  std::vector<v1::JobEvent> events;
  auto add = [&events]() -> v1::JobEvent& {
    v1::JobEvent& e = events.emplace_back();
    e.set_job_id("42");
    e.set_seq(static_cast<int64_t>(events.size()));
    return e;
  };
  add().mutable_state()->set_state(v1::Job::RUNNING);
  v1::BenchRow row;
  row.set_model("mlp");
  row.set_batch_size(4);
  row.set_device("cpu");
  row.set_mode("inference");
  row.set_precision("fp32");
  row.set_memory_format("contiguous");
  row.set_status(v1::BenchRow::OK);
  row.set_median_ms(2);
  row.set_p10_ms(1.5);
  row.set_p90_ms(2.5);
  row.set_samples_per_second(2000);
  *add().mutable_bench_row() = row;
  v1::JobSummary& summary = *add().mutable_summary();
  summary.set_device("cpu");
  summary.set_total_time_s(1.5);
  *summary.add_bench_rows() = row;
  add().mutable_state()->set_state(v1::Job::SUCCEEDED);

  EXPECT_EQ(PrintAll(events, {}),
            "job 42 RUNNING\n"
            "mlp batch 4 on cpu, inference fp32: median 2.00 ms (p10 1.50, p90 2.50), "
            "2,000 samples/s\n"
            "\n"
            "model  batch  cpu (ms)\n"
            "mlp        4      2.00\n"
            "\n"
            "job 42 SUCCEEDED in 1.5 s on cpu\n"
            "  1 row (all OK)\n"
            "  memory: not tracked on cpu\n");
}

}  // namespace
}  // namespace mpsd::client
