// Tests for client/bench_table.cc: the exact text of the tables, and CSV and JSON that read back
// into the same rows.
#include "client/bench_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mpsd::client {
namespace {

using ::testing::HasSubstr;
using v1::BenchRow;

BenchRow Row(const std::string& model, int batch, const std::string& device, double median_ms) {
  BenchRow row;
  row.set_model(model);
  row.set_batch_size(batch);
  row.set_device(device);
  row.set_precision("fp32");
  row.set_mode("inference");
  row.set_memory_format("contiguous");
  row.set_status(BenchRow::OK);
  row.set_median_ms(median_ms);
  // Values that print exactly, so the expected text can be written down.
  row.set_p10_ms(median_ms - 2);
  row.set_p90_ms(median_ms + 3);
  row.set_mean_ms(median_ms + 0.5);
  row.set_samples_per_second(std::round(batch * 100000.0 / median_ms) / 100);
  row.set_iters(20);
  row.set_cpu_threads(device == "cpu" ? 2 : 0);
  row.set_parameters(25557032);
  return row;
}

// The seeds' first table: resnet50 at two batch sizes on the cpu and one GPU, the GPU out of
// memory at the larger one.
std::vector<BenchRow> Resnet50Rows() {
  BenchRow gpu32 = Row("resnet50", 32, "cuda:0", 10.5);
  gpu32.set_speedup_vs_cpu(39.26);
  gpu32.set_peak_memory_bytes(int64_t{1} << 30);
  BenchRow gpu64 = Row("resnet50", 64, "cuda:0", 0);
  gpu64.set_status(BenchRow::OUT_OF_MEMORY);
  gpu64.set_message("CUDA out of memory. Tried to allocate 2.00 GiB\n(more detail)");
  for (auto clear :
       {&BenchRow::clear_median_ms, &BenchRow::clear_p10_ms, &BenchRow::clear_p90_ms,
        &BenchRow::clear_mean_ms, &BenchRow::clear_samples_per_second, &BenchRow::clear_iters}) {
    (gpu64.*clear)();
  }
  return {Row("resnet50", 32, "cpu", 412.25), gpu32, Row("resnet50", 64, "cpu", 800), gpu64};
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(absl::StripSuffix(text, "\n"), '\n');
}

TEST(BenchTableTest, TableHasModelsAndBatchSizesAsRowsDevicesAsColumnsSpeedupLast) {
  EXPECT_EQ(FormatBenchRows(Resnet50Rows(), BenchFormat::kTable),
            "model     batch  cpu (ms)  cuda:0 (ms)  speedup\n"
            "resnet50     32    412.25        10.50   39.26x\n"
            "resnet50     64    800.00          OOM        -\n"
            "note: resnet50 batch 64 on cuda:0, inference fp32: OUT_OF_MEMORY: CUDA out of "
            "memory. Tried to allocate 2.00 GiB\n");
}

TEST(BenchTableTest, MarkdownIsTheSameTable) {
  EXPECT_EQ(FormatBenchRows(Resnet50Rows(), BenchFormat::kMarkdown),
            "| model | batch | cpu (ms) | cuda:0 (ms) | speedup |\n"
            "| --- | ---: | ---: | ---: | ---: |\n"
            "| resnet50 | 32 | 412.25 | 10.50 | 39.26x |\n"
            "| resnet50 | 64 | 800.00 | OOM | - |\n"
            "note: resnet50 batch 64 on cuda:0, inference fp32: OUT_OF_MEMORY: CUDA out of "
            "memory. Tried to allocate 2.00 GiB\n");
}

TEST(BenchTableTest, CpuOnlyHasNoSpeedupAndVaryingModesGetAColumn) {
  std::vector<BenchRow> rows = {Row("mlp", 4, "cpu", 0.126), Row("mlp", 4, "cpu", 0.5),
                                Row("convnet", 4, "cpu", 1.5)};
  rows[1].set_mode("train_step");
  rows[2].set_status(BenchRow::UNSUPPORTED);
  rows[2].set_message("fp16 autocast is not available on cpu with this LibTorch");
  EXPECT_EQ(FormatBenchRows(rows, BenchFormat::kTable),
            "model    batch  mode        cpu (ms)\n"
            "mlp          4  inference       0.13\n"
            "mlp          4  train_step      0.50\n"
            "convnet      4  inference        n/a\n"
            "note: convnet batch 4 on cpu, inference fp32: UNSUPPORTED: fp16 autocast is not "
            "available on cpu with this LibTorch\n");
  EXPECT_EQ(FormatBenchRows({}, BenchFormat::kTable), "no rows\n");
}

TEST(BenchTableTest, TwoAcceleratorsEachGetASpeedupColumn) {
  BenchRow cuda = Row("vgg16", 64, "cuda:0", 20);
  cuda.set_speedup_vs_cpu(50);
  BenchRow mps = Row("vgg16", 64, "mps", 100);
  mps.set_speedup_vs_cpu(10);
  EXPECT_EQ(FormatBenchRows({Row("vgg16", 64, "cpu", 1000), cuda, mps}, BenchFormat::kTable),
            "model  batch  cpu (ms)  cuda:0 (ms)  mps (ms)  speedup cuda:0  speedup mps\n"
            "vgg16     64   1000.00        20.00    100.00          50.00x       10.00x\n");
}

TEST(BenchTableTest, CsvHasEveryFieldOfEveryRow) {
  const std::vector<BenchRow> rows = Resnet50Rows();
  const std::vector<std::string> lines = Lines(FormatBenchRows(rows, BenchFormat::kCsv));
  ASSERT_EQ(lines.size(), 6u);  // the header, 4 records, one of them on two lines (below)
  EXPECT_EQ(lines[0],
            "model,batch_size,device,precision,mode,memory_format,status,message,median_ms,p10_ms,"
            "p90_ms,mean_ms,samples_per_second,peak_memory_bytes,cpu_threads,iters,"
            "speedup_vs_cpu,parameters,step,step_note");
  EXPECT_EQ(lines[1],
            "resnet50,32,cpu,fp32,inference,contiguous,OK,,412.25,410.25,415.25,412.75,77.62,0,2,"
            "20,0,25557032,,");
  // The message has a line break, so it is quoted and the record spans two lines.
  EXPECT_THAT(lines[4], HasSubstr(",OUT_OF_MEMORY,\"CUDA out of memory. Tried to allocate"));
}

TEST(BenchTableTest, JsonReadsBackIntoTheSameRows) {
  const std::vector<BenchRow> rows = Resnet50Rows();
  const std::string json = FormatBenchRows(rows, BenchFormat::kJson);
  const std::vector<std::string> lines = Lines(json);
  ASSERT_EQ(lines.size(), rows.size() + 2);
  EXPECT_EQ(lines.front(), "[");
  EXPECT_EQ(lines.back(), "]");
  for (size_t i = 0; i < rows.size(); ++i) {
    BenchRow parsed;
    const std::string object(absl::StripSuffix(lines[i + 1], ","));
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(object, &parsed).ok()) << object;
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, rows[i]))
        << parsed.ShortDebugString() << "\nvs\n"
        << rows[i].ShortDebugString();
    // Every field is there, also those at their default.
    EXPECT_THAT(object, HasSubstr("\"speedup_vs_cpu\":"));
    EXPECT_THAT(object, HasSubstr("\"message\":"));
  }
  // The whole output is one JSON array.
  google::protobuf::ListValue list;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &list).ok());
  EXPECT_EQ(list.values_size(), 4);
  EXPECT_EQ(FormatBenchRows({}, BenchFormat::kJson), "[]\n");
}

TEST(BenchTableTest, RowLinesAndCounts) {
  const std::vector<BenchRow> rows = Resnet50Rows();
  EXPECT_EQ(FormatBenchRowLine(rows[0]),
            "resnet50 batch 32 on cpu, inference fp32: median 412.25 ms (p10 410.25, p90 "
            "415.25), 78 samples/s");
  EXPECT_EQ(FormatBenchRowLine(rows[1]),
            "resnet50 batch 32 on cuda:0, inference fp32: median 10.50 ms (p10 8.50, p90 13.50), "
            "3,048 samples/s, 39.26x cpu");
  v1::JobSummary summary;
  for (const BenchRow& row : rows) *summary.add_bench_rows() = row;
  EXPECT_EQ(FormatBenchRowCounts(summary), "4 rows (3 OK, 1 OUT_OF_MEMORY)");
  summary.mutable_bench_rows()->RemoveLast();
  EXPECT_EQ(FormatBenchRowCounts(summary), "3 rows (all OK)");
}

TEST(BenchTableTest, ParseBenchFormat) {
  EXPECT_EQ(*ParseBenchFormat("markdown"), BenchFormat::kMarkdown);
  EXPECT_EQ(*ParseBenchFormat("csv"), BenchFormat::kCsv);
  EXPECT_EQ(ParseBenchFormat("xml").status().message(),
            "--format: unknown \"xml\" (expected table, markdown, csv or json)");
}

}  // namespace
}  // namespace mpsd::client
