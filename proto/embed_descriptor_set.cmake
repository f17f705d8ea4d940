# cmake -DINPUT=set.pb -DOUTPUT=file.cc -P embed_descriptor_set.cmake: writes the bytes of INPUT
# as the C++ array behind mpsd::proto::ApiDescriptorSet() (api_descriptor_set.h).
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
string(REGEX REPLACE "(('\\\\x[0-9a-f][0-9a-f]',){16})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUTPUT}" "// Generated from ${INPUT} by embed_descriptor_set.cmake.
#include \"api_descriptor_set.h\"

namespace mpsd::proto {
namespace {
const char kDescriptorSet[${size}] = {
${bytes}};
}  // namespace

std::string_view ApiDescriptorSet() { return std::string_view(kDescriptorSet, ${size}); }

}  // namespace mpsd::proto
")
