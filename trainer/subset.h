// Which examples of a split a limit keeps (DatasetSpec.limit_train / limit_test, `subset`):
// a seeded, class-stratified random subset by default, or the first N as mpsd did before; and
// the check that no class went missing. Torch-free: the loaders hand over their labels as they
// read them (IDX and CIFAR bytes, image_folder's file list, a tensors file's y) and gather the
// rows these indices name themselves. Free functions without state; safe from any thread.
#ifndef MPSD_TRAINER_SUBSET_H_
#define MPSD_TRAINER_SUBSET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mpsd::trainer {

enum class SubsetMode { kStratified, kFirst };

// "stratified", "first".
absl::string_view SubsetModeName(SubsetMode mode);

// What a loader asks for one split.
struct SubsetRequest {
  int64_t limit = 0;  // examples to keep; 0 (or >= the split's size) = all
  SubsetMode mode = SubsetMode::kStratified;
  // The job's seed; each split mixes in its own `split` name, so train and test draw apart.
  uint64_t seed = 0;
  int num_classes = 0;
  // The class names, index = class, for messages; may be empty ("class 7").
  std::vector<std::string> class_names;
  // A missing class: INVALID_ARGUMENT (false) or a warning in Subset::notes (true).
  bool allow_missing_classes = false;
  absl::string_view split = "train";        // "train" or "test", for messages and the seed
  absl::string_view field = "limit_train";  // the DatasetSpec field the error names
};

struct Subset {
  // The kept examples' positions in the split, ascending (the split's order is kept); every
  // position when nothing was left out (`subsetted` false).
  std::vector<int64_t> indices;
  bool subsetted = false;
  // Kept examples per class, index = class (num_classes entries).
  std::vector<int64_t> class_counts;
  // Lines for the job's log: what was kept and, with allow_missing_classes, the warning.
  std::vector<std::string> notes;
};

// Chooses the examples of a split whose example i has class labels[i] (each in
// [0, num_classes)). kFirst keeps positions [0, limit). kStratified keeps limit examples drawn
// without replacement, each class's count its share of the split by the largest-remainder
// rule (as scikit-learn's StratifiedShuffleSplit allots test examples, _approximate_mode),
// then raised to one for each class present in the split that got none, taken from the class
// with the largest count, when the limit allows one per class present. The draw within each
// class is a Fisher–Yates shuffle driven by SplitMix64 of (seed, split): the same labels,
// limit and seed give the same indices on every platform and run.
//
// After a subset (only then: a split as the data has it is the user's), a class with no kept
// example is INVALID_ARGUMENT "train_job.dataset.<field>: …" naming the classes, unless
// allow_missing_classes, which turns it into a warning note. INVALID_ARGUMENT also for a label
// outside [0, num_classes).
absl::StatusOr<Subset> ChooseSubset(const std::vector<int64_t>& labels,
                                    const SubsetRequest& request);

// A training split divided into what trains and what validates (DatasetSpec.validation
// .fraction): round(fraction × N) validation examples, each class's count its share by the
// largest-remainder rule (at least one of each class present, when that many fit), drawn as
// ChooseSubset draws from SplitMix64 of (seed, "validation"). Both index lists ascending; the
// same labels, fraction and seed give the same split. INVALID_ARGUMENT
// "train_job.dataset.validation.fraction: …" when either part would be empty or a class
// present in the split would be missing from the training part (unless
// allow_missing_classes: then a warning note); labels as ChooseSubset.
struct ValidationSplit {
  std::vector<int64_t> train;
  std::vector<int64_t> validation;
  std::vector<int64_t> validation_class_counts;
  std::vector<std::string> notes;
};
absl::StatusOr<ValidationSplit> SplitValidation(const std::vector<int64_t>& labels, double fraction,
                                                const SubsetRequest& request);

// Rows `indices` of `bytes` (rows of `row_bytes` bytes each), in that order.
std::vector<uint8_t> SelectRows(const std::vector<uint8_t>& bytes, int64_t row_bytes,
                                const std::vector<int64_t>& indices);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_SUBSET_H_
