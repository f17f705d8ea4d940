// The gRPC auth step: bearer token and method from the call's metadata, checked against the
// TokenStore and the role table.
#include "server/grpc/grpc_auth.h"

#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/status.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace {

// How many entries `metadata` has under `key`.
size_t Count(const grpc::AuthMetadataProcessor::InputMetadata& metadata, absl::string_view key) {
  size_t count = 0;
  for (const auto& [name, value] : metadata) {
    if (absl::string_view(name.data(), name.size()) == key) ++count;
  }
  return count;
}

std::string Lookup(const grpc::AuthMetadataProcessor::InputMetadata& metadata,
                   absl::string_view key) {
  for (const auto& [name, value] : metadata) {
    if (absl::string_view(name.data(), name.size()) == key) {
      return std::string(value.data(), value.size());
    }
  }
  return "";
}

// The client certificate's subject under mutual TLS; "" otherwise.
std::string ClientCertificateName(const grpc::AuthContext& context) {
  for (const grpc::string_ref& value : context.FindPropertyValues("x509_common_name")) {
    return std::string(value.data(), value.size());
  }
  return "";
}

}  // namespace

grpc::Status TokenAuthProcessor::Process(const InputMetadata& auth_metadata,
                                         grpc::AuthContext* context,
                                         OutputMetadata* /*consumed_auth_metadata*/,
                                         OutputMetadata* /*response_metadata*/) {
  const std::string method = Lookup(auth_metadata, ":path");
  // Two authorization entries: which one counts would be ours to pick (the first), and a proxy
  // in front may have checked the other. Refused.
  absl::StatusOr<Principal> principal =
      Count(auth_metadata, "authorization") > 1
          ? absl::UnauthenticatedError("more than one authorization header")
          : tokens_->Authenticate(Lookup(auth_metadata, "authorization"));
  absl::Status status = principal.status();
  if (status.ok()) {
    const Role needed = RequiredRole(method);
    absl::string_view action = method;
    if (const size_t slash = action.rfind('/'); slash != absl::string_view::npos) {
      action.remove_prefix(slash + 1);
    }
    status = Authorize(*principal, needed, action);
  }
  if (status.ok()) return grpc::Status::OK;
  const std::optional<int64_t> held_back = refusals_logged_.Allow(absl::Now());
  if (!held_back.has_value()) return api::ToGrpcStatus(status);
  const std::string certificate = context != nullptr ? ClientCertificateName(*context) : "";
  spdlog::warn(
      "auth: {} {}: {} (token {}{}){}", absl::StatusCodeToString(status.code()), method,
      std::string(status.message()),
      principal.ok() ? absl::StrCat("\"", principal->name, "\"") : std::string("-"),
      certificate.empty() ? "" : absl::StrCat(", client certificate \"", certificate, "\""),
      *held_back == 0 ? "" : absl::StrCat("; ", *held_back, " more refused calls not logged"));
  return api::ToGrpcStatus(status);
}

bool IsUnixSocketCall(const grpc::CallbackServerContext& context) {
  return absl::StartsWith(context.peer(), "unix:");
}

absl::StatusOr<Principal> CallPrincipal(const grpc::CallbackServerContext& context,
                                        const TokenStore* tokens) {
  if (IsUnixSocketCall(context)) return LocalPrincipal();
  if (tokens == nullptr) return absl::UnauthenticatedError("no tokens on this listener");
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find("authorization");
  if (found == metadata.end()) return absl::UnauthenticatedError("missing token");
  if (metadata.count("authorization") > 1) {
    return absl::UnauthenticatedError("more than one authorization header");
  }
  return tokens->Authenticate(absl::string_view(found->second.data(), found->second.size()));
}

}  // namespace mpsd::server
