// ReflectionService: a SimpleDescriptorDatabase over the embedded FileDescriptorSet, and a
// bidirectional reactor that answers one request at a time.
#include "server/grpc/reflection_service.h"

#include <set>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "proto/api_descriptor_set.h"

namespace mpsd::server {
namespace {

namespace reflection = grpc::reflection::v1alpha;

constexpr int kNotFound = 5;  // grpc::StatusCode::NOT_FOUND

// Reads requests and writes their answers in order, one at a time. Request and Response are
// v1alpha's messages or v1's, which are the same on the wire: a v1 request is answered by
// reparsing it as v1alpha. Threads: gRPC's. Deletes itself in OnDone.
template <typename Request, typename Response>
class ReflectionReactor final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  explicit ReflectionReactor(const ReflectionService* service) : service_(service) {
    this->StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // The client has sent its last request.
      this->Finish(grpc::Status::OK);
      return;
    }
    if constexpr (std::is_same_v<Request, reflection::ServerReflectionRequest>) {
      response_ = service_->Answer(request_);
    } else {
      reflection::ServerReflectionRequest request;
      request.ParseFromString(request_.SerializeAsString());
      response_.ParseFromString(service_->Answer(request).SerializeAsString());
    }
    this->StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream write failed"));
      return;
    }
    this->StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  const ReflectionService* const service_;
  Request request_;
  Response response_;
};

void SetError(reflection::ServerReflectionResponse& response, const std::string& message) {
  response.mutable_error_response()->set_error_code(kNotFound);
  response.mutable_error_response()->set_error_message(message);
}

}  // namespace

class ReflectionService::V1 final : public grpc::reflection::v1::ServerReflection::CallbackService {
 public:
  explicit V1(const ReflectionService* service) : service_(service) {}

  grpc::ServerBidiReactor<grpc::reflection::v1::ServerReflectionRequest,
                          grpc::reflection::v1::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* /*context*/) override {
    return new ReflectionReactor<grpc::reflection::v1::ServerReflectionRequest,
                                 grpc::reflection::v1::ServerReflectionResponse>(service_);
  }

 private:
  const ReflectionService* const service_;
};

ReflectionService::ReflectionService() : v1_(std::make_unique<V1>(this)) {}
ReflectionService::~ReflectionService() = default;

grpc::Service* ReflectionService::v1() { return v1_.get(); }

absl::StatusOr<std::unique_ptr<ReflectionService>> ReflectionService::Create() {
  google::protobuf::FileDescriptorSet set;
  const std::string_view bytes = mpsd::proto::ApiDescriptorSet();
  if (!set.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InternalError("the embedded API descriptor set does not parse");
  }
  std::unique_ptr<ReflectionService> service(new ReflectionService());
  std::set<std::string> services;
  for (const google::protobuf::FileDescriptorProto& file : set.file()) {
    if (!service->database_.Add(file)) {
      return absl::InternalError(absl::StrCat("descriptor set: cannot add ", file.name()));
    }
    service->files_[file.name()] = file.SerializeAsString();
    service->imports_[file.name()] = {file.dependency().begin(), file.dependency().end()};
    for (const auto& defined : file.service()) {
      services.insert(file.package().empty() ? defined.name()
                                             : absl::StrCat(file.package(), ".", defined.name()));
    }
  }
  service->services_.assign(services.begin(), services.end());
  return service;
}

grpc::ServerBidiReactor<reflection::ServerReflectionRequest, reflection::ServerReflectionResponse>*
ReflectionService::ServerReflectionInfo(grpc::CallbackServerContext* /*context*/) {
  return new ReflectionReactor<reflection::ServerReflectionRequest,
                               reflection::ServerReflectionResponse>(this);
}

void ReflectionService::AddWithImports(const std::string& file,
                                       reflection::FileDescriptorResponse& response) const {
  std::set<std::string> added;
  std::vector<std::string> pending = {file};
  while (!pending.empty()) {
    const std::string name = std::move(pending.back());
    pending.pop_back();
    if (!added.insert(name).second) continue;
    auto found = files_.find(name);
    if (found == files_.end()) continue;
    response.add_file_descriptor_proto(found->second);
    for (const std::string& import : imports_.at(name)) pending.push_back(import);
  }
}

reflection::ServerReflectionResponse ReflectionService::Answer(
    const reflection::ServerReflectionRequest& request) const {
  reflection::ServerReflectionResponse response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  google::protobuf::FileDescriptorProto file;
  switch (request.message_request_case()) {
    case reflection::ServerReflectionRequest::kListServices:
      for (const std::string& name : services_) {
        response.mutable_list_services_response()->add_service()->set_name(name);
      }
      break;
    case reflection::ServerReflectionRequest::kFileByFilename:
      if (files_.count(request.file_by_filename()) == 0) {
        SetError(response, absl::StrCat("no file ", request.file_by_filename()));
      } else {
        AddWithImports(request.file_by_filename(), *response.mutable_file_descriptor_response());
      }
      break;
    case reflection::ServerReflectionRequest::kFileContainingSymbol:
      if (!database_.FindFileContainingSymbol(request.file_containing_symbol(), &file)) {
        SetError(response, absl::StrCat("no symbol ", request.file_containing_symbol()));
      } else {
        AddWithImports(file.name(), *response.mutable_file_descriptor_response());
      }
      break;
    case reflection::ServerReflectionRequest::kFileContainingExtension: {
      const auto& extension = request.file_containing_extension();
      if (!database_.FindFileContainingExtension(extension.containing_type(),
                                                 extension.extension_number(), &file)) {
        SetError(response, absl::StrCat("no extension ", extension.extension_number(), " of ",
                                        extension.containing_type()));
      } else {
        AddWithImports(file.name(), *response.mutable_file_descriptor_response());
      }
      break;
    }
    case reflection::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const std::string& type = request.all_extension_numbers_of_type();
      if (!database_.FindFileContainingSymbol(type, &file)) {
        SetError(response, absl::StrCat("no type ", type));
        break;
      }
      std::vector<int> numbers;
      database_.FindAllExtensionNumbers(type, &numbers);
      auto* answer = response.mutable_all_extension_numbers_response();
      answer->set_base_type_name(type);
      for (int number : numbers) answer->add_extension_number(number);
      break;
    }
    default:
      response.mutable_error_response()->set_error_code(3);  // INVALID_ARGUMENT
      response.mutable_error_response()->set_error_message("empty reflection request");
      break;
  }
  return response;
}

}  // namespace mpsd::server
