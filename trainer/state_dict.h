// PyTorch state_dict files read without Python, and loaded into a zoo model by name (pretrained
// weights: ModelSpec.weights). Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_STATE_DICT_H_
#define MPSD_TRAINER_STATE_DICT_H_

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mpsd::trainer {

// Named tensors in the file's order.
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Reads a state_dict file as torch.save(model.state_dict(), path) writes it (the zip format of
// PyTorch >= 1.6; also what StateDictBytes / torch::pickle_save write): a dict, or an
// OrderedDict, from parameter names to tensors, onto the CPU. The pickle is read with LibTorch's
// Unpickler (torch::pickle_load's), which constructs values and never calls Python; before it,
// every opcode of the pickle is checked against what a state dict uses (protocol 2's data
// opcodes) and every global it names against torch's tensor rebuilding, its storage types,
// LibTorch's type tag of a typed dict and collections.OrderedDict, which becomes a plain dict
// (its attributes, such as the state dict's `_metadata` of module versions, are dropped).
// INVALID_ARGUMENT naming the file for: a missing file; a file that is not a zip archive (the
// pre-1.6 format, or not torch.save's); a pickle that names any other Python object ("refused:
// the pickle names the Python object __builtin__.print ..."); an opcode outside that set; a
// value that is not a tensor (a nested dict: "entry "model" is a GenericDict, not a tensor").
// An archive from a newer PyTorch than this LibTorch reads is refused by LibTorch's reader,
// also INVALID_ARGUMENT. Reads only `path`; thread-safe.
absl::StatusOr<NamedTensors> ReadStateDict(const std::string& path);

// What LoadStateDict did.
struct StateDictLoad {
  int64_t loaded = 0;                   // parameters and buffers copied from the file
  std::vector<std::string> missing;     // the model's names the file lacks
  std::vector<std::string> unexpected;  // the file's names the model lacks
  // The head's names whose shape differs from the file's (kept as initialised), with both
  // shapes: "fc.weight (file [1000, 512], model [5, 512])".
  std::vector<std::string> reinitialised;
};

// Copies `file` into the parameters and buffers of `module` by name (under no_grad, converted
// to each target's dtype and device). The head is the module of the last parameter
// ("fc.weight" → "fc."): its tensors may differ in shape from the file's (another num_classes)
// and then keep their initialisation. INVALID_ARGUMENT without a field path: another tensor whose
// shape differs ("layer1.0.conv1.weight: the file has [64, 64, 3, 3], the model [64, 32, 3,
// 3]"); with `strict`, names missing from the file or unexpected in it (listed, at most 10 of
// each). Not thread-safe with other users of `module`.
absl::StatusOr<StateDictLoad> LoadStateDict(torch::nn::Module& module, const NamedTensors& file,
                                            bool strict);

// "[64, 3, 7, 7]".
std::string ShapeText(const torch::Tensor& tensor);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_STATE_DICT_H_
