# mpsd.v1: the generated stubs of proto/mpsd/v1/mpsd.proto (mpsd_pb2.py, mpsd_pb2_grpc.py,
# mpsd_pb2.pyi), written here by CMake's target mpsd_python_stubs; not committed.
