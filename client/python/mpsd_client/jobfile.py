"""Job files and job specs: YAML (or a dict of the same shape) to a SubmitJobRequest.

The rules are client/job_file.cc's (mpsctl): every scalar is read as a string, then typed by the
proto field, so `device: 12` stays "12" and `batch_size: sixty` is an error naming its path.
Thread-safety: the functions keep no state; call them from any thread.
"""

import base64
import math
import os
import re
import stat
from typing import Any, Mapping, Union

from google.protobuf.descriptor import FieldDescriptor as F

from .v1 import mpsd_pb2 as pb2


class JobFileError(ValueError):
    """A job file or spec that cannot become a SubmitJobRequest; str() has one line per problem."""


# ---------------------------------------------------------------------------------------------
# Job files. The YAML is read with every scalar as a string, then typed by the proto field, so
# `device: 12` stays "12" and `batch_size: sixty` names its path (as client/job_file.cc does,
# without line numbers). Top-level keys beside `kind` that are fields of SubmitJobRequest itself
# (`priority`, `request_id`) go into the request; every other key is a field of the job.

_NULL_WORDS = ("", "~", "null", "Null", "NULL")
_TRUE_WORDS = ("true", "yes", "on")
_FALSE_WORDS = ("false", "no", "off")
_INT_RE = re.compile(r"^[-+]?[0-9][0-9_]*$")
_FLOAT_MAX = 3.4028234663852886e38  # the largest finite float32, as C++'s numeric_limits


def _describe(value):
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, list):
        return "a list"
    return '"%s"' % value


def _int_range(field):
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
    if not re.match(r"^[-+]?(\.[0-9]|[0-9])", text) or text != text.strip():
        return None  # Python's float() would also take "inf", "nan", " 1", "1 "
    try:
        return float(text.replace("_", ""))  # `_` separators anywhere, as client/job_file.cc
    except ValueError:
        return None


def _scalar(field, value, path):
    """The Python value for one scalar of `field`; raises JobFileError."""
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
        if t == F.CPPTYPE_FLOAT and not math.isinf(f) and abs(f) > _FLOAT_MAX:
            raise JobFileError("%s: %s is out of range for float" % (path, value))
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


def _is_path_keyed(field):
    """A list of messages keyed by their `path` (SweepSpec.grid, RandomSearch.parameters)."""
    if field.label != F.LABEL_REPEATED or field.cpp_type != F.CPPTYPE_MESSAGE:
        return False
    names = field.message_type.fields_by_name
    return "path" in names and "values" in names


def _fill(message, mapping, path, errors):
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
                # `labels: {project: fmnist}`: string keys and scalar values.
                if not isinstance(value, dict):
                    raise JobFileError("%s: expected a map, got %s" % (key_path, _describe(value)))
                value_field = field.message_type.fields_by_name["value"]
                if value_field.cpp_type == F.CPPTYPE_MESSAGE:
                    raise JobFileError("%s: maps of messages are not supported here" % key_path)
                target = getattr(message, key)
                for k, v in value.items():
                    target[k] = _scalar(value_field, v, "%s.%s" % (key_path, k))
                continue
            if _is_path_keyed(field) and isinstance(value, dict):
                # `grid: {optimizer.learning_rate: [0.1, 0.01]}` (mpsctl's form, client/job_file.cc).
                target = getattr(message, key)
                values_field = field.message_type.fields_by_name["values"]
                for k, v in value.items():
                    item_path = "%s.%s" % (key_path, k)
                    item = target.add()
                    item.path = k
                    if isinstance(v, list):
                        item.values.extend(_scalar(values_field, x, item_path) for x in v)
                    elif isinstance(v, dict):
                        _fill(item, v, item_path, errors)
                    else:
                        raise JobFileError("%s: expected a list of values or a map, got %s" % (
                            item_path, _describe(v)))
                continue
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
    """Moves the request-level keys (priority, request_id, name, labels, after, sweep) out of
    `doc` into `request`."""
    for field in request.DESCRIPTOR.fields:
        if field.containing_oneof is not None or field.name not in doc:
            continue
        value = doc.pop(field.name)
        if isinstance(value, str) and value in _NULL_WORDS:
            continue
        if field.label == F.LABEL_REPEATED or field.cpp_type == F.CPPTYPE_MESSAGE:
            _fill(request, {field.name: value}, "", errors)  # labels, after, sweep
            continue
        try:
            setattr(request, field.name, _scalar(field, value, field.name))
        except JobFileError as e:
            errors.append(str(e))


# The deepest nesting of maps and lists a job file may have (the deepest job spec is about 6
# levels): as client/job_file.cc's kMaxNesting, so that both clients refuse the same files, and
# far below where PyYAML's recursive composer would hit Python's recursion limit.
MAX_NESTING = 64


class _Refused(Exception):
    """A YAML construct a job file may not use, at `mark`: what and why in `message`."""

    def __init__(self, mark, message):
        super().__init__(message)
        self.mark = mark
        self.message = message


def _loader_without_aliases():
    """yaml.BaseLoader (every scalar a string) that refuses what mpsctl refuses
    (client/job_file.cc): aliases (an alias shares its node, and walking the document would visit
    that node once per path to it, exponential in the nesting: "billion laughs"), nesting deeper
    than MAX_NESTING, and a key given twice in one map (PyYAML would keep the last silently)."""
    import yaml

    class Loader(yaml.BaseLoader):
        _depth = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise _Refused(self.peek_event().start_mark,
                               "YAML aliases (*name) are not supported in a job file: write the "
                               "value out")
            if self.check_event(yaml.MappingStartEvent, yaml.SequenceStartEvent):
                if self._depth >= MAX_NESTING:
                    raise _Refused(self.peek_event().start_mark,
                                   "nested more than %d levels deep" % MAX_NESTING)
                self._depth += 1
                try:
                    return super().compose_node(parent, index)
                finally:
                    self._depth -= 1
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    if key_node.value in seen:
                        raise _Refused(key_node.start_mark,
                                       "%s: duplicate key" % key_node.value)
                    seen.add(key_node.value)
            return super().construct_mapping(node, deep=deep)

    return Loader


def parse_job_file(text: str, filename: str) -> pb2.SubmitJobRequest:
    """`text` of a job file → SubmitJobRequest; raises JobFileError naming file and paths.

    Needs PyYAML. Relative paths stay as written (read_job_file makes them absolute). YAML
    aliases (*name), a key given twice in one map and nesting deeper than MAX_NESTING are
    refused, naming the line and column, as mpsctl refuses them."""
    import yaml
    try:
        documents = list(yaml.load_all(text, Loader=_loader_without_aliases()))
    except _Refused as e:
        where = "%s:%d:%d" % (filename, e.mark.line + 1, e.mark.column + 1)
        raise JobFileError("%s: %s" % (where, e.message)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = "%s:%d:%d" % (filename, mark.line + 1, mark.column + 1) if mark else filename
        raise JobFileError("%s: YAML syntax error: %s" % (where, getattr(e, "problem", e))) from e
    documents = [d for d in documents if d not in (None, "")]
    if not documents:
        raise JobFileError('%s: empty job file (expected a map that starts with "kind: TrainJob")' % filename)
    if len(documents) > 1:
        raise JobFileError("%s: a job file holds one YAML document, found %d" % (filename, len(documents)))
    return _request_from_document(documents[0], filename)


def _request_from_document(doc, source):
    """A job file's top-level map (every scalar a string) → SubmitJobRequest."""
    if not isinstance(doc, dict):
        raise JobFileError("%s: expected a map of job fields, got %s" % (source, _describe(doc)))
    doc = dict(doc)
    spec = pb2.SubmitJobRequest.DESCRIPTOR.oneofs_by_name["spec"]
    kinds = {f.message_type.name: f.name for f in spec.fields}
    names = list(kinds)
    # As mpsctl says it: "TrainJob, BenchJob, EvalJob or PredictJob".
    expected = names[0] if len(names) == 1 else "%s or %s" % (", ".join(names[:-1]), names[-1])
    if "kind" not in doc:
        raise JobFileError('%s: missing "kind" (expected %s)' % (source, expected))
    kind = doc.pop("kind")
    if kind not in kinds:
        raise JobFileError('%s: kind: unknown %s (expected %s)' % (source, _describe(kind), expected))
    request = pb2.SubmitJobRequest()
    errors = []
    _fill_request_fields(request, doc, errors)
    job = getattr(request, kinds[kind])
    job.SetInParent()
    _fill(job, doc, "", errors)
    if errors:
        raise JobFileError("\n".join("%s: %s" % (source, e) for e in errors))
    return request


# The largest job file read_job_file reads, bytes: 1 MiB, as mpsctl (client/job_file.h).
MAX_JOB_FILE_BYTES = 1 << 20


def _read_regular_file(path: str, limit: int) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes. The open never blocks
    (O_NONBLOCK: a FIFO is refused, not waited on); JobFileError for what is not a regular file
    (a FIFO, /dev/zero, a directory) or is larger; OSError if it cannot be opened or read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise JobFileError("%s: not a regular file; a job file is a YAML file" % path)
        if info.st_size > limit:
            raise JobFileError("%s: %d bytes; a job file is at most 1 MiB (%d bytes)"
                               % (path, info.st_size, limit))
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while size <= limit:  # to one byte beyond the limit: the file may have grown
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise JobFileError("%s: more than %d bytes; a job file is at most 1 MiB (%d bytes)"
                               % (path, limit, limit))
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_job_file(path: Union[str, "os.PathLike[str]"]) -> pb2.SubmitJobRequest:
    """Reads and parses a job file, then makes its relative paths absolute (make_paths_absolute).
    Raises OSError if it cannot be read, JobFileError if it is not a job, not UTF-8, not a
    regular file or larger than MAX_JOB_FILE_BYTES (1 MiB)."""
    path = os.fspath(path)
    data = _read_regular_file(path, MAX_JOB_FILE_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise JobFileError("%s:%d: not UTF-8 text (byte 0x%02x at offset %d); a job file is YAML "
                           "in UTF-8" % (path, line, data[e.start], e.start)) from None
    request = parse_job_file(text, path)
    make_paths_absolute(request, path)
    return request


def _as_text(value):
    """A Python value from a dict spec as the string YAML's BaseLoader would have read."""
    if isinstance(value, Mapping):
        return {str(k): _as_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_text(v) for v in value]
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float):
        return repr(value)
    return str(value)


SpecLike = Union[str, "os.PathLike[str]", Mapping[str, Any], pb2.SubmitJobRequest, pb2.TrainJob,
                 pb2.BenchJob, pb2.EvalJob, pb2.PredictJob]


def job_request(spec: SpecLike) -> pb2.SubmitJobRequest:
    """Any of the forms a job can be given in → a new SubmitJobRequest:

    - a path (str or os.PathLike) to a YAML job file (read_job_file: relative paths in it are
      made absolute against its directory);
    - a dict shaped like a job file: {"kind": "TrainJob", "model": {"name": "convnet"}, ...},
      checked by the same rules (errors name the key path, with "spec" as the file name);
      relative paths in it are sent as they are (the daemon takes them against its own working
      directory);
    - a SubmitJobRequest (copied), a TrainJob, a BenchJob, an EvalJob or a PredictJob message.
    Raises JobFileError for a bad spec, TypeError for anything else."""
    if isinstance(spec, pb2.SubmitJobRequest):
        request = pb2.SubmitJobRequest()
        request.CopyFrom(spec)
        return request
    if isinstance(spec, pb2.TrainJob):
        return pb2.SubmitJobRequest(train_job=spec)
    if isinstance(spec, pb2.BenchJob):
        return pb2.SubmitJobRequest(bench_job=spec)
    if isinstance(spec, pb2.EvalJob):
        return pb2.SubmitJobRequest(eval_job=spec)
    if isinstance(spec, pb2.PredictJob):
        return pb2.SubmitJobRequest(predict_job=spec)
    if isinstance(spec, (str, os.PathLike)):
        return read_job_file(spec)
    if isinstance(spec, Mapping):
        return _request_from_document(_as_text(spec), "spec")
    raise TypeError("a job spec is a job file path, a dict, a SubmitJobRequest, a TrainJob, a "
                    "BenchJob, an EvalJob or a PredictJob, not %s" % type(spec).__name__)


def make_paths_absolute(request: pb2.SubmitJobRequest, job_file: str) -> None:
    """Makes the relative paths of a job absolute against the directory of `job_file`, as mpsctl
    does (client/job_file.cc MakePathsAbsolute), since the daemon would resolve them against its
    own working directory: a TrainJob's model.torchscript, model.weights, loss.torchscript,
    metrics' torchscript, dataset.root and resume_from (unless a job id, all digits); a BenchJob's models that are
    files (ending in .pt or holding a "/"); an EvalJob's model (unless a job id) and dataset.root; a PredictJob's
    model (unless a job id) and inputs. Absolute paths and `upload:NAME` references stay as they
    are."""
    kind = request.WhichOneof("spec")
    if kind not in ("train_job", "bench_job", "eval_job", "predict_job"):
        return
    directory = os.path.dirname(os.path.abspath(job_file))

    def absolute(path):
        if not path or os.path.isabs(path) or path.startswith("upload:"):
            return path
        return os.path.normpath(os.path.join(directory, path))

    if kind == "bench_job":
        models = request.bench_job.models
        for i, model in enumerate(models):
            if model.endswith(".pt") or "/" in model:
                models[i] = absolute(model)
        return
    if kind == "predict_job":
        predict = request.predict_job
        if predict.model and not predict.model.isdigit():
            predict.model = absolute(predict.model)
        for i, path in enumerate(predict.inputs):
            predict.inputs[i] = absolute(path)
        return
    if kind == "eval_job":
        evaluation = request.eval_job
        if evaluation.model and not evaluation.model.isdigit():
            evaluation.model = absolute(evaluation.model)
        if evaluation.dataset.root:
            evaluation.dataset.root = absolute(evaluation.dataset.root)
        return
    job = request.train_job
    # Only set fields are touched: setting a field, even to "", would make its message present.
    if job.model.torchscript:
        job.model.torchscript = absolute(job.model.torchscript)
    if job.model.weights:
        job.model.weights = absolute(job.model.weights)
    if job.loss.torchscript:
        job.loss.torchscript = absolute(job.loss.torchscript)
    for metric in job.metrics:
        if metric.torchscript:
            metric.torchscript = absolute(metric.torchscript)
    if job.dataset.root:
        job.dataset.root = absolute(job.dataset.root)
    if job.resume_from and not job.resume_from.isdigit():
        job.resume_from = absolute(job.resume_from)
