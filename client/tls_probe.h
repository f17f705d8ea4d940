// Why a TLS connection to mpsd failed, in words: gRPC reports a wrong CA and an expired
// certificate alike ("certificate verify failed") and a plaintext client on a TLS port as
// "Socket closed". After such a failure mpsctl makes one handshake of its own with OpenSSL and
// reads what went wrong from it.
#ifndef MPSD_CLIENT_TLS_PROBE_H_
#define MPSD_CLIENT_TLS_PROBE_H_

#include <string>

namespace mpsd::client {

struct TlsOptions;

// Connects to `host`:`port` (2 s per socket operation, below) and makes one TLS
// handshake, verifying as gRPC does (against tls.ca_file, else the system's roots, and `host`
// as a DNS name or IP address; with tls's client certificate when given). Returns a sentence
// saying what is wrong, e.g. "the server's certificate expired on Jan  2 00:00:00 2020 GMT",
// or "" when the probe finds nothing to add (or cannot connect at all).
// `client_used_tls`: false when gRPC spoke plaintext; then the probe only asks whether the
// port speaks TLS.
// Thread-safe (no shared state). Blocks the caller: the 2 s limit applies to each connect, read
// and write, not to the whole probe, and name resolution (getaddrinfo) is not bounded. A failure
// of the probe itself is the "" answer.
std::string DiagnoseTls(const std::string& host, int port, const TlsOptions& tls,
                        bool client_used_tls);

}  // namespace mpsd::client

#endif  // MPSD_CLIENT_TLS_PROBE_H_
