"""A typed client for mpsd's JobService: submit a job, follow its events, get, cancel.

    import mpsd
    with mpsd.Client() as client:                      # the default address, as mpsctl's
        job = client.submit("examples/fashion-mnist-small.yaml")
        for event in client.follow(job.id):
            if event.HasField("step"):
                print(event.step.step, event.step.loss)

Thread-safety: one Client may be used from several threads at once (a grpc.Channel is
thread-safe); each follow() iterator belongs to the thread that iterates it. Errors from the
daemon are grpc.RpcError with the daemon's status code and message (INVALID_ARGUMENT names the
bad field path); a bad job file or spec is JobFileError before anything is sent.
"""

import os
from typing import Iterator, Optional

import grpc

from . import jobfile
from .v1 import mpsd_pb2 as pb2
from .v1 import mpsd_pb2_grpc as pb2_grpc

ADDRESS_ENV = "MPSD_ADDR"


def default_address() -> str:
    """The address mpsd listens on by default; the same rule as client/default_address.h:
    $MPSD_ADDR, else unix://$XDG_RUNTIME_DIR/mpsd/mpsd.sock, else unix:///tmp/mpsd-UID/mpsd.sock."""
    explicit = os.environ.get(ADDRESS_ENV)
    if explicit:
        return explicit
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return "unix://%s/mpsd/mpsd.sock" % runtime_dir
    return "unix:///tmp/mpsd-%d/mpsd.sock" % os.getuid()


def grpc_target(address: str) -> str:
    """An mpsd address as gRPC's target: a bare absolute path is a unix socket."""
    return "unix://" + address if address.startswith("/") else address


def terminal_states():
    """The Job.State values after which a job's stream ends."""
    return (pb2.Job.SUCCEEDED, pb2.Job.FAILED, pb2.Job.CANCELLED, pb2.Job.INTERRUPTED)


def is_terminal(event: pb2.JobEvent) -> bool:
    """Whether `event` is a job's terminal state event (the last of its stream)."""
    return event.WhichOneof("payload") == "state" and event.state.state in terminal_states()


def follow_events(stub: pb2_grpc.JobServiceStub, job_id: str, after_seq: int = 0,
                  heartbeats: bool = False) -> Iterator[pb2.JobEvent]:
    """Yields the job's JobEvents after `after_seq` up to and including its terminal state event.

    Heartbeats (seq 0, sent while the stream is idle; for a queued job they carry its queue
    position) are yielded only with heartbeats=True. To resume after a lost connection, pass the
    last non-zero seq seen as `after_seq`. The stream has no deadline (a job may run for hours).
    Closing the generator early cancels the call. Raises grpc.RpcError if it fails.
    """
    call = stub.StreamEvents(pb2.StreamEventsRequest(job_id=job_id, after_seq=after_seq))
    try:
        for event in call:
            if event.WhichOneof("payload") == "heartbeat" and not heartbeats:
                continue
            yield event
            if is_terminal(event):
                return
    finally:
        call.cancel()  # no-op once the server has ended the stream


class Client:
    """One connection to an mpsd daemon (a grpc.Channel), opened lazily by gRPC.

    `address`: unix:///path/mpsd.sock, a bare /path (a unix socket), or host:port; default
    default_address(). `timeout`: the deadline in seconds of each unary call (submit, get,
    cancel, device); follow() has none. Close it (or use `with`) to release the channel.
    """

    def __init__(self, address: Optional[str] = None, *, timeout: float = 10.0):
        self.address = address or default_address()
        self.timeout = timeout
        self._channel = grpc.insecure_channel(grpc_target(self.address))
        self.stub = pb2_grpc.JobServiceStub(self._channel)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def submit(self, spec: jobfile.SpecLike, *, priority: Optional[int] = None,
               request_id: Optional[str] = None) -> pb2.Job:
        """Queues a job and returns it as the daemon stored it (state QUEUED, its id).

        `spec`: a job file path, a dict shaped like one, a SubmitJobRequest, a TrainJob or a
        BenchJob (jobfile.job_request). `priority` and `request_id` override the spec's: queued
        jobs run highest priority first; submitting the same request_id again returns the job it
        created. Raises JobFileError (bad spec, nothing sent), OSError (unreadable file),
        grpc.RpcError (the daemon said no, or cannot be reached)."""
        request = jobfile.job_request(spec)
        if priority is not None:
            request.priority = priority
        if request_id is not None:
            request.request_id = request_id
        return self.stub.SubmitJob(request, timeout=self.timeout)

    def follow(self, job_id: str, *, after_seq: int = 0,
               heartbeats: bool = False) -> Iterator[pb2.JobEvent]:
        """The job's events after `after_seq`, stored ones first, then live, ending with its
        terminal state event (see follow_events)."""
        return follow_events(self.stub, job_id, after_seq=after_seq, heartbeats=heartbeats)

    def get(self, job_id: str) -> pb2.Job:
        """The job now; grpc.RpcError NOT_FOUND for an unknown id."""
        return self.stub.GetJob(pb2.GetJobRequest(job_id=job_id), timeout=self.timeout)

    def cancel(self, job_id: str) -> pb2.Job:
        """Cancels a queued or running job (a running one stops at its next step boundary)."""
        return self.stub.CancelJob(pb2.CancelJobRequest(job_id=job_id), timeout=self.timeout)

    def device(self) -> pb2.DeviceInfo:
        """The device the daemon's executor owns, and its memory now."""
        return self.stub.GetDevice(pb2.GetDeviceRequest(), timeout=self.timeout)


def submit(spec: jobfile.SpecLike, *, address: Optional[str] = None,
           priority: Optional[int] = None, request_id: Optional[str] = None) -> pb2.Job:
    """Client(address).submit(spec, ...) on a channel of its own, closed before it returns."""
    with Client(address) as client:
        return client.submit(spec, priority=priority, request_id=request_id)


def follow(job_id: str, *, address: Optional[str] = None, after_seq: int = 0,
           heartbeats: bool = False) -> Iterator[pb2.JobEvent]:
    """Client(address).follow(job_id, ...) on a channel of its own, closed when the iteration
    ends (or the generator is closed)."""
    with Client(address) as client:
        yield from client.follow(job_id, after_seq=after_seq, heartbeats=heartbeats)


def to_json_line(message) -> str:
    """protobuf's JSON mapping on one line, proto field names (as `mpsctl --json` prints)."""
    import json
    from google.protobuf import json_format
    return json.dumps(json_format.MessageToDict(message, preserving_proto_field_name=True),
                      separators=(",", ":"))
