// The sd_notify calls of service_notify.h, through libsystemd when the build found it.
#include "server/service_notify.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

#if defined(MPSD_HAVE_LIBSYSTEMD)
#include <systemd/sd-daemon.h>
#endif

namespace mpsd::server {

#if defined(MPSD_HAVE_LIBSYSTEMD)

bool ServiceNotifyAvailable() { return true; }

void NotifyReady(const std::string& status) {
  sd_notify(0, absl::StrCat("READY=1\nSTATUS=", status).c_str());
}

void NotifyStopping(const std::string& status) {
  sd_notify(0, absl::StrCat("STOPPING=1\nSTATUS=", status).c_str());
}

void NotifyWatchdog() { sd_notify(0, "WATCHDOG=1"); }

absl::Duration WatchdogInterval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return absl::ZeroDuration();
  return absl::Microseconds(usec) / 2;
}

#else

bool ServiceNotifyAvailable() { return false; }
void NotifyReady(const std::string&) {}
void NotifyStopping(const std::string&) {}
void NotifyWatchdog() {}
absl::Duration WatchdogInterval() { return absl::ZeroDuration(); }

#endif

}  // namespace mpsd::server
