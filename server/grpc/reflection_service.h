// gRPC server reflection (grpc.reflection.v1 and grpc.reflection.v1alpha), served from the API's
// descriptor set with source info (proto/api_descriptor_set.h), so that a client without mpsd.proto
// (grpcurl, grpc_cli, an editor's plugin) sees every service, message and field with its comments:
// defaults, units, errors. gRPC's own reflection plugin serves the compiled-in descriptors,
// which have no comments. The set also holds grpc.health.v1's proto, so that the health service
// that gRPC runs resolves like any other (`grpcurl describe grpc.health.v1.Health`).
#ifndef MPSD_SERVER_GRPC_REFLECTION_SERVICE_H_
#define MPSD_SERVER_GRPC_REFLECTION_SERVICE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/descriptor_database.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"

namespace mpsd::server {

// Thread-safe: immutable after Create; gRPC calls it from its threads. Must outlive the gRPC
// server it is registered with.
class ReflectionService final
    : public grpc::reflection::v1alpha::ServerReflection::CallbackService {
 public:
  // Parses the embedded descriptor set; list_services names every service it defines.
  // INTERNAL if the embedded set does not parse (a build error).
  static absl::StatusOr<std::unique_ptr<ReflectionService>> Create();
  ~ReflectionService() override;

  // The same protocol under grpc.reflection.v1 (its messages are v1alpha's on the wire), answered
  // by Answer. Owned by this object; register it with the same server.
  grpc::Service* v1();

  grpc::ServerBidiReactor<grpc::reflection::v1alpha::ServerReflectionRequest,
                          grpc::reflection::v1alpha::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* context) override;

  // The answer to one request: list_services, file_by_filename and file_containing_symbol
  // (the file and every file it imports, transitively, as serialized FileDescriptorProtos with
  // source info), file_containing_extension and all_extension_numbers_of_type; an
  // error_response with NOT_FOUND (5) for an unknown file or symbol.
  grpc::reflection::v1alpha::ServerReflectionResponse Answer(
      const grpc::reflection::v1alpha::ServerReflectionRequest& request) const;

 private:
  class V1;

  ReflectionService();

  // `file` and its imports, each once, serialized.
  void AddWithImports(const std::string& file,
                      grpc::reflection::v1alpha::FileDescriptorResponse& response) const;

  // Constant after Create. Its Find methods are not const but only read, so concurrent calls
  // are safe.
  mutable google::protobuf::SimpleDescriptorDatabase database_;
  // File name -> serialized FileDescriptorProto (with source info).
  std::map<std::string, std::string> files_;
  std::map<std::string, std::vector<std::string>> imports_;
  std::vector<std::string> services_;
  std::unique_ptr<V1> v1_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_GRPC_REFLECTION_SERVICE_H_
