// A gRPC reflection client with no copy of mpsd.proto: it speaks grpc.reflection.v1alpha with
// the messages compiled into gRPC's own grpc++_reflection library (found in the generated pool,
// used through protobuf reflection) over a generic stub, rebuilds the server's descriptors in a
// fresh pool, and prints what a client author would look up. Used by reflection_e2e_test.
//
//   reflection_client [--v1] TARGET list       one service name per line
//   reflection_client TARGET describe SYMBOL   the symbol's file, then its leading comments
//   reflection_client TARGET method SERVICE.METHOD
//                                              "input OUTPUT", then the method's comments
// --v1 calls grpc.reflection.v1 (with the same messages: the two versions' are the same on the
// wire) instead of v1alpha. Exit status: 0 found, 1 not found or an RPC error (message on stderr).
#include <iostream>
#include <memory>
#include <string>

#include <grpcpp/create_channel.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/descriptor_database.h"
#include "google/protobuf/message.h"

namespace {

namespace pb = google::protobuf;

constexpr char kV1alphaMethod[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
constexpr char kV1Method[] = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
const char* method_name = kV1alphaMethod;

// gRPC's compiled reflection messages, reached by name only.
const pb::Message& Prototype(const std::string& name) {
  const pb::Descriptor* descriptor = pb::DescriptorPool::generated_pool()->FindMessageTypeByName(
      "grpc.reflection.v1alpha." + name);
  if (descriptor == nullptr) {
    std::cerr << "grpc++_reflection's descriptors are not linked in\n";
    std::exit(2);
  }
  return *pb::MessageFactory::generated_factory()->GetPrototype(descriptor);
}

grpc::ByteBuffer Serialize(const pb::Message& message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// Sends one request on a new stream and returns the response, or nullptr (error on stderr).
std::unique_ptr<pb::Message> Ask(grpc::GenericStub& stub, const std::string& field,
                                 const std::string& value) {
  std::unique_ptr<pb::Message> request(Prototype("ServerReflectionRequest").New());
  request->GetReflection()->SetString(request.get(),
                                      request->GetDescriptor()->FindFieldByName(field), value);
  grpc::CompletionQueue queue;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method_name, &queue);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  queue.Next(&tag, &ok);
  grpc::ByteBuffer out = Serialize(*request), in;
  if (ok) {
    call->Write(out, reinterpret_cast<void*>(2));
    queue.Next(&tag, &ok);
  }
  if (ok) {
    call->WritesDone(reinterpret_cast<void*>(3));
    queue.Next(&tag, &ok);
  }
  bool read = false;
  if (ok) {
    call->Read(&in, reinterpret_cast<void*>(4));
    queue.Next(&tag, &read);
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  queue.Next(&tag, &ok);
  if (!read) {
    std::cerr << "reflection call failed: " << status.error_code() << " " << status.error_message()
              << "\n";
    return nullptr;
  }
  std::unique_ptr<pb::Message> response(Prototype("ServerReflectionResponse").New());
  std::vector<grpc::Slice> slices;
  in.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (!response->ParseFromString(bytes)) {
    std::cerr << "unparsable reflection response\n";
    return nullptr;
  }
  return response;
}

// Adds the FileDescriptorProtos of a file_descriptor_response to `pool`'s database.
bool AddFiles(const pb::Message& response, pb::SimpleDescriptorDatabase& database) {
  const pb::Reflection* reflection = response.GetReflection();
  const pb::FieldDescriptor* field =
      response.GetDescriptor()->FindFieldByName("file_descriptor_response");
  if (!reflection->HasField(response, field)) {
    std::cerr << "no file in the answer: " << response.ShortDebugString() << "\n";
    return false;
  }
  const pb::Message& files = reflection->GetMessage(response, field);
  const pb::FieldDescriptor* list = files.GetDescriptor()->FindFieldByName("file_descriptor_proto");
  for (int i = 0; i < files.GetReflection()->FieldSize(files, list); ++i) {
    pb::FileDescriptorProto file;
    file.ParseFromString(files.GetReflection()->GetRepeatedString(files, list, i));
    database.Add(file);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // A call into grpc++_reflection keeps the library (and the descriptors it registers) linked;
  // it only registers a plugin for servers this program never builds.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  if (argc > 1 && std::string(argv[1]) == "--v1") {
    method_name = kV1Method;
    --argc;
    ++argv;
  }
  if (argc < 3) {
    std::cerr << "usage: reflection_client [--v1] TARGET list|describe SYMBOL|method NAME\n";
    return 2;
  }
  const std::string target = argv[1], command = argv[2];
  grpc::GenericStub stub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  if (command == "list") {
    std::unique_ptr<pb::Message> response = Ask(stub, "list_services", "*");
    if (response == nullptr) return 1;
    const pb::FieldDescriptor* field =
        response->GetDescriptor()->FindFieldByName("list_services_response");
    const pb::Message& list = response->GetReflection()->GetMessage(*response, field);
    const pb::FieldDescriptor* services = list.GetDescriptor()->FindFieldByName("service");
    for (int i = 0; i < list.GetReflection()->FieldSize(list, services); ++i) {
      const pb::Message& service = list.GetReflection()->GetRepeatedMessage(list, services, i);
      std::cout << service.GetReflection()->GetString(
                       service, service.GetDescriptor()->FindFieldByName("name"))
                << "\n";
    }
    return 0;
  }
  if (argc < 4) return 2;
  const std::string symbol = argv[3];
  const std::string lookup = command == "method" ? symbol.substr(0, symbol.rfind('.')) : symbol;
  std::unique_ptr<pb::Message> response = Ask(stub, "file_containing_symbol", lookup);
  if (response == nullptr) return 1;
  pb::SimpleDescriptorDatabase database;
  if (!AddFiles(*response, database)) return 1;
  pb::DescriptorPool pool(&database);
  pb::SourceLocation location;
  if (command == "method") {
    const pb::MethodDescriptor* method = pool.FindMethodByName(symbol);
    if (method == nullptr) {
      std::cerr << "no method " << symbol << "\n";
      return 1;
    }
    std::cout << method->input_type()->full_name() << " " << method->output_type()->full_name()
              << (method->server_streaming() ? " (server streaming)" : "") << "\n";
    if (method->GetSourceLocation(&location)) std::cout << location.leading_comments;
    return 0;
  }
  const pb::FileDescriptor* file = pool.FindFileContainingSymbol(symbol);
  if (file == nullptr) {
    std::cerr << "no symbol " << symbol << "\n";
    return 1;
  }
  std::cout << file->name() << "\n";
  if (const pb::Descriptor* message = pool.FindMessageTypeByName(symbol)) {
    if (message->GetSourceLocation(&location)) std::cout << location.leading_comments;
    for (int i = 0; i < message->field_count(); ++i) {
      std::cout << "field " << message->field(i)->name() << ":";
      if (message->field(i)->GetSourceLocation(&location)) std::cout << location.leading_comments;
      std::cout << "\n";
    }
  } else if (const pb::FieldDescriptor* field = pool.FindFieldByName(symbol)) {
    if (field->GetSourceLocation(&location)) std::cout << location.leading_comments;
  } else if (const pb::ServiceDescriptor* service = pool.FindServiceByName(symbol)) {
    for (int i = 0; i < service->method_count(); ++i)
      std::cout << service->method(i)->name() << "\n";
  }
  return 0;
}
