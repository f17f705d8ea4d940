// CancelFlag: an atomic flag with stop callbacks.
#include "api/cancel_flag.h"

#include <algorithm>
#include <utility>

namespace mpsd::api {

void CancelFlag::Cancel() {
  absl::MutexLock lock(&mu_);
  if (flag_.exchange(true)) return;
  // Under mu_: a Callback being destroyed waits until its fn has returned.
  for (Callback* callback : callbacks_) callback->fn_();
  callbacks_.clear();
}

CancelFlag::Callback::Callback(const CancelFlag& flag, std::function<void()> fn)
    : flag_(flag), fn_(std::move(fn)) {
  {
    absl::MutexLock lock(&flag_.mu_);
    if (!flag_.flag_.load()) {
      flag_.callbacks_.push_back(this);
      return;
    }
  }
  fn_();
}

CancelFlag::Callback::~Callback() {
  absl::MutexLock lock(&flag_.mu_);
  auto it = std::find(flag_.callbacks_.begin(), flag_.callbacks_.end(), this);
  if (it != flag_.callbacks_.end()) flag_.callbacks_.erase(it);
}

}  // namespace mpsd::api
