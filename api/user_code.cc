// UserCodeOf: the TorchScript files a job spec names.
#include "api/user_code.h"

#include <string>
#include <utility>
#include <vector>

#include "api/job_id.h"

namespace mpsd::api {
namespace {

bool SetsTorchScript(const google::protobuf::RepeatedPtrField<mpsd::v1::SweepParameter>& list) {
  for (const mpsd::v1::SweepParameter& parameter : list) {
    if (parameter.path() == "model.torchscript") return true;
  }
  return false;
}

// A TrainJob's own files, in the order the job names them: its TorchScript model, loss and
// metrics.
std::vector<UserCode> TrainJobFiles(const mpsd::v1::TrainJob& job) {
  std::vector<UserCode> files;
  if (!job.model().torchscript().empty()) {
    files.push_back({"train_job.model.torchscript", job.model().torchscript()});
  }
  if (!job.loss().torchscript().empty()) {
    files.push_back({"train_job.loss.torchscript", job.loss().torchscript()});
  }
  for (int i = 0; i < job.metrics_size(); ++i) {
    if (job.metrics(i).torchscript().empty()) continue;
    files.push_back(
        {"train_job.metrics[" + std::to_string(i) + "].torchscript", job.metrics(i).torchscript()});
  }
  return files;
}

}  // namespace

std::optional<UserCode> UserCodeOf(const mpsd::v1::SubmitJobRequest& request) {
  // An EvalJob's or PredictJob's model.pt given by path may be a TorchScript module (a
  // TorchScript TrainJob's), whose forward the EvalJob's check and both jobs run.
  if (request.has_eval_job() || request.has_predict_job()) {
    const bool eval = request.has_eval_job();
    const std::string& model = eval ? request.eval_job().model() : request.predict_job().model();
    if (model.empty() || IsJobId(model)) return std::nullopt;
    return UserCode{eval ? "eval_job.model" : "predict_job.model", model};
  }
  // A BenchJob's TorchScript file (a models entry that is a path, not a zoo name or a job id):
  // checked in a process of its own and timed under the stall timeout like a TrainJob's.
  if (request.has_bench_job()) {
    const auto& models = request.bench_job().models();
    for (int i = 0; i < models.size(); ++i) {
      const std::string& model = models[i];
      if (!IsJobId(model) &&
          (model.find('/') != std::string::npos ||
           (model.size() > 3 && model.compare(model.size() - 3, 3, ".pt") == 0))) {
        return UserCode{"bench_job.models[" + std::to_string(i) + "]", model};
      }
    }
    return std::nullopt;
  }
  if (!request.has_train_job()) return std::nullopt;
  std::vector<UserCode> files = TrainJobFiles(request.train_job());
  if (!files.empty()) return std::move(files.front());
  if (request.has_sweep() && (SetsTorchScript(request.sweep().grid()) ||
                              SetsTorchScript(request.sweep().random().parameters()))) {
    return UserCode{"sweep", ""};
  }
  return std::nullopt;
}

std::vector<UserCode> AllUserCodeOf(const mpsd::v1::SubmitJobRequest& request) {
  std::vector<UserCode> all;
  if (request.has_train_job()) all = TrainJobFiles(request.train_job());
  if (all.empty()) {
    if (std::optional<UserCode> one = UserCodeOf(request)) all.push_back(*std::move(one));
  }
  return all;
}

}  // namespace mpsd::api
