// A job's artifacts: artifacts, rm and gc (DeleteArtifacts), download (resumed, SHA-256 checked).
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "api/sha256.h"
#include "client/commands.h"
#include "client/format.h"
#include "client/reconnect.h"

namespace mpsd::client {

int Commands::DeleteArtifacts(const std::vector<std::string>& job_ids, bool dry_run) {
  v1::DeleteArtifactsRequest request;
  for (const std::string& id : job_ids) request.add_job_ids(id);
  request.set_retention_policy(job_ids.empty());
  request.set_dry_run(dry_run);
  v1::DeleteArtifactsResponse response;
  const grpc::Status status = stub_->DeleteArtifacts(UnaryContext().get(), request, &response);
  if (!status.ok()) return RpcFailed(status);
  out_ << (options_.json ? ToJsonLine(response) + "\n" : FormatDeletedArtifacts(response, dry_run));
  return kExitOk;
}

int Commands::Artifacts(const std::string& job_id) {
  v1::ListArtifactsRequest request;
  request.set_job_id(job_id);
  v1::ListArtifactsResponse response;
  const grpc::Status status = stub_->ListArtifacts(UnaryContext().get(), request, &response);
  if (!status.ok()) return RpcFailed(status);
  if (options_.json) {
    out_ << ToJsonLine(response) << "\n";
    return kExitOk;
  }
  if (response.artifacts().empty()) {
    const std::string reason = NoArtifactsReason(job_id);
    if (!reason.empty()) {
      out_ << "no artifacts: " << reason << "\n";
      return kExitOk;
    }
  }
  out_ << FormatArtifacts(response);
  return kExitOk;
}

std::string Commands::NoArtifactsReason(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  if (!stub_->GetJob(UnaryContext().get(), request, &job).ok() || job.kind() != v1::Job::SWEEP ||
      job.trial_job_ids().empty()) {
    return "";
  }
  constexpr int kShown = 3;
  std::vector<std::string> trials(
      job.trial_job_ids().begin(),
      job.trial_job_ids().begin() + std::min(kShown, job.trial_job_ids_size()));
  if (job.trial_job_ids_size() > kShown) trials.push_back("…");
  return absl::StrCat("job ", job_id, " is a sweep: its trials keep the artifacts (",
                      absl::StrJoin(trials, ", "), "; mpsctl sweep ", job_id, ")");
}

namespace {

// The artifact `name` names, or the job's model (model.pt; else the first of kind "model", else
// its only artifact) when `name` is empty.
absl::StatusOr<v1::Artifact> ChooseArtifact(const v1::ListArtifactsResponse& list,
                                            const std::string& job_id, const std::string& name) {
  if (name.empty()) {
    for (const v1::Artifact& artifact : list.artifacts()) {
      if (artifact.name() == "model.pt") return artifact;
    }
  }
  std::vector<std::string> names;
  for (const v1::Artifact& artifact : list.artifacts()) {
    if (artifact.name() == name || (name.empty() && artifact.kind() == "model")) return artifact;
    names.push_back(artifact.name());
  }
  if (name.empty() && list.artifacts_size() == 1) return list.artifacts(0);
  if (names.empty()) return absl::NotFoundError(absl::StrCat("job ", job_id, " has no artifacts"));
  return absl::NotFoundError(
      absl::StrCat(name.empty() ? absl::StrCat("job ", job_id, " has no model; name one")
                                : absl::StrCat("job ", job_id, " has no artifact \"", name, "\""),
                   " (artifacts: ", absl::StrJoin(names, ", "), ")"));
}

// Where a download of `name` goes: `output`, or inside it when it is a directory (or ends in
// '/'), or the artifact's file name in the current directory. Errors name the path: a directory
// that does not exist, a file already there (unless `force`).
absl::StatusOr<std::string> DownloadPath(const std::string& name, const std::string& output,
                                         bool force) {
  namespace fs = std::filesystem;
  const std::string file = fs::path(name).filename().string();
  std::error_code error;
  std::string path = file;
  if (!output.empty() && (fs::is_directory(output, error) || absl::EndsWith(output, "/"))) {
    if (!fs::is_directory(output, error)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "-o ", output, ": ", fs::exists(output, error) ? "not a directory" : "no such directory",
          " (create it first: mkdir -p ", output, ")"));
    }
    path = (fs::path(output) / file).string();
  } else if (!output.empty()) {
    path = output;
    const fs::path parent = fs::path(output).parent_path();
    if (!parent.empty() && !fs::is_directory(parent, error)) {
      return absl::FailedPreconditionError(
          absl::StrCat("-o ", output, ": ",
                       fs::exists(parent, error) ? "not a directory: " : "no such directory: ",
                       parent.string()));
    }
  }
  if (!force && fs::exists(fs::symlink_status(path, error))) {
    return absl::AlreadyExistsError(
        absl::StrCat(path, " already exists; --force overwrites it, or -o names another file"));
  }
  return path;
}

}  // namespace

int Commands::Download(const std::string& job_id, const std::string& name,
                       const std::string& output, bool force) {
  v1::ListArtifactsRequest list_request;
  list_request.set_job_id(job_id);
  v1::ListArtifactsResponse list;
  const grpc::Status status = stub_->ListArtifacts(UnaryContext().get(), list_request, &list);
  if (!status.ok()) return RpcFailed(status);
  absl::StatusOr<v1::Artifact> artifact = ChooseArtifact(list, job_id, name);
  if (!artifact.ok()) {
    const std::string reason = list.artifacts().empty() ? NoArtifactsReason(job_id) : "";
    err_ << "mpsctl: " << (reason.empty() ? artifact.status().message() : reason) << "\n";
    return kExitFailed;
  }
  // `-o -`: into a private temporary folder, checked, then written to stdout (`| jq`).
  const bool to_stdout = output == "-";
  std::string temporary;
  if (to_stdout) {
    const char* tmpdir = std::getenv("TMPDIR");
    temporary = absl::StrCat(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp",
                             "/mpsctl-download-XXXXXX");
    if (mkdtemp(temporary.data()) == nullptr) {
      err_ << "mpsctl: download: cannot create a temporary folder: " << std::strerror(errno)
           << "\n";
      return kExitFailed;
    }
  }
  struct RemoveTemporary {
    const std::string& folder;
    ~RemoveTemporary() {
      std::error_code ignored;
      if (!folder.empty()) std::filesystem::remove_all(folder, ignored);
    }
  } remove_temporary{temporary};
  const absl::StatusOr<std::string> destination =
      to_stdout ? absl::StatusOr<std::string>(temporary + "/artifact")
                : DownloadPath(artifact->name(), output, force);
  if (!destination.ok()) {
    err_ << "mpsctl: download: " << destination.status().message() << "\n";
    return kExitFailed;
  }
  const std::string& path = *destination;
  const std::string part = path + ".part";
  if (const int code = ReceiveResuming(job_id, *artifact, part); code != kExitOk) return code;
  return FinishDownload(*artifact, part, path, to_stdout);
}

int Commands::ReceiveResuming(const std::string& job_id, const v1::Artifact& artifact,
                              const std::string& part) {
  ReconnectPolicy reconnect(options_.reconnect_timeout);
  for (int attempt = 0;; ++attempt) {
    std::error_code error;
    int64_t offset = std::filesystem::exists(part, error)
                         ? static_cast<int64_t>(std::filesystem::file_size(part, error))
                         : 0;
    if (offset > artifact.size_bytes()) {  // Not a prefix of this artifact: start again.
      std::filesystem::remove(part, error);
      offset = 0;
    }
    int64_t received = 0;
    const grpc::Status status = ReceiveArtifact(job_id, artifact.name(), offset, part, received);
    if (received > 0) reconnect.Progressed();
    if (status.ok()) return kExitOk;
    // A first attempt that got nothing is answered at once, as every other command's call.
    if (!ReconnectPolicy::Broke(status) || (attempt == 0 && received == 0 && offset == 0) ||
        reconnect.OutOfTime()) {
      if (status.error_code() == grpc::StatusCode::DATA_LOSS) {
        err_ << "mpsctl: " << status.error_message() << "\n";
        return kExitFailed;
      }
      return RpcFailed(status);
    }
    err_ << "mpsctl: the download of " << artifact.name() << " broke (" << status.error_message()
         << "); resuming at byte " << offset + received << "\n";
    ReconnectPolicy::Wait(attempt);
  }
}

int Commands::FinishDownload(const v1::Artifact& artifact, const std::string& part,
                             const std::string& path, bool to_stdout) {
  absl::StatusOr<std::string> sha256 = api::Sha256OfFile(part);
  if (!sha256.ok() || *sha256 != artifact.sha256()) {
    std::error_code error;
    std::filesystem::remove(part, error);
    err_ << "mpsctl: " << artifact.name() << ": the downloaded bytes' SHA-256 "
         << (sha256.ok() ? *sha256 : "(unreadable)") << " is not the daemon's " << artifact.sha256()
         << "; removed " << part << ", download again\n";
    return kExitFailed;
  }
  std::error_code error;
  std::filesystem::rename(part, path, error);
  if (error) {
    err_ << "mpsctl: cannot rename " << part << " to " << path << ": " << error.message() << "\n";
    return kExitFailed;
  }
  if (to_stdout) {
    std::ifstream in(path, std::ios::binary);
    if (artifact.size_bytes() > 0) out_ << in.rdbuf();  // nothing inserted sets failbit
    out_.flush();
    if (!in || !out_) {
      err_ << "mpsctl: download: " << artifact.name() << ": cannot write it to stdout\n";
      return kExitFailed;
    }
    return kExitOk;
  }
  out_ << "downloaded " << artifact.name() << " (" << artifact.size_bytes() << " bytes, sha256 "
       << artifact.sha256() << ") to " << path << "\n";
  return kExitOk;
}

grpc::Status Commands::ReceiveArtifact(const std::string& job_id, const std::string& name,
                                       int64_t offset, const std::string& part, int64_t& received) {
  std::ofstream file(part, std::ios::binary | std::ios::app);
  if (!file) {
    return grpc::Status(grpc::StatusCode::DATA_LOSS,
                        absl::StrCat("cannot write ", part, ": ", std::strerror(errno)));
  }
  grpc::ClientContext context;
  context.set_wait_for_ready(offset > 0);
  v1::GetArtifactRequest request;
  request.set_job_id(job_id);
  request.set_name(name);
  request.set_offset(offset);
  std::unique_ptr<grpc::ClientReaderInterface<v1::ArtifactChunk>> reader =
      stub_->GetArtifact(&context, request);
  v1::ArtifactChunk chunk;
  while (reader->Read(&chunk)) {
    if (chunk.offset() != offset + received) {
      context.TryCancel();
      reader->Finish();
      return grpc::Status(
          grpc::StatusCode::DATA_LOSS,
          absl::StrCat(name, ": chunk at byte ", chunk.offset(), ", expected ", offset + received));
    }
    file.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
    received += static_cast<int64_t>(chunk.data().size());
  }
  file.flush();
  if (!file) return grpc::Status(grpc::StatusCode::DATA_LOSS, absl::StrCat("cannot write ", part));
  return reader->Finish();
}

}  // namespace mpsd::client
