// The one source of mpsd_test_torch_pch (tests/CMakeLists.txt), the target that compiles the
// torch-using tests' shared precompiled header; a target needs a source for CMake to build it.
