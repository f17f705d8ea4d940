// What remote access costs: mpsd's start-up with and without a TLS listener and tokens, the
// per-call time of GetJob over the unix socket (no auth), over loopback TCP with a token
// (plaintext, gRPC's local credentials) and over TLS with a token, and StreamEvents' replay
// throughput (events/s) over the unix socket and over TLS with a token. Prints the numbers.
//
//   build/tests/e2e/mpsd_auth_overhead [--calls 1000] [--starts 5] [--replays 5]
//
// Every wait is bounded (a daemon that does not answer within 120 s ends the run with a
// message): an earlier version read the previous daemon's log, dialed its dead port, and waited
// for ever.
//
// Needs the built mpsd and the openssl CLI (certificates are made in a temp dir). Each call is
// a sync GetJob on one warm channel, one after another; times are wall-clock.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "mpsd/v1/mpsd.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void Run(const std::string& command) {
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "failed: %s\n", command.c_str());
    std::exit(1);
  }
}

struct Daemon {
  pid_t pid = -1;
  std::string log;
};

// `log` must be a new file name: the parent reads it for the TCP port before the child may have
// written anything, so an old log would name an old port.
Daemon Spawn(const std::vector<std::string>& argv, const std::string& log) {
  std::filesystem::remove(log);
  Daemon daemon;
  daemon.log = log;
  daemon.pid = fork();
  if (daemon.pid == 0) {
    freopen(log.c_str(), "w", stderr);
    freopen("/dev/null", "w", stdout);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return daemon;
}

void Stop(Daemon& daemon) {
  kill(daemon.pid, SIGTERM);
  waitpid(daemon.pid, nullptr, 0);
}

// Calls GetDevice until it answers; returns the time since `start`, seconds. Exits after 120 s.
double WaitUntilServing(mpsd::v1::JobService::Stub& stub, const std::string& token,
                        Clock::time_point start) {
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(120);
  for (;;) {
    if (Clock::now() > give_up) {
      std::fprintf(stderr, "mpsd did not answer GetDevice within 120 s\n");
      std::exit(1);
    }
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    mpsd::v1::DeviceInfo device;
    const grpc::Status status = stub.GetDevice(&context, {}, &device);
    if (status.ok()) return std::chrono::duration<double>(Clock::now() - start).count();
    if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
      std::fprintf(stderr, "GetDevice: %s\n", status.error_message().c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::string TcpAddressFromLog(const std::string& log) {
  for (int i = 0; i < 6000; ++i) {
    const std::string text = ReadFile(log);
    const size_t at = text.find("mpsd listening on 127.0.0.1:");
    if (at != std::string::npos) {
      const size_t start = at + std::string("mpsd listening on ").size();
      return text.substr(start, text.find(' ', start) - start);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::fprintf(stderr, "no TCP listener in %s\n", log.c_str());
  std::exit(1);
}

// Replays job `job_id`'s stored events (StreamEvents from seq 0 to its terminal event)
// `replays` times; returns events per second over all of them, and sets `events` to one
// replay's count.
double ReplayRate(mpsd::v1::JobService::Stub& stub, const std::string& token,
                  const std::string& job_id, int replays, int64_t& events) {
  const Clock::time_point start = Clock::now();
  int64_t total = 0;
  for (int i = 0; i < replays; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    mpsd::v1::StreamEventsRequest request;
    request.set_job_id(job_id);
    auto reader = stub.StreamEvents(&context, request);
    mpsd::v1::JobEvent event;
    int64_t count = 0;
    while (reader->Read(&event)) ++count;
    const grpc::Status status = reader->Finish();
    if (!status.ok()) {
      std::fprintf(stderr, "StreamEvents: %s\n", status.error_message().c_str());
      std::exit(1);
    }
    events = count;
    total += count;
  }
  return total / std::chrono::duration<double>(Clock::now() - start).count();
}

struct Stats {
  double mean_us, p50_us, p99_us;
};

Stats TimeGetJob(mpsd::v1::JobService::Stub& stub, const std::string& token,
                 const std::string& job_id, int calls) {
  std::vector<double> us;
  us.reserve(calls);
  mpsd::v1::GetJobRequest request;
  request.set_job_id(job_id);
  for (int i = 0; i < calls + 50; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    mpsd::v1::Job job;
    const Clock::time_point start = Clock::now();
    const grpc::Status status = stub.GetJob(&context, request, &job);
    const double elapsed = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (!status.ok()) {
      std::fprintf(stderr, "GetJob: %s\n", status.error_message().c_str());
      std::exit(1);
    }
    if (i >= 50) us.push_back(elapsed);  // the first 50 warm up
  }
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  return {sum / us.size(), us[us.size() / 2], us[us.size() * 99 / 100]};
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 1000, starts = 5, replays = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--calls") calls = std::atoi(argv[i + 1]);
    if (std::string(argv[i]) == "--starts") starts = std::atoi(argv[i + 1]);
    if (std::string(argv[i]) == "--replays") replays = std::atoi(argv[i + 1]);
  }
  int spawned = 0;
  auto log_name = [&](const std::string& what) {
    return what + "-" + std::to_string(++spawned) + ".log";
  };
  const std::string mpsd = std::string(MPSD_BINARY_DIR) + "/server/mpsd";
  char pattern[] = "/tmp/mpsd-auth-overhead-XXXXXX";
  const std::string dir = mkdtemp(pattern);
  // A CA and a server certificate for 127.0.0.1.
  Run("cd " + dir +
      " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem "
      "-days 1 -subj /CN=ca 2>/dev/null && openssl req -newkey rsa:2048 -nodes -keyout server.key "
      "-out server.csr -subj /CN=127.0.0.1 2>/dev/null && printf 'subjectAltName=IP:127.0.0.1\\n' "
      "> san && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out "
      "server.pem -days 1 -extfile san 2>/dev/null");
  Run(mpsd + " token add --tokens " + dir + "/tokens.yaml --name bench --role viewer > " + dir +
      "/token 2>/dev/null");
  const std::string token = [&] {
    std::string t = ReadFile(dir + "/token");
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
    return t;
  }();
  const std::string unix_address = "unix://" + dir + "/mpsd.sock";
  const std::vector<std::string> plain_args = {mpsd, "--listen", unix_address, "--state-dir",
                                               dir + "/state"};
  std::vector<std::string> tls_args = plain_args;
  for (const char* a : {"--listen", "127.0.0.1:0", "--tls-cert"}) tls_args.push_back(a);
  tls_args.push_back(dir + "/server.pem");
  tls_args.push_back("--tls-key");
  tls_args.push_back(dir + "/server.key");
  tls_args.push_back("--tokens");
  tls_args.push_back(dir + "/tokens.yaml");

  // Start-up: exec to the first answered GetDevice (unix socket; over TLS for the TLS daemon).
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFile(dir + "/ca.pem");
  std::vector<double> plain_starts, tls_starts;
  for (int i = 0; i < starts; ++i) {
    {
      const Clock::time_point start = Clock::now();
      Daemon daemon = Spawn(plain_args, dir + "/" + log_name("plain"));
      auto stub = mpsd::v1::JobService::NewStub(
          grpc::CreateChannel(unix_address, grpc::InsecureChannelCredentials()));
      plain_starts.push_back(WaitUntilServing(*stub, "", start));
      Stop(daemon);
    }
    {
      const Clock::time_point start = Clock::now();
      const std::string log = dir + "/" + log_name("tls");
      Daemon daemon = Spawn(tls_args, log);
      const std::string tcp = TcpAddressFromLog(log);
      auto stub =
          mpsd::v1::JobService::NewStub(grpc::CreateChannel(tcp, grpc::SslCredentials(ssl)));
      tls_starts.push_back(WaitUntilServing(*stub, token, start));
      Stop(daemon);
    }
  }
  std::sort(plain_starts.begin(), plain_starts.end());
  std::sort(tls_starts.begin(), tls_starts.end());
  const double plain_median = plain_starts[plain_starts.size() / 2];
  const double tls_median = tls_starts[tls_starts.size() / 2];
  std::printf("start-up, exec to first answered call (median of %d):\n", starts);
  std::printf("  unix socket only                  %8.1f ms\n", plain_median * 1e3);
  std::printf("  + TLS listener, tokens file       %8.1f ms  (+%.1f ms)\n", tls_median * 1e3,
              (tls_median - plain_median) * 1e3);

  // Per call: one daemon with all three listeners.
  std::vector<std::string> all_args = tls_args;
  const std::string all_log = dir + "/" + log_name("all");
  Daemon daemon = Spawn(all_args, all_log);
  const std::string tls_address = TcpAddressFromLog(all_log);
  auto unix_stub = mpsd::v1::JobService::NewStub(
      grpc::CreateChannel(unix_address, grpc::InsecureChannelCredentials()));
  WaitUntilServing(*unix_stub, "", Clock::now());
  // One job to get.
  mpsd::v1::SubmitJobRequest submit;
  submit.mutable_train_job()->mutable_model()->set_name("mlp");
  submit.mutable_train_job()->mutable_dataset()->set_name("fashion-mnist");
  // 2,000 steps of batch 1: a job with a few thousand events to replay.
  submit.mutable_train_job()->mutable_dataset()->set_limit_train(2000);
  submit.mutable_train_job()->mutable_dataset()->set_limit_test(64);
  submit.mutable_train_job()->set_epochs(1);
  submit.mutable_train_job()->set_batch_size(1);
  submit.mutable_train_job()->set_device("cpu");
  mpsd::v1::Job job;
  {
    grpc::ClientContext context;
    const grpc::Status status = unix_stub->SubmitJob(&context, submit, &job);
    if (!status.ok()) {
      std::fprintf(stderr, "SubmitJob: %s\n", status.error_message().c_str());
      return 1;
    }
  }
  auto tls_stub =
      mpsd::v1::JobService::NewStub(grpc::CreateChannel(tls_address, grpc::SslCredentials(ssl)));
  // The job finished first (at most 10 minutes), so that no training competes with the calls.
  for (int i = 0;; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    mpsd::v1::GetJobRequest get;
    get.set_job_id(job.id());
    mpsd::v1::Job now;
    if (unix_stub->GetJob(&context, get, &now).ok() && now.state() >= mpsd::v1::Job::SUCCEEDED) {
      break;
    }
    if (i > 6000) {
      std::fprintf(stderr, "job %s did not finish within 10 minutes\n", job.id().c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const Stats unix_stats = TimeGetJob(*unix_stub, "", job.id(), calls);
  const Stats tls_stats = TimeGetJob(*tls_stub, token, job.id(), calls);
  int64_t events = 0;
  const double unix_rate = ReplayRate(*unix_stub, "", job.id(), replays, events);
  const double tls_rate = ReplayRate(*tls_stub, token, job.id(), replays, events);
  Stop(daemon);

  // Loopback plaintext TCP with a token: TLS's share of the difference.
  std::vector<std::string> local_args = plain_args;
  for (const std::string a : {"--listen", "127.0.0.1:0", "--tokens"}) local_args.push_back(a);
  local_args.push_back(dir + "/tokens.yaml");
  const std::string local_log = dir + "/" + log_name("local");
  Daemon local = Spawn(local_args, local_log);
  const std::string local_address = TcpAddressFromLog(local_log);
  auto local_stub = mpsd::v1::JobService::NewStub(
      grpc::CreateChannel(local_address, grpc::experimental::LocalCredentials(LOCAL_TCP)));
  WaitUntilServing(*local_stub, token, Clock::now());
  const Stats local_stats = TimeGetJob(*local_stub, token, job.id(), calls);
  Stop(local);

  std::printf("GetJob, %d sequential calls on one warm channel (microseconds):\n", calls);
  std::printf("  %-40s %8s %8s %8s\n", "", "mean", "p50", "p99");
  auto row = [](const char* name, const Stats& s) {
    std::printf("  %-40s %8.1f %8.1f %8.1f\n", name, s.mean_us, s.p50_us, s.p99_us);
  };
  row("unix socket, no auth", unix_stats);
  row("loopback TCP plaintext + token check", local_stats);
  row("loopback TCP TLS + token check", tls_stats);
  std::printf("  added per call by TLS + token: %.1f us (mean), %.1f us (p50)\n",
              tls_stats.mean_us - unix_stats.mean_us, tls_stats.p50_us - unix_stats.p50_us);
  std::printf("StreamEvents replay of a finished job's %lld events, %d times (events/s):\n",
              static_cast<long long>(events), replays);
  std::printf("  unix socket, no auth                     %10.0f\n", unix_rate);
  std::printf("  loopback TCP TLS + token check           %10.0f\n", tls_rate);
  std::filesystem::remove_all(dir);
  return 0;
}
