// trainer/torch_errors.h: an exception raised inside the user's TorchScript code becomes
// INVALID_ARGUMENT naming the field (a typed cause, not INTERNAL), with the script's own message.
#include "trainer/torch_errors.h"

#include <torch/script.h>

#include <sstream>
#include <string>

#include "api/error_cause.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mpsd::trainer {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Saved and loaded, as a user's file is (its tracebacks then show the serialized code too).
torch::jit::Module Asserting() {
  torch::jit::Module module("Asserting");
  module.define(
      "def forward(self, x):\n"
      "        assert bool(torch.all(x == 0)), 'only zeros, please'\n"
      "        return x\n");
  std::stringstream saved;
  module.save(saved);
  return torch::jit::load(saved);
}

TEST(TorchErrorsTest, AScriptsExceptionIsInvalidArgumentNamingTheField) {
  torch::jit::Module module = Asserting();
  const std::string field = "train_job.metrics[2].torchscript";
  int calls_of_what = 0;
  const auto what = [&] {
    ++calls_of_what;
    return std::string("forward on x [2]");
  };
  const absl::Status fine = CatchTorchErrors([&] {
    CallUserCode(field, "/m.pt", what, [&] { return module.forward({torch::zeros({2})}); });
    return absl::OkStatus();
  });
  EXPECT_TRUE(fine.ok()) << fine;
  EXPECT_EQ(calls_of_what, 0);  // described only for an error
  const absl::Status status = CatchTorchErrors([&] {
    CallUserCode(field, "/m.pt", what, [&] { return module.forward({torch::ones({2})}); });
    return absl::OkStatus();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(api::InvalidFieldOf(status), field);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("train_job.metrics[2].torchscript: /m.pt: forward on x [2] failed: "
                         "Traceback of TorchScript, original code"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("AssertionError: only zeros, please"));
  EXPECT_THAT(std::string(status.message()), ::testing::Not(HasSubstr("serialized code")));
}

// Its last 2,000 bytes, the exception's line last, cut where a character starts: here the cut
// would fall inside an "é" (2 bytes), so the text starts after it.
TEST(TorchErrorsTest, AScriptsLongMessageKeepsItsEnd) {
  const std::string end = std::string(1999 - 19, 'y') + "ValueError: the end";
  const std::string shown = ScriptErrorText(std::string(5000, 'x') + "\xc3\xa9" + end);
  EXPECT_EQ(shown, "…" + end);
  EXPECT_EQ(ScriptErrorText("short"), "short");
}

}  // namespace
}  // namespace mpsd::trainer
