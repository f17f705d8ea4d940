// Checkpoints: a zip archive (caffe2::serialize, the container torch.save uses) holding a small
// metadata record and one torch::serialize archive of every tensor a resumed job needs.
#include "trainer/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "api/job_id.h"
#include "trainer/artifact_file.h"
#include "trainer/torch_archive.h"
#include "trainer/zip_index.h"

namespace mpsd::trainer {
namespace {

namespace fs = std::filesystem;

constexpr char kInfoRecord[] = "mpsd_checkpoint.txt";
constexpr char kStateRecord[] = "state.pt";
constexpr char kFormatLine[] = "format: mpsd-checkpoint 1";

absl::Status FileError(const std::string& path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", problem));
}

// ---- The archive's table of contents ----------------------------------------------------------

// Records are "<archive name>/<record>" (caffe2::serialize), the archive name being the folder
// of the first entry.
bool IsRecord(const ZipEntry& entry, absl::string_view record) {
  const size_t slash = entry.name.find('/');
  return slash != std::string::npos && absl::string_view(entry.name).substr(slash + 1) == record;
}

bool HasRecord(const std::vector<ZipEntry>& index, absl::string_view record) {
  return std::any_of(index.begin(), index.end(),
                     [record](const ZipEntry& e) { return IsRecord(e, record); });
}

// What PyTorchStreamReader reads whole to check a checkpoint (the metadata and the version
// record) must be small: it allocates the size the directory states and decompresses into it.
absl::Status CheckRecordSizes(const std::vector<ZipEntry>& index) {
  for (const ZipEntry& entry : index) {
    if (!IsRecord(entry, kInfoRecord) && !IsRecord(entry, "version") &&
        !IsRecord(entry, ".data/version")) {
      continue;
    }
    if (entry.uncompressed_size > kMaxCheckpointInfoBytes ||
        entry.compressed_size > kMaxCheckpointInfoBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("its record ", entry.name, " is ", entry.uncompressed_size, " bytes (",
                       entry.compressed_size, " stored), more than the ", kMaxCheckpointInfoBytes,
                       " bytes of an mpsd checkpoint's; not a checkpoint mpsd wrote"));
    }
  }
  return absl::OkStatus();
}

// ---- Metadata ---------------------------------------------------------------------------------

std::string FormatInfo(const CheckpointInfo& info) {
  return absl::StrCat(kFormatLine, "\n",                              //
                      "model: ", info.model, "\n",                    //
                      "parameters: ", info.parameters, "\n",          //
                      "optimizer: ", info.optimizer, "\n",            //
                      "dataset: ", info.dataset, "\n",                //
                      "train_examples: ", info.train_examples, "\n",  //
                      "batch_size: ", info.batch_size, "\n",          //
                      "world_size: ", info.world_size, "\n",          //
                      "epoch: ", info.epoch, "\n",                    //
                      "step: ", info.step, "\n",                      //
                      "epoch_step: ", info.epoch_step, "\n",          //
                      info.seed.has_value() ? absl::StrCat("seed: ", *info.seed, "\n") : "",
                      "precision: ", info.precision, "\n",  //
                      "job_id: ", info.job_id, "\n",        //
                      "torch_version: ", info.torch_version, "\n");
}

// Unknown keys are ignored (a newer mpsd may record more); the numbers must parse.
absl::StatusOr<CheckpointInfo> ParseInfo(absl::string_view text) {
  if (!absl::StartsWith(text, kFormatLine)) {
    return absl::InvalidArgumentError("metadata does not start with \"format: mpsd-checkpoint 1\"");
  }
  CheckpointInfo info;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(": ", 1));
    const absl::string_view key = kv.first;
    const std::string value(absl::StripAsciiWhitespace(kv.second));
    bool ok = true;
    if (key == "model") info.model = value;
    if (key == "optimizer") info.optimizer = value;
    if (key == "dataset") info.dataset = value;
    if (key == "precision") info.precision = value;
    if (key == "job_id") info.job_id = value;
    if (key == "torch_version") info.torch_version = value;
    if (key == "parameters") ok = absl::SimpleAtoi(value, &info.parameters);
    if (key == "train_examples") ok = absl::SimpleAtoi(value, &info.train_examples);
    if (key == "batch_size") ok = absl::SimpleAtoi(value, &info.batch_size);
    if (key == "world_size") ok = absl::SimpleAtoi(value, &info.world_size);
    if (key == "epoch") ok = absl::SimpleAtoi(value, &info.epoch);
    if (key == "step") ok = absl::SimpleAtoi(value, &info.step);
    if (key == "epoch_step") ok = absl::SimpleAtoi(value, &info.epoch_step);
    if (key == "seed") {
      uint64_t seed = 0;
      ok = absl::SimpleAtoi(value, &seed);
      info.seed = seed;
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("metadata: bad ", key, " \"", value, "\""));
    }
  }
  if (info.model.empty() || info.epoch < 0 || info.step < 0 || info.epoch_step < 0) {
    return absl::InvalidArgumentError("metadata: model, epoch or step missing or negative");
  }
  return info;
}

// ---- Generators -------------------------------------------------------------------------------

// Generator state reads and writes take the generator's lock, as torch.get_rng_state does.
torch::Tensor GeneratorState(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void SetGeneratorState(at::Generator generator, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state.to(torch::kCPU));
}

// ---- Files ------------------------------------------------------------------------------------

absl::Status Rename(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("rename ", from, " to ", to, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Serialises every tensor of the checkpoint into one torch::serialize archive, in memory.
std::string SerializeState(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                           const at::Generator& shuffle, const ExtraState& extra,
                           const torch::Device& device) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  archive.write("model", model_archive);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  torch::serialize::OutputArchive extra_archive;
  for (const auto& [name, tensor] : extra) extra_archive.write(name, tensor, /*is_buffer=*/true);
  archive.write("extra", extra_archive);
  if (shuffle.defined()) {
    archive.write("rng_shuffle", GeneratorState(shuffle), /*is_buffer=*/true);
  }
  archive.write("rng_cpu", GeneratorState(at::detail::getDefaultCPUGenerator()),
                /*is_buffer=*/true);
  if (!device.is_cpu()) {
    archive.write("rng_device", GeneratorState(at::globalContext().defaultGenerator(device)),
                  /*is_buffer=*/true);
  }
  std::string bytes;
  archive.save_to([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

// Writes `path` as the finished archive: the zip is built in memory (LibTorch's writer aborts
// the process on a short write to a file), then written checked against the free space, via a
// temporary next to it (trainer/artifact_file.h).
absl::Status WriteArchive(const std::string& path, const std::string& info,
                          const std::string& state) {
  std::string archive;
  archive.reserve(info.size() + state.size() + 4096);
  {
    caffe2::serialize::PyTorchStreamWriter writer([&archive](const void* data, size_t size) {
      archive.append(static_cast<const char*>(data), size);
      return size;
    });
    writer.writeRecord(kInfoRecord, info.data(), info.size());
    writer.writeRecord(kStateRecord, state.data(), state.size());
    writer.writeEndOfFile();
  }
  return WriteArtifactFile(path, archive);
}

// Links `path` as dir/name (a hard link, replaced by rename).
absl::Status LinkAs(const fs::path& dir, const fs::path& path, const char* name) {
  const std::string link = (dir / name).string();
  const std::string temporary = link + ".tmp";
  std::error_code ec;
  fs::remove(temporary, ec);
  fs::create_hard_link(path, temporary, ec);
  if (ec) return absl::InternalError(absl::StrCat("link ", temporary, ": ", ec.message()));
  return Rename(temporary, link);
}

// A checkpoint file under its own name: checkpoint-epoch-N.pt or checkpoint-step-N.pt.
bool IsCheckpointFile(const std::string& name) {
  return (absl::StartsWith(name, "checkpoint-epoch-") ||
          absl::StartsWith(name, "checkpoint-step-")) &&
         absl::EndsWith(name, ".pt");
}

// Links the new checkpoint `path` as checkpoint-best.pt and checkpoint-latest.pt as `files`
// says, then removes the checkpoint files of `dir` beyond the newest files.keep_last (by their
// metadata's step; the new one is the newest; unreadable ones count as oldest).
absl::Status Publish(const fs::path& dir, const fs::path& path, const CheckpointFiles& files) {
  if (files.best) {
    if (absl::Status s = LinkAs(dir, path, kBestCheckpointName); !s.ok()) return s;
  }
  if (files.keep_last > 0) {
    if (absl::Status s = LinkAs(dir, path, kLatestCheckpointName); !s.ok()) return s;
  }
  std::vector<std::pair<int64_t, fs::path>> older;  // (step, file)
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!IsCheckpointFile(name) || entry.path() == path) continue;
    absl::StatusOr<CheckpointInfo> info = ReadCheckpointInfo(entry.path().string());
    older.emplace_back(info.ok() ? info->step : -1, entry.path());
  }
  std::sort(older.begin(), older.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second > b.second;  // newest first
  });
  const size_t keep_older = files.keep_last > 0 ? static_cast<size_t>(files.keep_last - 1) : 0;
  for (size_t i = keep_older; i < older.size(); ++i) fs::remove(older[i].second, ec);
  if (files.keep_last == 0) fs::remove(path, ec);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<mpsd::v1::CheckpointSaved> SaveCheckpoint(
    const std::string& dir, const CheckpointInfo& info, torch::nn::Module& model,
    torch::optim::Optimizer& optimizer, const at::Generator& shuffle, const ExtraState& extra,
    const torch::Device& device, const CheckpointFiles& files) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  const fs::path path =
      fs::path(dir) / (info.epoch_step == 0 ? absl::StrCat("checkpoint-epoch-", info.epoch, ".pt")
                                            : absl::StrCat("checkpoint-step-", info.step, ".pt"));
  const std::string state = SerializeState(model, optimizer, shuffle, extra, device);
  if (absl::Status s = WriteArchive(path.string(), FormatInfo(info), state); !s.ok()) return s;
  if (absl::Status s = Publish(dir, path, files); !s.ok()) return s;
  const fs::path kept = files.keep_last > 0 ? path : fs::path(dir) / kBestCheckpointName;
  mpsd::v1::CheckpointSaved saved;
  saved.set_path(kept.string());
  saved.set_epoch(info.epoch);
  saved.set_step(info.step);
  saved.set_size_bytes(static_cast<int64_t>(fs::file_size(kept, ec)));
  return saved;
}

absl::StatusOr<CheckpointInfo> ReadCheckpointInfo(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) return FileError(path, "no such checkpoint file");
  if (!fs::is_regular_file(status)) return FileError(path, "not a regular file");
  unsigned char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(magic), sizeof(magic));
  if (in.gcount() == 0) return FileError(path, "empty file, expected an mpsd checkpoint");
  if (magic[0] == 0x80) {
    return FileError(path,
                     "a legacy PyTorch pickle (torch.save without the zip format); mpsd resumes "
                     "only from checkpoints it wrote");
  }
  if (in.gcount() < 4 || std::memcmp(magic, "PK\x03\x04", 4) != 0) {
    return FileError(path, "not a checkpoint archive (expected a zip archive written by mpsd)");
  }
  in.close();
  absl::StatusOr<std::vector<ZipEntry>> index = ReadZipIndex(path);
  if (absl::IsOutOfRange(index.status())) {
    return FileError(path, absl::StrCat(index.status().message(),
                                        "; not a checkpoint mpsd "
                                        "wrote (its directory is a few hundred bytes)"));
  }
  if (!index.ok()) {
    return FileError(path, absl::StrCat("truncated or corrupt checkpoint archive (",
                                        index.status().message(), ")"));
  }
  if (absl::Status s = CheckRecordSizes(*index); !s.ok()) return FileError(path, s.message());
  if (!HasRecord(*index, kInfoRecord)) {
    // torch.jit.save (a job's model.pt, a TorchScript model) also writes data.pkl, and
    // constants.pkl beside it.
    if (HasRecord(*index, "constants.pkl")) {
      return FileError(path,
                       "a TorchScript module (as a job's model.pt is), not a checkpoint: "
                       "resume from the job's id, or its checkpoint-*.pt; a model to start "
                       "from is model.weights (a state dict) or model.torchscript");
    }
    if (HasRecord(*index, "data.pkl")) {
      return FileError(path,
                       "saved by Python torch.save; mpsd resumes only from checkpoints it wrote");
    }
    return FileError(path, "a zip archive without mpsd checkpoint metadata");
  }
  if (!HasRecord(*index, kStateRecord)) return FileError(path, "checkpoint has no state record");
  try {
    // Bounded now: the directory the reader loads and every record it reads whole (the
    // version and the metadata) are within the limits CheckRecordSizes applied.
    caffe2::serialize::PyTorchStreamReader reader(path);
    if (!reader.hasRecord(kInfoRecord)) {
      return FileError(path, "a zip archive without mpsd checkpoint metadata");
    }
    auto [data, size] = reader.getRecord(kInfoRecord);
    absl::StatusOr<CheckpointInfo> info =
        ParseInfo(absl::string_view(static_cast<const char*>(data.get()), size));
    if (!info.ok()) return FileError(path, info.status().message());
    return info;
  } catch (const c10::Error& e) {
    return FileError(path, absl::StrCat("truncated or corrupt checkpoint archive (",
                                        e.what_without_backtrace(), ")"));
  }
}

absl::Status CheckCompatible(const CheckpointInfo& saved, const CheckpointInfo& job,
                             int job_epochs) {
  auto differs = [](absl::string_view what, const auto& theirs, const auto& ours) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint of another job: its ", what, " is ",
                                                   theirs, ", this job's is ", ours));
  };
  if (saved.model != job.model) return differs("model", saved.model, job.model);
  if (saved.parameters != job.parameters) {
    return differs("parameter count", saved.parameters, job.parameters);
  }
  if (saved.optimizer != job.optimizer) return differs("optimizer", saved.optimizer, job.optimizer);
  if (saved.dataset != job.dataset) return differs("dataset", saved.dataset, job.dataset);
  if (saved.batch_size != job.batch_size) {
    return differs("batch size", saved.batch_size, job.batch_size);
  }
  if (saved.world_size != job.world_size) {
    return differs("world size (distributed ranks)", saved.world_size, job.world_size);
  }
  if (saved.train_examples > 0 && job.train_examples > 0 &&
      saved.train_examples != job.train_examples) {
    return differs("training set size", saved.train_examples, job.train_examples);
  }
  if (saved.seed.has_value() && job.seed.has_value() && *saved.seed != *job.seed) {
    return differs("seed (the data order, validation split and subsets follow it)", *saved.seed,
                   *job.seed);
  }
  if (saved.epoch > job_epochs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "checkpoint is at epoch %d, beyond this job's %d epoch(s)", saved.epoch, job_epochs));
  }
  return absl::OkStatus();
}

absl::StatusOr<RestoredCheckpoint> LoadCheckpoint(const std::string& path, torch::nn::Module& model,
                                                  torch::optim::Optimizer& optimizer,
                                                  ExtraState& extra, const torch::Device& device) {
  absl::StatusOr<CheckpointInfo> info = ReadCheckpointInfo(path);
  if (!info.ok()) return info.status();
  RestoredCheckpoint restored{*std::move(info), torch::Tensor()};
  torch::serialize::InputArchive archive;
  // Read once (ReadCheckpointInfo checked only its metadata): the outer archive's claims and
  // the state record's tensors are checked on the bytes LibTorch then reads.
  absl::StatusOr<std::vector<char>> bytes = ReadWholeFile(path);
  if (!bytes.ok()) return absl::InvalidArgumentError(bytes.status().message());
  const absl::string_view view(bytes->data(), bytes->size());
  if (absl::Status s = CheckTorchArchive(view, {}); !s.ok()) return FileError(path, s.message());
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<MemoryReadAdapter>(view));
    auto [data, size] = reader.getRecord(kStateRecord);
    const absl::string_view state(static_cast<const char*>(data.get()), size);
    if (absl::Status s = CheckTorchArchive(state, ScriptPickles()); !s.ok()) {
      return FileError(path, absl::StrCat("its record ", kStateRecord, ": ", s.message()));
    }
    archive.load_from(state.data(), state.size(), device);
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    model.load(model_archive);
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    optimizer.load(optimizer_archive);
  } catch (const c10::Error& e) {
    return FileError(
        path, absl::StrCat("cannot restore the model and optimizer: ", e.what_without_backtrace()));
  }
  torch::serialize::InputArchive extra_archive;
  if (archive.try_read("extra", extra_archive)) {
    for (auto& [name, tensor] : extra) {
      tensor = torch::Tensor();
      extra_archive.try_read(name, tensor, /*is_buffer=*/true);
    }
  }
  if (archive.try_read("rng_shuffle", restored.shuffle_state, /*is_buffer=*/true)) {
    restored.shuffle_state = restored.shuffle_state.to(torch::kCPU);
  }
  torch::Tensor cpu_state;
  archive.read("rng_cpu", cpu_state, /*is_buffer=*/true);
  SetGeneratorState(at::detail::getDefaultCPUGenerator(), cpu_state);
  torch::Tensor device_state;
  if (!device.is_cpu() && archive.try_read("rng_device", device_state, /*is_buffer=*/true)) {
    SetGeneratorState(at::globalContext().defaultGenerator(device), device_state);
  }
  return restored;
}

std::string ResolveResumeFrom(const std::string& resume_from, const std::string& artifacts_dir) {
  if (!api::IsJobId(resume_from)) return resume_from;
  return (fs::path(artifacts_dir) / resume_from / kLatestCheckpointName).string();
}

}  // namespace mpsd::trainer
