// The daemon's files on disk, checked before they are trusted: the unix socket's folder (owner
// and mode, as ssh-agent and tmux check theirs), a stale socket (removed only when it is a
// socket), a state dir whose job database is gone while its artifacts are not, the modes of the
// state dir and its files, and a watch that notices the state dir or its database being
// deleted or replaced while mpsd runs.
#ifndef MPSD_SERVER_CORE_STATE_DIR_H_
#define MPSD_SERVER_CORE_STATE_DIR_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mpsd::server {

// The file mode creation mask mpsd runs with (main() sets it first): every directory it creates
// is 0700 and every file 0600, mpsd-executor's checkpoints and model.pt included (the child
// inherits it).
inline constexpr mode_t kPrivateUmask = 0077;

// Creates `dir` (mode 0700) and its missing parents (0700 under kPrivateUmask). An existing
// directory keeps its mode. FAILED_PRECONDITION naming the directory when it cannot be created.
absl::Status MakePrivateDir(const std::string& dir);

// The folder that holds mpsd's unix socket must be a directory that nobody but the daemon's
// user (or root) can change: owned by `euid` or by root, and not writable by group or others
// unless its sticky bit is set (as /tmp: others cannot then remove or rename our socket).
// Anything else would let another user replace the socket and receive mpsctl's connections.
// FAILED_PRECONDITION naming the folder, its owner and mode, and what to do.
absl::Status CheckSocketDir(const std::string& dir, uid_t euid);

// Prepares `path` for bind(2): nothing there is fine; a socket that no process listens on (a
// stale one, left by a killed mpsd) is removed; a socket someone listens on is
// FAILED_PRECONDITION "another process already listens on ..."; anything else (a regular file,
// a directory, a symbolic link) is FAILED_PRECONDITION and is left as it is.
absl::Status RemoveStaleSocket(const std::string& path);

// Refuses to start on a state dir whose job database was lost: when <state_dir>/mpsd.db is
// missing or zero-length while artifacts/ holds a job's directory or a WAL file
// (mpsd.db-wal, mpsd.db-shm) is present, a new database would hand out ids whose artifacts
// exist and overwrite them. FAILED_PRECONDITION naming the files found and what to do.
absl::Status CheckDatabaseNotLost(const std::string& state_dir);

// The highest job id that has a directory under `artifacts_dir` (names that are job ids: "1",
// "2", …); 0 when there is none or the directory is missing.
int64_t HighestArtifactJobId(const std::string& artifacts_dir);

// Removes the temporaries of artifact writes that never finished (an executor killed while it
// wrote, or one from before full-disk checks): every "*.tmp" directly inside a job's directory
// under `artifacts_dir` (files and links alike; folders are left alone). Called at start, when no
// executor runs. Returns the paths removed; what cannot be removed is left (and not returned).
std::vector<std::string> RemoveArtifactTemporaries(const std::string& artifacts_dir);

// FAILED_PRECONDITION, naming the command that fixes it, when group or others may write in
// `state_dir`, or when one of the daemon's files in it (mpsd.db, its WAL and shared-memory
// files, mpsd.lock) is a symbolic link (SQLite would follow it, even dangling, and create the
// database outside). Else logs a warning when `state_dir` can be read or searched by group or
// others (a pre-existing directory keeps its mode), and makes the daemon's own files in it
// 0600 if an older mpsd left them readable by others.
absl::Status CheckStateDirMode(const std::string& state_dir);

// Watches that the state dir and its database stay where mpsd opened them: someone deleting or
// replacing the directory (rm -rf, a restore over it) while mpsd runs would make every later
// job vanish at the next start. Checks every `interval` on its own thread; on the first change
// it calls `on_lost` once with FAILED_PRECONDITION saying what happened, and checks no more.
// Thread-safe; `on_lost` runs on the watch's thread and must not destroy the watch.
class StateDirWatch {
 public:
  struct Options {
    std::string state_dir;
    // The database inside it, e.g. "<state_dir>/mpsd.db"; it must exist when Start is called.
    std::string database;
    absl::Duration interval = absl::Seconds(1);
    std::function<void(const absl::Status&)> on_lost;
  };

  // Records the identity (device, inode) of the state dir and the database and starts the
  // thread. FAILED_PRECONDITION when either cannot be stat'ed now.
  static absl::StatusOr<std::unique_ptr<StateDirWatch>> Start(Options options);
  // Stops the thread.
  ~StateDirWatch();
  StateDirWatch(const StateDirWatch&) = delete;
  StateDirWatch& operator=(const StateDirWatch&) = delete;

  // OK while both are where they were; the error on_lost got once they are not.
  absl::Status Check();

 private:
  struct Identity {
    dev_t device = 0;
    ino_t inode = 0;
  };
  explicit StateDirWatch(Options options) : options_(std::move(options)) {}
  void Loop();

  // Constant after Start.
  Options options_;
  Identity dir_;
  Identity database_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_STATE_DIR_H_
