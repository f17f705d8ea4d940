// Tokens and roles on gRPC: the one auth step every call on a TCP listener passes (an
// AuthMetadataProcessor on the listener's credentials, so it covers every service: JobService,
// health checking, reflection), and the principal of a call for the handlers that need to know
// who calls (SubmitJob records it, CancelJob checks job ownership).
#ifndef MPSD_SERVER_GRPC_GRPC_AUTH_H_
#define MPSD_SERVER_GRPC_GRPC_AUTH_H_

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/server_context.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/access/auth.h"
#include "server/access/log_limiter.h"

namespace mpsd::server {

// Runs for every call on the listener whose credentials carry it, before the call reaches any
// service: reads `authorization: Bearer <token>` and the method (":path"), authenticates with
// the TokenStore and checks RequiredRole(method). Fails the call with UNAUTHENTICATED (missing,
// unknown or revoked token) or PERMISSION_DENIED (naming the role needed); the handler never
// runs. Failures are logged (warn) with the method, the token's name when known, the reason and
// the client certificate's subject under mutual TLS; never the token. (gRPC 1.51 gives a
// processor no peer address.)
//
// Thread-safe; runs inline on gRPC's threads (IsBlocking() is false: it does a SHA-256 and a
// stat, no I/O that waits). Borrows `tokens`, which must outlive the server.
class TokenAuthProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenAuthProcessor(const TokenStore* tokens) : tokens_(tokens) {}

  // Refused calls logged: at most this many lines per kRefusalLogWindow, then one line saying
  // how many more were refused (a client retrying a bad token in a loop cannot flood the log).
  static constexpr int kRefusalLogBurst = 100;
  static constexpr absl::Duration kRefusalLogWindow = absl::Seconds(60);

  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const TokenStore* const tokens_;
  LogLimiter refusals_logged_{kRefusalLogBurst, kRefusalLogWindow};
};

// Who makes `context`'s call: LocalPrincipal() on the unix socket (the peer is "unix:…"),
// else the principal of its bearer token (which TokenAuthProcessor has already let through).
// UNAUTHENTICATED when a TCP call has no valid token (only if the token was revoked between
// the two checks) or when `tokens` is null on TCP.
// Whether `context`'s call came through the unix socket (gRPC's peer "unix:…").
bool IsUnixSocketCall(const grpc::CallbackServerContext& context);

absl::StatusOr<Principal> CallPrincipal(const grpc::CallbackServerContext& context,
                                        const TokenStore* tokens);

}  // namespace mpsd::server

#endif  // MPSD_SERVER_GRPC_GRPC_AUTH_H_
