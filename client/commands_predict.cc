// `mpsctl predict MODEL INPUT...` (Commands::Predict): a PredictJob submitted, followed on its
// event stream until it ends, and its predictions printed.
#include <grpcpp/client_context.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/job_state.h"
#include "client/commands.h"
#include "client/job_file.h"
#include "client/predictions.h"

namespace mpsd::client {
namespace {

// Validation reads model.json and lists the inputs: more than a plain call's deadline may pass.
constexpr absl::Duration kSubmitAllowance = absl::Seconds(60);

v1::SubmitJobRequest PredictRequest(const std::string& model,
                                    const std::vector<std::string>& inputs, int32_t top_k) {
  v1::SubmitJobRequest request;
  v1::PredictJob& job = *request.mutable_predict_job();
  job.set_model(model);
  for (const std::string& input : inputs) job.add_inputs(input);
  if (top_k > 0) job.set_top_k(top_k);
  // Relative paths are the user's, against this directory (the daemon's is elsewhere).
  std::error_code error;
  MakePathsAbsolute(request, (std::filesystem::current_path(error) / "predict").string());
  request.set_request_id(NewRequestId());
  return request;
}

}  // namespace

int Commands::Predict(const std::string& model, const std::vector<std::string>& inputs,
                      int32_t top_k, const std::string& format_name) {
  const absl::StatusOr<PredictionFormat> format =
      ParsePredictionFormat(options_.json ? "json" : format_name);
  if (!format.ok()) {
    err_ << "mpsctl: predict: " << format.status().message() << "\n";
    return kExitUsage;
  }
  const v1::SubmitJobRequest request = PredictRequest(model, inputs, top_k);
  v1::Job job;
  const std::unique_ptr<grpc::ClientContext> submit = UnaryContext();
  submit->set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout + kSubmitAllowance));
  if (const grpc::Status status = stub_->SubmitJob(submit.get(), request, &job); !status.ok()) {
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      err_ << "mpsctl: predict: mpsd rejected the job: " << status.error_message() << "\n";
      return kExitFailed;
    }
    return RpcFailed(status);
  }
  // The job's stream: its predictions, then its summary, then the state it ended in.
  grpc::ClientContext context;  // no deadline: the job may wait in the queue
  v1::StreamEventsRequest stream_request;
  stream_request.set_job_id(job.id());
  std::unique_ptr<grpc::ClientReaderInterface<v1::JobEvent>> reader =
      stub_->StreamEvents(&context, stream_request);
  std::vector<v1::Prediction> predictions;
  std::optional<v1::StateChange> ended;
  std::string task = "classification";
  v1::JobEvent event;
  while (!ended.has_value() && reader->Read(&event)) {
    if (event.has_prediction()) predictions.push_back(event.prediction());
    if (event.has_summary() && !event.summary().task().empty()) task = event.summary().task();
    if (event.has_state() && api::IsTerminal(event.state().state())) ended = event.state();
  }
  if (ended.has_value()) context.TryCancel();
  if (const grpc::Status status = reader->Finish(); !ended.has_value()) {
    err_ << "mpsctl: predict: job " << job.id() << "'s events ended before the job did ("
         << status.error_message() << "); mpsctl get " << job.id() << " shows it\n";
    return status.ok() ? kExitFailed : RpcFailed(status);
  }
  if (ended->state() != v1::Job::SUCCEEDED) {
    err_ << "mpsctl: predict: job " << job.id() << " " << v1::Job::State_Name(ended->state());
    if (ended->failure_reason() != v1::Job::FAILURE_REASON_UNSPECIFIED) {
      err_ << " (" << v1::Job::FailureReason_Name(ended->failure_reason()) << ")";
    }
    err_ << (ended->message().empty() ? "" : ": ") << ended->message() << "\n";
    return kExitFailed;
  }
  out_ << FormatPredictions(predictions, task, *format) << std::flush;
  return kExitOk;
}

}  // namespace mpsd::client
