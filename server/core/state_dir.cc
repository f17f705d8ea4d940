// State dir and socket checks: stat(2) and lstat(2) on the paths mpsd is about to trust.
#include "server/core/state_dir.h"

#include <dirent.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/job_id.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace {

std::string OwnerName(uid_t uid) {
  const passwd* entry = getpwuid(uid);
  return entry != nullptr ? absl::StrCat(entry->pw_name, " (uid ", uid, ")")
                          : absl::StrCat("uid ", uid);
}

std::string Mode(mode_t mode) { return absl::StrFormat("%04o", mode & 07777); }

bool SomeoneListensOn(const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return connected;
}

// Size of `path` in bytes; -1 when it does not exist (or cannot be stat'ed).
int64_t FileSize(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_size);
}

// Names under `dir` that are job ids, in no particular order.
std::vector<std::string> JobDirs(const std::string& dir) {
  std::vector<std::string> names;
  DIR* stream = opendir(dir.c_str());
  if (stream == nullptr) return names;
  while (const dirent* entry = readdir(stream)) {
    if (api::IsJobId(entry->d_name)) names.emplace_back(entry->d_name);
  }
  closedir(stream);
  return names;
}

}  // namespace

absl::Status MakePrivateDir(const std::string& dir) {
  std::error_code error;
  const bool created = std::filesystem::create_directories(dir, error);
  if (created) chmod(dir.c_str(), 0700);  // Whatever the umask of a caller other than main().
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create directory ", dir, ": ", error.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckSocketDir(const std::string& dir, uid_t euid) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("socket folder ", dir, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("socket folder ", dir, " is not a directory"));
  }
  if (st.st_uid != euid && st.st_uid != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "socket folder ", dir, " is owned by ", OwnerName(st.st_uid), ", not by ", OwnerName(euid),
        ": that user could replace mpsd's socket and receive its clients' "
        "connections. Remove the folder (or let its owner), or listen in a folder of your own "
        "(--listen unix:///path/mpsd.sock)"));
  }
  const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  if (others_write && (st.st_mode & S_ISVTX) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "socket folder ", dir, " has mode ", Mode(st.st_mode),
        ": group or others may write to it, so they could replace mpsd's socket. Run chmod 700 ",
        dir, " (or go-w), or listen in a folder of your own"));
  }
  return absl::OkStatus();
}

absl::Status RemoveStaleSocket(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("listen: cannot stat ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "listen: ", path, " exists and is not a socket (",
        S_ISREG(st.st_mode)   ? "a regular file"
        : S_ISDIR(st.st_mode) ? "a directory"
        : S_ISLNK(st.st_mode) ? "a symbolic link"
                              : "not a socket",
        "); mpsd removes only a stale socket of its own. Choose another path, or move that file "
        "away"));
  }
  if (SomeoneListensOn(path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("another process already listens on unix://", path));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError(
        absl::StrCat("listen: cannot remove the stale socket ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status CheckDatabaseNotLost(const std::string& state_dir) {
  const std::string database = state_dir + "/mpsd.db";
  const int64_t size = FileSize(database);
  if (size > 0) return absl::OkStatus();
  std::vector<std::string> found;
  for (const char* suffix : {"-wal", "-shm"}) {
    if (FileSize(database + suffix) >= 0) found.push_back(database + suffix);
  }
  std::vector<std::string> jobs = JobDirs(state_dir + "/artifacts");
  if (!jobs.empty()) {
    std::sort(jobs.begin(), jobs.end(), [](const std::string& a, const std::string& b) {
      return api::ParseJobId(a).value_or(0) < api::ParseJobId(b).value_or(0);
    });
    const size_t shown = std::min<size_t>(jobs.size(), 5);
    found.push_back(absl::StrCat(state_dir, "/artifacts/ with ", jobs.size(), " job(s) (",
                                 absl::StrJoin(jobs.begin(), jobs.begin() + shown, ", "),
                                 jobs.size() > shown ? ", …" : "", ")"));
  }
  if (found.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "state dir ", state_dir, ": the job database ", database,
      size < 0 ? " is missing" : " is empty", " but ", absl::StrJoin(found, " and "),
      (found.size() == 1 ? " is" : " are"),
      " there: the database was lost or moved, and a new one would reuse job ids and overwrite "
      "their artifacts. Restore mpsd.db (with its -wal file) from where it went, or move "
      "artifacts/ and the mpsd.db-* files out of the state dir to start afresh"));
}

int64_t HighestArtifactJobId(const std::string& artifacts_dir) {
  int64_t highest = 0;
  for (const std::string& name : JobDirs(artifacts_dir)) {
    highest = std::max(highest, api::ParseJobId(name).value_or(0));
  }
  return highest;
}

std::vector<std::string> RemoveArtifactTemporaries(const std::string& artifacts_dir) {
  std::vector<std::string> removed;
  for (const std::string& name : JobDirs(artifacts_dir)) {
    std::error_code error;
    const std::filesystem::path dir = std::filesystem::path(artifacts_dir) / name;
    for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
      const std::string file = entry.path().filename().string();
      if (!absl::EndsWith(file, ".tmp") || entry.is_directory(error)) continue;
      if (std::filesystem::remove(entry.path(), error)) removed.push_back(entry.path().string());
    }
  }
  return removed;
}

absl::Status CheckStateDirMode(const std::string& state_dir) {
  struct stat st {};
  // Others who may write the folder may replace the database, or plant a link where it is
  // about to be created: nothing the daemon does inside it afterwards could be trusted.
  if (stat(state_dir.c_str(), &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state dir ", state_dir, " has mode ", Mode(st.st_mode),
        ": group or others may write in it, and so replace the job database or plant links in "
        "it; make it private with: chmod 700 ",
        state_dir,
        " (mpsd creates it 0700 when it is "
        "missing)"));
  }
  for (const char* name : {"mpsd.db", "mpsd.db-wal", "mpsd.db-shm", "mpsd.lock"}) {
    const std::string path = state_dir + "/" + name;
    // SQLite and the lock follow a symbolic link, even a dangling one: the database would be
    // created, or written, wherever the link points.
    if (lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          path,
          " is a symbolic link: mpsd keeps its database and lock only as files in the state "
          "dir; remove the link (rm ",
          path, ") or, to move the state, give --state-dir"));
    }
  }
  if (stat(state_dir.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    spdlog::warn(
        "state dir {} has mode {}: group or others may read the job database, checkpoints and "
        "models in it; run chmod 700 {}",
        state_dir, Mode(st.st_mode), state_dir);
  }
  for (const char* name : {"mpsd.db", "mpsd.db-wal", "mpsd.db-shm", "mpsd.lock"}) {
    const std::string path = state_dir + "/" + name;
    // lstat, and regular files only: chmod follows symbolic links, and a link planted here
    // (in a state dir others can write) would turn any file the daemon may touch 0600.
    if (lstat(path.c_str(), &st) != 0) continue;
    if (!S_ISREG(st.st_mode)) {
      spdlog::warn("{} is not a regular file; its mode is left as it is", path);
      continue;
    }
    if ((st.st_mode & (S_IRWXG | S_IRWXO)) == 0) continue;
    if (chmod(path.c_str(), 0600) == 0) {
      spdlog::warn("{} had mode {}; made it 0600", path, Mode(st.st_mode));
    } else {
      spdlog::warn("{} has mode {} and cannot be made 0600: {}", path, Mode(st.st_mode),
                   std::strerror(errno));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StateDirWatch>> StateDirWatch::Start(Options options) {
  std::unique_ptr<StateDirWatch> watch(new StateDirWatch(std::move(options)));
  for (auto [path, identity] : {std::pair{&watch->options_.state_dir, &watch->dir_},
                                std::pair{&watch->options_.database, &watch->database_}}) {
    struct stat st {};
    if (stat(path->c_str(), &st) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot stat ", *path, ": ", std::strerror(errno)));
    }
    *identity = Identity{st.st_dev, st.st_ino};
  }
  watch->thread_ = std::thread([w = watch.get()] { w->Loop(); });
  return watch;
}

StateDirWatch::~StateDirWatch() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status StateDirWatch::Check() {
  {
    absl::MutexLock lock(&mu_);
    if (!lost_.ok()) return lost_;
  }
  std::string what;
  for (auto [path, identity] :
       {std::pair{&options_.state_dir, &dir_}, std::pair{&options_.database, &database_}}) {
    struct stat st {};
    if (stat(path->c_str(), &st) != 0) {
      what = absl::StrCat(*path, " is gone (", std::strerror(errno), ")");
    } else if (st.st_dev != identity->device || st.st_ino != identity->inode) {
      what = absl::StrCat(*path, " was replaced by another file");
    }
    if (!what.empty()) break;
  }
  if (what.empty()) return absl::OkStatus();
  absl::Status lost = absl::FailedPreconditionError(absl::StrCat(
      "the state dir changed under mpsd: ", what,
      ". Jobs stored from now on would be lost at the next start, so mpsd accepts no new jobs; "
      "restore the state dir, or restart mpsd to begin a new one"));
  {
    absl::MutexLock lock(&mu_);
    if (!lost_.ok()) return lost_;
    lost_ = lost;
  }
  if (options_.on_lost) options_.on_lost(lost);
  return lost;
}

void StateDirWatch::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_ && lost_.ok()) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.interval);
    if (stopping_) break;
    mu_.Unlock();
    Check().IgnoreError();
    mu_.Lock();
  }
}

}  // namespace mpsd::server
