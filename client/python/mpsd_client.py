"""A small Python client library for mpsd: stubs, default address, job files, event streams.

The gRPC stubs are generated at build time, not committed: the CMake target `mpsd_python_stubs`
(built by default) writes <build>/python/mpsd/v1/mpsd_pb2.py and mpsd_pb2_grpc.py. import_stubs()
looks for them in, in order: its `stubs_dir` argument (submit.py --stubs DIR), $MPSD_PYTHON_STUBS,
anything already importable (PYTHONPATH), then <repo>/build/python and <repo>/build-*/python.

Needs grpcio, protobuf and PyYAML. On Debian: apt install python3-grpcio python3-protobuf
python3-yaml, and run with /usr/bin/python3 (a pyenv or venv python does not see those packages).
"""

import base64
import glob
import importlib
import os
import re
import sys

STUBS_ENV = "MPSD_PYTHON_STUBS"
ADDRESS_ENV = "MPSD_ADDR"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class StubsNotFound(ImportError):
    pass


class JobFileError(ValueError):
    """A job file that cannot become a SubmitJobRequest; str() has one line per problem."""


def default_address():
    """The address mpsd listens on by default; the same rule as client/default_address.h."""
    explicit = os.environ.get(ADDRESS_ENV)
    if explicit:
        return explicit
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return "unix://%s/mpsd/mpsd.sock" % runtime_dir
    return "unix:///tmp/mpsd-%d/mpsd.sock" % os.getuid()


def _stub_dirs(stubs_dir):
    if stubs_dir:
        yield stubs_dir
        return  # an explicit directory that lacks the stubs is an error, not a hint
    if os.environ.get(STUBS_ENV):
        yield os.environ[STUBS_ENV]
        return
    yield None  # whatever sys.path already has
    yield os.path.join(REPO_ROOT, "build", "python")
    yield from sorted(glob.glob(os.path.join(REPO_ROOT, "build-*", "python")))


def import_stubs(stubs_dir=None):
    """Returns the modules (mpsd_pb2, mpsd_pb2_grpc); raises StubsNotFound saying where it looked."""
    looked = []
    for directory in _stub_dirs(stubs_dir):
        if directory is not None:
            if not os.path.isfile(os.path.join(directory, "mpsd", "v1", "mpsd_pb2.py")):
                looked.append(directory)
                continue
            sys.path.insert(0, os.path.abspath(directory))
        try:
            pb2 = importlib.import_module("mpsd.v1.mpsd_pb2")
            pb2_grpc = importlib.import_module("mpsd.v1.mpsd_pb2_grpc")
            return pb2, pb2_grpc
        except ImportError as e:
            if directory is not None:
                raise StubsNotFound("cannot import the stubs in %s: %s" % (directory, e)) from e
            looked.append("sys.path")
    raise StubsNotFound(
        "no generated stubs (mpsd/v1/mpsd_pb2.py) in %s; build them with "
        "`cmake --build BUILD --target mpsd_python_stubs` and pass --stubs BUILD/python "
        "or set %s=BUILD/python" % (", ".join(looked), STUBS_ENV))


# ---------------------------------------------------------------------------------------------
# Job files. The YAML is read with every scalar as a string, then typed by the proto field, so
# `device: 12` stays "12" and `batch_size: sixty` names its path (as client/job_file.cc does,
# without line numbers). Top-level keys beside `kind` that are fields of SubmitJobRequest itself
# (`priority`, `request_id`) go into the request; every other key is a field of the job.

_NULL_WORDS = ("", "~", "null", "Null", "NULL")
_TRUE_WORDS = ("true", "yes", "on")
_FALSE_WORDS = ("false", "no", "off")
_INT_RE = re.compile(r"^[-+]?[0-9][0-9_]*$")


def _describe(value):
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, list):
        return "a list"
    return '"%s"' % value


def _int_range(field):
    from google.protobuf.descriptor import FieldDescriptor as F
    return {
        F.CPPTYPE_INT32: (-2**31, 2**31 - 1),
        F.CPPTYPE_INT64: (-2**63, 2**63 - 1),
        F.CPPTYPE_UINT32: (0, 2**32 - 1),
        F.CPPTYPE_UINT64: (0, 2**64 - 1),
    }[field.cpp_type]


def _parse_float(text):
    lower = text.lower().lstrip("+")
    if lower in (".inf", "-.inf"):
        return float("-inf") if lower.startswith("-") else float("inf")
    if lower == ".nan":
        return float("nan")
    if not re.match(r"^[-+]?(\.[0-9]|[0-9])", text):
        return None  # Python's float() would also take "inf", "nan", " 1"
    try:
        return float(text)
    except ValueError:
        return None


def _scalar(field, value, path):
    """The Python value for one scalar of `field`; raises JobFileError."""
    from google.protobuf.descriptor import FieldDescriptor as F
    if not isinstance(value, str):
        raise JobFileError("%s: expected a single value, got %s" % (path, _describe(value)))
    t = field.cpp_type
    if t in (F.CPPTYPE_INT32, F.CPPTYPE_INT64, F.CPPTYPE_UINT32, F.CPPTYPE_UINT64):
        low, high = _int_range(field)
        if _INT_RE.match(value):
            number = int(value.replace("_", ""))
        else:
            f = _parse_float(value)
            if f is None or f != f or f in (float("inf"), float("-inf")) or f != int(f):
                kind = "a non-negative integer" if low == 0 else "an integer"
                raise JobFileError('%s: expected %s, got "%s"' % (path, kind, value))
            number = int(f)
        if low == 0 and number < 0:
            raise JobFileError("%s: expected a non-negative integer, got %s" % (path, value))
        if not low <= number <= high:
            raise JobFileError("%s: %s is out of range (%d to %d)" % (path, value, low, high))
        return number
    if t in (F.CPPTYPE_FLOAT, F.CPPTYPE_DOUBLE):
        f = _parse_float(value)
        if f is None:
            raise JobFileError('%s: expected a number, got "%s"' % (path, value))
        return f
    if t == F.CPPTYPE_BOOL:
        if value.lower() in _TRUE_WORDS:
            return True
        if value.lower() in _FALSE_WORDS:
            return False
        raise JobFileError('%s: expected true or false, got "%s"' % (path, value))
    if t == F.CPPTYPE_ENUM:
        for v in field.enum_type.values:
            if v.name == value or v.name.lower() == value.lower() or str(v.number) == value:
                return v.number
        names = [v.name for v in field.enum_type.values if not v.name.endswith("_UNSPECIFIED")]
        raise JobFileError('%s: unknown "%s" (expected one of %s)' % (path, value, ", ".join(names)))
    if field.type == F.TYPE_BYTES:
        return base64.b64decode(value)
    return value


def _fill(message, mapping, path, errors):
    from google.protobuf.descriptor import FieldDescriptor as F
    for key, value in mapping.items():
        key_path = "%s.%s" % (path, key) if path else key
        field = message.DESCRIPTOR.fields_by_name.get(key)
        if field is None:
            errors.append("%s: unknown field (%s has %s)" % (
                key_path, message.DESCRIPTOR.name, ", ".join(message.DESCRIPTOR.fields_by_name)))
            continue
        if isinstance(value, str) and value in _NULL_WORDS:
            continue  # `key:` leaves the field unset
        is_message = field.cpp_type == F.CPPTYPE_MESSAGE
        try:
            if is_message and field.message_type.GetOptions().map_entry:
                raise JobFileError("%s: map fields are not supported here" % key_path)
            if field.label == F.LABEL_REPEATED:
                if not isinstance(value, list):
                    raise JobFileError("%s: expected a list, got %s" % (key_path, _describe(value)))
                target = getattr(message, key)
                for i, item in enumerate(value):
                    item_path = "%s[%d]" % (key_path, i)
                    if is_message:
                        if not isinstance(item, dict):
                            raise JobFileError("%s: expected a map, got %s" % (item_path, _describe(item)))
                        _fill(target.add(), item, item_path, errors)
                    else:
                        target.append(_scalar(field, item, item_path))
            elif is_message:
                if not isinstance(value, dict):
                    raise JobFileError("%s: expected a map with fields %s, got %s" % (
                        key_path, ", ".join(field.message_type.fields_by_name), _describe(value)))
                sub = getattr(message, key)
                sub.SetInParent()
                _fill(sub, value, key_path, errors)
            else:
                setattr(message, key, _scalar(field, value, key_path))
        except JobFileError as e:
            errors.append(str(e))


def _fill_request_fields(request, doc, errors):
    """Moves the request-level keys (priority, request_id) out of `doc` into `request`."""
    for field in request.DESCRIPTOR.fields:
        if field.containing_oneof is not None or field.name not in doc:
            continue
        value = doc.pop(field.name)
        if isinstance(value, str) and value in _NULL_WORDS:
            continue
        try:
            setattr(request, field.name, _scalar(field, value, field.name))
        except JobFileError as e:
            errors.append(str(e))


def parse_job_file(text, filename, pb2):
    """`text` of a job file → pb2.SubmitJobRequest; raises JobFileError naming file and paths."""
    import yaml
    try:
        documents = list(yaml.load_all(text, Loader=yaml.BaseLoader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = "%s:%d:%d" % (filename, mark.line + 1, mark.column + 1) if mark else filename
        raise JobFileError("%s: YAML syntax error: %s" % (where, getattr(e, "problem", e))) from e
    documents = [d for d in documents if d not in (None, "")]
    if not documents:
        raise JobFileError('%s: empty job file (expected a map that starts with "kind: TrainJob")' % filename)
    if len(documents) > 1:
        raise JobFileError("%s: a job file holds one YAML document, found %d" % (filename, len(documents)))
    doc = documents[0]
    if not isinstance(doc, dict):
        raise JobFileError("%s: expected a map of job fields, got %s" % (filename, _describe(doc)))
    spec = pb2.SubmitJobRequest.DESCRIPTOR.oneofs_by_name["spec"]
    kinds = {f.message_type.name: f.name for f in spec.fields}
    expected = " or ".join(kinds)
    if "kind" not in doc:
        raise JobFileError('%s: missing "kind" (expected %s)' % (filename, expected))
    kind = doc.pop("kind")
    if kind not in kinds:
        raise JobFileError('%s: kind: unknown %s (expected %s)' % (filename, _describe(kind), expected))
    request = pb2.SubmitJobRequest()
    errors = []
    _fill_request_fields(request, doc, errors)
    job = getattr(request, kinds[kind])
    job.SetInParent()
    _fill(job, doc, "", errors)
    if errors:
        raise JobFileError("\n".join("%s: %s" % (filename, e) for e in errors))
    return request


def read_job_file(path, pb2):
    """Reads and parses a job file, then makes its relative paths absolute (make_paths_absolute)."""
    with open(path, encoding="utf-8") as f:
        request = parse_job_file(f.read(), path, pb2)
    make_paths_absolute(request, path)
    return request


def make_paths_absolute(request, job_file):
    """Makes a TrainJob's relative model.torchscript and resume_from (unless a job id, all digits)
    absolute against the directory of `job_file`, as mpsctl does: the daemon resolves relative
    paths against its own working directory."""
    if request.WhichOneof("spec") != "train_job":
        return
    job = request.train_job
    directory = os.path.dirname(os.path.abspath(job_file))

    def absolute(path):
        if os.path.isabs(path):
            return path
        return os.path.normpath(os.path.join(directory, path))

    if job.model.torchscript:
        job.model.torchscript = absolute(job.model.torchscript)
    if job.resume_from and not job.resume_from.isdigit():
        job.resume_from = absolute(job.resume_from)


# ---------------------------------------------------------------------------------------------
# Events.

def terminal_states(pb2):
    return (pb2.Job.SUCCEEDED, pb2.Job.FAILED, pb2.Job.CANCELLED, pb2.Job.INTERRUPTED)


def follow_events(stub, pb2, job_id, after_seq=0, heartbeats=False):
    """Yields the job's JobEvents after `after_seq` up to and including its terminal state event.

    Heartbeats (seq 0, sent while the stream is idle; for a queued job they carry its queue
    position) are yielded only with heartbeats=True. To resume after a lost connection, pass the
    last non-zero seq seen as `after_seq`. The stream has no deadline (a job may run for hours).
    Raises grpc.RpcError if it fails.
    """
    call = stub.StreamEvents(pb2.StreamEventsRequest(job_id=job_id, after_seq=after_seq))
    try:
        for event in call:
            if event.WhichOneof("payload") == "heartbeat" and not heartbeats:
                continue
            yield event
            if event.WhichOneof("payload") == "state" and event.state.state in terminal_states(pb2):
                return
    finally:
        call.cancel()  # no-op once the server has ended the stream


def to_json_line(message):
    """protobuf's JSON mapping on one line, proto field names (as `mpsctl --json` prints)."""
    import json
    from google.protobuf import json_format
    return json.dumps(json_format.MessageToDict(message, preserving_proto_field_name=True),
                      separators=(",", ":"))
