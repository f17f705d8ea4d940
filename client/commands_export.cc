// `mpsctl export` (Commands::Export): GetJob for each job (a sweep: each of its trials), then
// its stored events through StreamEvents (stored_only) into a JobExporter (client/export.h).
#include <map>

#include "absl/strings/str_join.h"
#include "api/tensorboard/job_history.h"
#include "client/commands.h"
#include "client/export.h"

namespace mpsd::client {

int Commands::Export(const std::vector<std::string>& job_ids, const std::string& format_name,
                     const std::string& dir) {
  const absl::StatusOr<ExportFormat> format = ParseExportFormat(format_name);
  if (!format.ok()) {
    err_ << "mpsctl: export: " << format.status().message() << "\n";
    return kExitUsage;
  }
  std::vector<v1::Job> named;
  if (const int code = GetJobs(job_ids, named); code != kExitOk) return code;
  // A sweep has no metrics of its own: it stands for its trials (one run each).
  std::vector<v1::Job> jobs;
  for (v1::Job& job : named) {
    if (job.kind() != v1::Job::SWEEP) {
      jobs.push_back(std::move(job));
      continue;
    }
    std::vector<v1::Job> trials;
    const std::vector<std::string> trial_ids(job.trial_job_ids().begin(),
                                             job.trial_job_ids().end());
    if (const int code = GetJobs(trial_ids, trials); code != kExitOk) return code;
    for (v1::Job& trial : trials) jobs.push_back(std::move(trial));
  }
  for (const v1::Job& job : jobs) {
    // <name>-<id>, as the daemon's tensorboard_dir names runs: a job exported again replaces its
    // own files, and two jobs of one name (in this export or an earlier one) never mix.
    const std::string run = tensorboard::RunName(job, /*with_id=*/true);
    absl::StatusOr<std::unique_ptr<JobExporter>> exporter =
        JobExporter::Start(job, *format, dir, run);
    if (!exporter.ok()) {
      err_ << "mpsctl: export: " << exporter.status().message() << "\n";
      return kExitFailed;
    }
    // No deadline: the replay ends by itself once every stored event was sent.
    grpc::ClientContext context;
    v1::StreamEventsRequest request;
    request.set_job_id(job.id());
    request.set_stored_only(true);
    request.set_latest_attempt_only(true);
    std::unique_ptr<grpc::ClientReaderInterface<v1::JobEvent>> reader =
        stub_->StreamEvents(&context, request);
    v1::JobEvent event;
    int64_t events = 0;
    absl::Status added;
    while (added.ok() && reader->Read(&event)) {
      if (event.seq() == 0) continue;  // a heartbeat
      added = (*exporter)->Add(event);
      ++events;
    }
    if (!added.ok()) {
      context.TryCancel();
      (void)reader->Finish();
      err_ << "mpsctl: export: " << added.message() << "\n";
      return kExitFailed;
    }
    if (const grpc::Status status = reader->Finish(); !status.ok()) return RpcFailed(status);
    const absl::StatusOr<std::vector<std::string>> files = (*exporter)->Finish();
    if (!files.ok()) {
      err_ << "mpsctl: export: " << files.status().message() << "\n";
      return kExitFailed;
    }
    out_ << "job " << job.id() << " (" << events << " events): " << absl::StrJoin(*files, " ")
         << "\n";
  }
  return kExitOk;
}

}  // namespace mpsd::client
