#include "client/export.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/effective_spec.h"
#include "api/tensorboard/event_file.h"
#include "api/tensorboard/job_history.h"
#include "client/format.h"
#include "google/protobuf/descriptor.h"

namespace mpsd::client {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using tensorboard::JobHistory;

// The shortest text that reads back as the same double (or float, for a float field).
std::string NumberText(double value, int max_digits) {
  if (!std::isfinite(value)) return absl::StrCat(value);  // "nan", "inf": as Python's csv reads
  for (int digits = 6;; ++digits) {
    std::string text = absl::StrFormat("%.*g", digits, value);
    const double back = std::strtod(text.c_str(), nullptr);
    if (digits >= max_digits ||
        (max_digits == 9 ? static_cast<float>(back) == static_cast<float>(value) : back == value)) {
      return text;
    }
  }
}

// A scalar field as a CSV cell: "" when it has presence and is unset.
std::string CellText(const Message& message, const FieldDescriptor& field) {
  const auto& r = *message.GetReflection();
  if (field.has_presence() && !r.HasField(message, &field)) return "";
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(r.GetInt32(message, &field));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(r.GetInt64(message, &field));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return NumberText(r.GetDouble(message, &field), 17);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return NumberText(r.GetFloat(message, &field), 9);
    case FieldDescriptor::CPPTYPE_BOOL:
      return r.GetBool(message, &field) ? "true" : "false";
    default:  // StepMetrics and EpochMetrics hold numbers and bools only
      return "";
  }
}

// A map<string, double> field's entries, by reflection.
std::map<std::string, double> MapOf(const Message& message, const FieldDescriptor& field) {
  std::map<std::string, double> values;
  const auto& r = *message.GetReflection();
  for (int i = 0; i < r.FieldSize(message, &field); ++i) {
    const Message& entry = r.GetRepeatedMessage(message, &field, i);
    const auto& e = *entry.GetReflection();
    const google::protobuf::Descriptor& d = *entry.GetDescriptor();
    values[e.GetString(entry, d.map_key())] = e.GetDouble(entry, d.map_value());
  }
  return values;
}

// Header and rows of one message type: `key` first, then wall_time, then every other field in
// proto order. `skip(message, field)`: leave that cell empty (an unmeasured value).
template <typename Rows, typename Skip>
std::string CsvTable(const google::protobuf::Descriptor& descriptor, const char* key,
                     const Rows& rows, Skip skip) {
  std::vector<const FieldDescriptor*> fields = {descriptor.FindFieldByName(key)};
  const FieldDescriptor* map = nullptr;  // EpochMetrics.metrics: a column per name
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const FieldDescriptor* field = descriptor.field(i);
    if (field->is_map()) {
      map = field;
    } else if (field->name() != key) {
      fields.push_back(field);
    }
  }
  std::set<std::string> names;  // the map's keys over all rows (multilabel, regression)
  if (map != nullptr) {
    for (const auto& [unused, row] : rows) {
      for (const auto& [name, value] : MapOf(row.metrics, *map)) names.insert(name);
    }
  }
  // A name a field already carries is no second column: a classification job with metrics of
  // its own repeats its loss and accuracy in the map (the same values).
  for (const FieldDescriptor* field : fields) names.erase(field->name());
  std::vector<std::string> header = {key, "wall_time"};
  for (size_t i = 1; i < fields.size(); ++i) header.push_back(fields[i]->name());
  header.insert(header.end(), names.begin(), names.end());
  std::string out = absl::StrCat(absl::StrJoin(header, ","), "\n");
  for (const auto& [unused, row] : rows) {
    std::vector<std::string> cells = {CellText(row.metrics, *fields[0]),
                                      NumberText(row.wall_time, 17)};
    for (size_t i = 1; i < fields.size(); ++i) {
      cells.push_back(skip(row.metrics, *fields[i]) ? "" : CellText(row.metrics, *fields[i]));
    }
    if (!names.empty()) {
      const std::map<std::string, double> values = MapOf(row.metrics, *map);
      for (const std::string& name : names) {
        const auto found = values.find(name);
        cells.push_back(found == values.end() ? "" : NumberText(found->second, 17));
      }
    }
    absl::StrAppend(&out, absl::StrJoin(cells, ","), "\n");
  }
  return out;
}

absl::Status WriteError(const std::string& path, int error) {
  std::string message = absl::StrCat(path, ": ", std::strerror(error));
  return error == ENOSPC || error == EDQUOT ? absl::ResourceExhaustedError(message)
                                            : absl::InternalError(message);
}

absl::Status WriteFile(const std::string& path, const std::string& content) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return WriteError(path, errno);
  const bool written = std::fwrite(content.data(), 1, content.size(), file) == content.size();
  const int error = errno;
  if (std::fclose(file) != 0 || !written) return WriteError(path, written ? errno : error);
  return absl::OkStatus();
}

class TensorBoardExporter : public JobExporter {
 public:
  TensorBoardExporter(v1::Job job, std::string dir) : job_(std::move(job)), dir_(std::move(dir)) {}
  absl::Status Add(const v1::JobEvent& event) override {
    history_.Add(event);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> Finish() override {
    const v1::JobSummary* summary = history_.summary() ? &*history_.summary() : nullptr;
    const auto hparams = tensorboard::HParamsOf(api::EffectiveSpecOf(job_), summary);
    auto writer = tensorboard::EventFileWriter::Create(
        dir_, static_cast<double>(job_.created_at().seconds()));
    if (!writer.ok()) return writer.status();
    if (absl::Status s = tensorboard::WriteHistory(history_, hparams, writer->get()); !s.ok()) {
      return s;
    }
    if (absl::Status s = (*writer)->Close(); !s.ok()) return s;
    return std::vector<std::string>{(*writer)->path()};
  }

 private:
  const v1::Job job_;
  const std::string dir_;
  JobHistory history_;
};

class CsvExporter : public JobExporter {
 public:
  explicit CsvExporter(std::string dir) : dir_(std::move(dir)) {}
  absl::Status Add(const v1::JobEvent& event) override {
    history_.Add(event);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> Finish() override {
    const std::string steps = dir_ + "/steps.csv";
    const std::string epochs = dir_ + "/epochs.csv";
    const auto keep_all = [](const Message&, const FieldDescriptor&) { return false; };
    // test_* of an epoch that skipped its evaluation were never measured.
    const auto unmeasured = [](const Message& m, const FieldDescriptor& field) {
      const auto& epoch = static_cast<const v1::EpochMetrics&>(m);
      return !epoch.evaluated() && (field.name() == "test_loss" || field.name() == "test_accuracy");
    };
    absl::Status status = WriteFile(
        steps, CsvTable(*v1::StepMetrics::descriptor(), "step", history_.steps(), keep_all));
    if (status.ok()) {
      status = WriteFile(epochs, CsvTable(*v1::EpochMetrics::descriptor(), "epoch",
                                          history_.epochs(), unmeasured));
    }
    if (!status.ok()) return status;
    return std::vector<std::string>{steps, epochs};
  }

 private:
  const std::string dir_;
  JobHistory history_;
};

class JsonlExporter : public JobExporter {
 public:
  explicit JsonlExporter(std::string path) : path_(std::move(path)), out_(path_) {}
  absl::Status Add(const v1::JobEvent& event) override {
    if (event.seq() > 0) out_ << ToJsonLine(event) << '\n';  // heartbeats are not stored events
    return out_ ? absl::OkStatus() : WriteError(path_, errno);
  }
  absl::StatusOr<std::vector<std::string>> Finish() override {
    out_.close();
    if (!out_) return WriteError(path_, errno);
    return std::vector<std::string>{path_};
  }
  bool opened() const { return out_.is_open(); }

 private:
  const std::string path_;
  std::ofstream out_;
};

}  // namespace

absl::StatusOr<ExportFormat> ParseExportFormat(absl::string_view name) {
  if (name == "tensorboard") return ExportFormat::kTensorBoard;
  if (name == "csv") return ExportFormat::kCsv;
  if (name == "jsonl") return ExportFormat::kJsonl;
  return absl::InvalidArgumentError(
      absl::StrCat("--format: \"", name, "\" is not one of tensorboard, csv, jsonl"));
}

absl::StatusOr<std::unique_ptr<JobExporter>> JobExporter::Start(const v1::Job& job,
                                                                ExportFormat format,
                                                                const std::string& dir,
                                                                const std::string& run) {
  // "out/" and "out" alike give "out/<run>" (the paths printed and written).
  const std::string run_dir = (std::filesystem::path(dir) / run).lexically_normal().string();
  std::error_code error;
  std::filesystem::create_directories(run_dir, error);
  if (error) return absl::InternalError(absl::StrCat(run_dir, ": ", error.message()));
  switch (format) {
    case ExportFormat::kTensorBoard:
      return std::unique_ptr<JobExporter>(new TensorBoardExporter(job, run_dir));
    case ExportFormat::kCsv:
      return std::unique_ptr<JobExporter>(new CsvExporter(run_dir));
    case ExportFormat::kJsonl: {
      auto exporter = std::make_unique<JsonlExporter>(run_dir + "/events.jsonl");
      if (!exporter->opened()) return WriteError(run_dir + "/events.jsonl", errno);
      return std::unique_ptr<JobExporter>(std::move(exporter));
    }
  }
  return absl::InvalidArgumentError("unknown export format");
}

}  // namespace mpsd::client
