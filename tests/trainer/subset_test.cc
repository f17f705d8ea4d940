// Tests for trainer/subset.h (torch-free): stratified subsets keep each class's share and every
// class, the same seed picks the same examples, "first" keeps the old behaviour, and a class a
// subset leaves out is an error naming it (or a warning when allowed).
#include "trainer/subset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "api/error_cause.h"

namespace mpsd::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// `per_class[c]` examples of class c, in class order (as ImageFolder lists a folder).
std::vector<int64_t> ClassOrdered(const std::vector<int64_t>& per_class) {
  std::vector<int64_t> labels;
  for (size_t c = 0; c < per_class.size(); ++c) labels.insert(labels.end(), per_class[c], c);
  return labels;
}

SubsetRequest Request(int64_t limit, int classes, uint64_t seed = 0) {
  SubsetRequest request;
  request.limit = limit;
  request.num_classes = classes;
  request.seed = seed;
  return request;
}

TEST(SubsetTest, StratifiedKeepsEachClassShareOfAClassOrderedSplit) {
  const std::vector<int64_t> labels = ClassOrdered({100, 100, 100, 100});
  absl::StatusOr<Subset> subset = ChooseSubset(labels, Request(40, 4));
  ASSERT_TRUE(subset.ok()) << subset.status();
  EXPECT_TRUE(subset->subsetted);
  EXPECT_THAT(subset->class_counts, ElementsAre(10, 10, 10, 10));
  ASSERT_EQ(subset->indices.size(), 40u);
  EXPECT_TRUE(std::is_sorted(subset->indices.begin(), subset->indices.end()));
  EXPECT_EQ(std::set<int64_t>(subset->indices.begin(), subset->indices.end()).size(), 40u);
  // A random draw, not each class's first ten.
  EXPECT_NE(subset->indices[9], 9);
  EXPECT_THAT(subset->notes,
              ElementsAre(HasSubstr("train subset: stratified, 40 of 400 "
                                    "examples (seed 0); per class: 10, 10, 10, 10")));
}

TEST(SubsetTest, SharesFollowTheLargestRemainderAndEveryPresentClassKeepsOne) {
  // 50 of 1000 with 700/290/10: exact shares 35, 14.5, 0.5 → 35, 15 (larger remainder first
  // by class order on a tie), then class 2 takes one from the largest: 34, 15, 1.
  absl::StatusOr<Subset> subset = ChooseSubset(ClassOrdered({700, 290, 10}), Request(50, 3));
  ASSERT_TRUE(subset.ok()) << subset.status();
  EXPECT_THAT(subset->class_counts, ElementsAre(34, 15, 1));
}

TEST(SubsetTest, TheSameSeedPicksTheSameExamplesAndAnotherSeedOthers) {
  const std::vector<int64_t> labels = ClassOrdered({30, 50, 20});
  const absl::StatusOr<Subset> a = ChooseSubset(labels, Request(25, 3, /*seed=*/5));
  const absl::StatusOr<Subset> b = ChooseSubset(labels, Request(25, 3, /*seed=*/5));
  const absl::StatusOr<Subset> c = ChooseSubset(labels, Request(25, 3, /*seed=*/6));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->indices, b->indices);
  EXPECT_NE(a->indices, c->indices);
  EXPECT_EQ(a->class_counts, c->class_counts);
  // The test split draws apart from the train split with the same seed.
  SubsetRequest test = Request(25, 3, /*seed=*/5);
  test.split = "test";
  const absl::StatusOr<Subset> d = ChooseSubset(labels, test);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(a->indices, d->indices);
}

TEST(SubsetTest, FirstKeepsTheFirstNAndAMissingClassIsAnErrorNamingIt) {
  SubsetRequest request = Request(40, 4);
  request.mode = SubsetMode::kFirst;
  request.class_names = {"zero", "one", "two", "three"};
  const absl::StatusOr<Subset> subset = ChooseSubset(ClassOrdered({20, 20, 20, 20}), request);
  ASSERT_EQ(subset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(subset.status().message(),
              HasSubstr("train_job.dataset.limit_train: the train subset (first 40 of 80 "
                        "examples) has no example of \"two\" (class 2), \"three\" (class 3); "
                        "subset: stratified keeps every class"));

  request.allow_missing_classes = true;
  const absl::StatusOr<Subset> allowed = ChooseSubset(ClassOrdered({20, 20, 20, 20}), request);
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_THAT(allowed->class_counts, ElementsAre(20, 20, 0, 0));
  ASSERT_EQ(allowed->indices.size(), 40u);
  EXPECT_EQ(allowed->indices.back(), 39);
  EXPECT_THAT(allowed->notes.back(), HasSubstr("warning: the train subset"));
}

TEST(SubsetTest, ALimitBelowTheClassCountIsAnErrorThatSaysHowManyAreNeeded) {
  SubsetRequest request = Request(2, 3);
  request.split = "test";
  request.field = "limit_test";
  const absl::StatusOr<Subset> subset = ChooseSubset(ClassOrdered({5, 5, 5}), request);
  ASSERT_EQ(subset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(subset.status().message(), HasSubstr("train_job.dataset.limit_test: the test "
                                                   "subset (stratified 2 of 15 examples) has no "
                                                   "example of class 2"));
  EXPECT_THAT(subset.status().message(), HasSubstr("a limit of at least 3"));
  // The field as data too (an EvalJob renames it to its own: trainer/eval_job.cc).
  EXPECT_EQ(api::InvalidFieldOf(subset.status()), "train_job.dataset.limit_test");
}

TEST(SubsetTest, NoLimitKeepsEverythingAndChecksNothing) {
  // A class absent from the data itself is the user's data, not a subset's doing.
  for (const int64_t limit : {0, 10, 99}) {
    const absl::StatusOr<Subset> subset = ChooseSubset(ClassOrdered({4, 0, 6}), Request(limit, 3));
    ASSERT_TRUE(subset.ok()) << subset.status();
    EXPECT_FALSE(subset->subsetted);
    EXPECT_EQ(subset->indices.size(), 10u);
    EXPECT_THAT(subset->class_counts, ElementsAre(4, 0, 6));
    // A limit beyond the split keeps all of it, and says so.
    if (limit <= 10) {
      EXPECT_TRUE(subset->notes.empty());
    } else {
      EXPECT_THAT(subset->notes, ElementsAre("limit_train 99 is more than the train split's 10 "
                                             "examples: all 10 are used"));
    }
  }
}

TEST(SubsetTest, ALabelOutsideTheClassesIsAnError) {
  const absl::StatusOr<Subset> subset = ChooseSubset({0, 1, 3}, Request(2, 3));
  EXPECT_EQ(subset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(subset.status().message(), HasSubstr("example 2 has label 3"));
}

TEST(ValidationSplitTest, HoldsOutAStratifiedSeededFraction) {
  const std::vector<int64_t> labels = ClassOrdered({40, 40, 20});
  const absl::StatusOr<ValidationSplit> a = SplitValidation(labels, 0.1, Request(0, 3, 1));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->validation_class_counts, ElementsAre(4, 4, 2));
  EXPECT_EQ(a->validation.size(), 10u);
  EXPECT_EQ(a->train.size(), 90u);
  std::vector<int64_t> all = a->train;
  all.insert(all.end(), a->validation.begin(), a->validation.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(all[i], i);  // a partition
  // Same seed, same split (a resume validates on the same examples); another seed, another.
  EXPECT_EQ(SplitValidation(labels, 0.1, Request(0, 3, 1))->validation, a->validation);
  EXPECT_NE(SplitValidation(labels, 0.1, Request(0, 3, 2))->validation, a->validation);
  EXPECT_THAT(a->notes.back(), HasSubstr("validation: 10 of 100 training examples held out "
                                         "(fraction 0.1, stratified, seed 1)"));
}

TEST(ValidationSplitTest, AnEmptyPartOrAClassLeftOnlyInValidationIsAnError) {
  const absl::StatusOr<ValidationSplit> tiny =
      SplitValidation(ClassOrdered({5, 5}), 0.01, Request(0, 2));
  EXPECT_EQ(tiny.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tiny.status().message(),
              HasSubstr("train_job.dataset.validation.fraction: 0.01 of 10 training examples "
                        "leaves the validation split empty"));
  // Class 1 has one example: validation takes it (one of each class), training has none.
  SubsetRequest request = Request(0, 2);
  request.class_names = {"cat", "dog"};
  const absl::StatusOr<ValidationSplit> lonely =
      SplitValidation(ClassOrdered({9, 1}), 0.2, request);
  EXPECT_EQ(lonely.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(lonely.status().message(),
              HasSubstr("leaves no training example of \"dog\" (class 1)"));
  EXPECT_EQ(api::InvalidFieldOf(tiny.status()), "train_job.dataset.validation.fraction");
  EXPECT_EQ(api::InvalidFieldOf(lonely.status()), "train_job.dataset.validation.fraction");
}

TEST(SubsetTest, SelectRowsGathersRowsInIndexOrder) {
  const std::vector<uint8_t> bytes = {1, 2, 3, 4, 5, 6};
  EXPECT_THAT(SelectRows(bytes, 2, {2, 0}), ElementsAre(5, 6, 1, 2));
}

}  // namespace
}  // namespace mpsd::trainer
