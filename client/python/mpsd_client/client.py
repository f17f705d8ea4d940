"""A typed client for mpsd's JobService: submit, follow, list, get, cancel, download, sweep, export.

    import mpsd_client
    with mpsd_client.Client() as client:               # the default address, as mpsctl's
        job = client.submit("examples/fashion-mnist-small.yaml")
        for event in client.follow(job.id):
            if event.HasField("step"):
                print(event.step.step, event.step.loss)

Thread-safety: one Client may be used from several threads at once (a grpc.Channel is
thread-safe); each follow() iterator belongs to the thread that iterates it. A failed call raises
an errors.MpsdError (also a grpc.RpcError): a class per status code, with the daemon's reason and
field (errors.py); a bad job file or spec is JobFileError before anything is sent.
"""

import csv
import hashlib
import json
import os
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TypeVar

import grpc

from . import errors, jobfile
from .v1 import mpsd_pb2 as pb2
from .v1 import mpsd_pb2_grpc as pb2_grpc

ADDRESS_ENV = "MPSD_ADDR"
TOKEN_ENV = "MPSD_TOKEN"


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


def _is_loopback(host: str) -> bool:
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host in ("localhost", "::1") or host.startswith("127.")


def uses_tls(address: str, tls: bool = False, tls_ca: Optional[str] = None,
             tls_cert: Optional[str] = None) -> bool:
    """Whether a client speaks TLS to `address`, as mpsctl decides: never on a unix socket; on
    TCP when the host is not loopback, or when TLS is asked for (tls, a CA or a client cert)."""
    target = grpc_target(address)
    if target.startswith("unix:"):
        return False
    if tls or tls_ca or tls_cert:
        return True
    host = target.rsplit(":", 1)[0]
    return not _is_loopback(host)


def read_token_file(path: str) -> str:
    """The bearer token in `path`, whitespace stripped. OSError if unreadable; ValueError if
    empty."""
    with open(path) as f:
        token = f.read().strip()
    if not token:
        raise ValueError("%s: empty token file" % path)
    return token


def channel_for(address: str, *, tls: bool = False, tls_ca: Optional[str] = None,
                tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                token: Optional[str] = None, options=None) -> grpc.Channel:
    """A channel to `address` as mpsctl makes it: plaintext on a unix socket (the daemon's own
    user, no token); on TCP, TLS (uses_tls: verified with `tls_ca`, else the system's roots;
    `tls_cert`/`tls_key` for mutual TLS) or gRPC's local credentials on loopback, with `token`
    sent as "authorization: Bearer <token>" on every call. `options`: gRPC channel options."""
    target = grpc_target(address)
    if target.startswith("unix:"):
        return grpc.insecure_channel(target, options=options)
    if uses_tls(address, tls, tls_ca, tls_cert):
        def read(path):
            if not path:
                return None
            with open(path, "rb") as f:
                return f.read()
        if bool(tls_cert) != bool(tls_key):
            raise ValueError("tls_cert and tls_key go together (mutual TLS)")
        credentials = grpc.ssl_channel_credentials(root_certificates=read(tls_ca),
                                                   private_key=read(tls_key),
                                                   certificate_chain=read(tls_cert))
    else:
        credentials = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    if token:
        credentials = grpc.composite_channel_credentials(
            credentials, grpc.access_token_call_credentials(token))
    return grpc.secure_channel(target, credentials, options=options)


def daemon_answered(error: grpc.RpcError) -> bool:
    """For an UNAVAILABLE error: True when mpsd itself answered it (its errors carry a
    google.rpc.ErrorInfo of domain "mpsd": errors.error_info), False when gRPC did (no connection
    was made, or it was lost). Never decided by the message's text."""
    if isinstance(error, errors.MpsdError):
        return bool(error.reason)
    return errors.error_info(error) is not None


def terminal_states():
    """The Job.State values after which a job's stream ends."""
    return (pb2.Job.SUCCEEDED, pb2.Job.FAILED, pb2.Job.CANCELLED, pb2.Job.INTERRUPTED)


def is_terminal(event: pb2.JobEvent) -> bool:
    """Whether `event` is a job's terminal state event (the last of its stream)."""
    return event.WhichOneof("payload") == "state" and event.state.state in terminal_states()


# The channel options the client connects with (the same as mpsctl's): HTTP/2 keepalive pings
# every 30 s, also without calls, with a 10 s timeout; the daemon accepts pings every 10 s or
# slower (ServerStatus.min_keepalive_interval_s). gRPC's defaults would stop after two pings
# without data, spaced 5 min apart.
KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_time_ms", 30000),
    ("grpc.keepalive_timeout_ms", 10000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.min_time_between_pings_ms", 30000),
]

# Codes after which a followed stream is reopened (the daemon restarted, the connection broke).
_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)


class _Watchdog:
    """Cancels `call` when nothing arrived on it for `silence` seconds (a dead connection)."""

    def __init__(self, call, silence: Optional[float]):
        self.fired = False
        self._call, self._silence = call, silence
        self._timer = None
        self.reset()

    def _fire(self) -> None:
        self.fired = True
        self._call.cancel()

    def reset(self) -> None:
        self.stop()
        if self._silence:
            self._timer = threading.Timer(self._silence, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _silence_limit(stub: pb2_grpc.JobServiceStub) -> float:
    """Two of the daemon's heartbeat intervals (GetServerStatus) and 5 s: silence longer than
    that means the stream is broken. 15 s intervals when the daemon does not say."""
    try:
        interval = stub.GetServerStatus(pb2.GetServerStatusRequest(), timeout=10).heartbeat_interval_s
    except grpc.RpcError:
        interval = 0
    return 2 * (interval or 15.0) + 5


_T = TypeVar("_T")


def _retry_unavailable(call: Callable[[], _T], retries: int,
                       give_up: Callable[[], None] = lambda: None) -> _T:
    """Returns call(), calling it again after an UNAVAILABLE error (a daemon restart, a dropped
    connection) up to `retries` times, waiting 1, 2, ... at most 5 s between tries. Any other
    error, or UNAVAILABLE after the last try, runs give_up() and is raised typed
    (errors.MpsdError). `call` resumes where the previous try stopped (download and upload
    continue from the bytes already moved)."""
    tries = 0
    while True:
        try:
            return call()
        except grpc.RpcError as e:
            typed = errors.from_rpc_error(e)
            tries += 1
            if not isinstance(typed, errors.Unavailable) or tries > retries:
                give_up()
                raise typed from None
            time.sleep(min(tries, 5))


def run_name(job: pb2.Job) -> str:
    """A job's folder under an export (TensorBoard's run), the rule of mpsctl export and the
    daemon's tensorboard_dir (api/tensorboard/job_history.h RunName): "<name>-<id>", the name's
    characters other than [A-Za-z0-9._-] replaced by "_" ("." and ".." become "_"); the id alone
    for a job without a name."""
    if not job.spec.name:
        return job.id
    safe = "".join(chr(b) if chr(b).isalnum() and b < 128 or chr(b) in "._-" else "_"
                   for b in job.spec.name.encode("utf-8"))  # per byte, as the C++ rule
    if safe in (".", ".."):
        safe = "_"
    return "%s-%s" % (safe, job.id)


def follow_events(stub: pb2_grpc.JobServiceStub, job_id: str, after_seq: int = 0,
                  heartbeats: bool = False, reconnect_timeout: float = 0.0,
                  latest_attempt_only: bool = True) -> Iterator[pb2.JobEvent]:
    """Yields the job's JobEvents after `after_seq` up to and including its terminal state event.

    Heartbeats (seq 0, sent while the stream is idle; for a queued job they carry its queue
    position; outside the numbered sequence) are yielded only with heartbeats=True. The stream
    has no deadline (a job may run for hours). Closing the generator early cancels the call.

    With reconnect_timeout > 0 (seconds), a stream that breaks (UNAVAILABLE: a daemon restart, a
    dropped connection) or stays silent for more than two heartbeat intervals is reopened with
    after_seq = the last seq yielded, for as long as events keep arriving within
    reconnect_timeout of each other: every event is yielded exactly once. The first call is not
    retried when it cannot connect. Raises errors.MpsdError (a grpc.RpcError) otherwise.

    latest_attempt_only (default): a resumed job's steps and epochs once each, the latest
    attempt's (StreamEventsRequest.latest_attempt_only; the seqs then have gaps); False: every
    stored event.
    """
    silence = _silence_limit(stub) if reconnect_timeout > 0 else None
    last_seq, connected, attempt = after_seq, False, 0
    last_progress = time.monotonic()
    while True:
        call = stub.StreamEvents(pb2.StreamEventsRequest(job_id=job_id, after_seq=last_seq,
                                                         latest_attempt_only=latest_attempt_only),
                                 wait_for_ready=attempt > 0)
        watchdog = _Watchdog(call, silence)
        try:
            for event in call:
                watchdog.reset()
                connected, last_progress = True, time.monotonic()
                if event.WhichOneof("payload") == "heartbeat":
                    if heartbeats:
                        yield event
                    continue
                if event.seq <= last_seq:
                    continue  # a replay that overlaps what was yielded
                last_seq = event.seq
                yield event
                if is_terminal(event):
                    return
            return
        except grpc.RpcError as error:
            retry = watchdog.fired or error.code() in _RETRYABLE
            if not (retry and connected and reconnect_timeout > 0 and
                    time.monotonic() - last_progress <= reconnect_timeout):
                raise errors.from_rpc_error(error) from None
        finally:
            watchdog.stop()
            call.cancel()  # no-op once the server has ended the stream
        attempt += 1
        time.sleep(min(attempt, 5))


class Client:
    """One connection to an mpsd daemon (a grpc.Channel), opened lazily by gRPC.

    `address`: unix:///path/mpsd.sock, a bare /path (a unix socket), or host:port; default
    default_address(). `timeout`: the deadline in seconds of each unary call (submit, get,
    cancel, device); follow() has none. Close it (or use `with`) to release the channel.
    For TCP (see channel_for): `tls_ca`, `tls_cert`, `tls_key`, `tls` as mpsctl's --tls-ca,
    --tls-cert, --tls-key, --tls; `token` (else the file `token_file`, else $MPSD_TOKEN) is
    sent on every call.
    """

    def __init__(self, address: Optional[str] = None, *, timeout: float = 10.0,
                 tls: bool = False, tls_ca: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None, token: Optional[str] = None,
                 token_file: Optional[str] = None):
        self.address = address or default_address()
        self.timeout = timeout
        if not token and token_file:
            token = read_token_file(token_file)
        if not token:
            token = os.environ.get(TOKEN_ENV, "").strip() or None
        self._channel = channel_for(self.address, tls=tls, tls_ca=tls_ca, tls_cert=tls_cert,
                                    tls_key=tls_key, token=token,
                                    options=KEEPALIVE_OPTIONS)
        self.stub = pb2_grpc.JobServiceStub(self._channel)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def submit(self, spec: jobfile.SpecLike, *, priority: Optional[int] = None,
               request_id: Optional[str] = None, name: Optional[str] = None,
               labels: Optional[Dict[str, str]] = None,
               after: Optional[Sequence[str]] = None) -> pb2.Job:
        """Queues a job and returns it as the daemon stored it (state QUEUED, its id).

        `spec`: a job file path, a dict shaped like one, a SubmitJobRequest, a TrainJob, a BenchJob,
        an EvalJob or a PredictJob (jobfile.job_request). `priority` and `request_id` override the
        spec's: queued jobs run highest priority first; submitting the same request_id again returns
        the job it created. `name` replaces the spec's name, `labels` are added to its labels,
        `after` (job ids) to its dependencies: the job runs once each of them SUCCEEDED. Raises
        JobFileError (bad spec, nothing sent), OSError (unreadable file),
        errors.MpsdError (the daemon said no, or cannot be reached)."""
        request = jobfile.job_request(spec)
        if priority is not None:
            request.priority = priority
        if request_id is not None:
            request.request_id = request_id
        if name is not None:
            request.name = name
        for key, value in (labels or {}).items():
            request.labels[key] = value
        request.after.extend(after or [])
        # The daemon checks a job's user code (a TorchScript forward, a fine-tuning setup) for up
        # to its executor.user_code_timeout_s (default 30 s) before it answers; a shorter
        # deadline would hide the answer that names the field.
        return self._unary(self.stub.SubmitJob, request, timeout=self.timeout + 60)

    def wait(self, job_ids: Sequence[str], *, timeout: Optional[float] = None,
             poll_s: float = 0.5) -> List[pb2.Job]:
        """Polls the jobs until each reached a terminal state and returns them, in order (as
        `mpsctl wait`); TimeoutError when `timeout` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        done = {}
        while True:
            for job_id in job_ids:
                if job_id not in done:
                    job = self.get(job_id)
                    if job.state in terminal_states():
                        done[job_id] = job
            if len(done) == len(job_ids):
                return [done[j] for j in job_ids]
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("jobs still unfinished: %s" % ", ".join(
                    j for j in job_ids if j not in done))
            time.sleep(poll_s)

    def pause(self) -> pb2.ServerStatus:
        """Holds the queue (the running job finishes); kept across daemon restarts."""
        return self._unary(self.stub.PauseQueue, pb2.PauseQueueRequest())

    def resume(self) -> pb2.ServerStatus:
        """Lets queued jobs run again."""
        return self._unary(self.stub.ResumeQueue, pb2.ResumeQueueRequest())

    def follow(self, job_id: str, *, after_seq: int = 0, heartbeats: bool = False,
               reconnect_timeout: float = 120.0) -> Iterator[pb2.JobEvent]:
        """The job's events after `after_seq`, stored ones first, then live, ending with its
        terminal state event; a stream that breaks or goes silent is reopened where it stopped
        (see follow_events; reconnect_timeout=0 turns that off)."""
        return follow_events(self.stub, _job_id(job_id), after_seq=after_seq, heartbeats=heartbeats,
                             reconnect_timeout=reconnect_timeout)

    def get(self, job_id: str) -> pb2.Job:
        """The job now; errors.NotFound for an unknown id."""
        return self._unary(self.stub.GetJob, pb2.GetJobRequest(job_id=_job_id(job_id)))

    def cancel(self, job_id: str) -> pb2.Job:
        """Cancels a queued or running job (a running one stops at its next step boundary)."""
        return self._unary(self.stub.CancelJob, pb2.CancelJobRequest(job_id=_job_id(job_id)))

    def _unary(self, method, request, timeout: Optional[float] = None):
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    def list(self, *, states: Sequence[int] = (), kind: int = 0, name: str = "",
             labels: Optional[Dict[str, str]] = None, limit: Optional[int] = None,
             page_size: int = 100) -> Iterator[pb2.Job]:
        """Jobs newest first, as `mpsctl list`: only those in `states` (pb2.Job.QUEUED, ...; empty
        = every state), of `kind` (pb2.Job.TRAIN_JOB, ...; 0 = every kind), whose name matches the
        glob `name`, carrying every one of `labels`. Pages are fetched as the iteration goes;
        `limit` stops after that many jobs."""
        if limit is not None and limit < 0:
            raise ValueError("limit: %d; expected >= 0 (None: every job)" % limit)
        request = pb2.ListJobsRequest(states=list(states), kind=kind, name=name,
                                      page_size=page_size)
        for key, value in (labels or {}).items():
            request.labels[key] = value
        count = 0
        while True:
            page = self._unary(self.stub.ListJobs, request)
            for job in page.jobs:
                if limit is not None and count >= limit:
                    return
                count += 1
                yield job
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    def artifacts(self, job_id: str) -> List[pb2.Artifact]:
        """The files a job wrote (model, checkpoints, profile, ...), sorted by name."""
        return list(self._unary(self.stub.ListArtifacts,
                                pb2.ListArtifactsRequest(job_id=_job_id(job_id))).artifacts)

    def download(self, job_id: str, name: str = "model.pt", path: Optional[str] = None, *,
                 overwrite: bool = False, retries: int = 5) -> str:
        """Downloads the artifact `name` of job `job_id` to `path` and returns the path written.
        `path`: a file, or an existing directory to put `name`'s file name in; default: that
        file name in the working directory. An existing file is not replaced unless
        `overwrite=True` (FileExistsError, as `mpsctl download` refuses without --force). The
        bytes go to PATH.part first; a broken stream continues from the bytes it has (up to
        `retries` times); the whole file's SHA-256 is checked before PATH.part becomes PATH.
        errors.MpsdError when the daemon refuses; ValueError when the bytes do not match the
        daemon's SHA-256; FileNotFoundError when `path`'s directory does not exist."""
        job_id = _job_id(job_id)
        path = path or os.path.basename(name)
        if os.path.isdir(path):
            path = os.path.join(path, os.path.basename(name))
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise FileNotFoundError("download %s of job %s: the folder %s does not exist" %
                                    (name, job_id, directory))
        if os.path.exists(path) and not overwrite:
            raise FileExistsError("download %s of job %s: %s already exists (overwrite=True "
                                  "replaces it)" % (name, job_id, path))
        partial = path + ".part"
        received = {"offset": 0, "sha256": None}
        with open(partial, "wb") as out:
            def receive_rest() -> None:  # from the bytes already received to the end
                request = pb2.GetArtifactRequest(job_id=job_id, name=name,
                                                 offset=received["offset"])
                for chunk in self.stub.GetArtifact(request):
                    if chunk.offset != received["offset"]:
                        raise ValueError("artifact %s of job %s: a chunk at byte %d, expected "
                                         "%d" % (name, job_id, chunk.offset, received["offset"]))
                    received["sha256"] = chunk.sha256
                    out.write(chunk.data)
                    received["offset"] += len(chunk.data)

            def remove_partial() -> None:
                out.close()
                os.unlink(partial)

            _retry_unavailable(receive_rest, retries, remove_partial)
        sha256 = received["sha256"]  # an empty file sends no chunk, and no checksum
        digest = hashlib.sha256()
        with open(partial, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        if sha256 and digest.hexdigest() != sha256:
            os.unlink(partial)
            raise ValueError("artifact %s of job %s: SHA-256 %s, the daemon's is %s" %
                             (name, job_id, digest.hexdigest(), sha256))
        os.replace(partial, path)
        return path

    def sweep(self, sweep_id: str, *, dataframe: bool = False):
        """A sweep's trials as rows, in trial order: one dict per trial with "trial", "job_id",
        "state", "failure_reason" (its name, e.g. "EARLY_STOPPED" for a trial the sweep's
        scheduler stopped, or None), each swept parameter (its path as key, its value typed as the job field it sets:
        0.01, 64, "convnet"), and the trial's summary metrics (val_loss, val_accuracy, test_loss,
        test_accuracy, best_epoch, best_value, final_train_loss, epochs, steps,
        samples_per_second, total_time_s, and for multilabel and regression the summary's
        `metrics`: test_r2, val_macro_f1, ...; a metric the trial did not measure is None). Ranked
        tables: `mpsctl sweep ID`, or sort the DataFrame. `dataframe=True`: a pandas DataFrame of the
        same rows (ImportError when pandas is missing). errors.InvalidArgument when `sweep_id`
        is not a sweep."""
        sweep = self.get(sweep_id)
        if sweep.kind != pb2.Job.SWEEP:
            raise errors.InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT,
                                         "job %s is not a sweep" % sweep_id)
        rows = []
        for job_id in sweep.trial_job_ids:
            trial = self.get(job_id)
            summary = trial.summary
            row: Dict[str, Any] = {"trial": trial.trial.index, "job_id": trial.id,
                                   "state": pb2.Job.State.Name(trial.state),
                                   "failure_reason": (pb2.Job.FailureReason.Name(
                                       trial.failure_reason) if trial.failure_reason else None)}
            for parameter in trial.trial.parameters:
                row[parameter.path] = _typed_value(parameter.path, parameter.value)
            for metric in ("val_loss", "val_accuracy", "test_loss", "test_accuracy",
                           "best_value"):
                row[metric] = getattr(summary, metric) if summary.HasField(metric) else None
            # multilabel and regression: their metrics by name (test_r2, val_macro_f1, ...).
            for metric, value in sorted(summary.metrics.items()):
                row[metric] = value
            row["best_epoch"] = summary.best_epoch or None
            row["final_train_loss"] = summary.final_train_loss if trial.HasField("summary") else None
            for metric in ("epochs", "steps", "samples_per_second", "total_time_s"):
                row[metric] = getattr(summary, metric)
            rows.append(row)
        if dataframe:
            import pandas  # noqa: PLC0415 (optional dependency)
            return pandas.DataFrame(rows)
        return rows

    def events(self, job_id: str, *, after_seq: int = 0) -> Iterator[pb2.JobEvent]:
        """The job's stored events after `after_seq` (and live ones until it ends, for an
        unfinished job), heartbeats left out."""
        return self.follow(job_id, after_seq=after_seq)

    def export(self, job_id: str, directory: str, *, format: str = "csv") -> List[str]:
        """Writes a job's metrics under `directory`/run_name(job)/ (<name>-<id>, as mpsctl export)
        and returns the files written:
        "csv": steps.csv (one row per step, a column per StepMetrics field) and epochs.csv (one
        row per epoch, a column per EpochMetrics field; an unmeasured value empty), with the
        latest value of each step and epoch when a resumed job ran one twice (the columns of
        `mpsctl export --format csv`); "jsonl": events.jsonl, every event as a JSON object per line. For
        TensorBoard event files use `mpsctl export --format tensorboard`. Waits for an unfinished
        job to end."""
        if format not in ("csv", "jsonl"):
            raise ValueError("format %r: expected \"csv\" or \"jsonl\" (TensorBoard: mpsctl "
                             "export --format tensorboard)" % format)
        out_dir = os.path.join(directory, run_name(self.get(job_id)))
        os.makedirs(out_dir, exist_ok=True)
        if format == "jsonl":
            path = os.path.join(out_dir, "events.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                for event in self.events(job_id):
                    f.write(to_json_line(event) + "\n")
            return [path]
        steps: Dict[int, Any] = {}
        epochs: Dict[int, Any] = {}
        for event in self.events(job_id):
            kind = event.WhichOneof("payload")
            if kind == "step":
                steps[event.step.step] = event
            elif kind == "epoch":
                epochs[event.epoch.epoch] = event
        written = []
        for name, table, key in (("steps.csv", steps, "step"), ("epochs.csv", epochs, "epoch")):
            path = os.path.join(out_dir, name)
            descriptor = (pb2.StepMetrics if key == "step" else pb2.EpochMetrics).DESCRIPTOR
            fields = [f for f in descriptor.fields if f.name != key]
            with open(path, "w", encoding="utf-8", newline="") as f:
                writer = csv.writer(f, lineterminator="\n")
                writer.writerow([key, "wall_time"] + [f.name for f in fields])
                for number in sorted(table):
                    event = table[number]
                    metrics = getattr(event, key)
                    row = [number, repr(event.time.seconds + event.time.nanos / 1e9)]
                    for field in fields:
                        present = (not field.has_presence) or metrics.HasField(field.name)
                        # test_* of an epoch that skipped its evaluation were never measured.
                        if (key == "epoch" and not metrics.evaluated and
                                field.name in ("test_loss", "test_accuracy")):
                            present = False
                        row.append(_cell(field, getattr(metrics, field.name)) if present else "")
                    writer.writerow(row)
            written.append(path)
        return written

    def upload(self, path: str, name: Optional[str] = None, *, replace: bool = False,
               retries: int = 5) -> pb2.Upload:
        """Sends a file or folder to the daemon, for jobs to name as `upload:NAME` (as `mpsctl
        upload`): a folder goes as a tar archive of its regular files, folders and symbolic
        links (links are sent as links; the daemon refuses absolute ones and ones with ".."),
        which the daemon unpacks. `name` defaults to PATH's last part. Resumable: the daemon says
        how many bytes of this name and SHA-256 it holds (GetUploadStatus) and the stream
        starts there, also after a broken connection (up to `retries` times); an upload the
        daemon already has complete is not sent again. `replace`: replace an existing upload
        of that name. Returns the stored upload (its `ref` is what a job names).
        errors.MpsdError when the daemon refuses (ALREADY_EXISTS, RESOURCE_EXHAUSTED for the
        quota, InvalidArgument naming an unsafe archive entry); OSError for an unreadable PATH or one
        that is neither a regular file nor a folder (a FIFO, a device)."""
        import stat
        import tarfile
        import tempfile
        path = os.path.abspath(path)
        name = name or os.path.basename(os.path.normpath(path))
        # As mpsctl: a regular file or a folder, nothing else (opening a FIFO would wait for a
        # writer forever; a device is no file to keep).
        mode = os.stat(path).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise OSError("%s: not a regular file or folder" % path)
        with tempfile.TemporaryFile() as archive:
            is_archive = os.path.isdir(path)
            if is_archive:
                with tarfile.open(fileobj=archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    _add_tree(tar, path, "")
                source = archive
            else:
                source = open(path, "rb")
            try:
                source.seek(0, os.SEEK_END)
                size = source.tell()
                source.seek(0)
                digest = hashlib.sha256()
                for block in iter(lambda: source.read(1 << 20), b""):
                    digest.update(block)
                sha256 = digest.hexdigest()

                def send_rest() -> pb2.Upload:  # from the bytes the daemon holds to the end
                    status = self._unary(self.stub.GetUploadStatus, pb2.GetUploadStatusRequest(
                        name=name, sha256=sha256, size_bytes=size))
                    if status.complete and not replace:
                        for upload in self._unary(self.stub.ListUploads,
                                                  pb2.ListUploadsRequest()).uploads:
                            if upload.name == name:
                                return upload
                    return self.stub.UploadFile(_chunks(source, name, sha256, size, is_archive,
                                                        replace, status.offset))

                return _retry_unavailable(send_rest, retries)
            finally:
                if source is not archive:
                    source.close()

    def uploads(self) -> List[pb2.Upload]:
        """The caller's uploads (unfinished ones as kind "partial"), by name."""
        return list(self._unary(self.stub.ListUploads, pb2.ListUploadsRequest()).uploads)

    def delete_upload(self, name: str) -> pb2.Upload:
        """Deletes one of the caller's uploads; errors.NotFound when there is none,
        errors.FailedPrecondition (naming the jobs) while queued or running jobs name it."""
        return self._unary(self.stub.DeleteUpload, pb2.DeleteUploadRequest(name=name))

    def device(self) -> pb2.DeviceInfo:
        """The device the daemon's executor owns, and its memory now."""
        return self._unary(self.stub.GetDevice, pb2.GetDeviceRequest())


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


def _add_tree(tar, directory: str, prefix: str) -> None:
    """Adds `directory`'s entries, sorted, as `prefix`NAME: folders, regular files (each as its
    own bytes, never as a hard link to an earlier one), symbolic links as links; anything else
    (FIFOs, sockets, devices) is left out."""
    import stat as stat_module
    import tarfile
    for entry in sorted(os.listdir(directory)):
        full = os.path.join(directory, entry)
        info = os.lstat(full)
        member = tarfile.TarInfo(prefix + entry)
        member.mtime = int(info.st_mtime)
        if stat_module.S_ISDIR(info.st_mode):
            member.type, member.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(member)
            _add_tree(tar, full, prefix + entry + "/")
        elif stat_module.S_ISLNK(info.st_mode):
            member.type, member.mode, member.linkname = tarfile.SYMTYPE, 0o777, os.readlink(full)
            tar.addfile(member)
        elif stat_module.S_ISREG(info.st_mode):
            member.mode, member.size = 0o644, info.st_size
            with open(full, "rb") as f:
                tar.addfile(member, f)


def _chunks(source, name, sha256, size, archive, replace, offset):
    """UploadFile's stream from `offset`: the first chunk names the upload, each at most 1 MiB."""
    source.seek(offset)
    first = True
    while True:
        data = source.read(1 << 20)
        if not data and not first:
            return
        chunk = pb2.UploadChunk(offset=offset, data=data)
        if first:
            chunk.name, chunk.sha256, chunk.size_bytes = name, sha256, size
            chunk.archive, chunk.replace = archive, replace
            first = False
        offset += len(data)
        yield chunk
        if not data:
            return


def _job_id(job_id) -> str:
    """Job ids are strings ("12"); an int is taken as its decimal form."""
    if isinstance(job_id, bool) or not isinstance(job_id, (str, int)):
        raise TypeError("job id %r: expected a str such as \"12\" (or an int)" % (job_id,))
    return str(job_id)


def _typed_value(path: str, text: str):
    """A swept value as the TrainJob field at `path` types it (jobfile's rules): "0.01" -> 0.01
    for a double, "64" -> 64 for an int; the text when the path names no scalar field."""
    message = pb2.TrainJob.DESCRIPTOR
    field = None
    for part in path.split("."):
        field = message.fields_by_name.get(part) if message is not None else None
        if field is None:
            return text
        message = field.message_type
    if field is None or field.message_type is not None:
        return text
    try:
        return jobfile._scalar(field, text, path)  # noqa: SLF001 (the package's own rules)
    except jobfile.JobFileError:
        return text


def _cell(field, value) -> str:
    """A CSV cell as mpsctl export writes it: true/false, the shortest text that reads back as
    the same double (or float, for a float field)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if field.type == field.TYPE_FLOAT:
            import struct
            for digits in range(6, 10):
                text = "%.*g" % (digits, value)
                if struct.unpack("f", struct.pack("f", float(text)))[0] == value:
                    return text
        return repr(value)
    return str(value)


def to_dict(message) -> Dict[str, Any]:
    """protobuf's JSON mapping as mpsctl --json writes it: proto field names, every field
    (zeros and empty values too), int64 values as JSON numbers rather than strings."""
    from google.protobuf import json_format
    from google.protobuf.descriptor import FieldDescriptor as F
    as_dict = json_format.MessageToDict(message, preserving_proto_field_name=True,
                                        including_default_value_fields=True)
    int64s = (F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_SINT64, F.TYPE_FIXED64, F.TYPE_SFIXED64)

    def numbers(value, descriptor):
        if not isinstance(value, dict) or descriptor is None:
            return value
        if descriptor.full_name.startswith("google.protobuf."):
            return value  # well-known types keep their own JSON (Timestamp: an RFC 3339 string)
        for name, item in value.items():
            field = descriptor.fields_by_name.get(name)
            if field is None:
                continue
            if field.type in int64s:
                value[name] = ([int(v) for v in item] if isinstance(item, list) else int(item))
            elif field.message_type is not None:
                if field.message_type.GetOptions().map_entry:
                    continue
                if isinstance(item, list):
                    value[name] = [numbers(v, field.message_type) for v in item]
                else:
                    value[name] = numbers(item, field.message_type)
        return value

    return numbers(as_dict, message.DESCRIPTOR)


def to_json_line(message) -> str:
    """to_dict(message) on one line (as `mpsctl logs --json` prints each event)."""
    import json
    return json.dumps(to_dict(message), separators=(",", ":"))
