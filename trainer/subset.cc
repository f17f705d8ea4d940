// Seeded, class-stratified subsets of a split, and the missing-class check.
#include "trainer/subset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/error_cause.h"

namespace mpsd::trainer {
namespace {

// The field a validation split is asked for by.
constexpr char kFractionField[] = "train_job.dataset.validation.fraction";

// SplitMix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators", 2014): a
// generator defined bit for bit, unlike std::shuffle's use of a standard engine, so a seed picks
// the same subset with every standard library.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound), bound > 0, without modulo bias (rejection below 2^64 mod bound).
  uint64_t Below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;
    for (;;) {
      const uint64_t x = Next();
      if (x >= threshold) return x % bound;
    }
  }

 private:
  uint64_t state_;
};

uint64_t SplitSeed(uint64_t seed, absl::string_view split) {
  uint64_t salt = 0;  // FNV-1a of the split's name
  for (const char c : split) salt = (salt ^ static_cast<uint8_t>(c)) * 0x100000001B3ULL;
  return SplitMix64(seed ^ salt).Next();
}

// Each class's share of `limit` by the largest-remainder rule, then at least one for each class
// present when the limit allows it. counts: examples per class in the split (sum n > limit).
std::vector<int64_t> Quotas(const std::vector<int64_t>& counts, int64_t n, int64_t limit) {
  const size_t classes = counts.size();
  std::vector<int64_t> quota(classes);
  std::vector<std::pair<int64_t, size_t>> remainders;  // (remainder, class)
  int64_t given = 0;
  for (size_t c = 0; c < classes; ++c) {
    const __int128 share = static_cast<__int128>(limit) * counts[c];
    quota[c] = static_cast<int64_t>(share / n);
    remainders.emplace_back(static_cast<int64_t>(share % n), c);
    given += quota[c];
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < limit && i < classes; ++i, ++given) ++quota[remainders[i].second];
  const int64_t present =
      std::count_if(counts.begin(), counts.end(), [](int64_t k) { return k > 0; });
  if (limit < present) return quota;
  for (size_t c = 0; c < classes; ++c) {
    if (counts[c] == 0 || quota[c] > 0) continue;
    const size_t largest = std::max_element(quota.begin(), quota.end()) - quota.begin();
    --quota[largest];
    ++quota[c];
  }
  return quota;
}

std::vector<int64_t> Stratified(const std::vector<int64_t>& labels, int num_classes, int64_t limit,
                                uint64_t seed) {
  std::vector<std::vector<int64_t>> members(num_classes);
  for (size_t i = 0; i < labels.size(); ++i) members[labels[i]].push_back(static_cast<int64_t>(i));
  std::vector<int64_t> counts;
  for (const auto& m : members) counts.push_back(static_cast<int64_t>(m.size()));
  const std::vector<int64_t> quota = Quotas(counts, static_cast<int64_t>(labels.size()), limit);
  SplitMix64 random(seed);
  std::vector<int64_t> kept;
  kept.reserve(limit);
  for (int c = 0; c < num_classes; ++c) {
    std::vector<int64_t>& m = members[c];
    // The first quota[c] places of a Fisher–Yates shuffle: a uniform draw without replacement.
    for (int64_t i = 0; i < quota[c]; ++i) {
      const uint64_t j = i + random.Below(m.size() - i);
      std::swap(m[i], m[j]);
      kept.push_back(m[i]);
    }
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

std::string ClassName(const SubsetRequest& request, int c) {
  if (static_cast<size_t>(c) < request.class_names.size()) {
    return absl::StrFormat("\"%s\" (class %d)", request.class_names[c], c);
  }
  return absl::StrCat("class ", c);
}

std::string PerClass(const SubsetRequest& request, const std::vector<int64_t>& counts) {
  std::vector<std::string> parts;
  for (size_t c = 0; c < counts.size(); ++c) {
    parts.push_back(c < request.class_names.size()
                        ? absl::StrCat(request.class_names[c], " ", counts[c])
                        : absl::StrCat(counts[c]));
  }
  return absl::StrJoin(parts, ", ");
}

// The missing classes of a subset: an error, or a warning note.
absl::Status CheckClasses(const SubsetRequest& request, int64_t n, Subset& subset) {
  std::vector<std::string> missing;
  for (int c = 0; c < request.num_classes; ++c) {
    if (subset.class_counts[c] == 0) missing.push_back(ClassName(request, c));
  }
  if (missing.empty()) return absl::OkStatus();
  const std::string problem =
      absl::StrFormat("the %s subset (%s %d of %d examples) has no example of %s", request.split,
                      SubsetModeName(request.mode), request.limit, n, absl::StrJoin(missing, ", "));
  if (request.allow_missing_classes) {
    subset.notes.push_back(absl::StrCat("warning: ", problem, " (allow_missing_classes: true)"));
    return absl::OkStatus();
  }
  const std::string remedy =
      request.mode == SubsetMode::kFirst
          ? "subset: stratified keeps every class"
          : absl::StrFormat("a limit of at least %d keeps one of each class", request.num_classes);
  return api::WithInvalidField(
      absl::InvalidArgumentError(absl::StrFormat(
          "train_job.dataset.%s: %s; %s, or allow_missing_classes: true trains without them",
          request.field, problem, remedy)),
      absl::StrCat("train_job.dataset.", request.field));
}

}  // namespace

absl::string_view SubsetModeName(SubsetMode mode) {
  return mode == SubsetMode::kFirst ? "first" : "stratified";
}

absl::StatusOr<Subset> ChooseSubset(const std::vector<int64_t>& labels,
                                    const SubsetRequest& request) {
  const int64_t n = static_cast<int64_t>(labels.size());
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= request.num_classes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s split: example %d has label %d, expected [0, %d)", request.split, i,
                          labels[i], request.num_classes));
    }
  }
  Subset subset;
  subset.subsetted = request.limit > 0 && request.limit < n;
  if (!subset.subsetted) {
    subset.indices.resize(n);
    std::iota(subset.indices.begin(), subset.indices.end(), 0);
  } else if (request.mode == SubsetMode::kFirst) {
    subset.indices.resize(request.limit);
    std::iota(subset.indices.begin(), subset.indices.end(), 0);
  } else {
    subset.indices = Stratified(labels, request.num_classes, request.limit,
                                SplitSeed(request.seed, request.split));
  }
  subset.class_counts.assign(request.num_classes, 0);
  for (const int64_t i : subset.indices) ++subset.class_counts[labels[i]];
  if (!subset.subsetted) {
    // Asked for more than there is: every example, said so (a typo'd limit is not silent).
    if (request.limit > n) {
      subset.notes.push_back(
          absl::StrFormat("%s %d is more than the %s split's %d examples: all %d are used",
                          request.field, request.limit, request.split, n, n));
    }
    return subset;
  }
  subset.notes.push_back(absl::StrFormat(
      "%s subset: %s, %d of %d examples%s; per class: %s", request.split,
      SubsetModeName(request.mode), request.limit, n,
      request.mode == SubsetMode::kStratified ? absl::StrCat(" (seed ", request.seed, ")") : "",
      PerClass(request, subset.class_counts)));
  if (absl::Status s = CheckClasses(request, n, subset); !s.ok()) return s;
  return subset;
}

absl::StatusOr<ValidationSplit> SplitValidation(const std::vector<int64_t>& labels, double fraction,
                                                const SubsetRequest& request) {
  const int64_t n = static_cast<int64_t>(labels.size());
  SubsetRequest held_out = request;
  held_out.limit = static_cast<int64_t>(std::llround(fraction * static_cast<double>(n)));
  held_out.mode = SubsetMode::kStratified;
  held_out.split = "validation";
  if (held_out.limit < 1 || held_out.limit >= n) {
    return api::WithInvalidField(
        absl::InvalidArgumentError(absl::StrFormat(
            "%s: %g of %d training examples leaves %s empty", kFractionField, fraction, n,
            held_out.limit < 1 ? "the validation split" : "nothing to train on")),
        kFractionField);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= request.num_classes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("train split: example %d has label %d, expected [0, %d)", i, labels[i],
                          request.num_classes));
    }
  }
  ValidationSplit split;
  split.validation = Stratified(labels, request.num_classes, held_out.limit,
                                SplitSeed(request.seed, held_out.split));
  split.validation_class_counts.assign(request.num_classes, 0);
  for (const int64_t i : split.validation) ++split.validation_class_counts[labels[i]];
  std::vector<int64_t> train_counts(request.num_classes, 0);
  size_t next = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (next < split.validation.size() && split.validation[next] == i) {
      ++next;
      continue;
    }
    split.train.push_back(i);
    ++train_counts[labels[i]];
  }
  split.notes.push_back(absl::StrFormat(
      "validation: %d of %d training examples held out (fraction %g, stratified, seed %d); per "
      "class: %s",
      held_out.limit, n, fraction, request.seed, PerClass(request, split.validation_class_counts)));
  std::vector<std::string> missing;
  for (int c = 0; c < request.num_classes; ++c) {
    const int64_t present = train_counts[c] + split.validation_class_counts[c];
    if (present > 0 && train_counts[c] == 0) missing.push_back(ClassName(request, c));
  }
  if (missing.empty()) return split;
  const std::string problem =
      absl::StrFormat("holding out %d of %d examples leaves no training example of %s",
                      held_out.limit, n, absl::StrJoin(missing, ", "));
  if (!request.allow_missing_classes) {
    return api::WithInvalidField(
        absl::InvalidArgumentError(absl::StrCat(kFractionField, ": ", problem)), kFractionField);
  }
  split.notes.push_back(absl::StrCat("warning: ", problem, " (allow_missing_classes: true)"));
  return split;
}

std::vector<uint8_t> SelectRows(const std::vector<uint8_t>& bytes, int64_t row_bytes,
                                const std::vector<int64_t>& indices) {
  std::vector<uint8_t> out(static_cast<size_t>(row_bytes) * indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    std::memcpy(out.data() + k * row_bytes, bytes.data() + indices[k] * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace mpsd::trainer
