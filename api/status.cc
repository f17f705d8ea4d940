// Status conversion: absl, gRPC and executor.proto share the canonical codes.
#include "api/status.h"

#include <cstdint>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "api/error_cause.h"
#include "api/failure_reason.h"
#include "google/rpc/status.pb.h"

namespace mpsd::api {

namespace {

google::rpc::ErrorInfo ErrorInfoOf(const absl::Status& status) {
  google::rpc::ErrorInfo info;
  info.set_domain(kErrorDomain);
  std::optional<ErrorCause> cause = CauseOf(status);
  if (cause.has_value() && cause->kind() != ErrorCause::KIND_UNSPECIFIED) {
    info.set_reason(ErrorCause::Kind_Name(cause->kind()));
    if (cause->kind() == ErrorCause::INVALID_FIELD) {
      (*info.mutable_metadata())["field"] = cause->field();
    }
    if (cause->kind() == ErrorCause::UNSAFE_ARCHIVE_ENTRY) {
      (*info.mutable_metadata())["entry"] = cause->field();
    }
    if (cause->kind() == ErrorCause::RANK_FAILED) {
      (*info.mutable_metadata())["rank"] = std::to_string(cause->rank());
    }
  } else {
    info.set_reason(absl::StatusCodeToString(status.code()));
  }
  if (status.GetPayload(kFailureReasonPayloadUrl).has_value()) {
    (*info.mutable_metadata())["failure_reason"] =
        mpsd::v1::Job::FailureReason_Name(FailureReasonOf(status));
  }
  return info;
}

// The message as sent: at most kMaxMessageBytes (cut at a UTF-8 character boundary), so that
// an error quoting a long input (a 4,000-character path, a 20,000-character name) still fits a
// client's metadata limit (gRPC's default: 8 KiB for all trailers together) and says what it is.
std::string ClientMessage(absl::string_view message, size_t max_bytes = 2048) {
  if (message.size() <= max_bytes) return std::string(message);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(message.substr(0, cut), "... (", message.size() - cut, " more bytes)");
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // The message travels in grpc-message; the details carry what a program reads, and the
  // message's start again: grpc-go (1.33, Debian's) builds an error's text from the details'
  // Status alone when there are details, and showed Go clients an empty message. Short there, so
  // that both fit gRPC's default 8 KiB for all trailers even when grpc-message is
  // percent-encoded.
  google::rpc::Status details;
  details.set_code(static_cast<int32_t>(status.code()));
  details.set_message(ClientMessage(status.message(), 512));
  details.add_details()->PackFrom(ErrorInfoOf(status));
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), ClientMessage(status.message()),
                      details.SerializeAsString());
}

std::optional<google::rpc::ErrorInfo> MpsdErrorInfo(const grpc::Status& status) {
  if (status.ok() || status.error_details().empty()) return std::nullopt;
  google::rpc::Status details;
  if (!details.ParseFromString(status.error_details())) return std::nullopt;
  for (const google::protobuf::Any& any : details.details()) {
    google::rpc::ErrorInfo info;
    if (any.UnpackTo(&info) && info.domain() == kErrorDomain) return info;
  }
  return std::nullopt;
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

mpsd::v1::executor::Status ToExecutorStatus(const absl::Status& status) {
  mpsd::v1::executor::Status proto;
  proto.set_code(static_cast<int32_t>(status.code()));
  proto.set_message(std::string(status.message()));
  status.ForEachPayload([&proto](absl::string_view type_url, const absl::Cord& value) {
    mpsd::v1::executor::StatusPayload* payload = proto.add_payloads();
    payload->set_type_url(std::string(type_url));
    payload->set_value(std::string(value));
  });
  return proto;
}

absl::Status FromExecutorStatus(const mpsd::v1::executor::Status& status) {
  absl::Status result(static_cast<absl::StatusCode>(status.code()), status.message());
  for (const mpsd::v1::executor::StatusPayload& payload : status.payloads()) {
    result.SetPayload(payload.type_url(), absl::Cord(payload.value()));
  }
  return result;
}

}  // namespace mpsd::api
