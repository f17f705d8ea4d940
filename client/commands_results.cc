// Result tables: sweep (trials ranked), compare (jobs side by side), bench (a BenchJob's rows).
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/job_state.h"
#include "client/bench_table.h"
#include "client/commands.h"
#include "client/format.h"
#include "client/tables.h"

namespace mpsd::client {

int Commands::GetJobs(const std::vector<std::string>& ids, std::vector<v1::Job>& jobs) {
  for (const std::string& id : ids) {
    v1::GetJobRequest request;
    request.set_job_id(id);
    v1::Job job;
    const grpc::Status status = stub_->GetJob(UnaryContext().get(), request, &job);
    if (!status.ok()) return RpcFailed(status);
    jobs.push_back(std::move(job));
  }
  return kExitOk;
}

int Commands::Sweep(const std::string& job_id, const std::string& metric, const std::string& mode,
                    const std::string& format) {
  std::vector<v1::Job> sweep;
  if (int code = GetJobs({job_id}, sweep); code != kExitOk) return code;
  if (sweep[0].kind() != v1::Job::SWEEP) {
    err_ << "mpsctl: job " << job_id << " is not a sweep ("
         << (sweep[0].has_trial() ? absl::StrCat("it is trial ", sweep[0].trial().index(),
                                                 " of sweep ", sweep[0].trial().sweep_id())
                                  : v1::Job::Kind_Name(sweep[0].kind()))
         << ")\n";
    return kExitFailed;
  }
  std::vector<v1::Job> trials;
  if (int code =
          GetJobs({sweep[0].trial_job_ids().begin(), sweep[0].trial_job_ids().end()}, trials);
      code != kExitOk) {
    return code;
  }
  const std::string shown = options_.json ? "json" : format;
  std::string ranked_by;
  absl::StatusOr<TextTable> table =
      SweepTable(trials, metric, shown == "json" || shown == "csv", mode, &ranked_by);
  if (!table.ok()) {
    err_ << "mpsctl: " << table.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> text = RenderTable(*table, shown);
  if (!text.ok()) {
    err_ << "mpsctl: " << text.status().message() << "\n";
    return kExitUsage;
  }
  out_ << *text;
  // What the order means, beside the table (stderr, as the note below: stdout stays the table).
  if (format == "table" && !options_.json) err_ << "ranked by " << ranked_by << "\n";
  if (!api::IsTerminal(sweep[0].state()) && format == "table" && !options_.json) {
    err_ << "sweep " << job_id << " is " << v1::Job::State_Name(sweep[0].state())
         << ": unfinished trials show their newest epoch\n";
  }
  return kExitOk;
}

int Commands::Compare(const std::vector<std::string>& job_ids, const std::string& format) {
  std::vector<v1::Job> jobs;
  if (int code = GetJobs(job_ids, jobs); code != kExitOk) return code;
  absl::StatusOr<std::string> text =
      RenderTable(CompareTable(jobs), options_.json ? "json" : format);
  if (!text.ok()) {
    err_ << "mpsctl: " << text.status().message() << "\n";
    return kExitUsage;
  }
  out_ << *text;
  return kExitOk;
}

int Commands::Bench(const std::string& job_id, const std::string& format_name) {
  const absl::StatusOr<BenchFormat> format = ParseBenchFormat(options_.json ? "json" : format_name);
  if (!format.ok()) {
    err_ << "mpsctl: bench: " << format.status().message() << "\n";
    return kExitUsage;
  }
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  const grpc::Status status = stub_->GetJob(UnaryContext().get(), request, &job);
  if (!status.ok()) return RpcFailed(status);
  if (!job.spec().has_bench_job()) {
    err_ << "mpsctl: bench: job " << job_id << " is a " << KindName(job.spec())
         << ", not a BenchJob\n";
    return kExitFailed;
  }
  std::vector<v1::BenchRow> rows(job.summary().bench_rows().begin(),
                                 job.summary().bench_rows().end());
  // No summary yet (running) or none at all (interrupted): the stored rows are the table.
  if (rows.empty() && job.last_seq() > 0) {
    if (const grpc::Status read = StoredBenchRows(job_id, job.last_seq(), rows); !read.ok()) {
      return RpcFailed(read);
    }
  }
  out_ << FormatBenchRows(rows, *format) << std::flush;
  if (!api::IsTerminal(job.state())) {
    err_ << "mpsctl: job " << job_id << " is " << v1::Job::State_Name(job.state()) << ": "
         << rows.size() << " row(s) so far\n";
  }
  return kExitOk;
}

grpc::Status Commands::StoredBenchRows(const std::string& job_id, int64_t last_seq,
                                       std::vector<v1::BenchRow>& rows) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  v1::StreamEventsRequest request;
  request.set_job_id(job_id);
  std::unique_ptr<grpc::ClientReaderInterface<v1::JobEvent>> reader =
      stub_->StreamEvents(&context, request);
  v1::JobEvent event;
  bool reached = false;
  while (!reached && reader->Read(&event)) {
    if (event.has_bench_row()) rows.push_back(event.bench_row());
    reached = event.seq() >= last_seq || event.has_summary();
  }
  if (reached) context.TryCancel();  // the stream would follow the job live
  const grpc::Status status = reader->Finish();
  return reached ? grpc::Status::OK : status;
}

}  // namespace mpsd::client
