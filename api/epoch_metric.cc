// Epoch metrics by name (epoch_metric.h).
#include "api/epoch_metric.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mpsd::api {

std::optional<double> EpochMetricValue(const std::string& name,
                                       const mpsd::v1::EpochMetrics& epoch) {
  // multilabel and regression: their map holds every metric measured (none other is).
  if (!epoch.metrics().empty()) {
    const auto found = epoch.metrics().find(name);
    if (found == epoch.metrics().end()) return std::nullopt;
    return found->second;
  }
  if (name == "train_loss") return epoch.train_loss();
  if (name == "train_accuracy") return epoch.train_accuracy();
  if (name == "val_loss" && epoch.has_val_loss()) return epoch.val_loss();
  if (name == "val_accuracy" && epoch.has_val_accuracy()) return epoch.val_accuracy();
  if (name == "test_loss" && epoch.evaluated()) return epoch.test_loss();
  if (name == "test_accuracy" && epoch.evaluated()) return epoch.test_accuracy();
  return std::nullopt;
}

std::optional<bool> HigherIsBetter(absl::string_view name) {
  for (const char* up : {"_accuracy", "_f1", "_r2"}) {
    if (absl::EndsWith(name, up)) return true;
  }
  for (const char* down : {"_loss", "_mse", "_mae"}) {
    if (absl::EndsWith(name, down)) return false;
  }
  return std::nullopt;
}

std::string ModeContradiction(absl::string_view name, bool maximize) {
  const std::optional<bool> higher = HigherIsBetter(name);
  if (!higher.has_value() || *higher == maximize) return "";
  return absl::StrCat(maximize ? "max" : "min", " for ", name, ", where ",
                      *higher ? "higher" : "lower", " is better: write ", *higher ? "max" : "min",
                      ", or leave mode out for the default");
}

}  // namespace mpsd::api
