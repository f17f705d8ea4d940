# mpsd_client.v1: the generated stubs of proto/mpsd/v1/mpsd.proto (mpsd_pb2.py, mpsd_pb2_grpc.py,
# mpsd_pb2.pyi), written by client/python/generate_stubs.py and committed.
