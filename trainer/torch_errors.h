// The exception firewall between LibTorch and the rest of mpsd: LibTorch reports failures by
// throwing (c10::Error, std::bad_alloc, ...); our code returns absl::Status. Every entry point
// of the executor runs its LibTorch work through CatchTorchErrors, so no exception leaves the
// trainer. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_TORCH_ERRORS_H_
#define MPSD_TRAINER_TORCH_ERRORS_H_

#include <torch/torch.h>

#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "api/error_cause.h"
#include "trainer/compat/errors.h"

namespace mpsd::trainer {

// A collective (broadcast, all-reduce) that failed on this rank because a peer went away or
// the timeout passed (trainer/distributed.cc). A c10::Error, so that whatever catches LibTorch's
// errors catches it too; StatusFromTorchError attaches RANK_FAILED with the rank, which the
// daemon's rank group reads to tell a peer's collateral failure from the one that caused it.
class CollectiveError : public c10::Error {
 public:
  CollectiveError(c10::SourceLocation where, std::string message, int rank)
      : c10::Error(where, std::move(message)), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

// An exception raised by the job's own code (a TorchScript model's, loss's or metric's forward)
// while the job runs, or a value of the wrong kind that it returned: the field of the spec that
// names the code ("train_job.loss.torchscript", "train_job.metrics[2].torchscript") and a
// message for people that starts with it. CallUserCode raises it; CatchTorchErrors turns it into
// INVALID_ARGUMENT with an INVALID_FIELD cause naming the field (the job fails INVALID_SPEC), not
// into INTERNAL. Not a c10::Error, so that no handler of LibTorch's errors takes it for one.
class UserCodeError : public std::runtime_error {
 public:
  UserCodeError(std::string field, const std::string& message)
      : std::runtime_error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// What a script's exception says, for a job's message: TorchScript's traceback of the original
// code and the exception when the text has one (the serialized-code traceback before it shows
// the same place in compiled form), and of that at most the last 2,000 bytes (the exception's
// own line comes last), cut at a UTF-8 character boundary.
inline std::string ScriptErrorText(absl::string_view text) {
  constexpr absl::string_view kOriginal = "Traceback of TorchScript, original code";
  if (const size_t at = text.find(kOriginal); at != absl::string_view::npos) {
    text.remove_prefix(at);
  }
  constexpr size_t kMaxBytes = 2000;
  if (text.size() <= kMaxBytes) return std::string(text);
  size_t cut = text.size() - kMaxBytes;
  while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;
  return absl::StrCat("…", text.substr(cut));
}

// Runs `fn`, a call into the user's code named by `field` (its file `path`), and rethrows what
// it throws as UserCodeError "<field>: <path>: <what()> failed: <the script's message>"
// (ScriptErrorText; LibTorch's C++ backtrace left out); `what` ("forward on logits [16, 2] float32
// and ...") is called only then. Out of memory (device or host) stays what it is: that is the job's
// size, not the code's fault. Returns what `fn` returns.
template <typename Fn, typename What>
auto CallUserCode(const std::string& field, const std::string& path, What&& what, Fn&& fn)
    -> decltype(std::forward<Fn>(fn)()) {
  const auto error = [&](absl::string_view message) {
    return UserCodeError(field, absl::StrCat(field, ": ", path, ": ", what(),
                                             " failed: ", ScriptErrorText(message)));
  };
  try {
    return std::forward<Fn>(fn)();
  } catch (const UserCodeError&) {
    throw;
  } catch (const c10::Error& e) {
    if (compat::IsOutOfMemory(e)) throw;
    throw error(e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw error(e.what());
  }
}

// RESOURCE_EXHAUSTED for out of device memory, else INTERNAL "LibTorch error: <message>" (the
// message without LibTorch's C++ backtrace); a CollectiveError's carries RANK_FAILED.
inline absl::Status StatusFromTorchError(const c10::Error& e) {
  const std::string message = e.what_without_backtrace();
  if (compat::IsOutOfMemory(e)) return absl::ResourceExhaustedError(message);
  absl::Status status = absl::InternalError(absl::StrCat("LibTorch error: ", message));
  if (const auto* collective = dynamic_cast<const CollectiveError*>(&e)) {
    return api::WithRankFailed(std::move(status), collective->rank());
  }
  return status;
}

// Runs `fn` (returning absl::Status) and converts anything it throws: UserCodeError to
// INVALID_ARGUMENT naming its field (INVALID_FIELD), c10::Error as StatusFromTorchError,
// std::bad_alloc to RESOURCE_EXHAUSTED (out of host memory), any other exception to INTERNAL.
// Runs on the calling thread.
template <typename Fn>
absl::Status CatchTorchErrors(Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const UserCodeError& e) {
    return api::WithInvalidField(absl::InvalidArgumentError(e.what()), e.field());
  } catch (const c10::Error& e) {
    return StatusFromTorchError(e);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("unexpected exception: ", e.what()));
  } catch (...) {
    return absl::InternalError("unexpected exception of unknown type");
  }
}

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_TORCH_ERRORS_H_
