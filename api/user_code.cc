// UserCodeOf: the TorchScript files a job spec names.
#include "api/user_code.h"

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
  if (!request.has_train_job()) return std::nullopt;
  const std::string& path = request.train_job().model().torchscript();
  if (!path.empty()) return UserCode{"train_job.model.torchscript", path};
  if (request.has_sweep() && (SetsTorchScript(request.sweep().grid()) ||
                              SetsTorchScript(request.sweep().random().parameters()))) {
    return UserCode{"sweep", ""};
  }
  return std::nullopt;
}

}  // namespace mpsd::api
