// Raw TCP clients for tests of the HTTP listener's limits: connections from a chosen loopback
// address (all of 127.0.0.0/8 reaches a listener on 127.0.0.1 under Linux) that send a request
// as slowly as a test likes, and a way to see that the server closed one.
#ifndef MPSD_TESTS_COMMON_RAW_HTTP_H_
#define MPSD_TESTS_COMMON_RAW_HTTP_H_

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mpsd::testing {

// A blocking TCP connection from `source_ip` (port chosen by the kernel) to 127.0.0.1:`port`;
// -1 on failure. The caller closes it.
int ConnectFrom(const std::string& source_ip, int port);

// Sends all of `data`; false if the connection is gone (EPIPE, ECONNRESET: no SIGPIPE).
bool SendAll(int fd, const std::string& data);

// Reads what the peer sends until it closes the connection (then true, with what came in
// `received` when not null), or `limit` passes (false).
bool WaitForClose(int fd, absl::Duration limit, std::string* received = nullptr);

// Whether the peer has closed the connection already (nothing is waited for); what it sent
// before is read and dropped.
bool ClosedByPeer(int fd);

// Replaces each connection of `fds` that the server has closed (e.g. refused over a cap while
// another took its place) with a new one from `source_ip` to `port`.
void Reopen(std::vector<int>& fds, const std::string& source_ip, int port);

}  // namespace mpsd::testing

#endif  // MPSD_TESTS_COMMON_RAW_HTTP_H_
