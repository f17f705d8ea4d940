// Artifacts: a directory walk, each file's SHA-256 (api/sha256.h), and path checks on canonical
// paths.
#include "server/core/artifacts.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "api/executor.h"
#include "api/sha256.h"

namespace mpsd::server {
namespace fs = std::filesystem;
namespace {

std::string KindOf(const std::string& name) {
  const std::string file = fs::path(name).filename().string();
  // The finished model and what travels with it (trainer/model_export.h).
  if (file == "model.pt" || file == "best.pt" || absl::StartsWith(file, "model.")) return "model";
  if (absl::StartsWith(file, "checkpoint")) return "checkpoint";
  return "other";
}

// Whether `path` is `dir` or lies under it (both canonical).
bool IsUnder(const fs::path& path, const fs::path& dir) {
  auto [dir_end, path_it] = std::mismatch(dir.begin(), dir.end(), path.begin(), path.end());
  return dir_end == dir.end();
}

}  // namespace

absl::StatusOr<std::vector<mpsd::v1::Artifact>> ListArtifacts(const std::string& job_dir) {
  std::vector<mpsd::v1::Artifact> artifacts;
  std::error_code error;
  if (!fs::is_directory(job_dir, error)) return artifacts;
  for (auto it = fs::recursive_directory_iterator(job_dir, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (it->is_symlink() || !it->is_regular_file()) continue;
    const std::string name = fs::relative(it->path(), job_dir).generic_string();
    // Files being written, and a distributed job's rendezvous store (trainer/distributed.h).
    if (absl::EndsWith(name, ".tmp") || name == api::kRendezvousFileName) continue;
    absl::StatusOr<std::string> sha256 = api::Sha256OfFile(it->path().string());
    if (!sha256.ok()) continue;  // Removed meanwhile (an older checkpoint replaced).
    mpsd::v1::Artifact& artifact = artifacts.emplace_back();
    artifact.set_name(name);
    artifact.set_size_bytes(static_cast<int64_t>(fs::file_size(it->path(), error)));
    artifact.set_sha256(*sha256);
    artifact.set_kind(KindOf(name));
  }
  if (error) {
    return absl::InternalError(absl::StrCat("cannot list ", job_dir, ": ", error.message()));
  }
  std::sort(artifacts.begin(), artifacts.end(),
            [](const auto& a, const auto& b) { return a.name() < b.name(); });
  return artifacts;
}

absl::StatusOr<std::string> ResolveArtifact(const std::string& job_dir, absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("name: required");
  if (name.front() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("name: \"", name, "\" is absolute; artifact names are relative to the job"));
  }
  for (absl::string_view part : absl::StrSplit(name, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat("name: \"", name, "\" contains \"..\""));
    }
  }
  if (name.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError("name: contains a NUL byte");
  }
  std::error_code error;
  const fs::path dir = fs::canonical(job_dir, error);
  if (error) return absl::NotFoundError(absl::StrCat("no artifact \"", name, "\" (none at all)"));
  const fs::path path = fs::weakly_canonical(dir / std::string(name), error);
  if (error || !IsUnder(path, dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: \"", name, "\" leads outside the job's artifact directory"));
  }
  if (!fs::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat("no artifact \"", name, "\""));
  }
  return path.string();
}

}  // namespace mpsd::server
