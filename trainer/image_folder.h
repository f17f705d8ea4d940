// The file list of an image_folder dataset, by torchvision's ImageFolder rules: root/train/ and
// root/val/ (or root/test/) each hold one directory per class; classes are train/'s
// sub-directories sorted by name (class index = position); a class's images are the files
// anywhere below its directory (symlinks followed, as os.walk(followlinks=True)) whose names end
// in .jpg, .jpeg or .png in any case, depth first by sorted name (a directory's files before
// its sub-directories'). Scanning reads directories and
// file metadata only; nothing is decoded. Torch-free; internal to trainer/.
#ifndef MPSD_TRAINER_IMAGE_FOLDER_H_
#define MPSD_TRAINER_IMAGE_FOLDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mpsd::trainer {

struct ImageFile {
  std::string path;         // as found: <root>/train/<class>/…/<name>
  int label = 0;            // index into ImageFolderListing::classes
  int64_t size_bytes = -1;  // -1: the file could not be examined (stat failed: a dangling
                            // symlink, no permission) or is not a regular file after
                            // following symlinks (a FIFO, socket or device: never opened);
                            // `error` says why
  int64_t mtime_ns = 0;     // modification time, ns since the epoch
  std::string error;
};

struct ImageFolderSplit {
  std::string dir;               // <root>/train, <root>/val or <root>/test
  std::vector<ImageFile> files;  // in ImageFolder's order: by class, then os.walk's order
  int64_t other_files = 0;       // files skipped for their extension
};

struct ImageFolderListing {
  std::string root;
  std::vector<std::string> classes;  // sorted by name
  ImageFolderSplit train;
  ImageFolderSplit test;  // val/, else test/; test/ when `val` is scanned
  // val/ as a validation split (ScanImageFolder's separate_val); dir empty otherwise.
  ImageFolderSplit val;
};

// True for names ImageFolder's loader reads here: *.jpg, *.jpeg, *.png, any case.
bool HasImageExtension(absl::string_view name);

// Lists `root`. Errors (the message names the directory or file):
//   NOT_FOUND            root (or root/train, or both root/val and root/test) does not exist
//                        or is not a directory;
//   INVALID_ARGUMENT     train/ has no class directory; a class of train/ is not in val/ (or
//                        one of val/ is not in train/) — "<root>/val: class \"zebra\" of
//                        <root>/train has no directory here"; a class directory holds no
//                        .jpg/.jpeg/.png file ("<root>/train/cat: no .jpg, .jpeg or .png
//                        file"); a symlink loop ("<path>: symlink loop: it leads back to
//                        <ancestor>");
//   errno's code         a directory cannot be read ("<dir>: cannot list: Permission denied").
// A file that cannot be stat'ed, or that is not a regular file ("not a regular file (a FIFO)"),
// is listed with size_bytes -1 and its error (the decoder's on_bad_image decides); scanning
// opens no file. Thread-safe.
//
// separate_val (DatasetSpec.validation.source "val"): val/ is listed as `val` and test/ as
// `test`; both must exist (NOT_FOUND naming the missing one).
//
// A train/ without class directories but with a targets.csv (float targets, trainer/own_data.h)
// is listed without classes: every image below each split's directory, one class named "".
absl::StatusOr<ImageFolderListing> ScanImageFolder(const std::string& root,
                                                   bool separate_val = false);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_IMAGE_FOLDER_H_
