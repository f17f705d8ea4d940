// Job files: the YAML tree is walked against the message descriptors and the message is built by
// reflection, so every error can name its key path and position. (protobuf 3.21's JSON parser
// stops at the first error, names paths as "(train_job.dataset) limt_train", has no line numbers,
// and rejects `resume_from: 12` for a string field; hence no YAML → JSON → message round trip.)
#include "client/job_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "absl/numeric/int128.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "api/decimal.h"
#include "api/field_text.h"
#include "api/job_id.h"
#include "api/upload_name.h"

namespace mpsd::client {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::OneofDescriptor;
using google::protobuf::Reflection;

// More problems than this in one file are noise; the first ones are enough to start fixing.
constexpr int kMaxErrors = 20;

// ---------------------------------------------------------------------------------------------
// Scalars, typed the YAML 1.2 core-schema way (plus `_` digit separators, as YAML 1.1 allows).

// Scalars are typed by api/field_text.h, the rules sweeps and the Python client share.
bool IsNullWord(absl::string_view s) { return api::IsNullText(s); }

std::string Quote(absl::string_view s) { return api::QuoteText(s); }

// For "expected X, got <this>".
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return Quote(node.Scalar());
    default:
      return "nothing";
  }
}

// Shared with api/field_text.h's messages.
using api::EnglishList;
using api::FieldNames;

// What a field takes, for "expected X".
std::string Expected(const FieldDescriptor& field) { return api::ExpectedText(field); }

// "unknown field (did you mean "limit_train"?)" for a likely typo, else the list of fields.
std::string UnknownField(const Descriptor& d, absl::string_view name) {
  const std::vector<std::string> names = FieldNames(d);
  if (const std::optional<std::string> best = api::ClosestName(name, names); best.has_value()) {
    return absl::StrCat("unknown field (did you mean \"", *best, "\"?)");
  }
  return absl::StrCat("unknown field (", d.name(), " has ", EnglishList(names, "and"), ")");
}

// The fields of SubmitJobRequest outside its `spec` oneof (priority, request_id): top-level keys
// of a job file beside `kind`, in proto order.
std::vector<const FieldDescriptor*> RequestLevelFields() {
  const Descriptor& request = *v1::SubmitJobRequest::descriptor();
  std::vector<const FieldDescriptor*> fields;
  for (int i = 0; i < request.field_count(); ++i) {
    if (request.field(i)->real_containing_oneof() == nullptr) fields.push_back(request.field(i));
  }
  return fields;
}

// A list of messages keyed by their `path` string (SweepSpec.grid, RandomSearch.parameters):
// job files write it as a map from path to the rest, `optimizer.learning_rate: [0.1, 0.01]`
// (a list is the `values`) or `optimizer.learning_rate: {log_uniform: [1e-4, 1e-1]}`.
const FieldDescriptor* PathField(const FieldDescriptor& field) {
  if (!field.is_repeated() || field.is_map() ||
      field.cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
    return nullptr;
  }
  const FieldDescriptor* path = field.message_type()->FindFieldByName("path");
  if (path == nullptr || path->is_repeated() ||
      path->cpp_type() != FieldDescriptor::CPPTYPE_STRING ||
      field.message_type()->FindFieldByName("values") == nullptr) {
    return nullptr;
  }
  return path;
}

// ---------------------------------------------------------------------------------------------
// The documents, counted before any node is built.

// yaml-cpp 0.7's YAML::LoadAll never returns on a token that no document can start with (a
// ',' outside [...] or {...}: the job file "," alone): Parser::HandleNextDocument reports a
// document without consuming the token, and LoadAll appends an empty one each turn until
// memory runs out (found by tests/fuzz/job_file_fuzzer). So the job file's documents are
// counted on the parser's events, at most kScanTurns of them, and only the first is loaded.
// Aliases (*name) are refused here too: they share nodes, and the walk below would visit a
// shared node once for each path to it (exponential in the nesting: "billion laughs"). So is
// nesting deeper than kMaxNesting: the scan stops there (TooDeep), before yaml-cpp's recursive
// loader would go as deep (it gives up at 2000 levels with a message that names no place).
// The Python client (client/python/mpsd_client/jobfile.py, MAX_NESTING) refuses the same.
constexpr int kMaxNesting = 64;

struct TooDeep {
  YAML::Mark mark;
};

class DocumentScan final : public YAML::EventHandler {
 public:
  // Where each document the parser reported starts (the same position twice: stuck), and where
  // its first node is (the mark a node of it would carry).
  std::vector<YAML::Mark> starts;
  std::vector<YAML::Mark> first_nodes;
  std::optional<YAML::Mark> alias;
  std::optional<YAML::Mark> too_deep;  // where the nesting went past kMaxNesting

  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    Node(mark);
    if (!alias.has_value()) alias = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Node(mark);
    Enter(mark);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Node(mark);
    Enter(mark);
  }
  void OnMapEnd() override { --depth_; }

 private:
  void Enter(const YAML::Mark& mark) {
    if (++depth_ > kMaxNesting) throw TooDeep{mark};
  }
  int depth_ = 0;

  void Node(const YAML::Mark& mark) {
    if (first_nodes.size() < starts.size()) first_nodes.push_back(mark);
  }
};

YAML::Mark MarkAt(absl::string_view text, size_t offset) {
  YAML::Mark mark;
  mark.pos = static_cast<int>(offset);
  const size_t line_start = text.rfind('\n', offset == 0 ? 0 : offset - 1);
  mark.line = static_cast<int>(std::count(text.begin(), text.begin() + offset, '\n'));
  mark.column = static_cast<int>(
      line_start == absl::string_view::npos || offset == 0 ? offset : offset - line_start - 1);
  return mark;
}

// One document, a second one (an error either way), and two more that show whether the parser
// stuck on one token after the second's "---" ("a: 1\n---\n,").
constexpr int kScanTurns = 4;

DocumentScan ScanDocuments(const std::string& yaml) {
  std::istringstream stream(yaml);
  YAML::Parser parser(stream);
  DocumentScan scan;
  try {
    for (int turn = 0; turn < kScanTurns && parser.HandleNextDocument(scan); ++turn) {
    }
  } catch (const TooDeep& e) {
    scan.too_deep = e.mark;
  }
  return scan;
}

// The position where the parser stopped making progress, if it did.
std::optional<YAML::Mark> StuckAt(const DocumentScan& scan) {
  for (size_t i = 1; i < scan.starts.size(); ++i) {
    if (scan.starts[i].pos == scan.starts[i - 1].pos) return scan.starts[i];
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// The walk.

class JobFileParser {
 public:
  explicit JobFileParser(absl::string_view filename) : filename_(filename) {}

  absl::StatusOr<v1::SubmitJobRequest> Parse(absl::string_view yaml);

 private:
  // Records "FILE:LINE:COL: PATH: WHAT"; the position is left out when `at` has none.
  void Error(const YAML::Node& at, absl::string_view path, absl::string_view what);
  void Error(const YAML::Mark& at, absl::string_view path, absl::string_view what);

  // The `spec` member that `kind` names, or nullptr after recording why there is none.
  const FieldDescriptor* KindField(const YAML::Node& root);
  // Fills `message` from the keys of `map`, except those in `skip_keys`.
  void FillMessage(const YAML::Node& map, const std::string& path, Message& message,
                   const std::set<std::string>& skip_keys);
  // Sets the request-level fields (priority, request_id) from their top-level keys.
  void FillRequestFields(const YAML::Node& root, v1::SubmitJobRequest& request);
  bool CheckOneof(const YAML::Node& key, const std::string& path, const Message& message,
                  const FieldDescriptor& field);
  // One key's value: unset when null, else a map, a list or one value as the field's shape says.
  void SetField(const YAML::Node& value, const std::string& path, Message& message,
                const FieldDescriptor& field);
  void SetMapField(const YAML::Node& value, const std::string& path, Message& message,
                   const FieldDescriptor& field);
  // PathField's map form: one message per key.
  void SetPathKeyedField(const YAML::Node& value, const std::string& path, Message& message,
                         const FieldDescriptor& field);
  // Sets a singular field, or appends one element to a repeated one.
  void SetValue(const YAML::Node& value, const std::string& path, Message& message,
                const FieldDescriptor& field);

  const std::string filename_;
  std::vector<std::string> errors_;
  int dropped_errors_ = 0;
};

void JobFileParser::Error(const YAML::Mark& at, absl::string_view path, absl::string_view what) {
  if (errors_.size() >= kMaxErrors) {
    ++dropped_errors_;
    return;
  }
  std::string line = filename_;
  if (!at.is_null()) absl::StrAppend(&line, ":", at.line + 1, ":", at.column + 1);
  absl::StrAppend(&line, ": ");
  if (!path.empty()) absl::StrAppend(&line, path, ": ");
  absl::StrAppend(&line, what);
  errors_.push_back(std::move(line));
}

void JobFileParser::Error(const YAML::Node& at, absl::string_view path, absl::string_view what) {
  Error(at.IsDefined() ? at.Mark() : YAML::Mark::null_mark(), path, what);
}

absl::StatusOr<v1::SubmitJobRequest> JobFileParser::Parse(absl::string_view yaml) {
  v1::SubmitJobRequest request;
  std::vector<YAML::Node> documents;
  const std::string text(yaml);
  if (std::optional<size_t> bad = api::FirstInvalidUtf8(text); bad.has_value()) {
    Error(MarkAt(text, *bad), "",
          absl::StrFormat("not UTF-8 text (byte 0x%02x at offset %d); a job file is YAML in UTF-8",
                          static_cast<unsigned char>(text[*bad]), *bad));
    return absl::InvalidArgumentError(absl::StrJoin(errors_, "\n"));
  }
  try {
    const DocumentScan scan = ScanDocuments(text);
    if (scan.too_deep.has_value()) {
      Error(*scan.too_deep, "", absl::StrCat("nested more than ", kMaxNesting, " levels deep"));
      return absl::InvalidArgumentError(absl::StrJoin(errors_, "\n"));
    }
    if (std::optional<YAML::Mark> stuck = StuckAt(scan); stuck.has_value()) {
      const char c = stuck->pos >= 0 && static_cast<size_t>(stuck->pos) < text.size()
                         ? text[static_cast<size_t>(stuck->pos)]
                         : ' ';
      Error(*stuck, "",
            absl::StrCat("YAML syntax error: unexpected ",
                         absl::ascii_isgraph(static_cast<unsigned char>(c))
                             ? absl::StrCat("'", std::string(1, c), "'")
                             : std::string("character"),
                         c == ',' ? " (a ',' separates items only inside [...] or {...})" : ""));
    } else if (scan.starts.size() > 1) {
      Error(scan.first_nodes.size() > 1 ? scan.first_nodes[1] : scan.starts[1], "",
            "a job file holds one YAML document, but a second one starts here");
    } else if (scan.alias.has_value()) {
      Error(*scan.alias, "",
            "YAML aliases (*name) are not supported in a job file: write the value out");
    } else if (!scan.starts.empty()) {
      documents.push_back(YAML::Load(text));
    }
  } catch (const YAML::ParserException& e) {
    Error(e.mark, "", absl::StrCat("YAML syntax error: ", e.msg));
  } catch (const YAML::Exception& e) {
    Error(YAML::Mark::null_mark(), "", absl::StrCat("YAML error: ", e.what()));
  }
  if (errors_.empty()) {
    if (documents.empty() || (documents.size() == 1 && documents[0].IsNull())) {
      Error(YAML::Mark::null_mark(), "",
            "empty job file (expected a map that starts with \"kind: TrainJob\")");
    } else if (!documents[0].IsMap()) {
      Error(documents[0], "",
            absl::StrCat("expected a map of job fields, got ", Describe(documents[0])));
    } else if (const FieldDescriptor* kind = KindField(documents[0])) {
      Message* spec = request.GetReflection()->MutableMessage(&request, kind);
      std::set<std::string> skip_keys = {"kind"};
      for (const FieldDescriptor* field : RequestLevelFields()) skip_keys.insert(field->name());
      FillMessage(documents[0], "", *spec, skip_keys);
      FillRequestFields(documents[0], request);
    }
  }
  if (errors_.empty()) return request;
  if (dropped_errors_ > 0) errors_.push_back(absl::StrCat("(", dropped_errors_, " more errors)"));
  return absl::InvalidArgumentError(absl::StrJoin(errors_, "\n"));
}

const FieldDescriptor* JobFileParser::KindField(const YAML::Node& root) {
  const OneofDescriptor& spec = *v1::SubmitJobRequest::descriptor()->FindOneofByName("spec");
  std::vector<std::string> kinds;
  for (int i = 0; i < spec.field_count(); ++i)
    kinds.push_back(spec.field(i)->message_type()->name());
  const std::string expected = absl::StrCat("(expected ", EnglishList(kinds, "or"), ")");

  for (const auto& entry : root) {
    if (!entry.first.IsScalar() || entry.first.Scalar() != "kind") continue;
    const YAML::Node& value = entry.second;
    if (!value.IsScalar()) {
      Error(value.IsNull() ? entry.first : value, "kind",
            absl::StrCat("expected ", EnglishList(kinds, "or"), ", got ", Describe(value)));
      return nullptr;
    }
    for (int i = 0; i < spec.field_count(); ++i) {
      if (spec.field(i)->message_type()->name() == value.Scalar()) return spec.field(i);
    }
    Error(value, "kind", absl::StrCat("unknown ", Describe(value), " ", expected));
    return nullptr;
  }
  Error(YAML::Mark::null_mark(), "", absl::StrCat("missing \"kind\" ", expected));
  return nullptr;
}

void JobFileParser::FillMessage(const YAML::Node& map, const std::string& path, Message& message,
                                const std::set<std::string>& skip_keys) {
  const Descriptor& descriptor = *message.GetDescriptor();
  std::set<std::string> seen;
  for (const auto& entry : map) {
    const YAML::Node& key = entry.first;
    if (!key.IsScalar()) {
      Error(key, path, absl::StrCat("expected a field name as key, got ", Describe(key)));
      continue;
    }
    const std::string& name = key.Scalar();
    const std::string field_path = path.empty() ? name : absl::StrCat(path, ".", name);
    if (!seen.insert(name).second) {
      Error(key, field_path, "duplicate key");
      continue;
    }
    if (skip_keys.count(name) > 0) continue;
    const FieldDescriptor* field = descriptor.FindFieldByName(name);
    if (field == nullptr) {
      Error(key, field_path, UnknownField(descriptor, name));
      continue;
    }
    if (!entry.second.IsNull() && !CheckOneof(key, field_path, message, *field)) continue;
    SetField(entry.second, field_path, message, *field);
  }
}

void JobFileParser::FillRequestFields(const YAML::Node& root, v1::SubmitJobRequest& request) {
  for (const auto& entry : root) {
    if (!entry.first.IsScalar()) continue;  // FillMessage reported it
    const std::string& name = entry.first.Scalar();
    const FieldDescriptor* field = v1::SubmitJobRequest::descriptor()->FindFieldByName(name);
    if (field == nullptr || field->real_containing_oneof() != nullptr) continue;
    SetField(entry.second, name, request, *field);
  }
}

bool JobFileParser::CheckOneof(const YAML::Node& key, const std::string& path,
                               const Message& message, const FieldDescriptor& field) {
  const OneofDescriptor* oneof = field.real_containing_oneof();
  if (oneof == nullptr) return true;
  const FieldDescriptor* set = message.GetReflection()->GetOneofFieldDescriptor(message, oneof);
  if (set == nullptr || set == &field) return true;
  Error(key, path,
        absl::StrCat("cannot be set together with \"", set->name(), "\" (only one of ",
                     oneof->name(), " may be set)"));
  return false;
}

void JobFileParser::SetField(const YAML::Node& value, const std::string& path, Message& message,
                             const FieldDescriptor& field) {
  if (value.IsNull()) return;  // `key:`, `key: ~`, `key: null` leave the field unset
  if (field.is_map()) {
    SetMapField(value, path, message, field);
  } else if (PathField(field) != nullptr && value.IsMap()) {
    SetPathKeyedField(value, path, message, field);
  } else if (field.is_repeated()) {
    if (!value.IsSequence()) {
      Error(value, path,
            absl::StrCat("expected a list (e.g. [a, b]) of ", Expected(field), ", got ",
                         Describe(value)));
      return;
    }
    int index = 0;
    for (const auto& item : value) {
      SetValue(item, absl::StrCat(path, "[", index++, "]"), message, field);
    }
  } else {
    SetValue(value, path, message, field);
  }
}

void JobFileParser::SetMapField(const YAML::Node& value, const std::string& path, Message& message,
                                const FieldDescriptor& field) {
  if (!value.IsMap()) {
    Error(value, path, absl::StrCat("expected a map, got ", Describe(value)));
    return;
  }
  const Descriptor& entry_type = *field.message_type();
  for (const auto& item : value) {
    const std::string item_path =
        absl::StrCat(path, ".", item.first.IsScalar() ? item.first.Scalar() : "?");
    Message* entry = message.GetReflection()->AddMessage(&message, &field);
    SetValue(item.first, item_path, *entry, *entry_type.map_key());
    SetField(item.second, item_path, *entry, *entry_type.map_value());
  }
}

void JobFileParser::SetPathKeyedField(const YAML::Node& value, const std::string& path,
                                      Message& message, const FieldDescriptor& field) {
  const FieldDescriptor& path_field = *PathField(field);
  const FieldDescriptor& values = *field.message_type()->FindFieldByName("values");
  for (const auto& item : value) {
    if (!item.first.IsScalar()) {
      Error(item.first, path,
            absl::StrCat("expected a field path as key, got ", Describe(item.first)));
      continue;
    }
    if (std::optional<size_t> bad = api::FirstInvalidUtf8(item.first.Scalar()); bad.has_value()) {
      Error(item.first, path, "a field path key is not valid UTF-8 (from an escape sequence)");
      continue;
    }
    const std::string item_path = absl::StrCat(path, ".", item.first.Scalar());
    Message* entry = message.GetReflection()->AddMessage(&message, &field);
    entry->GetReflection()->SetString(entry, &path_field, item.first.Scalar());
    if (item.second.IsSequence()) {
      SetField(item.second, item_path, *entry, values);
    } else if (item.second.IsMap()) {
      FillMessage(item.second, item_path, *entry, {path_field.name()});
    } else {
      // A grid takes values only; a random search's parameter also a distribution.
      Error(item.second.IsNull() ? item.first : item.second, item_path,
            absl::StrCat(absl::StartsWith(path, "sweep.grid")
                             ? "expected a list of values (e.g. [0.1, 0.5])"
                             : "expected a list of values or a map (e.g. {uniform: [0.1, 0.5]})",
                         ", got ", Describe(item.second)));
    }
  }
}

void JobFileParser::SetValue(const YAML::Node& value, const std::string& path, Message& message,
                             const FieldDescriptor& field) {
  const Reflection& r = *message.GetReflection();
  const bool add = field.is_repeated();
  if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    if (!value.IsMap()) {
      Error(value, path, absl::StrCat("expected ", Expected(field), ", got ", Describe(value)));
      return;
    }
    Message* sub = add ? r.AddMessage(&message, &field) : r.MutableMessage(&message, &field);
    FillMessage(value, path, *sub, {});
    return;
  }
  if (!value.IsScalar()) {
    Error(value, path, absl::StrCat("expected ", Expected(field), ", got ", Describe(value)));
    return;
  }
  if (absl::Status set = api::SetFieldFromText(message, field, value.Scalar()); !set.ok()) {
    Error(value, path, set.message());
  }
}

// ---------------------------------------------------------------------------------------------
// Formatting.

// api::ShortestDecimal, with YAML's words for NaN and the infinities.
std::string ShortestDouble(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  return api::ShortestDecimal(value);
}

// True when a plain scalar would not read back as `s`: words YAML or our parser would take for
// null, a bool or a number, and strings whose control characters or surrounding white space a
// plain scalar would lose (the parser folds or strips them; "resum\r" read back as "resum").
bool NeedsQuotes(const std::string& s) {
  const bool loses_characters =
      std::any_of(s.begin(), s.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }) ||
      (!s.empty() && (s.front() == ' ' || s.back() == ' '));
  return loses_characters || IsNullWord(s) || api::ParseBoolText(s).has_value() ||
         api::ParseFloatText(s).has_value() || api::ParseIntegerText(s).has_value();
}

void EmitScalar(YAML::Emitter& out, const Message& message, const FieldDescriptor& field,
                int index) {
  const Reflection& r = *message.GetReflection();
  const bool rep = field.is_repeated();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      out << absl::StrCat(rep ? r.GetRepeatedInt32(message, &field, index)
                              : r.GetInt32(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      out << absl::StrCat(rep ? r.GetRepeatedInt64(message, &field, index)
                              : r.GetInt64(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      out << absl::StrCat(rep ? r.GetRepeatedUInt32(message, &field, index)
                              : r.GetUInt32(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      out << absl::StrCat(rep ? r.GetRepeatedUInt64(message, &field, index)
                              : r.GetUInt64(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      out << ShortestDouble(rep ? r.GetRepeatedDouble(message, &field, index)
                                : r.GetDouble(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      out << ShortestDouble(rep ? r.GetRepeatedFloat(message, &field, index)
                                : r.GetFloat(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      out << ((rep ? r.GetRepeatedBool(message, &field, index) : r.GetBool(message, &field))
                  ? "true"
                  : "false");
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      out << (rep ? r.GetRepeatedEnum(message, &field, index) : r.GetEnum(message, &field))->name();
      break;
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string s =
          rep ? r.GetRepeatedString(message, &field, index) : r.GetString(message, &field);
      if (field.type() == FieldDescriptor::TYPE_BYTES) {
        out << absl::Base64Escape(s);
      } else if (NeedsQuotes(s)) {
        out << YAML::DoubleQuoted << s;
      } else {
        out << s;
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
}

void EmitFields(YAML::Emitter& out, const Message& message, const FieldDescriptor* skip = nullptr);
void EmitValue(YAML::Emitter& out, const Message& message, const FieldDescriptor& field);

// Messages of a few scalars read best on one line: `model: {name: convnet}`.
void EmitMessage(YAML::Emitter& out, const Message& message,
                 const FieldDescriptor* skip = nullptr) {
  std::vector<const FieldDescriptor*> fields;
  message.GetReflection()->ListFields(message, &fields);
  const bool flat = fields.size() <= 4 && std::none_of(fields.begin(), fields.end(), [](auto* f) {
                      return f->is_repeated() || f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
                    });
  if (flat) out << YAML::Flow;
  out << YAML::BeginMap;
  EmitFields(out, message, skip);
  out << YAML::EndMap;
}

// A map field as a YAML map: `labels: {project: fmnist}`.
void EmitMap(YAML::Emitter& out, const Message& message, const FieldDescriptor& field) {
  const Reflection& r = *message.GetReflection();
  const FieldDescriptor& key = *field.message_type()->map_key();
  const FieldDescriptor& value = *field.message_type()->map_value();
  // Sorted by the key's text: map order is unspecified, and a stable file reads better.
  std::vector<std::pair<std::string, const Message*>> entries;
  for (int i = 0; i < r.FieldSize(message, &field); ++i) {
    const Message& entry = r.GetRepeatedMessage(message, &field, i);
    YAML::Emitter text;
    EmitScalar(text, entry, key, 0);
    entries.emplace_back(text.c_str(), &entry);
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  out << YAML::BeginMap;
  for (const auto& [text, entry] : entries) {
    out << YAML::Key;
    EmitScalar(out, *entry, key, 0);
    out << YAML::Value;
    EmitValue(out, *entry, value);
  }
  out << YAML::EndMap;
}

// PathField's map form: `optimizer.learning_rate: [0.1, 0.01]`.
void EmitPathKeyed(YAML::Emitter& out, const Message& message, const FieldDescriptor& field) {
  const Reflection& r = *message.GetReflection();
  const FieldDescriptor& path = *PathField(field);
  const FieldDescriptor& values = *field.message_type()->FindFieldByName("values");
  out << YAML::BeginMap;
  for (int i = 0; i < r.FieldSize(message, &field); ++i) {
    const Message& entry = r.GetRepeatedMessage(message, &field, i);
    const Reflection& er = *entry.GetReflection();
    out << YAML::Key;
    EmitScalar(out, entry, path, 0);  // quoted where a plain scalar would read differently
    out << YAML::Value;
    std::vector<const FieldDescriptor*> set;
    er.ListFields(entry, &set);
    const bool only_values =
        std::all_of(set.begin(), set.end(), [&](auto* f) { return f == &path || f == &values; });
    if (only_values && er.FieldSize(entry, &values) > 0) {
      EmitValue(out, entry, values);
    } else {
      EmitMessage(out, entry, &path);
    }
  }
  out << YAML::EndMap;
}

void EmitValue(YAML::Emitter& out, const Message& message, const FieldDescriptor& field) {
  const Reflection& r = *message.GetReflection();
  const bool is_message = field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
  if (field.is_map()) return EmitMap(out, message, field);
  if (PathField(field) != nullptr) return EmitPathKeyed(out, message, field);
  if (!field.is_repeated()) {
    is_message ? EmitMessage(out, r.GetMessage(message, &field))
               : EmitScalar(out, message, field, 0);
    return;
  }
  if (!is_message) out << YAML::Flow;
  out << YAML::BeginSeq;
  for (int i = 0; i < r.FieldSize(message, &field); ++i) {
    is_message ? EmitMessage(out, r.GetRepeatedMessage(message, &field, i))
               : EmitScalar(out, message, field, i);
  }
  out << YAML::EndSeq;
}

void EmitFields(YAML::Emitter& out, const Message& message, const FieldDescriptor* skip) {
  const Reflection& r = *message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r.ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    if (field == skip) continue;
    out << YAML::Key << field->name() << YAML::Value;
    EmitValue(out, message, *field);
  }
}

}  // namespace

absl::StatusOr<v1::SubmitJobRequest> ParseJobFile(absl::string_view yaml,
                                                  absl::string_view filename) {
  return JobFileParser(filename).Parse(yaml);
}

namespace {

// A relative `path` made absolute against `dir`; absolute and empty paths and uploads
// ("upload:NAME", which the daemon resolves) unchanged.
std::string AgainstDirectory(const std::string& path, const std::filesystem::path& dir) {
  if (path.empty() || std::filesystem::path(path).is_absolute() || api::IsUploadRef(path)) {
    return path;
  }
  return (dir / path).lexically_normal().string();
}

}  // namespace

void MakePathsAbsolute(v1::SubmitJobRequest& request, const std::string& job_file) {
  if (!request.has_train_job() && !request.has_bench_job() && !request.has_eval_job() &&
      !request.has_predict_job()) {
    return;
  }
  std::error_code ec;
  const std::filesystem::path dir =
      std::filesystem::absolute(job_file, ec).lexically_normal().parent_path();
  if (ec) return;
  if (request.has_bench_job()) {
    // A TorchScript file among the models; zoo names and job ids stay as they are.
    for (std::string& model : *request.mutable_bench_job()->mutable_models()) {
      if (absl::EndsWith(model, ".pt") || absl::StrContains(model, "/")) {
        model = AgainstDirectory(model, dir);
      }
    }
    return;
  }
  if (request.has_predict_job()) {
    v1::PredictJob& predict = *request.mutable_predict_job();
    if (!api::IsJobId(predict.model())) predict.set_model(AgainstDirectory(predict.model(), dir));
    for (std::string& input : *predict.mutable_inputs()) input = AgainstDirectory(input, dir);
    return;
  }
  if (request.has_eval_job()) {
    // model: a job id stays as it is; a model.pt path is made absolute.
    v1::EvalJob& eval = *request.mutable_eval_job();
    if (!api::IsJobId(eval.model())) eval.set_model(AgainstDirectory(eval.model(), dir));
    if (!eval.dataset().root().empty()) {
      eval.mutable_dataset()->set_root(AgainstDirectory(eval.dataset().root(), dir));
    }
    return;
  }
  v1::TrainJob& job = *request.mutable_train_job();
  if (!job.model().torchscript().empty()) {
    job.mutable_model()->set_torchscript(AgainstDirectory(job.model().torchscript(), dir));
  }
  if (!job.model().weights().empty()) {
    job.mutable_model()->set_weights(AgainstDirectory(job.model().weights(), dir));
  }
  if (!job.loss().torchscript().empty()) {
    job.mutable_loss()->set_torchscript(AgainstDirectory(job.loss().torchscript(), dir));
  }
  for (v1::MetricSpec& metric : *job.mutable_metrics()) {
    if (!metric.torchscript().empty()) {
      metric.set_torchscript(AgainstDirectory(metric.torchscript(), dir));
    }
  }
  if (!job.dataset().root().empty()) {
    job.mutable_dataset()->set_root(AgainstDirectory(job.dataset().root(), dir));
  }
  // A job id ("12") stays as it is: only paths are resolved.
  const std::string& resume_from = job.resume_from();
  if (!resume_from.empty() && !api::IsJobId(resume_from)) {
    job.set_resume_from(AgainstDirectory(resume_from, dir));
  }
}

absl::StatusOr<v1::SubmitJobRequest> ReadJobFile(const std::string& path) {
  // O_NONBLOCK: a FIFO is refused below instead of waited on for a writer.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file; a job file is a YAML file"));
  }
  auto too_big = [&path](const std::string& size) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", size, "; a job file is at most ",
                                                   "1 MiB (", kMaxJobFileBytes, " bytes)"));
  };
  if (st.st_size > kMaxJobFileBytes) return too_big(absl::StrCat(st.st_size, " bytes"));
  // Read to at most one byte beyond the limit: the file may have grown since fstat.
  std::string text(static_cast<size_t>(kMaxJobFileBytes) + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > static_cast<size_t>(kMaxJobFileBytes)) {
    return too_big(absl::StrCat("more than ", kMaxJobFileBytes, " bytes"));
  }
  text.resize(got);
  absl::StatusOr<v1::SubmitJobRequest> request = ParseJobFile(text, path);
  if (request.ok()) MakePathsAbsolute(*request, path);
  return request;
}

bool IsGeneratedRequestId(absl::string_view request_id) {
  return absl::StartsWith(request_id, kGeneratedRequestIdPrefix);
}

std::string NewRequestId() {
  unsigned char bytes[16] = {};
  std::FILE* random = std::fopen("/dev/urandom", "rb");
  const bool read =
      random != nullptr && std::fread(bytes, 1, sizeof(bytes), random) == sizeof(bytes);
  if (random != nullptr) std::fclose(random);
  if (!read) {  // no /dev/urandom: time and pid, unique enough for one user's retries
    const uint64_t now = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
    const uint64_t pid = static_cast<uint64_t>(getpid());
    std::memcpy(bytes, &now, sizeof(now));
    std::memcpy(bytes + sizeof(now), &pid, sizeof(pid));
  }
  return absl::StrCat(kGeneratedRequestIdPrefix,
                      absl::BytesToHexString(
                          absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes))));
}

std::string FormatJobFile(const v1::SubmitJobRequest& request) {
  const OneofDescriptor& spec = *v1::SubmitJobRequest::descriptor()->FindOneofByName("spec");
  const FieldDescriptor* kind = request.GetReflection()->GetOneofFieldDescriptor(request, &spec);
  if (kind == nullptr) return "";
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "kind" << YAML::Value << kind->message_type()->name();
  const Reflection& r = *request.GetReflection();
  for (const FieldDescriptor* field : RequestLevelFields()) {
    if (field->is_repeated() ? r.FieldSize(request, field) == 0 : !r.HasField(request, field)) {
      continue;
    }
    if (field->name() == "sweep") continue;  // after the spec: it names the spec's fields
    // A request_id mpsctl made up is a retry token of that one submit, not part of the job: a
    // job file printed from it and submitted again makes a new job.
    if (field->name() == "request_id" && IsGeneratedRequestId(request.request_id())) continue;
    out << YAML::Key << field->name() << YAML::Value;
    EmitValue(out, request, *field);
  }
  EmitFields(out, r.GetMessage(request, kind));
  if (request.has_sweep()) {
    out << YAML::Key << "sweep" << YAML::Value;
    EmitMessage(out, request.sweep());
  }
  out << YAML::EndMap;
  return absl::StrCat(out.c_str(), "\n");
}

}  // namespace mpsd::client
