// What a finished TrainJob leaves beside model.pt so that the model can be used outside mpsd
// (docs/job-files.md, "Using a trained model"): model.json, which says what the model is and
// which preprocessing its inputs need; for zoo models model.state_dict.pt, a PyTorch state_dict
// (torch.load in Python, then load_state_dict into the torchvision / pytorch-examples model of
// the same name); model.check.pt, the model's own outputs on 16 fixed inputs to check a model
// loaded elsewhere against. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_MODEL_EXPORT_H_
#define MPSD_TRAINER_MODEL_EXPORT_H_

#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/datasets.h"
#include "trainer/models.h"
#include "trainer/train_job.h"

namespace mpsd::trainer {

inline constexpr char kModelJsonFile[] = "model.json";
inline constexpr char kStateDictFile[] = "model.state_dict.pt";
inline constexpr char kModelCheckFile[] = "model.check.pt";
// Inputs in model.check.pt.
inline constexpr int64_t kCheckExamples = 16;

// The Python expression that builds the zoo model `job` trained with the names and shapes of
// its state dict, e.g. "torchvision.models.resnet18(num_classes=5)"; "" where there is none
// (mpsd's own models, or a torchvision model for other than 3 input channels).
std::string PythonConstructor(const TrainJobConfig& job);

// Writes model.json, model.state_dict.pt (zoo models) and model.check.pt into job.job_dir, each
// atomically through WriteArtifactFile (trainer/artifact_file.h: a full disk is DISK_FULL), and
// names them in `summary` (model_json_path, model_state_dict_path, model_check_path). `model`
// is the finished model on job.device; it runs in eval mode for the check (under no_grad, in
// float32) and is left in eval mode. `data` says which preprocessing the inputs got.
// `model_path` is model.pt's path (named in model.json). Throws c10::Error for device failures
// (the caller's firewall converts). Not thread-safe with other users of `model`.
absl::Status WriteModelArtifacts(const TrainJobConfig& job, ClassifierImpl& model,
                                 const DeviceDataset& data, mpsd::v1::JobSummary& summary);

// The parameters and buffers of `module` as a PyTorch state_dict: torch::pickle_save of a
// Dict[str, Tensor] (CPU, contiguous), which Python's torch.load reads as a dict. Names are
// LibTorch's (= PyTorch's: "layer1.0.conv1.weight", "bn1.running_mean").
std::vector<char> StateDictBytes(const torch::nn::Module& module);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_MODEL_EXPORT_H_
