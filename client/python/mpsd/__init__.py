"""mpsd's Python client: submit training and benchmark jobs to an mpsd daemon and follow them.

    import mpsd
    job = mpsd.submit({"kind": "TrainJob", "model": {"name": "convnet"},
                       "dataset": {"name": "fashion-mnist", "limit_train": 2000}})
    for event in mpsd.follow(job.id):
        print(mpsd.to_json_line(event))

Client (mpsd.client) holds one connection for many calls; jobfile reads YAML job files by
mpsctl's rules. The generated gRPC stubs are mpsd.v1.mpsd_pb2 (messages, also as mpsd.pb2)
and mpsd.v1.mpsd_pb2_grpc (JobServiceStub); CMake's target mpsd_python_stubs writes them into
this package (client/python/mpsd/v1/) before `pip install ./client/python`.
"""

import os as _os


class StubsNotFound(ImportError):
    """The package was installed or imported without its generated stubs (mpsd/v1/mpsd_pb2.py)."""


try:
    from .v1 import mpsd_pb2 as pb2
    from .v1 import mpsd_pb2_grpc as pb2_grpc
except ModuleNotFoundError as e:
    if e.name and e.name.startswith(__name__ + ".v1."):
        raise StubsNotFound(
            "mpsd's generated stubs (%s) are missing: build them with `cmake --build BUILD "
            "--target mpsd_python_stubs`, which writes them into client/python/mpsd/v1/, then "
            "install the package again (pip install ./client/python)"
            % _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "v1", "mpsd_pb2.py")
        ) from e
    raise

from ._version import __version__
from .client import (ADDRESS_ENV, Client, default_address, follow, follow_events, grpc_target,
                     is_terminal, submit, terminal_states, to_json_line)
from .jobfile import (MAX_JOB_FILE_BYTES, JobFileError, SpecLike, job_request, make_paths_absolute,
                      parse_job_file, read_job_file)

Job = pb2.Job
JobEvent = pb2.JobEvent

__all__ = [
    "ADDRESS_ENV", "Client", "Job", "JobEvent", "JobFileError", "MAX_JOB_FILE_BYTES", "SpecLike",
    "StubsNotFound",
    "__version__",
    "default_address", "follow", "follow_events", "grpc_target", "is_terminal", "job_request",
    "make_paths_absolute", "parse_job_file", "pb2", "pb2_grpc", "read_job_file", "submit",
    "terminal_states", "to_json_line",
]
