"""mpsd's Python client: submit training and benchmark jobs to an mpsd daemon and follow them.

    import mpsd_client
    job = mpsd_client.submit({"kind": "TrainJob", "model": {"name": "convnet"},
                              "dataset": {"name": "fashion-mnist", "limit_train": 2000}})
    for event in mpsd_client.follow(job.id):
        print(mpsd_client.to_json_line(event))

Client (client.py) holds one connection for many calls: submit, follow, list, get, cancel,
wait, artifacts, download, sweep, export. jobfile reads YAML job files by mpsctl's rules; errors
has the typed errors every call raises. The generated gRPC stubs are mpsd_client.v1.mpsd_pb2
(messages, also as mpsd_client.pb2) and mpsd_client.v1.mpsd_pb2_grpc (JobServiceStub), committed
with the package (client/python/generate_stubs.py writes them).
"""

from . import errors
from .v1 import mpsd_pb2 as pb2
from .v1 import mpsd_pb2_grpc as pb2_grpc
from ._version import __version__
from .client import (ADDRESS_ENV, Client, default_address, follow, follow_events, grpc_target,
                     is_terminal, submit, terminal_states, to_json_line)
from .errors import MpsdError
from .jobfile import (MAX_JOB_FILE_BYTES, JobFileError, SpecLike, job_request, make_paths_absolute,
                      parse_job_file, read_job_file)

Job = pb2.Job
JobEvent = pb2.JobEvent

__all__ = [
    "ADDRESS_ENV", "Client", "Job", "JobEvent", "JobFileError", "MAX_JOB_FILE_BYTES", "MpsdError",
    "SpecLike", "__version__", "errors",
    "default_address", "follow", "follow_events", "grpc_target", "is_terminal", "job_request",
    "make_paths_absolute", "parse_job_file", "pb2", "pb2_grpc", "read_job_file", "submit",
    "terminal_states", "to_json_line",
]
