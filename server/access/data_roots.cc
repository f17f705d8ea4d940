// DataRoots: lexical prefix checks on paths with their symlinks resolved.
#include "server/access/data_roots.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <system_error>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/effective_spec.h"
#include "api/error_cause.h"
#include "api/job_id.h"
#include "api/upload_name.h"

namespace mpsd::server {
namespace {

// `path` made absolute and with every symlink that exists resolved; the part that does not
// exist (or cannot be looked into) is normalised lexically ("..", "."). "" when even that fails.
std::string Resolve(const std::string& path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  if (error) return "";
  std::filesystem::path resolved = std::filesystem::weakly_canonical(absolute, error);
  if (error) resolved = absolute.lexically_normal();
  std::string text = resolved.string();
  while (text.size() > 1 && text.back() == '/') text.pop_back();
  return text;
}

// A submitter name that is one directory under uploads/ (not "", ".", ".." nor with a '/').
bool AreaName(absl::string_view name) {
  return !name.empty() && name != "." && name != ".." && !absl::StrContains(name, '/');
}

}  // namespace

std::vector<std::string> DefaultDataRoots(const std::string& state_dir) {
  std::vector<std::string> roots;
  if (const passwd* entry = getpwuid(getuid()); entry != nullptr && entry->pw_dir != nullptr) {
    roots.push_back(entry->pw_dir);
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    roots.push_back(home);
  }
  roots.push_back("/usr/share/datasets");
  roots.push_back(state_dir + "/artifacts");  // resume_from a checkpoint path
  return roots;
}

DataRoots::DataRoots(const std::vector<std::string>& roots, const std::string& state_dir) {
  for (const std::string& root : roots) {
    const std::string resolved = Resolve(root);
    if (!resolved.empty()) roots_.push_back(resolved);
  }
  if (!state_dir.empty()) {
    state_dir_ = Resolve(state_dir);
    if (!state_dir_.empty()) {
      artifacts_dir_ = state_dir_ + "/artifacts";
      uploads_dir_ = state_dir_ + "/uploads";
    }
  }
}

absl::Status DataRoots::ResolveUploads(mpsd::v1::SubmitJobRequest* request,
                                       absl::string_view submitter) const {
  auto resolve = [&](absl::string_view field, std::string* value) -> absl::Status {
    if (!api::IsUploadRef(*value)) return absl::OkStatus();
    absl::StatusOr<api::UploadRef> ref = api::ParseUploadRef(field, *value);
    if (!ref.ok()) return ref.status();
    if (uploads_dir_.empty()) {
      return api::WithInvalidField(
          absl::InvalidArgumentError(absl::StrCat(field, ": this daemon keeps no uploads")), field);
    }
    const std::string owner(ref->owner.empty() ? submitter : ref->owner);
    const std::string upload = absl::StrCat(uploads_dir_, "/", owner, "/", ref->name);
    // One's own upload that is not there is said so; whether another submitter's exists is
    // theirs to know (CheckPath refuses naming it, whether it exists or not).
    std::error_code error;
    if (owner == submitter && !std::filesystem::exists(upload, error)) {
      return api::WithInvalidField(absl::InvalidArgumentError(absl::StrCat(
                                       field, ": ", *value, ": you have no upload named \"",
                                       ref->name, "\" (mpsctl uploads lists yours)")),
                                   field);
    }
    *value = absl::StrCat(upload, ref->path.empty() ? "" : "/", ref->path);
    return absl::OkStatus();
  };
  if (request->has_bench_job()) {
    auto& models = *request->mutable_bench_job()->mutable_models();
    for (int i = 0; i < models.size(); ++i) {
      if (absl::Status s = resolve(absl::StrCat("bench_job.models[", i, "]"), &models[i]);
          !s.ok()) {
        return s;
      }
    }
  }
  if (request->has_predict_job()) {
    mpsd::v1::PredictJob& job = *request->mutable_predict_job();
    if (absl::Status s = resolve("predict_job.model", job.mutable_model()); !s.ok()) return s;
    auto& inputs = *job.mutable_inputs();
    for (int i = 0; i < inputs.size(); ++i) {
      if (absl::Status s = resolve(absl::StrCat("predict_job.inputs[", i, "]"), &inputs[i]);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  if (request->has_eval_job()) {
    mpsd::v1::EvalJob& job = *request->mutable_eval_job();
    if (absl::Status s = resolve("eval_job.model", job.mutable_model()); !s.ok()) return s;
    return resolve("eval_job.dataset.root", job.mutable_dataset()->mutable_root());
  }
  if (!request->has_train_job()) return absl::OkStatus();
  mpsd::v1::TrainJob& job = *request->mutable_train_job();
  std::string no_loss;  // a job without a loss keeps none (not an empty `loss: {}`)
  for (auto [field, value] : std::initializer_list<std::pair<absl::string_view, std::string*>>{
           {"train_job.dataset.root", job.mutable_dataset()->mutable_root()},
           {"train_job.model.torchscript", job.mutable_model()->mutable_torchscript()},
           {"train_job.model.weights", job.mutable_model()->mutable_weights()},
           {"train_job.loss.torchscript",
            job.has_loss() ? job.mutable_loss()->mutable_torchscript() : &no_loss},
           {"train_job.resume_from", job.mutable_resume_from()}}) {
    if (absl::Status s = resolve(field, value); !s.ok()) return s;
  }
  for (int i = 0; i < job.metrics_size(); ++i) {
    if (absl::Status s = resolve(absl::StrCat("train_job.metrics[", i, "].torchscript"),
                                 job.mutable_metrics(i)->mutable_torchscript());
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status DataRoots::CheckPath(absl::string_view field, const std::string& path,
                                  const Principal* principal) const {
  // Relative to what? The daemon's working directory is nothing a remote submitter knows, and
  // the executor may open the path from another one (mpsctl makes a job file's paths absolute).
  if (!path.empty() && path.front() != '/') {
    return api::WithInvalidField(
        absl::InvalidArgumentError(absl::StrCat(
            field, ": \"", absl::CHexEscape(path.substr(0, 256)),
            "\" is a relative path: a job submitted over TCP must name absolute paths")),
        field);
  }
  const std::string resolved = path.empty() ? "" : Resolve(path);
  auto under = [&resolved](const std::string& dir) {
    return resolved == dir || dir == "/" ||
           (absl::StartsWith(resolved, dir) && resolved[dir.size()] == '/');
  };
  // The submitter's own uploads (an admin's job: anyone's).
  if (!resolved.empty() && principal != nullptr && !uploads_dir_.empty() &&
      AreaName(principal->name) &&
      (principal->role == Role::kAdmin ? under(uploads_dir_) && resolved != uploads_dir_
                                       : under(absl::StrCat(uploads_dir_, "/", principal->name)))) {
    return absl::OkStatus();
  }
  const bool daemons_own = !state_dir_.empty() && under(state_dir_) && !under(artifacts_dir_);
  if (!resolved.empty() && !daemons_own) {
    for (const std::string& root : roots_) {
      if (under(root)) return absl::OkStatus();
    }
  }
  // The roots themselves are the operator's to tell: a remote submitter learns only the rule.
  // An upload's path is shown as the job named it (upload:@OWNER/NAME), not where the state
  // dir is.
  if (!uploads_dir_.empty() && absl::StartsWith(path, uploads_dir_ + "/")) {
    return absl::PermissionDeniedError(absl::StrCat(
        field, ": \"", api::kUploadPrefix, "@", path.substr(uploads_dir_.size() + 1),
        "\" is another submitter's upload: a job may read only its submitter's uploads (an "
        "admin's job: anyone's)"));
  }
  const std::string& shown = path;
  return absl::PermissionDeniedError(absl::StrCat(
      field, ": \"", shown,
      "\" is not under the daemon's data_roots: a job submitted over TCP may "
      "name only files under the directories its operator listed there (symbolic links "
      "resolved); ask the operator which those are"));
}

absl::Status DataRoots::CheckTree(absl::string_view field, const std::string& dir,
                                  const Principal* principal) const {
  std::error_code error;
  std::filesystem::recursive_directory_iterator it(dir, std::filesystem::directory_options::none,
                                                   error);
  int seen = 0;
  for (; !error && it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
    if (++seen > kMaxTreeEntries) break;  // A huge tree: the files past this are not looked at.
    if (it.depth() >= kMaxTreeDepth) it.disable_recursion_pending();
    if (!it->is_symlink(error)) continue;
    if (absl::Status s = CheckPath(field, it->path().string(), principal); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status DataRoots::CheckDataset(absl::string_view field, const mpsd::v1::DatasetSpec& dataset,
                                     const Principal* principal) const {
  if (!dataset.root().empty()) {
    if (absl::Status s = CheckPath(field, dataset.root(), principal); !s.ok()) return s;
    // A symlink inside the root that leads out of the roots (a "dataset file" that is
    // /etc/shadow) is refused as the root itself would be.
    return CheckTree(field, dataset.root(), principal);
  }
  if (const std::string root = api::DefaultDatasetRoot(dataset.name()); !root.empty()) {
    return CheckPath(absl::StrCat(field, " (default)"), root, principal);
  }
  return absl::OkStatus();
}

absl::Status DataRoots::Check(const mpsd::v1::SubmitJobRequest& request,
                              const Principal* principal) const {
  if (request.has_bench_job()) {
    // A TorchScript file among the models (a zoo name or a job id is no path).
    const auto& models = request.bench_job().models();
    for (int i = 0; i < models.size(); ++i) {
      if (!absl::StrContains(models[i], '/') && !absl::EndsWith(models[i], ".pt")) continue;
      if (absl::Status s =
              CheckPath(absl::StrCat("bench_job.models[", i, "]"), models[i], principal);
          !s.ok()) {
        return s;
      }
    }
  }
  if (request.has_predict_job()) {
    const mpsd::v1::PredictJob& job = request.predict_job();
    if (!job.model().empty() && !api::IsJobId(job.model())) {
      if (absl::Status s = CheckPath("predict_job.model", job.model(), principal); !s.ok()) {
        return s;
      }
    }
    for (int i = 0; i < job.inputs_size(); ++i) {
      const std::string field = absl::StrCat("predict_job.inputs[", i, "]");
      if (absl::Status s = CheckPath(field, job.inputs(i), principal); !s.ok()) return s;
      // A folder of images: a symlink in it that leads out of the roots is refused too.
      std::error_code error;
      if (std::filesystem::is_directory(job.inputs(i), error)) {
        if (absl::Status s = CheckTree(field, job.inputs(i), principal); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }
  if (request.has_eval_job()) {
    const mpsd::v1::EvalJob& job = request.eval_job();
    // A job id is no path: the scheduler checks it names a finished TrainJob.
    if (!job.model().empty() && !api::IsJobId(job.model())) {
      if (absl::Status s = CheckPath("eval_job.model", job.model(), principal); !s.ok()) {
        return s;
      }
    }
    return CheckDataset("eval_job.dataset.root", job.dataset(), principal);
  }
  if (!request.has_train_job()) return absl::OkStatus();
  const mpsd::v1::TrainJob& job = request.train_job();
  if (absl::Status s = CheckDataset("train_job.dataset.root", job.dataset(), principal); !s.ok()) {
    return s;
  }
  if (!job.model().torchscript().empty()) {
    if (absl::Status s =
            CheckPath("train_job.model.torchscript", job.model().torchscript(), principal);
        !s.ok()) {
      return s;
    }
  }
  if (!job.model().weights().empty()) {
    if (absl::Status s = CheckPath("train_job.model.weights", job.model().weights(), principal);
        !s.ok()) {
      return s;
    }
  }
  if (!job.loss().torchscript().empty()) {
    if (absl::Status s =
            CheckPath("train_job.loss.torchscript", job.loss().torchscript(), principal);
        !s.ok()) {
      return s;
    }
  }
  for (int i = 0; i < job.metrics_size(); ++i) {
    if (absl::Status s = CheckPath(absl::StrCat("train_job.metrics[", i, "].torchscript"),
                                   job.metrics(i).torchscript(), principal);
        !s.ok()) {
      return s;
    }
  }
  if (!job.resume_from().empty() && !api::IsJobId(job.resume_from())) {
    return CheckPath("train_job.resume_from", job.resume_from(), principal);
  }
  return absl::OkStatus();
}

}  // namespace mpsd::server
