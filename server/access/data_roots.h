// Which files a job submitted over TCP may make the daemon read: the paths a TrainJob names
// (dataset.root, model.torchscript, model.weights, loss.torchscript, metrics[i].torchscript,
// resume_from), an EvalJob's model and dataset.root, and a PredictJob's model and inputs, must
// lie under one of the configured data roots once symlinks are resolved. Torch-free: checked in the
// daemon before the spec goes to the executor.
#ifndef MPSD_SERVER_ACCESS_DATA_ROOTS_H_
#define MPSD_SERVER_ACCESS_DATA_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "mpsd/v1/mpsd.pb.h"
#include "server/access/auth.h"

namespace mpsd::server {

// The default roots: the daemon user's home directory (from the password database, else
// $HOME), /usr/share/datasets and `state_dir`/artifacts.
std::vector<std::string> DefaultDataRoots(const std::string& state_dir);

// Immutable after construction; thread-safe.
class DataRoots {
 public:
  // `roots` are resolved now (symlinks followed as far as they exist); relative ones against
  // the working directory. `state_dir`, when given, is refused whatever the roots say, but for
  // its artifacts/ (a job's checkpoints, for resume_from) and, for a job of submitter S, its
  // uploads/S/ (an admin's job: all of uploads/): its database, tokens and TLS files are the
  // daemon's, never a job's to read (the daemon user's home, a default root, often holds it).
  explicit DataRoots(const std::vector<std::string>& roots, const std::string& state_dir = "");

  // Turns every `upload:NAME[/PATH]` the request names (dataset.root, model.torchscript,
  // model.weights, resume_from, a BenchJob's models, an EvalJob's model and dataset.root, a
  // PredictJob's model and inputs) into <state_dir>/uploads/<submitter>/NAME [/PATH], and
  // `upload:@OWNER/NAME[/PATH]` into OWNER's; called before any check (Check then refuses another
  // submitter's upload to anyone but an admin, the same whether it exists). INVALID_ARGUMENT
  // (INVALID_FIELD naming the field) for a malformed reference or a daemon without a state dir.
  // Other values are left as they are.
  absl::Status ResolveUploads(mpsd::v1::SubmitJobRequest* request,
                              absl::string_view submitter) const;

  // OK when every path `request` names lies under a root, and no symlink in the dataset's
  // root directory leads elsewhere (CheckTree). PERMISSION_DENIED otherwise, naming the field
  // and the path as given (an upload's as upload:@OWNER/NAME), never the roots; the message is
  // the same whether the path exists or not (and whether the daemon could read it), so that it
  // tells nothing about files outside the roots. A dataset without a root is checked at its
  // default directory (api::DefaultDatasetRoot); resume_from naming a job id (digits only) is
  // not a path.
  // `principal` (null: nobody's) is whose uploads the paths may also lie in: its own, or all
  // for an admin.
  absl::Status Check(const mpsd::v1::SubmitJobRequest& request,
                     const Principal* principal = nullptr) const;

  // The checks of a dataset's root (CheckPath and CheckTree) or, without a root, of its default
  // directory; `field` is the root's field path, e.g. "eval_job.dataset.root".
  absl::Status CheckDataset(absl::string_view field, const mpsd::v1::DatasetSpec& dataset,
                            const Principal* principal) const;

  // The check for one path; `field` is its field path, e.g. "train_job.dataset.root".
  absl::Status CheckPath(absl::string_view field, const std::string& path,
                         const Principal* principal = nullptr) const;

  // CheckPath for every symlink under the directory `dir` (which has passed CheckPath), at most
  // kMaxTreeDepth levels down and kMaxTreeEntries entries: the files a dataset reads are in it,
  // and one of them may be a link to a file outside the roots. Errors name the link's path.
  absl::Status CheckTree(absl::string_view field, const std::string& dir,
                         const Principal* principal = nullptr) const;
  static constexpr int kMaxTreeDepth = 3;
  static constexpr int kMaxTreeEntries = 100000;

  const std::vector<std::string>& roots() const { return roots_; }

 private:
  std::vector<std::string> roots_;  // Resolved, without a trailing '/'.
  std::string state_dir_;           // Resolved; "" = none
  std::string artifacts_dir_;       // <state_dir_>/artifacts
  std::string uploads_dir_;         // <state_dir_>/uploads
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_ACCESS_DATA_ROOTS_H_
