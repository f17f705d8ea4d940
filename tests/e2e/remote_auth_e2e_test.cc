// End-to-end tests of remote access: real mpsd processes listening on a unix socket and on
// 127.0.0.1 port 0 with real TLS (certificates made here with the openssl CLI), bearer tokens
// made with `mpsd token add`, and the real mpsctl binary and gRPC clients against them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "httplib.h"
#include "tests/common/files.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using mpsd::v1::Job;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kOpenssl[] = "/usr/bin/openssl";

// Runs the openssl CLI; fails the test when it fails.
void Openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kOpenssl};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult result = RunCommand(argv);
  ASSERT_EQ(result.exit_code, 0) << absl::StrJoin(argv, " ") << "\n" << result.err;
}

// A CA and certificates signed by it, all made with the openssl CLI in `dir`:
//   ca.pem              the CA that signs everything below
//   server.pem/.key     for IP 127.0.0.1 and DNS localhost
//   server2.pem/.key    the same names, another key (for SIGHUP reloads)
//   other-host.pem/.key for DNS other.example only
//   client.pem/.key     a client certificate (CN ci-runner) for mutual TLS
//   other-ca.pem        a CA that signed none of these
class Certificates {
 public:
  explicit Certificates(std::string dir) : dir_(std::move(dir)) {}

  void Make() {
    WriteFile(Path("ca.cnf"),
              "[ca]\ndefault_ca = test_ca\n[test_ca]\ndatabase = " + Path("index.txt") +
                  "\nnew_certs_dir = " + dir_ + "\nserial = " + Path("serial") +
                  "\ndefault_md = sha256\npolicy = any\nunique_subject = no\n"
                  "[any]\ncommonName = supplied\n"
                  "[server]\nsubjectAltName = IP:127.0.0.1,DNS:localhost\n"
                  "[other]\nsubjectAltName = DNS:other.example\n"
                  "[client]\nextendedKeyUsage = clientAuth\n");
    WriteFile(Path("index.txt"), "");
    WriteFile(Path("serial"), "1000\n");
    ASSERT_NO_FATAL_FAILURE(SelfSigned("ca", "mpsd test CA"));
    ASSERT_NO_FATAL_FAILURE(SelfSigned("other-ca", "some other CA"));
    ASSERT_NO_FATAL_FAILURE(Sign("server", "127.0.0.1", "server", 2));
    ASSERT_NO_FATAL_FAILURE(Sign("server2", "127.0.0.1", "server", 2));
    ASSERT_NO_FATAL_FAILURE(Sign("other-host", "other.example", "other", 2));
    ASSERT_NO_FATAL_FAILURE(Sign("client", "ci-runner", "client", 2));
  }

  // A server certificate for 127.0.0.1 that expires `seconds` from now: name.pem, name.key.
  void ExpiringSoon(const std::string& name, int seconds) {
    const absl::Time start = absl::Now() - absl::Hours(1);
    const absl::Time end = absl::Now() + absl::Seconds(seconds);
    ASSERT_NO_FATAL_FAILURE(SignBetween(name, "127.0.0.1", "server", start, end));
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // The certificate's serial number as openssl prints it ("serial=1001").
  static std::string Serial(const std::string& pem_text) {
    const std::string dir = std::filesystem::temp_directory_path().string();
    const std::string path = absl::StrCat(dir, "/mpsd-serial-", getpid(), ".pem");
    WriteFile(path, pem_text);
    CommandResult result = RunCommand({kOpenssl, "x509", "-in", path, "-noout", "-serial"});
    std::filesystem::remove(path);
    return std::string(absl::StripAsciiWhitespace(result.out));
  }

 private:
  void SelfSigned(const std::string& name, const std::string& cn) {
    Openssl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", Path(name + ".key"),
             "-out", Path(name + ".pem"), "-days", "2", "-subj", "/CN=" + cn});
  }
  void Sign(const std::string& name, const std::string& cn, const std::string& extensions,
            int days) {
    SignBetween(name, cn, extensions, absl::Now() - absl::Hours(1),
                absl::Now() + absl::Hours(24 * days));
  }
  void SignBetween(const std::string& name, const std::string& cn, const std::string& extensions,
                   absl::Time start, absl::Time end) {
    auto stamp = [](absl::Time t) {
      return absl::FormatTime("%Y%m%d%H%M%SZ", t, absl::UTCTimeZone());
    };
    ASSERT_NO_FATAL_FAILURE(
        Openssl({"req", "-newkey", "rsa:2048", "-nodes", "-keyout", Path(name + ".key"), "-out",
                 Path(name + ".csr"), "-subj", "/CN=" + cn}));
    ASSERT_NO_FATAL_FAILURE(Openssl(
        {"ca", "-batch", "-config", Path("ca.cnf"), "-cert", Path("ca.pem"), "-keyfile",
         Path("ca.key"), "-in", Path(name + ".csr"), "-out", Path(name + ".pem"), "-startdate",
         stamp(start), "-enddate", stamp(end), "-extensions", extensions, "-notext"}));
  }

  const std::string dir_;
};

// `mpsd token add`: the token it prints.
std::string AddToken(const std::string& tokens, const std::string& name, const std::string& role) {
  CommandResult result =
      RunCommand({MpsdPath(), "token", "add", "--tokens", tokens, "--name", name, "--role", role});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return std::string(absl::StripAsciiWhitespace(result.out));
}

std::string ShortJobYaml(const std::string& root = "/usr/share/datasets/fashion-mnist") {
  return absl::StrFormat(
      "kind: TrainJob\nmodel: {name: mlp}\n"
      "dataset: {name: fashion-mnist, root: %s, limit_train: 256, limit_test: 64}\n"
      "batch_size: 64\nepochs: 1\noptimizer: {name: adam, learning_rate: 0.001}\nseed: 1\n"
      "device: cpu\n",
      root);
}

mpsd::v1::SubmitJobRequest LongJob() { return TrainJobRequest(320, 64, 200, 64); }

// A gRPC channel to `address` over TLS, verified with `ca`, with an optional client
// certificate.
std::shared_ptr<grpc::Channel> TlsChannel(const std::string& address, const std::string& ca,
                                          const std::string& client_cert = "",
                                          const std::string& client_key = "") {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFile(ca);
  if (!client_cert.empty()) {
    ssl.pem_cert_chain = ReadFile(client_cert);
    ssl.pem_private_key = ReadFile(client_key);
  }
  return grpc::CreateChannel(address, grpc::SslCredentials(ssl));
}

std::unique_ptr<grpc::ClientContext> Context(const std::string& token) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  return context;
}

// A unary call by method name with serialized bytes (for the services whose stubs the tests
// do not have: health checking, reflection).
grpc::Status RawUnary(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const std::string& token, const std::string& request, std::string* response) {
  grpc::GenericStub stub(channel);
  auto context = Context(token);
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1), out;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(context.get(), method, grpc::StubOptions(), &in, &out, [&](grpc::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  if (status.ok() && response != nullptr) {
    std::vector<grpc::Slice> slices;
    (void)out.Dump(&slices);
    response->clear();
    for (const grpc::Slice& s : slices)
      response->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return status;
}

class RemoteTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_dir_ = new TempDir();
    certs_ = new Certificates(certs_dir_->str());
    certs_->Make();
  }
  static void TearDownTestSuite() {
    delete certs_;
    delete certs_dir_;
  }

  void SetUp() override {
    ASSERT_FALSE(HasFatalFailure());
    tokens_ = dir_.str() + "/tokens.yaml";
  }

  // A daemon on a unix socket and on TLS 127.0.0.1:0 with the suite's server certificate.
  std::unique_ptr<Daemon> StartTlsDaemon(std::vector<std::string> extra = {},
                                         const std::string& cert = "server") {
    auto daemon = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
    std::vector<std::string> args = {"--listen",          "127.0.0.1:0", "--tls-cert",
                                     Cert(cert + ".pem"), "--tls-key",   Cert(cert + ".key"),
                                     "--tokens",          tokens_};
    args.insert(args.end(), extra.begin(), extra.end());
    daemon->Start(args);
    return daemon;
  }

  CommandResult Mpsctl(const std::string& address, std::vector<std::string> args) {
    std::vector<std::string> argv = {MpsctlPath(), "--server", address};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }

  std::string TokenFile(const std::string& token) {
    const std::string path = dir_.str() + "/token-" + std::to_string(++token_files_);
    WriteFile(path, token + "\n");
    chmod(path.c_str(), 0600);
    return path;
  }

  static std::string Cert(const std::string& name) { return certs_->Path(name); }

  static TempDir* certs_dir_;
  static Certificates* certs_;
  TempDir dir_;
  std::string tokens_;
  int token_files_ = 0;
};

TempDir* RemoteTest::certs_dir_ = nullptr;
Certificates* RemoteTest::certs_ = nullptr;

// ---------------------------------------------------------------------------------------------
// TLS with mpsctl.

TEST_F(RemoteTest, TlsSubmitToSucceededWithASubmitterToken) {
  const std::string token = AddToken(tokens_, "ci", "submitter");
  std::unique_ptr<Daemon> daemon = StartTlsDaemon();
  const std::string address = TcpAddress(*daemon);
  const std::string job_file = dir_.str() + "/job.yaml";
  WriteFile(job_file, ShortJobYaml());
  CommandResult followed = Mpsctl(address, {"--tls-ca", Cert("ca.pem"), "--token-file",
                                            TokenFile(token), "submit", job_file, "--follow"});
  ASSERT_EQ(followed.exit_code, 0) << followed.out << followed.err;
  EXPECT_THAT(followed.out, HasSubstr("SUCCEEDED"));
  // The job records who submitted it; get and list show it (here with MPSD_TOKEN).
  absl::StatusOr<mpsd::v1::ListJobsResponse> jobs = rpc::List(*daemon, {});
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->jobs_size(), 1);
  EXPECT_EQ(jobs->jobs(0).state(), Job::SUCCEEDED);
  EXPECT_EQ(jobs->jobs(0).submitted_by(), "ci");
  const std::string id = jobs->jobs(0).id();
  CommandResult get = RunCommand({"/usr/bin/env", "MPSD_TOKEN=" + token, MpsctlPath(), "--server",
                                  address, "--tls-ca", Cert("ca.pem"), "get", id});
  EXPECT_EQ(get.exit_code, 0) << get.err;
  EXPECT_THAT(get.out, HasSubstr("by          ci\n"));
  CommandResult list = RunCommand({"/usr/bin/env", "MPSD_TOKEN=" + token, MpsctlPath(), "--server",
                                   address, "--tls-ca", Cert("ca.pem"), "list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("  BY\n"));
  EXPECT_THAT(list.out, HasSubstr("  ci\n"));
  // Over the unix socket, the same daemon: submitted_by "local".
  absl::StatusOr<Job> local = rpc::Submit(*daemon, TrainJobRequest(64, 64, 1, 64, "mlp"));
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(local->submitted_by(), "local");
}

// The Python client (client/python/submit.py) takes the same options as mpsctl.
TEST_F(RemoteTest, PythonClientOverTlsWithAToken) {
  const std::string token = AddToken(tokens_, "py", "submitter");
  std::unique_ptr<Daemon> daemon = StartTlsDaemon({"--tls-client-ca", Cert("ca.pem")});
  const std::string job_file = dir_.str() + "/job.yaml";
  WriteFile(job_file, ShortJobYaml());
  const std::string submit = SourcePath("client/python/submit.py");
  CommandResult done =
      RunCommand({"/usr/bin/python3", submit, "--server", TcpAddress(*daemon), "--tls-ca",
                  Cert("ca.pem"), "--tls-cert", Cert("client.pem"), "--tls-key", Cert("client.key"),
                  "--token-file", TokenFile(token), job_file});
  EXPECT_EQ(done.exit_code, 0) << done.err;
  EXPECT_THAT(done.out, HasSubstr("\"SUCCEEDED\""));
  absl::StatusOr<mpsd::v1::ListJobsResponse> jobs = rpc::List(*daemon, {});
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->jobs_size(), 1);
  EXPECT_EQ(jobs->jobs(0).submitted_by(), "py");
  CommandResult refused = RunCommand({"/usr/bin/python3", submit, "--server", TcpAddress(*daemon),
                                      "--tls-ca", Cert("ca.pem"), "--tls-cert", Cert("client.pem"),
                                      "--tls-key", Cert("client.key"), job_file});
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("refused the call: missing token"));
}

TEST_F(RemoteTest, PlaintextClientOnTheTlsPort) {
  const std::string token = AddToken(tokens_, "ci", "submitter");
  std::unique_ptr<Daemon> daemon = StartTlsDaemon();
  CommandResult result = Mpsctl(TcpAddress(*daemon), {"--token-file", TokenFile(token), "status"});
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_THAT(result.err, StartsWith("mpsctl: cannot reach mpsd at " + TcpAddress(*daemon)));
  EXPECT_THAT(result.err, HasSubstr("this port speaks TLS and mpsctl spoke plaintext: give "
                                    "--tls-ca FILE"));
}

TEST_F(RemoteTest, WrongCa) {
  const std::string token = AddToken(tokens_, "ci", "submitter");
  std::unique_ptr<Daemon> daemon = StartTlsDaemon();
  CommandResult result = Mpsctl(TcpAddress(*daemon), {"--tls-ca", Cert("other-ca.pem"),
                                                      "--token-file", TokenFile(token), "status"});
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("TLS: the server's certificate is not signed by a CA in "
                                    "--tls-ca " +
                                    Cert("other-ca.pem")));
}

// A private key given as --tls-ca (or --tls-cert): gRPC printed raw error lines and "empty
// address list"; mpsctl now says which file holds no certificate, before connecting.
TEST_F(RemoteTest, AKeyGivenAsTheCaIsNamed) {
  const std::string token = AddToken(tokens_, "ci", "submitter");
  std::unique_ptr<Daemon> daemon = StartTlsDaemon();
  CommandResult result = Mpsctl(TcpAddress(*daemon), {"--tls-ca", Cert("ca.key"), "--token-file",
                                                      TokenFile(token), "status"});
  EXPECT_EQ(result.exit_code, 64) << result.err;
  EXPECT_THAT(result.err, HasSubstr("--tls-ca " + Cert("ca.key") +
                                    ": no certificate in it (expected PEM \"BEGIN CERTIFICATE\" "
                                    "blocks; it holds a private key)"));
  EXPECT_THAT(result.err, ::testing::Not(HasSubstr("empty address list")));
  CommandResult cert =
      Mpsctl(TcpAddress(*daemon),
             {"--tls-ca", Cert("ca.pem"), "--tls-cert", Cert("client.key"), "--tls-key",
              Cert("client.key"), "--token-file", TokenFile(token), "status"});
  EXPECT_EQ(cert.exit_code, 64) << cert.err;
  EXPECT_THAT(cert.err, HasSubstr("--tls-cert " + Cert("client.key") + ": no certificate in it"));
}

// Secret files others may read: mpsctl warns (naming the chmod that fixes it) and goes on;
// mpsd refuses a TLS key every user may read, as ssh refuses such a key.
TEST_F(RemoteTest, SecretFilesReadableByOthers) {
  const std::string token = AddToken(tokens_, "ci", "submitter");
  const std::string loose_key = dir_.str() + "/loose.key";
  std::filesystem::copy_file(Cert("server.key"), loose_key);
  ASSERT_EQ(chmod(loose_key.c_str(), 0644), 0);
  CommandResult refused =
      RunCommand({MpsdPath(), "--listen", "127.0.0.1:0", "--state-dir", dir_.str() + "/state",
                  "--tokens", tokens_, "--tls-cert", Cert("server.pem"), "--tls-key", loose_key});
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("TLS key " + loose_key +
                                     " has mode 0644: every user of this "
                                     "machine may read (or replace) the daemon's private key; "
                                     "make it private with: chmod 600 " +
                                     loose_key));
  // --check-config says so too.
  const std::string config = dir_.str() + "/tls.yaml";
  WriteFile(config, "tls: {cert: " + Cert("server.pem") + ", key: " + loose_key + "}\n");
  CommandResult checked = RunCommand({MpsdPath(), "--check-config", config});
  EXPECT_EQ(checked.exit_code, 2) << checked.err;
  EXPECT_THAT(checked.err, HasSubstr("TLS key " + loose_key + " has mode 0644"));

  std::unique_ptr<Daemon> daemon = StartTlsDaemon();
  const std::string loose_token = TokenFile(token);
  ASSERT_EQ(chmod(loose_token.c_str(), 0644), 0);
  CommandResult warned = Mpsctl(
      TcpAddress(*daemon), {"--tls-ca", Cert("ca.pem"), "--token-file", loose_token, "status"});
  EXPECT_EQ(warned.exit_code, 0) << warned.err;
  EXPECT_THAT(warned.err, HasSubstr("mpsctl: warning: --token-file " + loose_token +
                                    " is accessible by other users (mode 0644)"));
  EXPECT_THAT(warned.err, HasSubstr("chmod 600 " + loose_token));
  CommandResult quiet = Mpsctl(TcpAddress(*daemon), {"--tls-ca", Cert("ca.pem"), "--token-file",
                                                     TokenFile(token), "status"});
  EXPECT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_THAT(quiet.err, ::testing::Not(HasSubstr("warning")));
}

TEST_F(RemoteTest, WrongHost) {
  const std::string token = AddToken(tokens_, "ci", "submitter");
  std::unique_ptr<Daemon> daemon = StartTlsDaemon({}, "other-host");
  CommandResult result = Mpsctl(TcpAddress(*daemon), {"--tls-ca", Cert("ca.pem"), "--token-file",
                                                      TokenFile(token), "status"});
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_THAT(result.err,
              HasSubstr("TLS: the server's certificate is not issued for \"127.0.0.1\""));
}

TEST_F(RemoteTest, ExpiredCertificate) {
  // Refused at start, naming the file.
  ASSERT_NO_FATAL_FAILURE(certs_->ExpiringSoon("expired", -60));
  CommandResult refused = RunCommand({MpsdPath(), "--listen", "127.0.0.1:0", "--state-dir",
                                      dir_.str() + "/refused", "--tls-cert", Cert("expired.pem"),
                                      "--tls-key", Cert("expired.key"), "--tokens", tokens_});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("TLS certificate " + Cert("expired.pem") + ": expired on "));
  // One that expires while mpsd runs: mpsctl says so.
  const std::string token = AddToken(tokens_, "ci", "submitter");
  constexpr int kValidS = 8;
  const absl::Time expires = absl::Now() + absl::Seconds(kValidS);
  ASSERT_NO_FATAL_FAILURE(certs_->ExpiringSoon("expiring", kValidS));
  std::unique_ptr<Daemon> daemon = StartTlsDaemon({}, "expiring");
  absl::SleepFor(expires - absl::Now() + absl::Seconds(2));
  CommandResult result = Mpsctl(TcpAddress(*daemon), {"--tls-ca", Cert("ca.pem"), "--token-file",
                                                      TokenFile(token), "status"});
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("TLS: the server's certificate has expired"));
}

TEST_F(RemoteTest, MutualTls) {
  const std::string token = AddToken(tokens_, "ci", "viewer");
  std::unique_ptr<Daemon> daemon = StartTlsDaemon({"--tls-client-ca", Cert("ca.pem")});
  const std::string address = TcpAddress(*daemon);
  CommandResult without =
      Mpsctl(address, {"--tls-ca", Cert("ca.pem"), "--token-file", TokenFile(token), "status"});
  EXPECT_EQ(without.exit_code, 2) << without.err;
  EXPECT_THAT(without.err, HasSubstr("TLS: mpsd requires a client certificate (mutual TLS): "
                                     "give --tls-cert FILE --tls-key FILE"));
  CommandResult with =
      Mpsctl(address, {"--tls-ca", Cert("ca.pem"), "--tls-cert", Cert("client.pem"), "--tls-key",
                       Cert("client.key"), "--token-file", TokenFile(token), "status"});
  EXPECT_EQ(with.exit_code, 0) << with.err;
  // A client certificate from another CA is refused too.
  CommandResult foreign =
      Mpsctl(address, {"--tls-ca", Cert("ca.pem"), "--tls-cert", Cert("other-ca.pem"), "--tls-key",
                       Cert("other-ca.key"), "--token-file", TokenFile(token), "status"});
  EXPECT_EQ(foreign.exit_code, 2) << foreign.err;
  // And the token is still needed: a certificate alone is not enough.
  auto channel = TlsChannel(address, Cert("ca.pem"), Cert("client.pem"), Cert("client.key"));
  mpsd::v1::ServerStatus status;
  grpc::Status no_token =
      mpsd::v1::JobService::NewStub(channel)->GetServerStatus(Context("").get(), {}, &status);
  EXPECT_EQ(no_token.error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

// ---------------------------------------------------------------------------------------------
// Tokens and roles.

TEST_F(RemoteTest, TokenMatrix) {
  const std::string viewer = AddToken(tokens_, "dash", "viewer");
  const std::string submitter = AddToken(tokens_, "ci", "submitter");
  const std::string other_submitter = AddToken(tokens_, "ci2", "submitter");
  const std::string admin = AddToken(tokens_, "root", "admin");
  const std::string revoked = AddToken(tokens_, "old", "admin");
  CommandResult revoke = RunCommand({MpsdPath(), "token", "revoke", "old", "--tokens", tokens_});
  ASSERT_EQ(revoke.exit_code, 0) << revoke.err;
  CommandResult listed = RunCommand({MpsdPath(), "token", "list", "--tokens", tokens_});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("dash"));
  EXPECT_THAT(listed.out, Not(HasSubstr("old")));
  EXPECT_THAT(ReadFile(tokens_), Not(HasSubstr(viewer)));
  // The daemon's --state-dir may follow the subcommand as well as precede it.
  const std::string other_state = dir_.str() + "/other-state";
  CommandResult after = RunCommand({MpsdPath(), "token", "add", "--state-dir", other_state,
                                    "--name", "late", "--role", "viewer"});
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_THAT(ReadFile(other_state + "/tokens.yaml"), HasSubstr("late"));

  std::unique_ptr<Daemon> daemon = StartTlsDaemon();
  auto channel = TlsChannel(TcpAddress(*daemon), Cert("ca.pem"));
  auto stub = mpsd::v1::JobService::NewStub(channel);
  // A running job (over the unix socket) keeps the ones below queued.
  absl::StatusOr<Job> running = rpc::Submit(*daemon, LongJob());
  ASSERT_TRUE(running.ok()) << running.status();
  // A job of the other submitter, queued, to cancel.
  Job others;
  ASSERT_TRUE(stub->SubmitJob(Context(other_submitter).get(), TrainJobRequest(64, 64, 1, 64, "mlp"),
                              &others)
                  .ok());
  EXPECT_EQ(others.submitted_by(), "ci2");

  const std::map<std::string, std::string> tokens = {
      {"none", ""},       {"unknown", "mpsd_0123456789"}, {"revoked", revoked},
      {"viewer", viewer}, {"submitter", submitter},       {"admin", admin}};
  using Code = grpc::StatusCode;
  auto expected = [](const std::string& who, const std::string& needs) {
    if (who == "none" || who == "unknown" || who == "revoked") return Code::UNAUTHENTICATED;
    const std::map<std::string, int> rank = {{"viewer", 1}, {"submitter", 2}, {"admin", 3}};
    return rank.at(who) >= rank.at(needs) ? Code::OK : Code::PERMISSION_DENIED;
  };
  for (const auto& [who, token] : tokens) {
    SCOPED_TRACE(who);
    Job job;
    mpsd::v1::GetJobRequest get;
    get.set_job_id(running->id());
    EXPECT_EQ(stub->GetJob(Context(token).get(), get, &job).error_code(), expected(who, "viewer"));
    mpsd::v1::ListJobsResponse jobs;
    EXPECT_EQ(stub->ListJobs(Context(token).get(), {}, &jobs).error_code(),
              expected(who, "viewer"));
    mpsd::v1::DeviceInfo device;
    EXPECT_EQ(stub->GetDevice(Context(token).get(), {}, &device).error_code(),
              expected(who, "viewer"));
    mpsd::v1::ListModelsResponse models;
    EXPECT_EQ(stub->ListModels(Context(token).get(), {}, &models).error_code(),
              expected(who, "viewer"));
    mpsd::v1::ServerStatus status;
    EXPECT_EQ(stub->GetServerStatus(Context(token).get(), {}, &status).error_code(),
              expected(who, "viewer"));
    // A stream: the first event, or the error.
    {
      auto context = Context(token);
      mpsd::v1::StreamEventsRequest request;
      request.set_job_id(running->id());
      auto reader = stub->StreamEvents(context.get(), request);
      mpsd::v1::JobEvent event;
      const bool got = reader->Read(&event);
      if (got) context->TryCancel();
      const grpc::Status finished = reader->Finish();
      EXPECT_EQ(got ? Code::OK : finished.error_code(), expected(who, "viewer"));
    }
    // Health checking and reflection need viewer too.
    std::string health;
    EXPECT_EQ(RawUnary(channel, "/grpc.health.v1.Health/Check", token, "", &health).error_code(),
              expected(who, "viewer"));
    std::string reflection;
    // ServerReflectionRequest{list_services: ""}: field 7, length 0.
    const grpc::Status reflected =
        RawUnary(channel, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", token,
                 std::string("\x3a\x00", 2), &reflection);
    EXPECT_EQ(reflected.error_code(), expected(who, "viewer"));
    if (reflected.ok()) EXPECT_THAT(reflection, HasSubstr("mpsd.v1.JobService"));
    // Submit (each accepted job is cancelled again below by its submitter).
    Job submitted;
    const grpc::Status submit =
        stub->SubmitJob(Context(token).get(), TrainJobRequest(64, 64, 1, 64, "mlp"), &submitted);
    EXPECT_EQ(submit.error_code(), expected(who, "submitter")) << submit.error_message();
    if (submit.error_code() == Code::PERMISSION_DENIED) {
      EXPECT_EQ(submit.error_message(),
                "SubmitJob needs role submitter; token \"dash\" has viewer");
    }
    if (submit.ok()) {
      // Its own job: a submitter may cancel it.
      mpsd::v1::CancelJobRequest own;
      own.set_job_id(submitted.id());
      Job cancelled;
      EXPECT_TRUE(stub->CancelJob(Context(token).get(), own, &cancelled).ok());
      EXPECT_EQ(cancelled.state(), Job::CANCELLED);
    }
    // Another token's job: admin only.
    if (who != "admin") {
      mpsd::v1::CancelJobRequest theirs;
      theirs.set_job_id(others.id());
      Job cancelled;
      const grpc::Status cancel = stub->CancelJob(Context(token).get(), theirs, &cancelled);
      EXPECT_EQ(cancel.error_code(), who == "none" || who == "unknown" || who == "revoked"
                                         ? Code::UNAUTHENTICATED
                                         : Code::PERMISSION_DENIED);
      if (who == "submitter") {
        EXPECT_THAT(cancel.error_message(), HasSubstr("needs role admin"));
        EXPECT_THAT(cancel.error_message(), HasSubstr("submitted by \"ci2\""));
      }
      if (who == "viewer") EXPECT_THAT(cancel.error_message(), HasSubstr("needs role submitter"));
    }
  }
  // The admin cancels the other submitter's job, and the running one.
  for (const std::string& id : {others.id(), running->id()}) {
    mpsd::v1::CancelJobRequest request;
    request.set_job_id(id);
    Job cancelled;
    const grpc::Status cancel = stub->CancelJob(Context(admin).get(), request, &cancelled);
    EXPECT_TRUE(cancel.ok()) << cancel.error_message();
  }
  // Every failure was logged with its method and the token's name, and no token appears.
  const std::string log = ReadFile(daemon->log_path());
  EXPECT_THAT(log, HasSubstr("auth: PERMISSION_DENIED /mpsd.v1.JobService/SubmitJob: SubmitJob "
                             "needs role submitter; token \"dash\" has viewer"));
  EXPECT_THAT(log, HasSubstr("auth: UNAUTHENTICATED /mpsd.v1.JobService/GetJob: unknown or "
                             "revoked token (token -)"));
  EXPECT_THAT(log, HasSubstr("CancelJob from ipv4:127.0.0.1:"));
  for (const std::string& token : {viewer, submitter, other_submitter, admin, revoked}) {
    EXPECT_THAT(log, Not(HasSubstr(token.substr(5))));
  }
  EXPECT_THAT(log, Not(HasSubstr("mpsd_0123456789")));
}

// A client that retries a bad token in a loop: the daemon logs the first refusals of each
// minute, not every one (server/access/log_limiter.h), and still refuses every call.
TEST_F(RemoteTest, ABadTokenInALoopDoesNotFloodTheLog) {
  std::unique_ptr<Daemon> daemon = StartTlsDaemon();
  auto stub = mpsd::v1::JobService::NewStub(TlsChannel(TcpAddress(*daemon), Cert("ca.pem")));
  constexpr int kCalls = 250;
  for (int i = 0; i < kCalls; ++i) {
    mpsd::v1::DeviceInfo device;
    ASSERT_EQ(stub->GetDevice(Context("mpsd_0123456789").get(), {}, &device).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  const std::string log = ReadFile(daemon->log_path());
  const std::string line = "auth: UNAUTHENTICATED /mpsd.v1.JobService/GetDevice";
  int logged = 0;
  for (size_t at = log.find(line); at != std::string::npos; at = log.find(line, at + 1)) ++logged;
  EXPECT_GE(logged, 100);  // TokenAuthProcessor::kRefusalLogBurst a minute
  EXPECT_LT(logged, kCalls);
}

TEST_F(RemoteTest, TokensFileReadableByOthersIsRefused) {
  AddToken(tokens_, "ci", "submitter");
  chmod(tokens_.c_str(), 0644);
  CommandResult result = RunCommand({MpsdPath(), "--listen", "127.0.0.1:0", "--state-dir",
                                     dir_.str() + "/state", "--tokens", tokens_});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr(tokens_ +
                                    ": mode 0644 lets other users read or change the "
                                    "tokens; it must be 0600 (chmod 600 " +
                                    tokens_ + ")"));
}

TEST_F(RemoteTest, NonLoopbackWithoutTlsIsRefused) {
  for (const std::string address : {"0.0.0.0:0", "[::]:0", "192.0.2.1:7070"}) {
    CommandResult result = RunCommand({MpsdPath(), "--listen", address, "--state-dir",
                                       dir_.str() + "/state", "--tokens", tokens_});
    EXPECT_EQ(result.exit_code, 1) << address;
    EXPECT_THAT(result.err, HasSubstr("listen: " + address +
                                      " is not a loopback address, and "
                                      "TCP on other interfaces needs TLS: give mpsd --tls-cert "
                                      "FILE --tls-key FILE"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.str() + "/state/mpsd.db"));
}

TEST_F(RemoteTest, FirstStartCreatesAnAdminTokenAndLogsOnlyWhereItIs) {
  auto daemon = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
  daemon->Start({"--listen", "127.0.0.1:0"});  // plaintext loopback, default tokens file
  const std::string admin_path = dir_.str() + "/state/admin.token";
  const std::string tokens_path = dir_.str() + "/state/tokens.yaml";
  struct stat st {};
  ASSERT_EQ(stat(admin_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(tokens_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string token(absl::StripAsciiWhitespace(ReadFile(admin_path)));
  const std::string log = ReadFile(daemon->log_path());
  EXPECT_THAT(log, HasSubstr(admin_path));
  EXPECT_THAT(log, Not(HasSubstr(token)));
  // mpsctl with the admin token over plaintext loopback TCP; without one it is refused.
  const std::string address = TcpAddress(*daemon);
  CommandResult with = Mpsctl(address, {"--token-file", admin_path, "status"});
  EXPECT_EQ(with.exit_code, 0) << with.err;
  CommandResult without = Mpsctl(address, {"status"});
  EXPECT_EQ(without.exit_code, 1);
  EXPECT_THAT(without.err, HasSubstr("refused the call: missing token"));
  EXPECT_THAT(without.err, HasSubstr("--token-file FILE or MPSD_TOKEN"));
}

// The URL of the daemon's HTTP listener, from its log ("http://127.0.0.1:PORT" or https).
std::string HttpUrl(const Daemon& daemon) {
  const std::string kLine = "/metrics and /healthz on ";
  std::string log;
  WaitUntil(
      [&] {
        log = ReadFile(daemon.log_path());
        return absl::StrContains(log, kLine);
      },
      absl::Seconds(30));
  const size_t at = log.find(kLine);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no HTTP listener in the log:\n" << log;
    return "";
  }
  const size_t start = at + kLine.size();
  return log.substr(start, log.find_first_of(" \n", start) - start);
}

int UrlPort(const std::string& url) {
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(url.substr(url.rfind(':') + 1), &port)) << url;
  return port;
}

// One tokens file, one TokenStore: a token made with `mpsd token add` opens both the gRPC TCP
// listener and the HTTP listener, and `mpsd token revoke` closes both without a restart.
TEST_F(RemoteTest, OneTokensFileForGrpcAndHttp) {
  const std::string token = AddToken(tokens_, "grafana", "viewer");
  auto daemon = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
  daemon->Start({"--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--tokens", tokens_});
  const std::string address = TcpAddress(*daemon);
  const std::string url = HttpUrl(*daemon);
  ASSERT_THAT(url, StartsWith("http://127.0.0.1:"));
  httplib::Client http("127.0.0.1", UrlPort(url));
  httplib::Result listed = http.Get("/api/jobs", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(listed) << httplib::to_string(listed.error());
  EXPECT_EQ(listed->status, 200) << listed->body;
  CommandResult status = Mpsctl(address, {"--token-file", TokenFile(token), "status"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  // No token: 401 naming the command that makes one, but not where the tokens file is (issue
  // 14's last pass: the body told anyone who asked the path of the daemon's secrets).
  httplib::Result anonymous = http.Get("/api/jobs");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_THAT(anonymous->body, HasSubstr("missing token"));
  EXPECT_THAT(anonymous->body,
              HasSubstr("mpsd token add --state-dir DIR --name NAME --role viewer"));
  EXPECT_THAT(anonymous->body, ::testing::Not(HasSubstr(tokens_)));
  EXPECT_THAT(anonymous->body, ::testing::Not(HasSubstr("tokens.yaml")));
  // The daemon did not make a second tokens file for HTTP.
  EXPECT_FALSE(std::filesystem::exists(dir_.str() + "/state/tokens.yaml"));
  // Revoked: both listeners refuse it from the next request.
  CommandResult revoked =
      RunCommand({MpsdPath(), "token", "revoke", "--tokens", tokens_, "grafana"});
  ASSERT_EQ(revoked.exit_code, 0) << revoked.err;
  httplib::Result after = http.Get("/api/jobs", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 401);
  EXPECT_THAT(after->body, HasSubstr("unknown or revoked token"));
  EXPECT_THAT(after->body, Not(HasSubstr(token)));
  CommandResult refused = Mpsctl(address, {"--token-file", TokenFile(token), "status"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("unknown or revoked token"));
  EXPECT_THAT(ReadFile(daemon->log_path()), Not(HasSubstr(token)));
}

// A fresh user's pass: a bare token without "Bearer " was accepted (on HTTP and gRPC), and
// /api/jobs/abc answered 404 with an empty body.
TEST_F(RemoteTest, OnlyBearerTokensAreAcceptedAndUnknownApiPathsAnswerJson) {
  const std::string token = AddToken(tokens_, "grafana", "viewer");
  auto daemon = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
  daemon->Start({"--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--tokens", tokens_});
  httplib::Client http("127.0.0.1", UrlPort(HttpUrl(*daemon)));
  httplib::Result bare = http.Get("/api/jobs", {{"Authorization", token}});
  ASSERT_TRUE(bare) << httplib::to_string(bare.error());
  EXPECT_EQ(bare->status, 401);
  // The API's JSON error body, as its other errors.
  EXPECT_THAT(bare->body, ::testing::StartsWith("{\"code\":\"UNAUTHENTICATED\",\"message\":"));
  EXPECT_THAT(bare->body, HasSubstr("expected \\\"authorization: Bearer <token>\\\""));
  EXPECT_THAT(bare->body, Not(HasSubstr(token.substr(5))));
  auto stub = mpsd::v1::JobService::NewStub(
      grpc::CreateChannel(TcpAddress(*daemon), grpc::experimental::LocalCredentials(LOCAL_TCP)));
  grpc::ClientContext context;
  context.AddMetadata("authorization", token);
  mpsd::v1::ServerStatus status;
  const grpc::Status refused =
      stub->GetServerStatus(&context, mpsd::v1::GetServerStatusRequest(), &status);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(refused.error_message(), HasSubstr("Bearer <token>"));
  EXPECT_THAT(refused.error_message(), Not(HasSubstr(token.substr(5))));
  httplib::Result good = http.Get("/api/jobs", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200);
  // Issue 26: two authorization headers were accepted (the first won); refused on both ports.
  httplib::Result twice = http.Get(
      "/api/jobs", {{"Authorization", "Bearer " + token}, {"Authorization", "Bearer " + token}});
  ASSERT_TRUE(twice);
  EXPECT_EQ(twice->status, 400);
  EXPECT_THAT(twice->body, HasSubstr("more than one Authorization header"));
  grpc::ClientContext doubled;
  doubled.AddMetadata("authorization", "Bearer " + token);
  doubled.AddMetadata("authorization", "Bearer " + token);
  const grpc::Status refused_twice =
      stub->GetServerStatus(&doubled, mpsd::v1::GetServerStatusRequest(), &status);
  EXPECT_EQ(refused_twice.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(refused_twice.error_message(), HasSubstr("more than one authorization header"));

  for (const char* path : {"/api/jobs/abc", "/api/nothing", "/api/jobs/1/nothing"}) {
    httplib::Result unknown = http.Get(path, {{"Authorization", "Bearer " + token}});
    ASSERT_TRUE(unknown) << path;
    EXPECT_EQ(unknown->status, 404) << path;
    EXPECT_EQ(unknown->get_header_value("Content-Type"), "application/json") << path;
    EXPECT_THAT(unknown->body, HasSubstr("\"code\":\"NOT_FOUND\"")) << path;
  }
  // A route's own errors keep their bodies.
  httplib::Result missing = http.Get("/api/jobs/999", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_THAT(missing->body, HasSubstr("999"));
  EXPECT_THAT(ReadFile(daemon->log_path()), Not(HasSubstr(token)));
}

// A fresh user's pass: one submitter could resume from another's checkpoint (resume_from its
// job id, or a path into its artifacts), and request_id was global: another submitter's
// request_id returned their job. Both follow the submitter now.
TEST_F(RemoteTest, SubmittersResumeOnlyTheirOwnJobsAndRequestIdsAreTheirOwn) {
  const std::string ana = AddToken(tokens_, "ana", "submitter");
  const std::string bob = AddToken(tokens_, "bob", "submitter");
  auto daemon = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
  daemon->Start({"--listen", "127.0.0.1:0", "--tokens", tokens_});
  auto stub = mpsd::v1::JobService::NewStub(
      grpc::CreateChannel(TcpAddress(*daemon), grpc::experimental::LocalCredentials(LOCAL_TCP)));
  auto submit = [&](const std::string& token, const mpsd::v1::SubmitJobRequest& request, Job* job) {
    return stub->SubmitJob(Context(token).get(), request, job);
  };
  mpsd::v1::SubmitJobRequest checkpointed = TrainJobRequest(128, 64, 1, 64, "mlp");
  checkpointed.mutable_train_job()->mutable_checkpoint()->set_every_epochs(1);
  checkpointed.set_request_id("nightly");
  Job anas;
  ASSERT_TRUE(submit(ana, checkpointed, &anas).ok());
  absl::StatusOr<Job> done = rpc::WaitForEnd(*daemon, anas.id());
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state(), Job::SUCCEEDED) << done->message();

  // The same request_id from another submitter is another job.
  mpsd::v1::SubmitJobRequest other = TrainJobRequest(64, 64, 1, 64, "mlp");
  other.set_request_id("nightly");
  Job bobs;
  const grpc::Status bob_submit = submit(bob, other, &bobs);
  ASSERT_TRUE(bob_submit.ok()) << bob_submit.error_message();
  EXPECT_NE(bobs.id(), anas.id());
  EXPECT_EQ(bobs.submitted_by(), "bob");
  Job again;  // ana's retry still finds hers
  ASSERT_TRUE(submit(ana, checkpointed, &again).ok());
  EXPECT_EQ(again.id(), anas.id());

  const std::string checkpoint =
      dir_.str() + "/state/artifacts/" + anas.id() + "/checkpoint-epoch-1.pt";
  ASSERT_TRUE(std::filesystem::exists(checkpoint));
  for (const std::string& from : {anas.id(), checkpoint,
                                  dir_.str() + "/state/artifacts/../" + "artifacts/" + anas.id() +
                                      "/checkpoint-epoch-1.pt"}) {
    mpsd::v1::SubmitJobRequest resume = TrainJobRequest(128, 64, 2, 64, "mlp");
    resume.mutable_train_job()->set_resume_from(from);
    Job job;
    const grpc::Status refused = submit(bob, resume, &job);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << from;
    EXPECT_THAT(refused.error_message(), StartsWith("train_job.resume_from: job " + anas.id() +
                                                    " was submitted by another submitter"))
        << from;
    EXPECT_THAT(refused.error_message(), Not(HasSubstr("ana")));
    const grpc::Status own = submit(ana, resume, &job);
    EXPECT_TRUE(own.ok()) << from << ": " << own.error_message();
    if (own.ok()) rpc::Cancel(*daemon, job.id()).IgnoreError();
  }
  rpc::Cancel(*daemon, bobs.id()).IgnoreError();
}

// Only the HTTP listener, no TCP gRPC: the first start still makes the tokens file with an
// admin token, and that token opens the dashboard's API.
TEST_F(RemoteTest, HttpOnlyFirstStartCreatesTheAdminToken) {
  auto daemon = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
  daemon->Start({"--http-listen", "127.0.0.1:0"});
  const std::string admin_path = dir_.str() + "/state/admin.token";
  ASSERT_TRUE(std::filesystem::exists(admin_path));
  const std::string token(absl::StripAsciiWhitespace(ReadFile(admin_path)));
  httplib::Client http("127.0.0.1", UrlPort(HttpUrl(*daemon)));
  httplib::Result whoami = http.Get("/api/whoami", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(whoami);
  EXPECT_EQ(whoami->status, 200);
  EXPECT_THAT(whoami->body, HasSubstr("admin"));
  EXPECT_THAT(ReadFile(daemon->log_path()), Not(HasSubstr(token)));
}

// The serial number of the certificate a TLS server on 127.0.0.1:`port` presents now.
std::string ServedSerial(int port) {
  CommandResult shown =
      RunCommand({"/bin/sh", "-c",
                  absl::StrCat("echo | ", kOpenssl, " s_client -connect 127.0.0.1:", port,
                               " 2>/dev/null | ", kOpenssl, " x509 -noout -serial")});
  return std::string(absl::StripAsciiWhitespace(shown.out));
}

// The HTTP listener with the gRPC listeners' certificate: HTTPS on any interface (it has TLS),
// verified with the same CA, the same tokens; plaintext is not answered; SIGHUP reloads its
// certificate too.
TEST_F(RemoteTest, HttpsWithTheSameCertificateAndTokens) {
  const std::string token = AddToken(tokens_, "grafana", "viewer");
  const std::string live_cert = dir_.str() + "/cert.pem", live_key = dir_.str() + "/key.pem";
  std::filesystem::copy_file(Cert("server.pem"), live_cert);
  std::filesystem::copy_file(Cert("server.key"), live_key);
  auto daemon = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
  daemon->Start({"--listen", "127.0.0.1:0", "--tls-cert", live_cert, "--tls-key", live_key,
                 "--tokens", tokens_, "--http-listen", "0.0.0.0:0"});
  const std::string url = HttpUrl(*daemon);
  ASSERT_THAT(url, StartsWith("https://0.0.0.0:"));
  const int port = UrlPort(url);
  httplib::SSLClient https("127.0.0.1", port);
  https.set_ca_cert_path(Cert("ca.pem").c_str());
  https.enable_server_certificate_verification(true);
  httplib::Result listed = https.Get("/api/jobs", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(listed) << httplib::to_string(listed.error());
  EXPECT_EQ(listed->status, 200) << listed->body;
  httplib::Result anonymous = https.Get("/metrics");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  // A CA that did not sign it: the handshake fails.
  httplib::SSLClient wrong_ca("127.0.0.1", port);
  wrong_ca.set_ca_cert_path(Cert("other-ca.pem").c_str());
  wrong_ca.enable_server_certificate_verification(true);
  EXPECT_FALSE(wrong_ca.Get("/healthz"));
  // Plaintext on the HTTPS port gets no HTTP answer.
  httplib::Client plain("127.0.0.1", port);
  plain.set_read_timeout(5, 0);
  httplib::Result plain_answer = plain.Get("/healthz");
  EXPECT_TRUE(!plain_answer || plain_answer->status != 200);

  // mpsctl dashboard: the URL from GetServerStatus, the wildcard host replaced.
  CommandResult local = RunCommand({MpsctlPath(), "--server", daemon->address(), "dashboard"});
  EXPECT_EQ(local.exit_code, 0) << local.err;
  EXPECT_EQ(local.out, absl::StrCat("https://localhost:", port, "/\n"));
  EXPECT_THAT(local.err, HasSubstr("mpsd token add --state-dir DIR --name NAME --role viewer"));
  CommandResult remote = Mpsctl(TcpAddress(*daemon), {"--tls-ca", Cert("ca.pem"), "--token-file",
                                                      TokenFile(token), "dashboard"});
  EXPECT_EQ(remote.exit_code, 0) << remote.err;
  EXPECT_EQ(remote.out, absl::StrCat("https://127.0.0.1:", port, "/\n"));
  EXPECT_THAT(remote.out + remote.err, Not(HasSubstr(token)));

  // SIGHUP: a mismatched pair changes nothing; the matching pair reaches new HTTPS connections.
  const std::string first = Certificates::Serial(ReadFile(Cert("server.pem")));
  const std::string second = Certificates::Serial(ReadFile(Cert("server2.pem")));
  EXPECT_EQ(ServedSerial(port), first);
  std::filesystem::copy_file(Cert("server2.pem"), live_cert,
                             std::filesystem::copy_options::overwrite_existing);
  kill(daemon->pid(), SIGHUP);
  ASSERT_TRUE(
      WaitUntil([&] { return absl::StrContains(ReadFile(daemon->log_path()), "reload refused"); },
                absl::Seconds(10)));
  EXPECT_EQ(ServedSerial(port), first);
  std::filesystem::copy_file(Cert("server2.key"), live_key,
                             std::filesystem::copy_options::overwrite_existing);
  kill(daemon->pid(), SIGHUP);
  EXPECT_TRUE(WaitUntil([&] { return ServedSerial(port) == second; }, absl::Seconds(15)));
  httplib::SSLClient after("127.0.0.1", port);
  after.set_ca_cert_path(Cert("ca.pem").c_str());
  after.enable_server_certificate_verification(true);
  httplib::Result again = after.Get("/api/jobs", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(again) << httplib::to_string(again.error());
  EXPECT_EQ(again->status, 200);
}

TEST_F(RemoteTest, DashboardWithoutAnHttpListenerSaysHowToEnableIt) {
  auto daemon = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
  daemon->Start();
  CommandResult result = RunCommand({MpsctlPath(), "--server", daemon->address(), "dashboard"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.out, "");
  EXPECT_THAT(result.err, HasSubstr("serves no dashboard: start it with --http-listen "
                                    "127.0.0.1:9464"));
}

// Sends `request` as is to 127.0.0.1:`port` and returns what comes back before the server
// closes the connection or 20 s pass.
std::string RawHttp(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    ADD_FAILURE() << "cannot connect to port " << port;
    return "";
  }
  timeval timeout{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  (void)!write(fd, request.data(), request.size());
  std::string answer;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
    answer.append(buffer, static_cast<size_t>(n));
    if (answer.find("\r\n\r\n") != std::string::npos) {
      // Headers are in; the answers here are short: read what follows within a moment.
      timeval brief{1, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &brief, sizeof(brief));
    }
  }
  close(fd);
  return answer;
}

// POST /api/jobs/{id}/cancel: a submitter token cancels the jobs it submitted and no other, an
// admin token any; a request without Content-Length (curl -X POST) is answered at once.
TEST_F(RemoteTest, HttpCancelFollowsSubmittedBy) {
  const std::string ci = AddToken(tokens_, "ci", "submitter");
  const std::string other = AddToken(tokens_, "ci2", "submitter");
  const std::string admin = AddToken(tokens_, "root", "admin");
  auto daemon = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
  daemon->Start({"--listen", "127.0.0.1:0", "--tokens", tokens_, "--http-listen", "127.0.0.1:0"});
  const int port = UrlPort(HttpUrl(*daemon));
  // A long job first (over the unix socket), so the two below stay queued.
  absl::StatusOr<Job> blocker = rpc::Submit(*daemon, LongJob());
  ASSERT_TRUE(blocker.ok()) << blocker.status();
  auto stub = mpsd::v1::JobService::NewStub(
      grpc::CreateChannel(TcpAddress(*daemon), grpc::experimental::LocalCredentials(LOCAL_TCP)));
  auto submit_as = [&](const std::string& token) {
    Job job;
    grpc::Status status =
        stub->SubmitJob(Context(token).get(), TrainJobRequest(64, 64, 1, 64, "mlp"), &job);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return job;
  };
  const Job mine = submit_as(ci);
  const Job theirs = submit_as(other);
  EXPECT_EQ(mine.submitted_by(), "ci");
  auto cancel = [&](const std::string& id, const std::string& token) {
    const absl::Time start = absl::Now();
    // No Content-Length, no body: as curl -X POST sends it.
    std::string answer = RawHttp(port, absl::StrCat("POST /api/jobs/", id,
                                                    "/cancel HTTP/1.1\r\n"
                                                    "Host: 127.0.0.1\r\nAuthorization: Bearer ",
                                                    token, "\r\nConnection: close\r\n\r\n"));
    EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "the answer took until the timeout";
    return answer;
  };
  std::string refused = cancel(theirs.id(), ci);
  EXPECT_THAT(refused, StartsWith("HTTP/1.1 403"));
  EXPECT_THAT(refused, HasSubstr("submitter"));
  std::string cancelled = cancel(mine.id(), ci);
  EXPECT_THAT(cancelled, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(cancelled, HasSubstr("CANCELLED"));
  std::string by_admin = cancel(theirs.id(), admin);
  EXPECT_THAT(by_admin, StartsWith("HTTP/1.1 200"));
  EXPECT_TRUE(rpc::Cancel(*daemon, blocker->id()).ok());
}

// Issue 14 item 11: a dataset file that is a symlink out of the data_roots is refused like the
// root itself; and a file that is not IDX is reported without quoting its bytes.
TEST_F(RemoteTest, DatasetFilesAreHeldToTheRootsAndNeverQuoted) {
  const std::string token = AddToken(tokens_, "ci", "submitter");
  const std::string allowed = dir_.str() + "/data";
  const std::string secret = dir_.str() + "/private/shadow";
  std::filesystem::create_directories(allowed + "/ds");
  std::filesystem::create_directories(dir_.str() + "/private");
  WriteFile(secret, "root:$6$secret:19000:0:99999:7:::\n");
  chmod(secret.c_str(), 0600);
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    std::filesystem::create_symlink(secret, allowed + "/ds/" + name);
  }
  const std::string config = dir_.str() + "/mpsd.yaml";
  WriteFile(config, "data_roots: [" + allowed + "]\n");
  std::unique_ptr<Daemon> daemon = StartTlsDaemon({"--config", config});
  auto stub = mpsd::v1::JobService::NewStub(TlsChannel(TcpAddress(*daemon), Cert("ca.pem")));
  mpsd::v1::SubmitJobRequest request = TrainJobRequest(64, 64, 1, 64, "mlp");
  request.mutable_train_job()->mutable_dataset()->set_root(allowed + "/ds");
  Job job;
  grpc::Status status = stub->SubmitJob(Context(token).get(), request, &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), StartsWith("train_job.dataset.root: \"" + allowed + "/ds/"));
  EXPECT_THAT(status.error_message(), HasSubstr("is not under the daemon's data_roots"));
  EXPECT_THAT(status.error_message(), Not(HasSubstr(secret)));
  // The daemon's own user (unix socket) may read it; the job fails without quoting it.
  // (Refused at submit if the executor checks the files then, else the job fails.)
  absl::StatusOr<Job> local = rpc::Submit(*daemon, request);
  std::string message;
  if (local.ok()) {
    absl::StatusOr<Job> ended = rpc::WaitForEnd(*daemon, local->id());
    ASSERT_TRUE(ended.ok()) << ended.status();
    EXPECT_EQ(ended->state(), Job::FAILED);
    message = ended->message();
  } else {
    message = std::string(local.status().message());
  }
  EXPECT_THAT(message, HasSubstr("bad magic, expected 00 00 08 NN"));
  EXPECT_THAT(message, Not(HasSubstr("72 6f 6f 74")));
  EXPECT_THAT(message, Not(HasSubstr("root:")));
}

// Issue 26's adversarial pass: a submitter's queued job whose dataset file became a link out
// of the roots after the submit read it when it started. The paths are checked again then: the
// job FAILS naming the rule, nothing is read.
TEST_F(RemoteTest, AQueuedJobsFilesAreCheckedAgainWhenItStarts) {
  const std::string token = AddToken(tokens_, "ci", "submitter");
  const std::string allowed = dir_.str() + "/data";
  std::filesystem::create_directories(allowed + "/ds");
  std::filesystem::create_directories(dir_.str() + "/private");
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    std::filesystem::copy_file(std::string("/usr/share/datasets/fashion-mnist/") + name,
                               allowed + "/ds/" + name);
    std::filesystem::copy_file(std::string("/usr/share/datasets/fashion-mnist/") + name,
                               dir_.str() + "/private/" + name);
  }
  const std::string config = dir_.str() + "/mpsd.yaml";
  WriteFile(config, "data_roots: [" + allowed + "]\n");
  std::unique_ptr<Daemon> daemon = StartTlsDaemon({"--config", config});
  auto stub = mpsd::v1::JobService::NewStub(TlsChannel(TcpAddress(*daemon), Cert("ca.pem")));
  mpsd::v1::SubmitJobRequest request = TrainJobRequest(64, 64, 1, 64, "mlp");
  request.mutable_train_job()->mutable_dataset()->set_root(allowed + "/ds");
  const auto queue = [&](bool pause) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    mpsd::v1::ServerStatus answer;
    return pause ? daemon->stub().PauseQueue(&context, mpsd::v1::PauseQueueRequest(), &answer)
                 : daemon->stub().ResumeQueue(&context, mpsd::v1::ResumeQueueRequest(), &answer);
  };
  ASSERT_TRUE(queue(true).ok());
  Job job;
  const grpc::Status status = stub->SubmitJob(Context(token).get(), request, &job);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::string swapped = allowed + "/ds/train-images-idx3-ubyte.gz";
  std::filesystem::remove(swapped);
  std::filesystem::create_symlink(dir_.str() + "/private/train-images-idx3-ubyte.gz", swapped);
  ASSERT_TRUE(queue(false).ok());
  absl::StatusOr<Job> ended = rpc::WaitForEnd(*daemon, job.id());
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->state(), Job::FAILED);
  EXPECT_THAT(ended->message(), HasSubstr("is not under the daemon's data_roots"));
  EXPECT_EQ(ended->summary().epochs(), 0);
  // The daemon's own jobs (unix socket) are not held to data_roots, at submit or at start.
  absl::StatusOr<Job> local = rpc::Submit(*daemon, request);
  ASSERT_TRUE(local.ok()) << local.status();
  absl::StatusOr<Job> local_end = rpc::WaitForEnd(*daemon, local->id());
  ASSERT_TRUE(local_end.ok()) << local_end.status();
  EXPECT_EQ(local_end->state(), Job::SUCCEEDED) << local_end->message();
}

// ---------------------------------------------------------------------------------------------
// SIGHUP: a new certificate for new connections; open streams go on.

TEST_F(RemoteTest, SighupReloadsTheCertificateWithoutDroppingStreams) {
  const std::string token = AddToken(tokens_, "dash", "viewer");
  const std::string live_cert = dir_.str() + "/cert.pem", live_key = dir_.str() + "/key.pem";
  std::filesystem::copy_file(Cert("server.pem"), live_cert);
  std::filesystem::copy_file(Cert("server.key"), live_key);
  auto daemon = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
  daemon->Start({"--listen", "127.0.0.1:0", "--tls-cert", live_cert, "--tls-key", live_key,
                 "--tokens", tokens_});
  const std::string address = TcpAddress(*daemon);
  const std::string port = address.substr(address.rfind(':') + 1);
  auto served_serial = [&] {
    CommandResult shown =
        RunCommand({"/bin/sh", "-c",
                    "echo | " + std::string(kOpenssl) + " s_client -connect 127.0.0.1:" + port +
                        " 2>/dev/null | " + kOpenssl + " x509 -noout -serial"});
    return std::string(absl::StripAsciiWhitespace(shown.out));
  };
  const std::string first = Certificates::Serial(ReadFile(Cert("server.pem")));
  const std::string second = Certificates::Serial(ReadFile(Cert("server2.pem")));
  ASSERT_NE(first, second);
  EXPECT_EQ(served_serial(), first);

  // A stream over TLS on the first certificate, following a running job.
  absl::StatusOr<Job> job = rpc::Submit(*daemon, LongJob());
  ASSERT_TRUE(job.ok()) << job.status();
  auto channel = TlsChannel(address, Cert("ca.pem"));
  auto stub = mpsd::v1::JobService::NewStub(channel);
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer " + token);
  mpsd::v1::StreamEventsRequest request;
  request.set_job_id(job->id());
  auto reader = stub->StreamEvents(&context, request);
  mpsd::v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));

  // A bad pair is refused and changes nothing.
  std::filesystem::copy_file(Cert("server2.pem"), live_cert,
                             std::filesystem::copy_options::overwrite_existing);
  kill(daemon->pid(), SIGHUP);
  ASSERT_TRUE(
      WaitUntil([&] { return absl::StrContains(ReadFile(daemon->log_path()), "reload refused"); },
                absl::Seconds(10)));
  EXPECT_THAT(
      ReadFile(daemon->log_path()),
      HasSubstr("TLS key " + live_key + " does not belong to the certificate " + live_cert));
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(served_serial(), first);
  // The matching key too: new connections get the new certificate within seconds.
  std::filesystem::copy_file(Cert("server2.key"), live_key,
                             std::filesystem::copy_options::overwrite_existing);
  kill(daemon->pid(), SIGHUP);
  EXPECT_TRUE(WaitUntil([&] { return served_serial() == second; }, absl::Seconds(15)));

  // The stream opened before the reload still delivers events, in order.
  int64_t last_seq = event.seq();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(reader->Read(&event)) << "the stream ended after the reload";
    if (event.seq() == 0) continue;  // a heartbeat
    EXPECT_GT(event.seq(), last_seq);
    last_seq = event.seq();
  }
  context.TryCancel();
  reader->Finish();
  // And a new connection on the new certificate works with the same CA.
  auto fresh = mpsd::v1::JobService::NewStub(TlsChannel(address, Cert("ca.pem")));
  mpsd::v1::ServerStatus status;
  EXPECT_TRUE(fresh->GetServerStatus(Context(token).get(), {}, &status).ok());
  EXPECT_TRUE(rpc::Cancel(*daemon, job->id()).ok());
}

// ---------------------------------------------------------------------------------------------
// data_roots: what a remote job may make the daemon read.

TEST_F(RemoteTest, DataRoots) {
  const std::string token = AddToken(tokens_, "ci", "submitter");
  const std::string allowed = dir_.str() + "/data";
  std::filesystem::create_directories(allowed);
  // Inside the roots, through a symlink that stays inside: the real Fashion-MNIST files.
  std::filesystem::create_directory_symlink("/usr/share/datasets/fashion-mnist",
                                            allowed + "/fashion-mnist");
  std::filesystem::create_directory_symlink("/etc", allowed + "/escape");
  const std::string config = dir_.str() + "/mpsd.yaml";
  // dir_ holds the state dir: a root over it does not open the daemon's own files.
  WriteFile(config, "data_roots: [" + allowed + ", /usr/share/datasets, " + dir_.str() + "]\n");
  std::unique_ptr<Daemon> daemon = StartTlsDaemon({"--config", config});
  auto stub = mpsd::v1::JobService::NewStub(TlsChannel(TcpAddress(*daemon), Cert("ca.pem")));
  auto submit = [&](const mpsd::v1::SubmitJobRequest& request) {
    Job job;
    grpc::Status status = stub->SubmitJob(Context(token).get(), request, &job);
    if (status.ok()) rpc::Cancel(*daemon, job.id()).IgnoreError();
    return status;
  };
  auto with_root = [](const std::string& root) {
    mpsd::v1::SubmitJobRequest request = TrainJobRequest(64, 64, 1, 64, "mlp");
    request.mutable_train_job()->mutable_dataset()->set_root(root);
    return request;
  };
  EXPECT_TRUE(submit(with_root(allowed + "/fashion-mnist")).ok());
  EXPECT_TRUE(submit(with_root("/usr/share/datasets/fashion-mnist")).ok());
  // Outside, existing or not, readable or not, through a symlink or "..": one message.
  auto refused = [&](const std::string& root) {
    const grpc::Status status = submit(with_root(root));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << root;
    return absl::StrReplaceAll(status.error_message(), {{root, "PATH"}});
  };
  const std::string message = refused("/root");
  EXPECT_THAT(message, StartsWith("train_job.dataset.root: \"PATH\" is not under the daemon's "
                                  "data_roots: a job submitted over TCP may name only files"));
  // The path and the rule, never the daemon's list of roots (nor its state dir).
  EXPECT_THAT(message, Not(HasSubstr(allowed)));
  EXPECT_THAT(message, Not(HasSubstr("/usr/share/datasets")));
  EXPECT_THAT(message, Not(HasSubstr(dir_.str() + "/state")));
  EXPECT_EQ(refused("/root/no-such-dir"), message);
  EXPECT_EQ(refused("/etc"), message);
  EXPECT_EQ(refused(allowed + "/escape"), message);
  EXPECT_EQ(refused(allowed + "/escape/ssl"), message);
  EXPECT_EQ(refused(allowed + "/../../etc"), message);
  EXPECT_EQ(refused("/no/such/place"), message);
  // The daemon's own files are no job's to read, even under a root.
  EXPECT_EQ(refused(dir_.str() + "/state"), message);
  EXPECT_EQ(refused(dir_.str() + "/state/tokens.yaml"), message);
  // torchscript and resume_from are held to the roots too; a resume_from job id is not a path.
  mpsd::v1::SubmitJobRequest script = TrainJobRequest(64, 64, 1, 64);
  script.mutable_train_job()->mutable_model()->set_torchscript("/etc/passwd");
  grpc::Status status = submit(script);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), StartsWith("train_job.model.torchscript: \"/etc/passwd\""));
  mpsd::v1::SubmitJobRequest weights = TrainJobRequest(64, 64, 1, 64, "mlp");
  weights.mutable_train_job()->mutable_model()->set_weights(allowed + "/escape/passwd");
  status = submit(weights);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), StartsWith("train_job.model.weights: "));
  mpsd::v1::SubmitJobRequest bench;
  bench.mutable_bench_job()->add_models("resnet18");
  bench.mutable_bench_job()->add_models(allowed + "/escape/net.pt");
  status = submit(bench);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), StartsWith("bench_job.models[1]: "));
  mpsd::v1::SubmitJobRequest resume = TrainJobRequest(64, 64, 1, 64, "mlp");
  resume.mutable_train_job()->set_resume_from(allowed + "/escape/passwd");
  status = submit(resume);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), StartsWith("train_job.resume_from: "));
  resume.mutable_train_job()->set_resume_from("12345");
  EXPECT_NE(submit(resume).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // The unix socket is the daemon's own user: not held to data_roots.
  absl::StatusOr<Job> local = rpc::Submit(*daemon, with_root("/root/no-such-dir"));
  EXPECT_NE(local.status().code(), absl::StatusCode::kPermissionDenied) << local.status();
}

// ---------------------------------------------------------------------------------------------
// mpsctl: no daemon vs a daemon that answers UNAVAILABLE.

TEST_F(RemoteTest, MpsctlTellsNoDaemonFromUnavailable) {
  auto daemon = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
  daemon->Start();
  absl::StatusOr<Job> running = rpc::Submit(*daemon, LongJob());
  ASSERT_TRUE(running.ok()) << running.status();
  absl::StatusOr<Job> queued = rpc::Submit(*daemon, TrainJobRequest(64, 64, 1, 64, "mlp"));
  ASSERT_TRUE(queued.ok()) << queued.status();
  CommandResult followed;
  std::thread follow([&] {
    // --reconnect-timeout 0: the daemon's own UNAVAILABLE ends mpsctl (by default it would
    // keep reconnecting, waiting for the daemon to come back).
    followed = RunCommand({MpsctlPath(), "--server", daemon->address(), "--reconnect-timeout", "0",
                           "logs", queued->id(), "--follow"});
  });
  absl::SleepFor(absl::Seconds(1));
  daemon->Stop(SIGTERM, absl::Seconds(60));
  follow.join();
  EXPECT_EQ(followed.exit_code, 3) << followed.err;
  EXPECT_THAT(followed.err, StartsWith("mpsctl: mpsd at " + daemon->address() +
                                       " is running but answered UNAVAILABLE: mpsd is shutting "
                                       "down"));
  CommandResult gone = RunCommand({MpsctlPath(), "--server", daemon->address(), "status"});
  EXPECT_EQ(gone.exit_code, 2);
  EXPECT_THAT(gone.err, StartsWith("mpsctl: cannot reach mpsd at " + daemon->address()));
}

}  // namespace
}  // namespace mpsd::testing
