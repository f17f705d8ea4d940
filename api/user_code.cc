// UserCodeOf: the TorchScript files a job spec names.
#include "api/user_code.h"

#include <string>

#include "api/job_id.h"

namespace mpsd::api {
namespace {

bool SetsTorchScript(const google::protobuf::RepeatedPtrField<mpsd::v1::SweepParameter>& list) {
  for (const mpsd::v1::SweepParameter& parameter : list) {
    if (parameter.path() == "model.torchscript") return true;
  }
  return false;
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
  const std::string& path = request.train_job().model().torchscript();
  if (!path.empty()) return UserCode{"train_job.model.torchscript", path};
  const std::string& loss = request.train_job().loss().torchscript();
  if (!loss.empty()) return UserCode{"train_job.loss.torchscript", loss};
  const auto& metrics = request.train_job().metrics();
  for (int i = 0; i < metrics.size(); ++i) {
    if (!metrics[i].torchscript().empty()) {
      return UserCode{"train_job.metrics[" + std::to_string(i) + "].torchscript",
                      metrics[i].torchscript()};
    }
  }
  if (request.has_sweep() && (SetsTorchScript(request.sweep().grid()) ||
                              SetsTorchScript(request.sweep().random().parameters()))) {
    return UserCode{"sweep", ""};
  }
  return std::nullopt;
}

std::vector<UserCode> AllUserCodeOf(const mpsd::v1::SubmitJobRequest& request) {
  std::vector<UserCode> all;
  if (!request.has_train_job()) {
    if (std::optional<UserCode> one = UserCodeOf(request)) all.push_back(*std::move(one));
    return all;
  }
  const mpsd::v1::TrainJob& job = request.train_job();
  if (!job.model().torchscript().empty()) {
    all.push_back({"train_job.model.torchscript", job.model().torchscript()});
  }
  if (!job.loss().torchscript().empty()) {
    all.push_back({"train_job.loss.torchscript", job.loss().torchscript()});
  }
  for (int i = 0; i < job.metrics_size(); ++i) {
    if (job.metrics(i).torchscript().empty()) continue;
    all.push_back(
        {"train_job.metrics[" + std::to_string(i) + "].torchscript", job.metrics(i).torchscript()});
  }
  if (all.empty()) {
    if (std::optional<UserCode> one = UserCodeOf(request)) all.push_back(*std::move(one));
  }
  return all;
}

}  // namespace mpsd::api
