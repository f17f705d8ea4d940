// Scalars from text, the YAML way (field_text.h).
#include "api/field_text.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace mpsd::api {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::vector<std::string> EnumNames(const EnumDescriptor& e) {
  std::vector<std::string> names;
  for (int i = 0; i < e.value_count(); ++i) {
    const EnumValueDescriptor& v = *e.value(i);
    if (v.number() == 0 && absl::EndsWith(v.name(), "_UNSPECIFIED")) continue;
    names.push_back(v.name());
  }
  return names;
}

// After an optional sign, a number starts with a digit (or a float with "."): "_1" is no number.
bool StartsLikeANumber(absl::string_view s, bool allow_point) {
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  return !s.empty() && (absl::ascii_isdigit(s[0]) || (allow_point && s[0] == '.'));
}

absl::Status Mismatch(const FieldDescriptor& field, absl::string_view text) {
  return absl::InvalidArgumentError(
      absl::StrCat("expected ", ExpectedText(field), ", got ", QuoteText(text)));
}

absl::Status SetInteger(Message& message, const FieldDescriptor& field, absl::string_view text) {
  const std::optional<absl::int128> number = ParseIntegerText(text);
  if (!number) return Mismatch(field, text);
  absl::int128 min = 0, max = 0;
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      min = std::numeric_limits<int32_t>::min(), max = std::numeric_limits<int32_t>::max();
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      min = std::numeric_limits<int64_t>::min(), max = std::numeric_limits<int64_t>::max();
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      max = std::numeric_limits<uint32_t>::max();
      break;
    default:
      max = std::numeric_limits<uint64_t>::max();
      break;
  }
  if (*number < 0 && min == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", ExpectedText(field), ", got ", text));
  }
  if (*number < min || *number > max) {
    return absl::InvalidArgumentError(absl::StrCat(text, " is out of range for ", field.type_name(),
                                                   " (", static_cast<int64_t>(min), " to ",
                                                   static_cast<uint64_t>(max), ")"));
  }
  const Reflection& r = *message.GetReflection();
  const bool add = field.is_repeated();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      const auto v = static_cast<int32_t>(*number);
      add ? r.AddInt32(&message, &field, v) : r.SetInt32(&message, &field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      const auto v = static_cast<int64_t>(*number);
      add ? r.AddInt64(&message, &field, v) : r.SetInt64(&message, &field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      const auto v = static_cast<uint32_t>(*number);
      add ? r.AddUInt32(&message, &field, v) : r.SetUInt32(&message, &field, v);
      break;
    }
    default: {
      const auto v = static_cast<uint64_t>(*number);
      add ? r.AddUInt64(&message, &field, v) : r.SetUInt64(&message, &field, v);
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status SetEnum(Message& message, const FieldDescriptor& field, absl::string_view text) {
  const EnumDescriptor& type = *field.enum_type();
  const EnumValueDescriptor* v = type.FindValueByName(std::string(text));
  for (int i = 0; v == nullptr && i < type.value_count(); ++i) {
    if (absl::EqualsIgnoreCase(type.value(i)->name(), text)) v = type.value(i);
  }
  if (v == nullptr) {
    const std::optional<absl::int128> number = ParseIntegerText(text);
    if (number && *number >= std::numeric_limits<int>::min() &&
        *number <= std::numeric_limits<int>::max()) {
      v = type.FindValueByNumber(static_cast<int>(*number));
    }
  }
  if (v == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown ", QuoteText(text), " (expected ",
                                                   EnglishList(EnumNames(type), "or"), ")"));
  }
  const Reflection& r = *message.GetReflection();
  field.is_repeated() ? r.AddEnum(&message, &field, v) : r.SetEnum(&message, &field, v);
  return absl::OkStatus();
}

absl::Status SetOtherScalar(Message& message, const FieldDescriptor& field,
                            absl::string_view text) {
  const Reflection& r = *message.GetReflection();
  const bool add = field.is_repeated();
  if (field.cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
    std::string bytes(text);
    if (field.type() == FieldDescriptor::TYPE_BYTES && !absl::Base64Unescape(text, &bytes)) {
      return Mismatch(field, text);
    }
    if (field.type() == FieldDescriptor::TYPE_STRING) {
      if (std::optional<size_t> bad = FirstInvalidUtf8(text); bad.has_value()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "not UTF-8 text (byte 0x%02x at offset %d, from an escape sequence); a string "
            "field holds UTF-8",
            static_cast<unsigned char>(text[*bad]), *bad));
      }
    }
    add ? r.AddString(&message, &field, std::move(bytes))
        : r.SetString(&message, &field, std::move(bytes));
  } else if (field.cpp_type() == FieldDescriptor::CPPTYPE_BOOL) {
    const std::optional<bool> b = ParseBoolText(text);
    if (!b) return Mismatch(field, text);
    add ? r.AddBool(&message, &field, *b) : r.SetBool(&message, &field, *b);
  } else if (field.cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
    const std::optional<double> number = ParseFloatText(text);
    if (!number) return Mismatch(field, text);
    add ? r.AddDouble(&message, &field, *number) : r.SetDouble(&message, &field, *number);
  } else if (field.cpp_type() == FieldDescriptor::CPPTYPE_FLOAT) {
    const std::optional<double> number = ParseFloatText(text);
    if (!number) return Mismatch(field, text);
    if (std::isfinite(*number) && std::fabs(*number) > std::numeric_limits<float>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(text, " is out of range for float"));
    }
    const float f = static_cast<float>(*number);
    add ? r.AddFloat(&message, &field, f) : r.SetFloat(&message, &field, f);
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::optional<std::string> ClosestName(absl::string_view name,
                                       const std::vector<std::string>& candidates) {
  const std::string lower = absl::AsciiStrToLower(name);
  const std::string* best = nullptr;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(lower, candidate);
    if (distance < best_distance) best = &candidate, best_distance = distance;
  }
  if (best != nullptr) return *best;
  // An abbreviation ("val_acc"): the one candidate it begins.
  for (const std::string& candidate : candidates) {
    if (lower.size() < 3 || !absl::StartsWith(candidate, lower)) continue;
    if (best != nullptr) return std::nullopt;  // more than one
    best = &candidate;
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

std::string EnglishList(const std::vector<std::string>& items, absl::string_view last_sep) {
  if (items.size() <= 1) return absl::StrJoin(items, "");
  std::vector<std::string> head(items.begin(), items.end() - 1);
  return absl::StrCat(absl::StrJoin(head, ", "), " ", last_sep, " ", items.back());
}

std::vector<std::string> FieldNames(const Descriptor& d) {
  std::vector<std::string> names;
  for (int i = 0; i < d.field_count(); ++i) names.push_back(d.field(i)->name());
  return names;
}

bool IsNullText(absl::string_view s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

std::optional<bool> ParseBoolText(absl::string_view s) {
  const std::string lower = absl::AsciiStrToLower(s);
  if (lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "no" || lower == "off") return false;
  return std::nullopt;
}

std::optional<double> ParseFloatText(absl::string_view s) {
  std::string text = absl::StrReplaceAll(s, {{"_", ""}});
  absl::string_view body = text;
  const bool negative = !body.empty() && body[0] == '-';
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) body.remove_prefix(1);
  const std::string lower = absl::AsciiStrToLower(body);
  if (lower == ".inf") {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  if (lower == ".nan" && body.size() == text.size())
    return std::numeric_limits<double>::quiet_NaN();
  // SimpleAtod would also take "inf", "nan", hexadecimal ("0x10", "0x1p3") and surrounding
  // spaces; YAML's floats do not.
  if (!StartsLikeANumber(s, /*allow_point=*/true) || absl::StrContains(lower, "x")) {
    return std::nullopt;
  }
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || absl::ascii_isspace(text.back())) return std::nullopt;
  return value;
}

std::optional<absl::int128> ParseIntegerText(absl::string_view s) {
  std::string text = absl::StrReplaceAll(s, {{"_", ""}});
  absl::string_view digits = text;
  const bool negative = !digits.empty() && digits[0] == '-';
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) digits.remove_prefix(1);
  if (!digits.empty() && StartsLikeANumber(s, /*allow_point=*/false) &&
      std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit)) {
    absl::int128 value = 0;
    for (char c : digits) {
      if (value < absl::MakeInt128(1, 0)) value = value * 10 + (c - '0');  // saturates at ~2^64·10
    }
    return negative ? -value : value;
  }
  const std::optional<double> d = ParseFloatText(s);
  // Exactly, through int128 (2^63 written as 9.223372036854775808e18 is out of int64's range,
  // not its minimum; 1e19 fits a uint64); from 2^64 on it saturates, out of every range.
  if (d && std::isfinite(*d) && std::trunc(*d) == *d) {
    if (std::fabs(*d) >= 0x1p64) return *d < 0 ? -absl::MakeInt128(1, 0) : absl::MakeInt128(1, 0);
    return absl::int128(*d);
  }
  return std::nullopt;
}

std::string ExpectedText(const FieldDescriptor& field) {
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
      return "an integer";
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return "a non-negative integer";
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return "a number";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return absl::StrCat("one of ", EnglishList(EnumNames(*field.enum_type()), "or"));
    case FieldDescriptor::CPPTYPE_STRING:
      return field.type() == FieldDescriptor::TYPE_BYTES ? "base64 data" : "a string";
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return absl::StrCat("a map with fields ",
                          EnglishList(FieldNames(*field.message_type()), "and"));
  }
  return "a value";
}

std::optional<size_t> FirstInvalidUtf8(absl::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;
    } else {
      return i;
    }
    if (i + length > n || p[i + 1] < low || p[i + 1] > high) return i;
    for (size_t k = 2; k < length; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    }
    i += length;
  }
  return std::nullopt;
}

std::string QuoteText(absl::string_view s) {
  return absl::StrCat("\"", absl::Utf8SafeCEscape(s), "\"");
}

absl::Status SetFieldFromText(Message& message, const FieldDescriptor& field,
                              absl::string_view text) {
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return Mismatch(field, text);
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return SetInteger(message, field, text);
    case FieldDescriptor::CPPTYPE_ENUM:
      return SetEnum(message, field, text);
    default:
      return SetOtherScalar(message, field, text);
  }
}

}  // namespace mpsd::api
