// Checks tsan_absl_sync.cc both ways (deploy/test-sanitizers.sh runs it twice): a counter written
// on one thread is read on another that waited for the writer's mutex (a Condition) and its
// Notification. `tsan_canary ordered` writes it before the unlock and the Notify: TSan must not
// report (without the wrappers it does: Debian's absl is invisible to it). `tsan_canary race`
// writes it after both: TSan must report, since they order nothing that came after them.
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

int main(int argc, char** argv) {
  const bool race = argc > 1 && std::strcmp(argv[1], "race") == 0;
  absl::Mutex mu;
  bool ready = false;
  absl::Notification notified;
  int counter = 0;
  std::thread writer([&] {
    if (!race) counter = 1;
    {
      absl::MutexLock lock(&mu);
      ready = true;
    }
    notified.Notify();
    if (race) counter = 1;
  });
  std::thread reader([&] {
    mu.LockWhen(absl::Condition(&ready));
    mu.Unlock();
    notified.WaitForNotification();
    std::printf("counter %d\n", counter);
  });
  writer.join();
  reader.join();
  return 0;
}
