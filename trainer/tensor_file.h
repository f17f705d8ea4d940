// The `tensors` dataset's file: what Python's
//   torch.save({"train": {"x": X, "y": Y}, "test": {"x": X, "y": Y}, "classes": [...]}, path)
// writes, read with LibTorch's own torch::pickle_load, which rebuilds dicts, lists, strings,
// numbers and tensors and refuses every other pickled Python object (it has no Python to run:
// nothing in the file is ever executed). Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_TENSOR_FILE_H_
#define MPSD_TRAINER_TENSOR_FILE_H_

#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mpsd::trainer {

struct TensorFileSplit {
  torch::Tensor x;  // [N, ...] on the CPU: float32, float64, float16, bfloat16 or uint8
  // [N] int64 on the CPU, each in [0, num_classes); or float targets (TensorFile::float_targets)
  // [N] or [N, D] float32, every value finite.
  torch::Tensor y;
};

struct TensorFile {
  TensorFileSplit train;
  TensorFileSplit test;
  // The optional "val" entry (a validation split, DatasetSpec.validation.source "val"); x and
  // y undefined when absent.
  TensorFileSplit val;
  // The optional "classes" entry (class names, index = class); empty when absent.
  std::vector<std::string> class_names;
  // len(classes) when given, else 1 + the largest training label.
  int num_classes = 0;
  // One example's shape: x.shape[1:].
  std::vector<int64_t> input_shape;
  // y is float (float32, float64, float16, bfloat16; converted to float32) in every split:
  // targets for multilabel or regression. num_classes is then their width (1 for [N]).
  bool float_targets = false;
  // float targets: y.shape[1:] of train.y, and the first value of any split that is neither 0
  // nor 1 ("train.y[4, 1]: 0.5"), empty when there is none.
  std::vector<int64_t> target_shape;
  std::string non_binary_target;
};

// Reads and checks the file at `path`. Errors (INVALID_ARGUMENT unless said; every message starts
// with the path and names the key, e.g. "<path>: train.y: dtype float32, expected int64"):
//   NOT_FOUND  "file <path> does not exist";
//   not a zip archive: a legacy torch.save file (_use_new_zipfile_serialization=False), or not
//   a torch.save file at all; a file from a newer PyTorch whose format version this LibTorch
//   cannot read; pickled Python objects other than dicts, lists, strings, numbers and tensors
//   (numpy arrays, classes: "… only dicts, lists, strings, numbers and tensors are read");
//   not a dict; a missing or unknown key (the known ones: train, test, classes; x and y in a
//   split); x not [N, ...] of a float or uint8 dtype with N >= 1; y neither int64 [N] nor float
//   [N] / [N, D] with x's N, or int64 in one split and float in another, or float targets of
//   different widths; a float target that is NaN or infinite ("train.y[3, 0]: nan; targets must
//   be finite"); classes with float targets;
//   test.x's example shape or dtype not train.x's; a label < 0 or >= the classes
//   ("test.y[17]: label 12, but there are 10 classes"); classes not a list of strings.
// Reads the whole file into memory once. Thread-safe. Throws nothing (LibTorch's errors are
// converted).
absl::StatusOr<TensorFile> ReadTensorFile(const std::string& path);

// Reads inputs for a model (PredictJob): a file of torch.save(X), or of a dict with "x": X and at
// least one more entry (LibTorch 1.13 cannot read a dict of one entry: the error says so), with X
// [N, ...] float32/float64/float16/bfloat16 or uint8, N >= 1, on the CPU as stored. Errors as
// ReadTensorFile's (the path first): not a torch.save zip file, pickled Python objects, "not a
// tensor or a dict with \"x\"", x of another dtype or without examples. Thread-safe.
absl::StatusOr<torch::Tensor> ReadInputsFile(const std::string& path);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_TENSOR_FILE_H_
