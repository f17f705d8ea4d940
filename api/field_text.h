// A proto field's value from text: the one parser that job files (client/job_file.cc) and
// sweep values (server/core/sweep.cc) share, so that `drop_last: yes` in a job file and "yes" as
// a swept value mean the same. The Python client (client/python/mpsd_client/jobfile.py) follows the
// same rules; tests/common/field_text_cases.tsv is the table of cases both test suites run.
//
// The rules are YAML 1.2's core schema for plain scalars, with YAML 1.1's yes/no/on/off booleans
// and `_` digit separators:
//   bool     true/yes/on, false/no/off, any case
//   integers optional sign and decimal digits (`_` ignored), or a float with no fraction left
//            (`1e4`); out of the field's range is an error naming the range
//   floats   decimal or exponent notation (`_` ignored), `.inf`, `-.inf`, `.nan`; not `inf`,
//            `nan` or surrounding spaces
//   enums    the value's name (any case) or its number
//   strings  as is; bytes as base64
// Thread-safety: pure functions.
#ifndef MPSD_API_FIELD_TEXT_H_
#define MPSD_API_FIELD_TEXT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/numeric/int128.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace mpsd::api {

// YAML's null words: "", "~", "null", "Null", "NULL".
bool IsNullText(absl::string_view text);
std::optional<bool> ParseBoolText(absl::string_view text);
std::optional<double> ParseFloatText(absl::string_view text);
// Values too large for int128 saturate, which puts them out of every field's range.
std::optional<absl::int128> ParseIntegerText(absl::string_view text);

// What a field takes, for "expected X": "an integer", "a number", "true or false", "one of A, B
// or C", "a string", "base64 data", "a map with fields a, b and c".
std::string ExpectedText(const google::protobuf::FieldDescriptor& field);

// "A, B or C" (last_sep "or"), "A and B" (last_sep "and"); "" for none (for error messages).
std::string EnglishList(const std::vector<std::string>& items, absl::string_view last_sep);

// The names of `message`'s fields, in declaration order.
std::vector<std::string> FieldNames(const google::protobuf::Descriptor& message);

// The candidate a typo of `name` most likely meant: the closest by edit distance (Levenshtein,
// `name` lowercased) within max(2, |name| / 3), else the one candidate that begins with `name`
// (an abbreviation, 3 characters or more: "val_acc"); nullopt when neither. For "did you mean"
// in errors.
std::optional<std::string> ClosestName(absl::string_view name,
                                       const std::vector<std::string>& candidates);

// The offset of the first byte of `text` that is not part of well-formed UTF-8 (RFC 3629: no
// overlong forms, no surrogates, at most U+10FFFF), if any. yaml-cpp passes such bytes through
// (also from escapes such as "\ud800"), which protobuf's string fields must not hold: the
// request would fail to serialize.
std::optional<size_t> FirstInvalidUtf8(absl::string_view text);

// `text` in double quotes, escaped as C does (for error messages).
std::string QuoteText(absl::string_view text);

// Sets the scalar `field` of `message` from `text` (adds a value for a repeated field).
// INVALID_ARGUMENT saying what was wrong, without naming the field (the caller knows where it
// is): `expected an integer, got "x"`, `3000000000 is out of range for int32 (-2147483648 to
// 2147483647)`, `unknown "x" (expected A or B)`; a message field is `expected a map with ...`.
absl::Status SetFieldFromText(google::protobuf::Message& message,
                              const google::protobuf::FieldDescriptor& field,
                              absl::string_view text);

}  // namespace mpsd::api

#endif  // MPSD_API_FIELD_TEXT_H_
