"""kvfence: a Python client of a served kvfence receiver.

Build requests and envelopes byte for byte as the Go package does
(:mod:`kvfence.wire`), load the Assignment ``kvfence activate
--assignment-out`` writes, and submit it over mTLS::

    import kvfence

    a = kvfence.load_assignment("assignment.json")
    tls = kvfence.load_tls("worker-a.crt", "worker-a.key", "ca.crt")
    with kvfence.Client("https://127.0.0.1:8443", tls=tls) as c:
        try:
            res = c.submit_assignment(a)          # applied or already_applied
        except kvfence.StaleAuthorityError:
            ...                                   # superseded: stop
"""

from .assignment import MAX_ASSIGNMENT_SIZE, Assignment, decode_assignment, load_assignment
from .client import Activation, Client
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .tls import load_tls
from .types import (
    Checkpoint,
    Event,
    Grant,
    HeldScope,
    HoldAck,
    HoldAllResult,
    HoldResult,
    Receipt,
    ScopeCreated,
    ScopeStatus,
    Status,
    SubmitResult,
    Target,
    LiveObject,
    TARGET_KINDS,
    Timestamp,
)
from .wire import (
    MAX_ENVELOPE_SIZE,
    WIRE_VERSION,
    Envelope,
    Request,
    check_name,
    decode_envelope,
    decode_request,
    encode_envelope,
    encode_request,
    patch_request,
    request_digest,
    set_request,
    validate_patch,
)

__version__ = "0.1.0"

__all__ = [
    "Activation", "Assignment", "Checkpoint", "Client", "Envelope", "Event", "Grant", "HeldScope", "HoldAck",
    "HoldAllResult", "HoldResult", "MAX_ASSIGNMENT_SIZE", "OutstandingDispatch", "MAX_ENVELOPE_SIZE", "Receipt", "Request", "ScopeCreated",
    "ScopeStatus", "Status", "SubmitResult", "Target", "LiveObject", "TARGET_KINDS", "Timestamp", "WIRE_VERSION", "check_name", "decode_assignment",
    "decode_envelope", "decode_request", "encode_envelope", "encode_request", "load_assignment", "load_tls",
    "patch_request", "request_digest", "set_request", "validate_patch",
] + list(_errors_all)
