"""Typed errors from mpsd's answers: branch on the class or on `reason`, never on the message.

Every error mpsd itself sends carries, in the call's binary details (grpc-status-details-bin), a
google.rpc.Status holding one google.rpc.ErrorInfo of domain "mpsd" (proto/mpsd/v1/mpsd.proto,
"Errors"): `reason` is the cause ("INVALID_FIELD", "NOT_FOUND", "RANK_FAILED", ...) and
`metadata` its data ("field": the bad field's path for INVALID_FIELD; "failure_reason"). Errors
mpsd did not send (gRPC's own: no connection, a deadline) have no details: reason "".

Each error is an MpsdError, which is also a grpc.RpcError with .code() and .details(), so code
written against raw gRPC errors keeps working. The class follows the status code:

    NotFound (NOT_FOUND)        InvalidArgument (INVALID_ARGUMENT), InvalidField (its reason is
    PermissionDenied            INVALID_FIELD: .field names the field path)
    Unauthenticated             FailedPrecondition      ResourceExhausted
    Unavailable                 DeadlineExceeded        MpsdError (any other code)

Thread-safety: the classes are immutable after construction; from_rpc_error is pure.
"""

from typing import Dict, Optional

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from ._rpc_descriptors import FILE_DESCRIPTOR_SET

ERROR_DOMAIN = "mpsd"
_DETAILS_KEY = "grpc-status-details-bin"


def _message_classes():
    """google.rpc.Status and google.rpc.ErrorInfo from a descriptor pool of this module's own, so
    that an installed googleapis-common-protos (google.rpc in the default pool) cannot clash."""
    pool = descriptor_pool.DescriptorPool()
    for proto in descriptor_pb2.FileDescriptorSet.FromString(FILE_DESCRIPTOR_SET).file:
        pool.Add(proto)
    factory = message_factory.MessageFactory(pool)
    get = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.22
    classes = []
    for name in ("google.rpc.Status", "google.rpc.ErrorInfo"):
        descriptor = pool.FindMessageTypeByName(name)
        classes.append(get(descriptor) if get else factory.GetPrototype(descriptor))
    return classes


_Status, _ErrorInfo = _message_classes()


class MpsdError(grpc.RpcError):
    """A failed call. `code`: the grpc.StatusCode; `message`: the daemon's text, for people;
    `reason` and `metadata`: the ErrorInfo of domain "mpsd" ("" and {} when mpsd did not send
    one); `field`: metadata["field"] (the bad field's path) or None."""

    def __init__(self, code: grpc.StatusCode, message: str, reason: str = "",
                 metadata: Optional[Dict[str, str]] = None):
        super().__init__(message)
        self._code = code
        self.message = message
        self.reason = reason
        self.metadata = dict(metadata or {})

    @property
    def field(self) -> Optional[str]:
        return self.metadata.get("field")

    # grpc.RpcError's call interface, for code that handles raw gRPC errors.
    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self.message

    def __str__(self) -> str:
        return "%s: %s" % (self._code.name, self.message)


class NotFound(MpsdError):
    pass


class InvalidArgument(MpsdError):
    pass


class InvalidField(InvalidArgument):
    pass


class PermissionDenied(MpsdError):
    pass


class Unauthenticated(MpsdError):
    pass


class FailedPrecondition(MpsdError):
    pass


class ResourceExhausted(MpsdError):
    pass


class Unavailable(MpsdError):
    pass


class DeadlineExceeded(MpsdError):
    pass


_BY_CODE = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}


def error_info(error: grpc.RpcError):
    """(reason, metadata) of the ErrorInfo of domain "mpsd" in `error`'s details, or None."""
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailing or ():
        if key != _DETAILS_KEY:
            continue
        try:
            status = _Status.FromString(value)
        except Exception:  # not a google.rpc.Status: not mpsd's
            return None
        for detail in status.details:
            if not detail.type_url.endswith("/google.rpc.ErrorInfo"):
                continue
            info = _ErrorInfo.FromString(detail.value)
            if info.domain == ERROR_DOMAIN:
                return info.reason, dict(info.metadata)
    return None


def from_rpc_error(error: grpc.RpcError) -> MpsdError:
    """The typed error for a failed call (an MpsdError is returned as it is)."""
    if isinstance(error, MpsdError):
        return error
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = (error.details() if hasattr(error, "details") else None) or str(error)
    reason, metadata = error_info(error) or ("", {})
    cls = _BY_CODE.get(code, MpsdError)
    if reason == "INVALID_FIELD":
        cls = InvalidField
    return cls(code, message, reason, metadata)
