// The daemon's commands: device, models, status, dashboard; the queue's pause, resume, move.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/format.h"

namespace mpsd::client {

int Commands::Device() {
  v1::DeviceInfo device;
  const grpc::Status status =
      stub_->GetDevice(UnaryContext().get(), v1::GetDeviceRequest(), &device);
  if (!status.ok()) return RpcFailed(status);
  out_ << (options_.json ? ToJsonLine(device) + "\n" : FormatDevice(device));
  return kExitOk;
}

int Commands::Models(const std::vector<int64_t>& input_shape, std::optional<int32_t> num_classes) {
  v1::ListModelsRequest request;
  for (const int64_t dim : input_shape) request.add_input_shape(dim);
  if (num_classes.has_value()) request.set_num_classes(*num_classes);
  v1::ListModelsResponse response;
  const grpc::Status status = stub_->ListModels(UnaryContext().get(), request, &response);
  if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    // mpsd names the request field ("input_shape: ..."); say the flag the user typed.
    std::string message = status.error_message();
    if (absl::StartsWith(message, "input_shape:")) message.replace(0, 12, "--input-shape:");
    if (absl::StartsWith(message, "num_classes:")) message.replace(0, 12, "--num-classes:");
    err_ << "mpsctl: models: " << message << "\n";
    return kExitFailed;
  }
  if (!status.ok()) return RpcFailed(status);
  out_ << (options_.json ? ToJsonLine(response) + "\n" : FormatModelTable(response));
  return kExitOk;
}

int Commands::Status() {
  v1::ServerStatus status;
  const grpc::Status rpc =
      stub_->GetServerStatus(UnaryContext().get(), v1::GetServerStatusRequest(), &status);
  if (!rpc.ok()) return RpcFailed(rpc);
  out_ << (options_.json ? ToJsonLine(status) + "\n" : FormatServerStatus(status));
  return kExitOk;
}

namespace {

// http_url as a browser elsewhere reaches it (see Commands::Dashboard), with a trailing '/'.
std::string DashboardUrl(const std::string& http_url, const std::string& server) {
  // "scheme://host:port" as the daemon bound it.
  const size_t scheme_end = http_url.find("://");
  const size_t port_colon = http_url.rfind(':');
  if (scheme_end == std::string::npos || port_colon == std::string::npos ||
      port_colon < scheme_end + 3) {
    return http_url + "/";
  }
  std::string host = http_url.substr(scheme_end + 3, port_colon - scheme_end - 3);
  if (host == "0.0.0.0" || host == "[::]") {
    const auto [dialed, port] = HostAndPort(server);
    host = port > 0 && !dialed.empty() ? dialed : "localhost";
  }
  return absl::StrCat(http_url.substr(0, scheme_end + 3), host, http_url.substr(port_colon), "/");
}

}  // namespace

int Commands::Dashboard(bool open_browser) {
  v1::ServerStatus status;
  const grpc::Status rpc =
      stub_->GetServerStatus(UnaryContext().get(), v1::GetServerStatusRequest(), &status);
  if (!rpc.ok()) return RpcFailed(rpc);
  if (status.http_url().empty()) {
    err_ << "mpsctl: mpsd at " << options_.server
         << " serves no dashboard: start it with --http-listen 127.0.0.1:9464 (config "
            "http_listen: 127.0.0.1:9464; another host needs TLS: --tls-cert, --tls-key)\n";
    return kExitFailed;
  }
  const std::string url = DashboardUrl(status.http_url(), options_.server);
  out_ << url << "\n";
  err_ << "mpsctl: the page asks once for a token (kept in the tab's sessionStorage, sent as a "
          "header): on the daemon's machine, mpsd token add --state-dir DIR --name NAME --role "
          "viewer prints one, DIR being the daemon's state dir (or the admin token in "
          "DIR/admin.token, if the first start made one)\n";
  if (!open_browser) return kExitOk;
#if defined(__APPLE__)
  const char* opener = "open";
#else
  const char* opener = "xdg-open";
#endif
  std::vector<char*> argv = {const_cast<char*>(opener), const_cast<char*>(url.c_str()), nullptr};
  pid_t pid = 0;
  if (const int error = posix_spawnp(&pid, opener, nullptr, nullptr, argv.data(), environ);
      error != 0) {
    err_ << "mpsctl: cannot start " << opener << " to open the browser: " << std::strerror(error)
         << "; open " << url << " yourself\n";
    return kExitFailed;
  }
  int wait_status = 0;
  waitpid(pid, &wait_status, 0);
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    err_ << "mpsctl: " << opener << " " << url << " failed; open it yourself\n";
    return kExitFailed;
  }
  return kExitOk;
}

int Commands::Pause() {
  v1::ServerStatus status;
  const grpc::Status rpc =
      stub_->PauseQueue(UnaryContext().get(), v1::PauseQueueRequest(), &status);
  if (!rpc.ok()) return RpcFailed(rpc);
  if (options_.json) {
    out_ << ToJsonLine(status) << "\n";
  } else {
    out_ << "queue paused: " << status.queued_jobs() << " queued job(s) wait"
         << (status.running_job_id().empty()
                 ? ""
                 : absl::StrCat("; job ", status.running_job_id(), " runs to its end"))
         << " (mpsctl resume)\n";
  }
  return kExitOk;
}

int Commands::Resume() {
  v1::ServerStatus status;
  const grpc::Status rpc =
      stub_->ResumeQueue(UnaryContext().get(), v1::ResumeQueueRequest(), &status);
  if (!rpc.ok()) return RpcFailed(rpc);
  if (options_.json) {
    out_ << ToJsonLine(status) << "\n";
  } else {
    out_ << "queue running: " << status.queued_jobs() << " queued job(s)\n";
  }
  return kExitOk;
}

int Commands::Move(const std::string& job_id, int32_t priority) {
  v1::MoveJobRequest request;
  request.set_job_id(job_id);
  request.set_priority(priority);
  v1::Job job;
  const grpc::Status status = stub_->MoveJob(UnaryContext().get(), request, &job);
  if (!status.ok()) return RpcFailed(status);
  if (options_.json) {
    out_ << ToJsonLine(job) << "\n";
  } else {
    out_ << "job " << job.id() << " priority " << priority << "\n";
  }
  return kExitOk;
}

}  // namespace mpsd::client
