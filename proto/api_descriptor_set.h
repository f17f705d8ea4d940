// The public API's descriptors as a serialized google.protobuf.FileDescriptorSet: mpsd.proto
// with its source info (comments), every file it imports, and gRPC's reflection.proto, generated
// at build time (protoc --include_imports --include_source_info) and embedded in the binary.
#ifndef MPSD_PROTO_API_DESCRIPTOR_SET_H_
#define MPSD_PROTO_API_DESCRIPTOR_SET_H_

#include <string_view>

namespace mpsd::proto {

// Static storage; never fails.
std::string_view ApiDescriptorSet();

}  // namespace mpsd::proto

#endif  // MPSD_PROTO_API_DESCRIPTOR_SET_H_
