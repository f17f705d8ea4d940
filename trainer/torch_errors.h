// The exception firewall between LibTorch and the rest of mpsd: LibTorch reports failures by
// throwing (c10::Error, std::bad_alloc, ...); our code returns absl::Status. Every entry point
// of the executor runs its LibTorch work through CatchTorchErrors, so no exception leaves the
// trainer. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_TORCH_ERRORS_H_
#define MPSD_TRAINER_TORCH_ERRORS_H_

#include <torch/torch.h>

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

// Runs `fn` (returning absl::Status) and converts anything it throws: c10::Error as
// StatusFromTorchError, std::bad_alloc to RESOURCE_EXHAUSTED (out of host memory), any other
// exception to INTERNAL. Runs on the calling thread.
template <typename Fn>
absl::Status CatchTorchErrors(Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
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
