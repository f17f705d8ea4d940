// A model a finished TrainJob left (model.pt with its model.json, trainer/model_export.h), found
// by the job's id or by the path of its model.pt, described and loaded for EvalJob and PredictJob
// (trainer/eval_job.h, trainer/predict_job.h). Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_TRAINED_MODEL_H_
#define MPSD_TRAINER_TRAINED_MODEL_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/field_checks.h"
#include "trainer/models.h"

namespace mpsd::trainer {

// What model.json says about a trained model, and where it lives.
struct TrainedModel {
  std::string dir;     // holds model.json (and model.pt)
  std::string job_id;  // the TrainJob that wrote it
  std::string label;   // "job 12 (convnet)", "job 12 (torchscript)", for people and errors
  // The TrainJob's spec as submitted (model.json's "spec").
  mpsd::v1::TrainJob spec;
  // The zoo's entry (borrowed from the registry); nullptr for a TorchScript model.
  const ModelEntry* entry = nullptr;
  // input_shape: one example, e.g. [1, 28, 28]; num_classes: the model's outputs (classes,
  // labels K or regression outputs D).
  ModelConfig config;
  // "classification", "multilabel" or "regression".
  std::string task = "classification";
  std::vector<std::string> class_names;  // index = class; may be empty
  // The preprocessing its inputs got: pixels / 255 when `scaled`, then (x - mean[c]) / std[c]
  // per channel (one value per channel, or one for all); mean and std empty = none.
  bool scaled = false;
  std::vector<float> mean, std;
  // The weights to load: <dir>/model.pt for a job id, else the file named (model.pt, best.pt or
  // a copy of either beside the model.json).
  std::string weights_path;
};

// Finds and reads the model `model` names: a job id ("12": <artifacts_dir>/12/, its model.pt) or
// the path of a weights file with model.json beside it (a job's model.pt, or its best.pt: the
// file named is the one loaded). INVALID_ARGUMENT through `fields` on "model" (e.g.
// "eval_job.model: job 12 has no model.json: not a TrainJob of this daemon that finished",
// "…: job 12's artifacts were deleted (mpsctl rm, …): its model is gone",
// "…: <path>: no such file", "…/model.json: not JSON", a zoo model this executor lacks; a
// directory, model.json itself or a file model.json lists as not mpsd's weights, its check or
// state_dict file, saying what it is). Reads files only; thread-safe.
absl::StatusOr<TrainedModel> ReadTrainedModel(const std::string& model,
                                              const std::string& artifacts_dir,
                                              const FieldChecks& fields);

// The model with the weights of `model.weights_path` on `device`, in eval mode: the zoo model built
// for `model.config` with the LibTorch archive loaded into it (read once and checked first,
// trainer/torch_archive.h, within the executor's input limits), or the TorchScript module
// (LoadTorchScriptClassifier, which checks it the same way).
// INVALID_ARGUMENT through `fields` on "model" for a file that is not that model's weights
// (another model's, or not a LibTorch archive), naming the file. Throws
// c10::Error for device failures (the caller's firewall converts).
absl::StatusOr<std::shared_ptr<ClassifierImpl>> LoadTrainedModel(const TrainedModel& model,
                                                                 const torch::Device& device,
                                                                 const FieldChecks& fields);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_TRAINED_MODEL_H_
