// Scanning an ImageFolder tree with POSIX calls (stat follows symlinks, as os.walk(followlinks=
// True) does; the (device, inode) pairs of the directories above catch symlink loops).
#include "trainer/image_folder.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mpsd::trainer {
namespace {

struct DirEntry {
  std::string name;
  std::string path;
  struct stat st;
  bool stat_ok = false;
  int stat_errno = 0;
};

// The entries of `dir` (not "." and ".."), sorted by name, each stat'ed through symlinks.
absl::StatusOr<std::vector<DirEntry>> ListDirectory(const std::string& dir) {
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat(dir, ": cannot list"));
  std::vector<DirEntry> entries;
  errno = 0;
  while (const dirent* entry = readdir(handle)) {
    const absl::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    DirEntry e;
    e.name = std::string(name);
    e.path = absl::StrCat(dir, "/", name);
    e.stat_ok = stat(e.path.c_str(), &e.st) == 0;
    if (!e.stat_ok) e.stat_errno = errno;
    entries.push_back(std::move(e));
    errno = 0;
  }
  const int error = errno;
  closedir(handle);
  if (error != 0) return absl::ErrnoToStatus(error, absl::StrCat(dir, ": cannot list"));
  std::sort(entries.begin(), entries.end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return entries;
}

bool IsDirectory(const DirEntry& e) { return e.stat_ok && S_ISDIR(e.st.st_mode); }

// What a file that is neither a regular file nor a directory is, in words.
const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a file";
}

struct Ancestor {
  dev_t device;
  ino_t inode;
  std::string path;
};

// Appends the images below `dir` (label `label`) to `split` in os.walk's sorted order: a
// directory's files before its sub-directories' (sorted(os.walk(...)) sorts by the directory
// path, and a directory's path sorts before its children's).
absl::Status WalkClass(const std::string& dir, int label, std::vector<Ancestor>& ancestors,
                       ImageFolderSplit& split) {
  absl::StatusOr<std::vector<DirEntry>> entries = ListDirectory(dir);
  if (!entries.ok()) return entries.status();
  std::vector<const DirEntry*> subdirectories;
  for (const DirEntry& e : *entries) {
    if (IsDirectory(e)) {
      subdirectories.push_back(&e);
      continue;
    }
    if (!HasImageExtension(e.name)) {
      ++split.other_files;
      continue;
    }
    ImageFile file;
    file.path = e.path;
    file.label = label;
    if (e.stat_ok && !S_ISREG(e.st.st_mode)) {
      // Reading a FIFO would wait for a writer forever; a device could be endless.
      file.error = absl::StrCat("not a regular file (", FileKind(e.st.st_mode), ")");
    } else if (e.stat_ok) {
      file.size_bytes = e.st.st_size;
      file.mtime_ns = int64_t{e.st.st_mtim.tv_sec} * 1'000'000'000 + e.st.st_mtim.tv_nsec;
    } else {
      file.error = absl::StrCat("cannot stat: ", std::strerror(e.stat_errno));
    }
    split.files.push_back(std::move(file));
  }
  for (const DirEntry* sub : subdirectories) {
    for (const Ancestor& a : ancestors) {
      if (a.device == sub->st.st_dev && a.inode == sub->st.st_ino) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: symlink loop: it leads back to %s", sub->path, a.path));
      }
    }
    ancestors.push_back({sub->st.st_dev, sub->st.st_ino, sub->path});
    absl::Status status = WalkClass(sub->path, label, ancestors, split);
    ancestors.pop_back();
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DirEntry>> ClassDirectories(const std::string& dir) {
  absl::StatusOr<std::vector<DirEntry>> entries = ListDirectory(dir);
  if (!entries.ok()) return entries.status();
  std::vector<DirEntry> classes;
  for (DirEntry& e : *entries) {
    if (IsDirectory(e)) classes.push_back(std::move(e));
  }
  return classes;
}

absl::Status ScanSplit(const std::vector<std::string>& classes, ImageFolderSplit& split) {
  absl::StatusOr<std::vector<DirEntry>> found = ClassDirectories(split.dir);
  if (!found.ok()) return found.status();
  for (const DirEntry& e : *found) {
    if (std::find(classes.begin(), classes.end(), e.name) == classes.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: class \"%s\" is not a class of the training split (no directory %s/../train/%s)",
          split.dir, e.name, split.dir, e.name));
    }
  }
  for (size_t label = 0; label < classes.size(); ++label) {
    const auto it = std::find_if(found->begin(), found->end(),
                                 [&](const DirEntry& e) { return e.name == classes[label]; });
    if (it == found->end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: class \"%s\" of the training split has no directory here", split.dir,
                          classes[label]));
    }
    const size_t before = split.files.size();
    std::vector<Ancestor> ancestors = {{it->st.st_dev, it->st.st_ino, it->path}};
    if (absl::Status s = WalkClass(it->path, static_cast<int>(label), ancestors, split); !s.ok()) {
      return s;
    }
    if (split.files.size() == before) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: no .jpg, .jpeg or .png file", it->path));
    }
  }
  return absl::OkStatus();
}

bool IsDirectoryPath(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A folder of float targets without classes (train/targets.csv, no class directory): every
// image below each split's directory, in os.walk's order, as one unnamed class.
absl::Status ScanWithoutClasses(ImageFolderListing& listing) {
  listing.classes = {""};
  for (ImageFolderSplit* split : {&listing.train, &listing.test, &listing.val}) {
    if (split->dir.empty()) continue;
    struct stat st;
    if (stat(split->dir.c_str(), &st) != 0) {
      return absl::NotFoundError(
          absl::StrFormat("%s: cannot examine it: %s", split->dir, std::strerror(errno)));
    }
    std::vector<Ancestor> ancestors = {{st.st_dev, st.st_ino, split->dir}};
    if (absl::Status s = WalkClass(split->dir, /*label=*/0, ancestors, *split); !s.ok()) return s;
    if (split->files.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: no .jpg, .jpeg or .png file", split->dir));
    }
  }
  return absl::OkStatus();
}

// `missing` (NOT_FOUND), unless `path` cannot be examined for want of permission: then
// FAILED_PRECONDITION saying so, naming the path (it may well exist).
absl::Status Missing(const std::string& path, absl::Status missing) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 && errno == EACCES) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: permission denied: mpsd's user cannot search a folder on its path", path));
  }
  return missing;
}

}  // namespace

bool HasImageExtension(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return absl::EndsWith(lower, ".jpg") || absl::EndsWith(lower, ".jpeg") ||
         absl::EndsWith(lower, ".png");
}

absl::StatusOr<ImageFolderListing> ScanImageFolder(const std::string& root, bool separate_val) {
  if (!IsDirectoryPath(root)) {
    return Missing(root, absl::NotFoundError(absl::StrFormat("directory %s does not exist", root)));
  }
  ImageFolderListing listing;
  listing.root = root;
  listing.train.dir = absl::StrCat(root, "/train");
  if (!IsDirectoryPath(listing.train.dir)) {
    return Missing(
        listing.train.dir,
        absl::NotFoundError(absl::StrFormat(
            "%s: no such directory; an image_folder root holds train/<class>/ and val/<class>/ "
            "(or test/<class>/)",
            listing.train.dir)));
  }
  if (separate_val) {
    listing.val.dir = absl::StrCat(root, "/val");
    listing.test.dir = absl::StrCat(root, "/test");
    for (const std::string& dir : {listing.val.dir, listing.test.dir}) {
      if (!IsDirectoryPath(dir)) {
        return absl::NotFoundError(absl::StrFormat(
            "%s: no such directory; with the validation split in val/<class>/, the test split "
            "is test/<class>/",
            dir));
      }
    }
  } else {
    listing.test.dir = absl::StrCat(root, "/val");
    if (!IsDirectoryPath(listing.test.dir)) listing.test.dir = absl::StrCat(root, "/test");
  }
  if (!IsDirectoryPath(listing.test.dir)) {
    return absl::NotFoundError(absl::StrFormat(
        "%s: has neither val/ nor test/; an image_folder root holds train/<class>/ and "
        "val/<class>/ (or test/<class>/)",
        root));
  }
  absl::StatusOr<std::vector<DirEntry>> classes = ClassDirectories(listing.train.dir);
  if (!classes.ok()) return classes.status();
  struct stat targets;
  if (classes->empty() && stat((listing.train.dir + "/targets.csv").c_str(), &targets) == 0) {
    if (absl::Status s = ScanWithoutClasses(listing); !s.ok()) return s;
    return listing;
  }
  if (classes->empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: no class directory (one per class: train/<class>/<images>)", listing.train.dir));
  }
  for (const DirEntry& e : *classes) listing.classes.push_back(e.name);
  if (absl::Status s = ScanSplit(listing.classes, listing.train); !s.ok()) return s;
  if (absl::Status s = ScanSplit(listing.classes, listing.test); !s.ok()) return s;
  if (separate_val) {
    if (absl::Status s = ScanSplit(listing.classes, listing.val); !s.ok()) return s;
  }
  return listing;
}

}  // namespace mpsd::trainer
