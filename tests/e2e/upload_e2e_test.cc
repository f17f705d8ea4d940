// End-to-end tests of uploads (issue 29): a real mpsd on 127.0.0.1 with TLS (a self-signed
// certificate made with the openssl CLI) and tokens of two submitters and an admin; uploads
// through the real mpsctl and through gRPC stubs (to break a stream part-way); archives made by
// GNU tar and Python's tarfile; a job that trains on an uploaded folder.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "api/sha256.h"
#include "api/status.h"
#include "tests/common/files.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using mpsd::v1::Job;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kQuota = 8 << 20;  // upload_quota_bytes of the daemon under test
constexpr int64_t kChunk = 1 << 20;

std::string AddToken(const std::string& tokens, const std::string& name, const std::string& role) {
  CommandResult result =
      RunCommand({MpsdPath(), "token", "add", "--tokens", tokens, "--name", name, "--role", role});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return std::string(absl::StripAsciiWhitespace(result.out));
}

// An IDX file (big-endian header): `magic`, then `dims`, then `body`.
void WriteIdx(const std::string& path, uint32_t magic, const std::vector<uint32_t>& dims,
              const std::string& body) {
  std::ofstream out(path, std::ios::binary);
  auto be = [&out](uint32_t v) {
    const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                           static_cast<char>(v >> 8), static_cast<char>(v)};
    out.write(bytes, 4);
  };
  be(magic);
  for (uint32_t d : dims) be(d);
  out << body;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(random());
  return bytes;
}

// A Fashion-MNIST-shaped dataset (random pixels, labels 0..9) of `train` and `test` examples
// in `dir`, plus `pad_bytes` of random data in pad.bin, a note in sub/ and a link to it.
void MakeDataset(const std::string& dir, int train, int test, size_t pad_bytes) {
  std::filesystem::create_directories(dir + "/sub");
  for (auto [prefix, n] : {std::pair<std::string, int>{"train", train}, {"t10k", test}}) {
    std::string labels;
    for (int i = 0; i < n; ++i) labels += static_cast<char>(i % 10);
    WriteIdx(dir + "/" + prefix + "-images-idx3-ubyte", 0x803, {static_cast<uint32_t>(n), 28, 28},
             RandomBytes(static_cast<size_t>(n) * 784, n));
    WriteIdx(dir + "/" + prefix + "-labels-idx1-ubyte", 0x801, {static_cast<uint32_t>(n)}, labels);
  }
  WriteFile(dir + "/pad.bin", RandomBytes(pad_bytes, 7));
  WriteFile(dir + "/sub/notes.txt", "made by upload_e2e_test\n");
  std::filesystem::create_symlink("notes.txt", dir + "/sub/link");
}

// The ErrorInfo reason and metadata `key` of a status mpsd sent ("" when none).
std::string Reason(const grpc::Status& status) {
  auto info = api::MpsdErrorInfo(status);
  return info.has_value() ? info->reason() : "";
}
std::string Meta(const grpc::Status& status, const std::string& key) {
  auto info = api::MpsdErrorInfo(status);
  if (!info.has_value() || info->metadata().count(key) == 0) return "";
  return info->metadata().at(key);
}

class UploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string d = dir_.str();
    CommandResult made =
        RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", d + "/key.pem", "-out",
                    d + "/cert.pem", "-days", "2", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost"});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    tokens_ = d + "/tokens.yaml";
    alice_ = AddToken(tokens_, "alice", "submitter");
    bob_ = AddToken(tokens_, "bob", "submitter");
    admin_ = AddToken(tokens_, "root", "admin");
    WriteFile(d + "/mpsd.yaml",
              absl::StrCat("upload_quota_bytes: ", kQuota, "\nupload_max_files: 1000\n"));
    ASSERT_NO_FATAL_FAILURE(StartDaemon());
  }

  void StartDaemon() {
    const std::string d = dir_.str();
    // The log is appended to across restarts: this start's line comes after `before`.
    const size_t before =
        std::filesystem::exists(d + "/state.log") ? ReadFile(d + "/state.log").size() : 0;
    daemon_ = std::make_unique<Daemon>(d + "/state", d + "/mpsd.sock");
    daemon_->Start({"--config", d + "/mpsd.yaml", "--listen", "127.0.0.1:0", "--tls-cert",
                    d + "/cert.pem", "--tls-key", d + "/key.pem", "--tokens", tokens_});
    std::string log;
    ASSERT_TRUE(WaitUntil(
        [&] {
          log = ReadFile(daemon_->log_path());
          return log.find("mpsd listening on 127.0.0.1:", before) != std::string::npos;
        },
        absl::Seconds(30)));
    const size_t at = log.find("mpsd listening on 127.0.0.1:", before) + 18;
    address_ = log.substr(at, log.find(' ', at) - at);
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(d + "/cert.pem");
    stub_ = v1::JobService::NewStub(grpc::CreateChannel(address_, grpc::SslCredentials(ssl)));
  }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& token) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    context->AddMetadata("authorization", "Bearer " + token);
    return context;
  }

  std::string TokenFile(const std::string& token) {
    const std::string path = absl::StrCat(dir_.str(), "/token-", ++token_files_);
    WriteFile(path, token + "\n");
    chmod(path.c_str(), 0600);
    return path;
  }

  CommandResult Mpsctl(const std::string& token, std::vector<std::string> args) {
    std::vector<std::string> argv = {
        MpsctlPath(),   "--server",      address_, "--tls-ca", dir_.str() + "/cert.pem",
        "--token-file", TokenFile(token)};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }

  // Sends bytes [from, to) of `data` as upload `name` (the first chunk describes all of
  // `data`), then either ends the stream (returns Finish's status) or, with `cancel`, breaks
  // it as a killed connection would.
  // A call that breaks returns at once, while the daemon may still hold the name for a moment
  // (ABORTED): tried again then.
  grpc::Status Send(const std::string& token, const std::string& name, const std::string& data,
                    int64_t from, int64_t to, bool archive, bool cancel = false,
                    v1::Upload* upload = nullptr) {
    grpc::Status status;
    WaitUntil(
        [&] {
          status = SendOnce(token, name, data, from, to, archive, cancel, upload);
          return status.error_code() != grpc::StatusCode::ABORTED;
        },
        absl::Seconds(10));
    return status;
  }

  grpc::Status SendOnce(const std::string& token, const std::string& name, const std::string& data,
                        int64_t from, int64_t to, bool archive, bool cancel, v1::Upload* upload) {
    v1::Upload ignored;
    auto context = Context(token);
    auto writer = stub_->UploadFile(context.get(), upload != nullptr ? upload : &ignored);
    v1::UploadChunk chunk;
    chunk.set_name(name);
    chunk.set_sha256(Sha256(data));
    chunk.set_size_bytes(static_cast<int64_t>(data.size()));
    chunk.set_archive(archive);
    for (int64_t at = from; at < to || at == from; at += kChunk) {
      chunk.set_offset(at);
      chunk.set_data(data.substr(at, std::min(kChunk, to - at)));
      if (!writer->Write(chunk)) break;
      chunk.clear_name();
      chunk.clear_sha256();
      chunk.clear_size_bytes();
      chunk.clear_archive();
      if (at == to) break;
    }
    if (cancel) {
      // Wait until the daemon holds what was sent, then break the call.
      WaitUntil([&] { return Status(token, name, data).offset() == to; }, absl::Seconds(10));
      context->TryCancel();
      return writer->Finish();
    }
    writer->WritesDone();
    return writer->Finish();
  }

  v1::UploadStatus Status(const std::string& token, const std::string& name,
                          const std::string& data) {
    v1::GetUploadStatusRequest request;
    request.set_name(name);
    request.set_sha256(Sha256(data));
    request.set_size_bytes(static_cast<int64_t>(data.size()));
    v1::UploadStatus status;
    EXPECT_TRUE(stub_->GetUploadStatus(Context(token).get(), request, &status).ok());
    return status;
  }

  v1::ListUploadsResponse List(const std::string& token) {
    v1::ListUploadsResponse list;
    grpc::Status status = stub_->ListUploads(Context(token).get(), {}, &list);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return list;
  }

  static std::string Sha256(const std::string& data) {
    api::Sha256Hasher hasher;
    hasher.Update(data);
    return hasher.Finish();
  }

  // An archive made by Python's tarfile from `script` (Python statements with `t`, the open
  // TarFile, and `tarfile`, `io` imported; `mode` "w" or "w:gz").
  std::string PythonTar(const std::string& script, const std::string& mode = "w") {
    const std::string path = absl::StrCat(dir_.str(), "/py-", ++tars_, ".tar");
    CommandResult made = RunCommand(
        {"/usr/bin/python3", "-c",
         absl::StrCat("import io, tarfile, sys\nt = tarfile.open(sys.argv[1], '", mode, "')\n",
                      "def add(name, data=b'', **kw):\n"
                      "    i = tarfile.TarInfo(name); i.size = len(data)\n"
                      "    for k, v in kw.items(): setattr(i, k, v)\n"
                      "    t.addfile(i, io.BytesIO(data))\n",
                      script, "\nt.close()\n"),
         path});
    EXPECT_EQ(made.exit_code, 0) << made.err;
    return ReadFile(path);
  }

  TempDir dir_;
  std::string tokens_, alice_, bob_, admin_, address_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<v1::JobService::Stub> stub_;
  int token_files_ = 0;
  int tars_ = 0;
};

// The case in small: a folder (GNU tar) whose stream is broken part-way resumes from
// the offset the daemon reports, appears whole, and a job of its submitter trains on it as
// upload:NAME; another submitter's job naming it is refused with the same text as for an
// upload that does not exist; an admin's may name it.
TEST_F(UploadTest, FolderResumesAfterABrokenStreamAndTrains) {
  const std::string folder = dir_.str() + "/ds";
  MakeDataset(folder, 256, 64, 3 << 20);
  CommandResult tarred =
      RunCommand({"/usr/bin/tar", "-cf", dir_.str() + "/ds.tar", "-C", folder, "."});
  ASSERT_EQ(tarred.exit_code, 0) << tarred.err;
  const std::string tar = ReadFile(dir_.str() + "/ds.tar");
  ASSERT_GT(tar.size(), 3u << 20);

  EXPECT_EQ(Status(alice_, "ds", tar).offset(), 0);
  grpc::Status broken = Send(alice_, "ds", tar, 0, 2 * kChunk, true, /*cancel=*/true);
  EXPECT_EQ(broken.error_code(), grpc::StatusCode::CANCELLED) << broken.error_message();
  // Held, but not visible under its name.
  v1::UploadStatus held = Status(alice_, "ds", tar);
  EXPECT_EQ(held.offset(), 2 * kChunk);
  EXPECT_FALSE(held.complete());
  EXPECT_FALSE(std::filesystem::exists(dir_.str() + "/state/uploads/alice/ds"));
  v1::ListUploadsResponse listed = List(alice_);
  ASSERT_EQ(listed.uploads_size(), 1);
  EXPECT_EQ(listed.uploads(0).kind(), "partial");
  EXPECT_EQ(listed.used_bytes(), 2 * kChunk);  // The quota counts unfinished bytes.

  // A resume from another offset is refused, naming the field.
  grpc::Status wrong = Send(alice_, "ds", tar, kChunk, 2 * kChunk, true);
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Meta(wrong, "field"), "offset");
  EXPECT_THAT(wrong.error_message(), HasSubstr("must start at offset 2097152"));

  v1::Upload upload;
  grpc::Status resumed = Send(alice_, "ds", tar, held.offset(), static_cast<int64_t>(tar.size()),
                              true, false, &upload);
  ASSERT_TRUE(resumed.ok()) << resumed.error_message();
  EXPECT_EQ(upload.kind(), "folder");
  EXPECT_EQ(upload.files(), 6);  // 4 IDX files, pad.bin, sub/notes.txt
  EXPECT_EQ(upload.sha256(), Sha256(tar));
  EXPECT_EQ(upload.ref(), "upload:ds");
  EXPECT_EQ(ReadFile(dir_.str() + "/state/uploads/alice/ds/sub/link"), "made by upload_e2e_test\n");
  EXPECT_TRUE(Status(alice_, "ds", tar).complete());

  // Trains, over TLS, as alice.
  v1::SubmitJobRequest request = TrainJobRequest(256, 64, 1, 64, "mlp");
  request.mutable_train_job()->mutable_dataset()->set_root("upload:ds");
  Job job;
  grpc::Status submitted = stub_->SubmitJob(Context(alice_).get(), request, &job);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  Job ended = rpc_ok::WaitForEnd(*daemon_, job.id());
  EXPECT_EQ(ended.state(), Job::SUCCEEDED) << ended.message();

  // Bob may not read alice's upload: the same text whether it exists or not.
  auto refused = [&](const std::string& root) {
    v1::SubmitJobRequest theirs = request;
    theirs.mutable_train_job()->mutable_dataset()->set_root(root);
    Job none;
    grpc::Status status = stub_->SubmitJob(Context(bob_).get(), theirs, &none);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << root;
    return status.error_message();
  };
  const std::string exists = refused("upload:@alice/ds");
  const std::string missing = refused("upload:@alice/nothing");
  EXPECT_THAT(exists, HasSubstr("train_job.dataset.root: \"upload:@alice/ds\" is another "
                                "submitter's upload"));
  EXPECT_THAT(exists, Not(HasSubstr(dir_.str())));  // Nor where the state dir is.
  EXPECT_EQ(absl::StrReplaceAll(exists, {{"/ds\"", "/X\""}}),
            absl::StrReplaceAll(missing, {{"/nothing\"", "/X\""}}));
  // Nor by its path.
  EXPECT_EQ(refused(dir_.str() + "/state/uploads/alice/ds").empty(), false);
  // Nor list or delete it.
  v1::ListUploadsRequest others;
  others.set_submitter("alice");
  v1::ListUploadsResponse ignored;
  EXPECT_EQ(stub_->ListUploads(Context(bob_).get(), others, &ignored).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::DeleteUploadRequest remove;
  remove.set_name("ds");
  remove.set_submitter("alice");
  v1::Upload gone;
  EXPECT_EQ(stub_->DeleteUpload(Context(bob_).get(), remove, &gone).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // An admin's job may name it.
  v1::SubmitJobRequest admins = request;
  admins.mutable_train_job()->mutable_dataset()->set_root("upload:@alice/ds");
  grpc::Status by_admin = stub_->SubmitJob(Context(admin_).get(), admins, &job);
  EXPECT_TRUE(by_admin.ok()) << by_admin.error_message();
  if (by_admin.ok()) EXPECT_TRUE(rpc::Cancel(*daemon_, job.id()).ok());
}

// mpsctl: a file upload broken after 1 MiB resumes there; a folder (its own tar) goes whole
// and again is "already uploaded"; uploads lists and rm deletes.
TEST_F(UploadTest, MpsctlResumesListsAndDeletes) {
  const std::string file = dir_.str() + "/weights.bin";
  const std::string data = RandomBytes(3 << 20, 3);
  WriteFile(file, data);
  EXPECT_EQ(Send(alice_, "weights.bin", data, 0, kChunk, false, true).error_code(),
            grpc::StatusCode::CANCELLED);
  CommandResult resumed = Mpsctl(alice_, {"upload", file});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr("resuming the upload of weights.bin at byte 1048576 of "
                                     "3145728"));
  EXPECT_THAT(resumed.out, HasSubstr("jobs name it as upload:weights.bin"));
  EXPECT_EQ(ReadFile(dir_.str() + "/state/uploads/alice/weights.bin"), data);

  const std::string folder = dir_.str() + "/small";
  MakeDataset(folder, 32, 16, 1000);
  CommandResult sent = Mpsctl(alice_, {"upload", folder + "/", "--name", "mnist-small"});
  ASSERT_EQ(sent.exit_code, 0) << sent.err;
  EXPECT_THAT(sent.out, HasSubstr("uploaded mnist-small (folder, 6 files"));
  EXPECT_EQ(ReadFile(dir_.str() + "/state/uploads/alice/mnist-small/sub/notes.txt"),
            "made by upload_e2e_test\n");
  CommandResult again = Mpsctl(alice_, {"upload", folder, "--name", "mnist-small"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("mnist-small is already uploaded"));

  CommandResult listed = Mpsctl(alice_, {"uploads"});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("mnist-small"));
  EXPECT_THAT(listed.out, HasSubstr("weights.bin"));
  EXPECT_THAT(Mpsctl(bob_, {"uploads"}).out, Not(HasSubstr("weights.bin")));
  CommandResult all = Mpsctl(bob_, {"uploads", "--all"});
  EXPECT_NE(all.exit_code, 0);
  EXPECT_THAT(all.err, HasSubstr("admin"));
  EXPECT_THAT(Mpsctl(admin_, {"uploads", "--all"}).out, HasSubstr("weights.bin"));

  CommandResult removed = Mpsctl(alice_, {"uploads", "rm", "weights.bin"});
  EXPECT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.str() + "/state/uploads/alice/weights.bin"));
  EXPECT_NE(Mpsctl(alice_, {"uploads", "rm", "weights.bin"}).exit_code, 0);

  // A job file names the upload; mpsctl leaves upload:NAME as it is.
  WriteFile(dir_.str() + "/job.yaml",
            "kind: TrainJob\nmodel: {name: mlp}\n"
            "dataset: {name: fashion-mnist, root: upload:mnist-small, limit_train: 32, "
            "limit_test: 16}\nbatch_size: 16\nepochs: 1\noptimizer: {name: adam, "
            "learning_rate: 0.001}\nseed: 1\ndevice: cpu\n");
  CommandResult job = Mpsctl(alice_, {"submit", dir_.str() + "/job.yaml", "--follow"});
  EXPECT_EQ(job.exit_code, 0) << job.out << job.err;

  // A TorchScript model uploaded as a file, trained on the uploaded folder.
  const std::string model = dir_.str() + "/tinynet.pt";
  CommandResult written = RunCommand({MPSD_WRITE_SCRIPT_MODULE, "linear", model, "784", "10"});
  ASSERT_EQ(written.exit_code, 0) << written.err;
  ASSERT_EQ(Mpsctl(alice_, {"upload", model}).exit_code, 0);
  WriteFile(dir_.str() + "/scripted.yaml",
            "kind: TrainJob\nmodel: {torchscript: upload:tinynet.pt}\n"
            "dataset: {name: fashion-mnist, root: upload:mnist-small, limit_train: 32, "
            "limit_test: 16}\nbatch_size: 16\nepochs: 1\noptimizer: {name: adam, "
            "learning_rate: 0.001}\nseed: 1\ndevice: cpu\n");
  CommandResult scripted = Mpsctl(alice_, {"submit", dir_.str() + "/scripted.yaml", "--follow"});
  EXPECT_EQ(scripted.exit_code, 0) << scripted.out << scripted.err;
  // Bob's job may not name alice's model.
  WriteFile(dir_.str() + "/theirs.yaml",
            absl::StrReplaceAll(ReadFile(dir_.str() + "/scripted.yaml"),
                                {{"upload:tinynet.pt", "upload:@alice/tinynet.pt"},
                                 {"upload:mnist-small", "/usr/share/datasets/fashion-mnist"}}));
  CommandResult theirs = Mpsctl(bob_, {"submit", dir_.str() + "/theirs.yaml"});
  EXPECT_NE(theirs.exit_code, 0);
  EXPECT_THAT(theirs.err, HasSubstr("train_job.model.torchscript: \"upload:@alice/tinynet.pt\" "
                                    "is another submitter's upload: a job may read only its "
                                    "submitter's uploads"));
  // An upload that is not there is named as such, not as a folder of the state dir.
  WriteFile(dir_.str() + "/none.yaml",
            absl::StrReplaceAll(ReadFile(dir_.str() + "/scripted.yaml"),
                                {{"upload:tinynet.pt", "upload:nope.pt"}}));
  CommandResult none = Mpsctl(alice_, {"submit", dir_.str() + "/none.yaml"});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_THAT(none.err, HasSubstr("train_job.model.torchscript: upload:nope.pt: you have no "
                                  "upload named \"nope.pt\" (mpsctl uploads lists yours)"));
  EXPECT_THAT(none.err, Not(HasSubstr("/state/")));
}

// The tester's case: `mpsctl uploads rm` of an upload that a QUEUED job names (and then a
// RUNNING one) is refused on one line naming the jobs, and so is `upload --replace`; the data
// stays; jobs that ended do
// not count, and once the last one is cancelled rm deletes it. An admin's job naming the upload
// as upload:@alice/NAME holds it too.
TEST_F(UploadTest, RmRefusesAnUploadThatUnfinishedJobsName) {
  const std::string folder = dir_.str() + "/ds";
  MakeDataset(folder, 256, 64, 1000);
  CommandResult sent = Mpsctl(alice_, {"upload", folder, "--name", "ds"});
  ASSERT_EQ(sent.exit_code, 0) << sent.err;
  CommandResult paused = Mpsctl(admin_, {"pause"});  // Keeps the jobs QUEUED.
  ASSERT_EQ(paused.exit_code, 0) << paused.err;
  // Long enough to be cancelled while RUNNING: 4 steps an epoch.
  v1::SubmitJobRequest request = TrainJobRequest(256, 64, 10000, 64, "mlp");
  request.mutable_train_job()->mutable_dataset()->set_root("upload:ds");
  Job first;
  grpc::Status submitted = stub_->SubmitJob(Context(alice_).get(), request, &first);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  EXPECT_EQ(first.state(), Job::QUEUED);
  v1::SubmitJobRequest admins = request;
  admins.mutable_train_job()->mutable_dataset()->set_root("upload:@alice/ds");
  Job second;
  submitted = stub_->SubmitJob(Context(admin_).get(), admins, &second);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  // A job that ended does not count.
  Job ended;
  submitted = stub_->SubmitJob(Context(alice_).get(), request, &ended);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  ASSERT_TRUE(rpc::Cancel(*daemon_, ended.id()).ok());

  CommandResult refused = Mpsctl(alice_, {"uploads", "rm", "ds"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_EQ(refused.err,
            absl::StrCat("mpsctl: upload \"ds\" is used by queued or running jobs ", first.id(),
                         ", ", second.id(), "; cancel them or wait for them to end\n"));
  EXPECT_EQ(refused.out, "");
  v1::DeleteUploadRequest remove;
  remove.set_name("ds");
  v1::Upload gone;
  EXPECT_EQ(stub_->DeleteUpload(Context(alice_).get(), remove, &gone).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  remove.set_submitter("alice");
  EXPECT_EQ(stub_->DeleteUpload(Context(admin_).get(), remove, &gone).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // Nor may `upload --replace` swap other data in under them.
  const std::string other = dir_.str() + "/other";
  std::filesystem::create_directories(other);
  WriteFile(other + "/readme.txt", "not a dataset\n");
  CommandResult replaced = Mpsctl(alice_, {"upload", other, "--name", "ds", "--replace"});
  EXPECT_NE(replaced.exit_code, 0);
  EXPECT_THAT(replaced.err, HasSubstr("upload \"ds\" is used by queued or running jobs"));
  const std::string upload = dir_.str() + "/state/uploads/alice/ds";
  EXPECT_EQ(ReadFile(upload + "/sub/notes.txt"), "made by upload_e2e_test\n");
  EXPECT_EQ(ReadFile(upload + "/train-labels-idx1-ubyte"),
            ReadFile(folder + "/train-labels-idx1-ubyte"));

  // Running, the first still holds it; the cancelled second no longer does.
  ASSERT_TRUE(rpc::Cancel(*daemon_, second.id()).ok());
  ASSERT_EQ(Mpsctl(admin_, {"resume"}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] {
    absl::StatusOr<Job> job = rpc::Get(*daemon_, first.id());
    return job.ok() && job->state() == Job::RUNNING;
  }));
  refused = Mpsctl(alice_, {"uploads", "rm", "ds"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_EQ(refused.err, absl::StrCat("mpsctl: upload \"ds\" is used by queued or running job ",
                                      first.id(), "; cancel it or wait for it to end\n"));
  EXPECT_EQ(ReadFile(upload + "/sub/notes.txt"), "made by upload_e2e_test\n");

  ASSERT_TRUE(rpc::Cancel(*daemon_, first.id()).ok());
  EXPECT_EQ(rpc_ok::WaitForEnd(*daemon_, first.id()).state(), Job::CANCELLED);
  CommandResult removed = Mpsctl(alice_, {"uploads", "rm", "ds"});
  EXPECT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_FALSE(std::filesystem::exists(upload));
  // And a job naming it now is refused at submit, naming the field.
  Job none;
  grpc::Status late = stub_->SubmitJob(Context(alice_).get(), request, &none);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(late.error_message(), HasSubstr("train_job.dataset.root: upload:ds: you have no "
                                              "upload named \"ds\""));
}

// A submit naming an upload and a delete of it at the same moment, many times: never both
// succeed (a queued job whose data is gone); when the submit wins, the data is there.
TEST_F(UploadTest, ASubmitAndAnRmAtOnceNeverLoseTheJobsData) {
  const std::string folder = dir_.str() + "/race";
  MakeDataset(folder, 64, 16, 0);
  CommandResult tarred =
      RunCommand({"/usr/bin/tar", "-cf", dir_.str() + "/race.tar", "-C", folder, "."});
  ASSERT_EQ(tarred.exit_code, 0) << tarred.err;
  const std::string tar = ReadFile(dir_.str() + "/race.tar");
  CommandResult paused = Mpsctl(admin_, {"pause"});
  ASSERT_EQ(paused.exit_code, 0) << paused.err;
  v1::SubmitJobRequest request = TrainJobRequest(64, 16, 1, 16, "mlp");
  request.mutable_train_job()->mutable_dataset()->set_root("upload:race");
  const std::string upload = dir_.str() + "/state/uploads/alice/race";
  int submits_won = 0, deletes_won = 0;
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE(round);
    if (!std::filesystem::exists(upload)) {
      ASSERT_TRUE(Send(alice_, "race", tar, 0, static_cast<int64_t>(tar.size()), true).ok());
    }
    Job job;
    grpc::Status submitted, deleted;
    std::thread submit([&] { submitted = stub_->SubmitJob(Context(alice_).get(), request, &job); });
    std::thread remove([&] {
      v1::DeleteUploadRequest rm;
      rm.set_name("race");
      v1::Upload gone;
      deleted = stub_->DeleteUpload(Context(alice_).get(), rm, &gone);
    });
    submit.join();
    remove.join();
    EXPECT_FALSE(submitted.ok() && deleted.ok());
    if (submitted.ok()) {
      ++submits_won;
      EXPECT_EQ(ReadFile(upload + "/sub/notes.txt"), "made by upload_e2e_test\n");
      EXPECT_THAT(deleted.error_code(), ::testing::AnyOf(grpc::StatusCode::FAILED_PRECONDITION,
                                                         grpc::StatusCode::ABORTED))
          << deleted.error_message();
      EXPECT_TRUE(rpc::Cancel(*daemon_, job.id()).ok());
    } else if (deleted.ok()) {
      ++deletes_won;
      EXPECT_FALSE(std::filesystem::exists(upload));
    }
  }
  // Both orders happened, or the rounds tested one order only (reported, not failed: the
  // scheduling of two threads is the machine's).
  std::cout << "submit first: " << submits_won << " rounds, delete first: " << deletes_won
            << " rounds\n";
}

// On a terminal (a pseudo-terminal from script(1)) mpsctl upload redraws one progress line on
// stderr and clears it before the result; through a pipe (every other test) it draws none.
TEST_F(UploadTest, MpsctlDrawsProgressOnlyOnATerminal) {
  const std::string file = dir_.str() + "/big.bin";
  WriteFile(file, RandomBytes(3 << 20, 5));  // Twice fits in the fixture's 8 MiB quota.
  const std::vector<std::string> argv = {
      MpsctlPath(),   "--server",        address_, "--tls-ca", dir_.str() + "/cert.pem",
      "--token-file", TokenFile(alice_), "upload", file};
  CommandResult terminal = RunCommand({"/usr/bin/script", "--quiet", "--return", "--flush",
                                       "--command", absl::StrJoin(argv, " "), "/dev/null"});
  ASSERT_EQ(terminal.exit_code, 0) << terminal.out << terminal.err;
  EXPECT_THAT(terminal.out, HasSubstr("\r\x1b[Kuploading big.bin: "));
  EXPECT_THAT(terminal.out, HasSubstr("of 3.0 MiB ("));
  EXPECT_THAT(terminal.out, HasSubstr("\r\x1b[Kuploaded big.bin (file, 3.0 MiB"));

  CommandResult piped = Mpsctl(alice_, {"upload", file, "--name", "big-again.bin"});
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_THAT(piped.err, Not(HasSubstr("uploading")));
}

// Archives that would write outside the folder, or too much, are refused with a structured
// cause naming the entry, and leave nothing behind.
TEST_F(UploadTest, UnsafeArchivesAreRefused) {
  struct Case {
    std::string what, script, mode, entry, reason;
  };
  const std::vector<Case> cases = {
      {"absolute path", "add('/etc/cron.d/x', b'x')", "w", "/etc/cron.d/x", "UNSAFE_ARCHIVE_ENTRY"},
      {"traversal", "add('a/../../x', b'x')", "w", "a/../../x", "UNSAFE_ARCHIVE_ENTRY"},
      {"symlink out", "add('out', type=tarfile.SYMTYPE, linkname='/etc/passwd')", "w", "out",
       "UNSAFE_ARCHIVE_ENTRY"},
      {"symlink up", "add('d/up', type=tarfile.SYMTYPE, linkname='../../..')", "w", "d/up",
       "UNSAFE_ARCHIVE_ENTRY"},
      {"write through a link", "add('l', type=tarfile.SYMTYPE, linkname='sub')\nadd('l/x', b'x')",
       "w", "l/x", "UNSAFE_ARCHIVE_ENTRY"},
      {"a file, then a path under it", "add('a', b'x')\nadd('a/b', b'y')", "w", "a/b",
       "UNSAFE_ARCHIVE_ENTRY"},
      {"hard link", "add('f', b'x')\nadd('h', type=tarfile.LNKTYPE, linkname='f')", "w", "h",
       "UNSAFE_ARCHIVE_ENTRY"},
      {"device", "add('dev', type=tarfile.CHRTYPE, devmajor=1, devminor=3)", "w", "dev",
       "UNSAFE_ARCHIVE_ENTRY"},
      {"too many files", "for i in range(1001): add('f%d' % i)", "w", "f1000",
       "UNSAFE_ARCHIVE_ENTRY"},
      // 64 MiB of zeros, a few KB gzipped: beyond the 8 MiB quota once unpacked.
      {"tar bomb", "add('zeros', b'\\0' * (64 << 20))", "w:gz", "", "UPLOAD_QUOTA_EXCEEDED"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string tar = PythonTar(c.script, c.mode);
    ASSERT_LT(tar.size(), static_cast<size_t>(kQuota));
    grpc::Status status = Send(alice_, "bad", tar, 0, static_cast<int64_t>(tar.size()), true);
    EXPECT_EQ(Reason(status), c.reason) << status.error_message();
    if (!c.entry.empty()) EXPECT_EQ(Meta(status, "entry"), c.entry);
    EXPECT_THAT(status.error_message(), HasSubstr("upload \"bad\""));
    EXPECT_EQ(List(alice_).uploads_size(), 0);
    EXPECT_EQ(List(alice_).used_bytes(), 0);
  }
  // mpsctl sends a folder's links as they are; the daemon refuses one that leads out.
  const std::string folder = dir_.str() + "/linky";
  std::filesystem::create_directories(folder);
  std::filesystem::create_symlink("/etc/passwd", folder + "/passwd");
  CommandResult result = Mpsctl(alice_, {"upload", folder});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.err, HasSubstr("archive entry \"passwd\" refused: a symbolic link to the "
                                    "absolute path \"/etc/passwd\""));
}

TEST_F(UploadTest, QuotaOverrunAndBadChunksAreRefused) {
  const std::string big = dir_.str() + "/big.bin";
  WriteFile(big, RandomBytes(kQuota + 1, 5));
  CommandResult result = Mpsctl(alice_, {"upload", big});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.err, HasSubstr("upload quota exceeded: submitter \"alice\" holds 0 bytes"));
  EXPECT_EQ(List(alice_).used_bytes(), 0);

  // Two uploads at once: the second counts what the first has yet to send.
  {
    const std::string first = RandomBytes(6 << 20, 11);
    v1::Upload ignored;
    auto context = Context(alice_);
    auto writer = stub_->UploadFile(context.get(), &ignored);
    v1::UploadChunk chunk;
    chunk.set_name("first");
    chunk.set_sha256(Sha256(first));
    chunk.set_size_bytes(static_cast<int64_t>(first.size()));
    chunk.set_data(first.substr(0, kChunk));
    ASSERT_TRUE(writer->Write(chunk));
    ASSERT_TRUE(WaitUntil([&] { return Status(alice_, "first", first).offset() == kChunk; }));
    const std::string second = RandomBytes(3 << 20, 12);
    grpc::Status refused = Send(alice_, "second", second, 0, 3 << 20, false);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(Reason(refused), "UPLOAD_QUOTA_EXCEEDED");
    EXPECT_THAT(refused.error_message(), HasSubstr("holds 6291456 bytes"));  // 1 held + 5 to come
    context->TryCancel();
    writer->Finish();
    // Once the first stream is gone only its 1 MiB counts.
    EXPECT_TRUE(WaitUntil([&] { return Send(alice_, "second", second, 0, 3 << 20, false).ok(); },
                          absl::Seconds(10)));
    v1::DeleteUploadRequest remove;
    v1::Upload gone;
    for (const char* name : {"first", "second"}) {
      remove.set_name(name);
      EXPECT_TRUE(stub_->DeleteUpload(Context(alice_).get(), remove, &gone).ok()) << name;
    }
  }

  // --replace counts what the area holds once the new bytes replace the old: 5 MiB replacing
  // 5 MiB under the 8 MiB quota fits (old + new would not), a file and a folder alike.
  {
    const std::string five = dir_.str() + "/five.bin";
    WriteFile(five, RandomBytes(5 << 20, 13));
    ASSERT_EQ(Mpsctl(alice_, {"upload", five}).exit_code, 0);
    WriteFile(five, RandomBytes(5 << 20, 14));
    CommandResult replaced = Mpsctl(alice_, {"upload", five, "--replace"});
    EXPECT_EQ(replaced.exit_code, 0) << replaced.err;
    EXPECT_LT(List(alice_).used_bytes(), 6 << 20);  // the new 5 MiB (+ its SHA-256 note) only
    const std::string folder = dir_.str() + "/fivedir";
    std::filesystem::create_directories(folder);
    WriteFile(folder + "/a.bin", RandomBytes(5 << 20, 15));
    CommandResult into_folder =
        Mpsctl(alice_, {"upload", folder, "--name", "five.bin", "--replace"});
    EXPECT_EQ(into_folder.exit_code, 0) << into_folder.err;
    v1::DeleteUploadRequest remove;
    remove.set_name("five.bin");
    v1::Upload gone;
    EXPECT_TRUE(stub_->DeleteUpload(Context(alice_).get(), remove, &gone).ok());
  }

  const std::string data = RandomBytes(1000, 9);
  // A SHA-256 that does not match: DATA_LOSS, nothing kept.
  v1::Upload upload;
  auto context = Context(alice_);
  auto writer = stub_->UploadFile(context.get(), &upload);
  v1::UploadChunk chunk;
  chunk.set_name("x");
  chunk.set_sha256(Sha256("other bytes"));
  chunk.set_size_bytes(1000);
  chunk.set_data(data);
  writer->Write(chunk);
  writer->WritesDone();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_EQ(List(alice_).used_bytes(), 0);
  // Bad names are refused, naming the field.
  for (const std::string& name : {std::string(".hidden"), std::string("a/b"), std::string("")}) {
    grpc::Status status = Send(alice_, name, data, 0, 1000, false);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
    EXPECT_EQ(Meta(status, "field"), "name") << name;
  }
  // An existing name is not overwritten without replace.
  EXPECT_TRUE(Send(alice_, "x", data, 0, 1000, false).ok());
  EXPECT_EQ(Send(alice_, "x", RandomBytes(10, 1), 0, 10, false).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  // A viewer may not upload.
  const std::string viewer = AddToken(tokens_, "watcher", "viewer");
  EXPECT_EQ(Send(viewer, "v", data, 0, 1000, false).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // What a daemon stopped (or killed) while unpacking or deleting leaves is removed at the next
  // start; unfinished uploads' bytes stay.
  const std::string area = dir_.str() + "/state/uploads/alice";
  EXPECT_EQ(Send(alice_, "half", data, 0, 500, false, true).error_code(),
            grpc::StatusCode::CANCELLED);
  const int stopped = daemon_->Stop(SIGTERM, absl::Seconds(30));
  ASSERT_TRUE(WIFEXITED(stopped)) << stopped;
  const std::string unpacking = area + "/.partial/big." + std::string(64, 'a') + ".d";
  std::filesystem::create_directories(unpacking + "/sub");
  WriteFile(unpacking + "/sub/f", "x");
  std::filesystem::create_directories(area + "/.trash/old.123");
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  EXPECT_FALSE(std::filesystem::exists(unpacking));
  EXPECT_FALSE(std::filesystem::exists(area + "/.trash/old.123"));
  EXPECT_THAT(ReadFile(daemon_->log_path()), HasSubstr("never finished unpacking or deleting"));
  EXPECT_EQ(Status(alice_, "half", data).offset(), 500);
}

}  // namespace
}  // namespace mpsd::testing
