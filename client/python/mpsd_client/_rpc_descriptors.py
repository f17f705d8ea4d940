# Written by client/python/generate_stubs.py: google/rpc/status.proto and
# google/rpc/error_details.proto (proto/google/rpc/) with their imports, as a serialized
# google.protobuf.FileDescriptorSet. Loaded by errors.py into a pool of its own.
FILE_DESCRIPTOR_SET = (
    b'\n\xe4\x01\n\x19google/protobuf/any.proto\x12\x0fgoogle.protobuf"6\n\x03Any\x12\x19\n\x08type_url\x18\x01 \x01(\t'
    b'R\x07typeUrl\x12\x14\n\x05value\x18\x02 \x01(\x0cR\x05valueBv\n\x13com.google.protobufB\x08AnyProtoP\x01Z,goog'
    b'le.golang.org/protobuf/types/known/anypb\xa2\x02\x03GPB\xaa\x02\x1eGoogle.Protobuf.WellKno'
    b'wnTypesb\x06proto3\n\xfb\x01\n\x17google/rpc/status.proto\x12\ngoogle.rpc\x1a\x19google/protobuf'
    b'/any.proto"f\n\x06Status\x12\x12\n\x04code\x18\x01 \x01(\x05R\x04code\x12\x18\n\x07message\x18\x02 \x01(\tR\x07message\x12.\n\x07de'
    b'tails\x18\x03 \x03(\x0b2\x14.google.protobuf.AnyR\x07detailsBI\n\x0ecom.google.rpcZ7google.gol'
    b'ang.org/genproto/googleapis/rpc/status;statusb\x06proto3\n\xc3\x02\n\x1egoogle/rpc/err'
    b'or_details.proto\x12\ngoogle.rpc"\xb9\x01\n\tErrorInfo\x12\x16\n\x06reason\x18\x01 \x01(\tR\x06reason\x12\x16\n\x06do'
    b'main\x18\x02 \x01(\tR\x06domain\x12?\n\x08metadata\x18\x03 \x03(\x0b2#.google.rpc.ErrorInfo.MetadataEntr'
    b'yR\x08metadata\x1a;\n\rMetadataEntry\x12\x10\n\x03key\x18\x01 \x01(\tR\x03key\x12\x14\n\x05value\x18\x02 \x01(\tR\x05value:\x028\x01'
    b'BQ\n\x0ecom.google.rpcZ?google.golang.org/genproto/googleapis/rpc/errdetails'
    b';errdetailsb\x06proto3')
