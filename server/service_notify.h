// Tells the service manager where mpsd stands (systemd's sd_notify protocol, Type=notify in
// deploy/mpsd.service): READY=1 once the daemon listens, STOPPING=1 when it starts to shut down,
// WATCHDOG=1 at half the unit's WatchdogSec while its main loop runs.
//
// Every function is a no-op when the process was not started by a service manager that asked for
// it ($NOTIFY_SOCKET unset; $WATCHDOG_USEC unset for the watchdog) or when mpsd was built without
// libsystemd (ServiceNotifyAvailable() is false: macOS, or Linux without libsystemd-dev). They
// send one datagram each; safe from any thread; errors are ignored (the manager's own timeouts
// report a daemon that never got READY or stopped feeding its watchdog).
#ifndef MPSD_SERVER_SERVICE_NOTIFY_H_
#define MPSD_SERVER_SERVICE_NOTIFY_H_

#include <string>

#include "absl/time/time.h"

namespace mpsd::server {

// Whether this build can talk to a service manager at all (linked with libsystemd).
bool ServiceNotifyAvailable();

// READY=1 with STATUS=`status` (shown by `systemctl status`).
void NotifyReady(const std::string& status);

// STOPPING=1 with STATUS=`status`.
void NotifyStopping(const std::string& status);

// WATCHDOG=1.
void NotifyWatchdog();

// How often to call NotifyWatchdog(): half the watchdog timeout the manager asked for
// ($WATCHDOG_USEC, for this pid when $WATCHDOG_PID is set); absl::ZeroDuration() when none.
absl::Duration WatchdogInterval();

}  // namespace mpsd::server

#endif  // MPSD_SERVER_SERVICE_NOTIFY_H_
