"""Exceptions of the kvfence client.

Every exception is a :class:`KvfenceError` with ``code`` (the receiver's
stable error code, or the client's own code for a problem found on this
side), ``status`` (the HTTP status, 0 when there was no answer) and
``message`` (for people; not stable).

A fence denial (:class:`DeniedError`, and :class:`StaleAuthorityError` for
the stale-authority reasons) and a role refusal (:class:`ForbiddenError`)
are both HTTP 403 but different classes: the first is the receiver's
decision about an envelope, recorded in its audit chain; the second says the
caller's identity may not make this call at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # pragma: no cover
    from .types import SubmitResult

__all__ = [
    "KvfenceError",
    "ProtocolError",
    "TransportError",
    "UntrustedServerError",
    "OutcomeUnknownError",
    "NotAcknowledgedError",
    "DeniedError",
    "StaleAuthorityError",
    "UnauthenticatedError",
    "ForbiddenError",
    "BadRequestError",
    "NotFoundError",
    "ConflictError",
    "EpochMismatchError",
    "HoldIDConflictError",
    "TooLargeError",
    "UnavailableError",
    "IntegrityError",
    "ServerError",
    "CanceledError",
    "MalformedRequestError",
    "MalformedEnvelopeError",
    "AssignmentError",
    "TLSFileError",
    "STALE_REASONS",
]

#: The denial reasons that mean the caller's authority is stale: the scope
#: is held, its epoch moved past the envelope's, or the grant is no longer
#: the active one. A worker that gets one must stop; retrying cannot help.
STALE_REASONS = frozenset({"receiver_held", "stale_or_unknown_epoch", "inactive_grant"})


class KvfenceError(Exception):
    """The base of every kvfence client error.

    ``code`` is the receiver's stable error code (or the client's, for a
    problem found here), ``status`` the HTTP status (0 without an answer),
    and ``message`` a description for people.
    """

    code: str
    status: int
    message: str

    def __init__(self, message: str, *, code: str = "", status: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message

    def __str__(self) -> str:
        parts = []
        if self.status:
            parts.append(f"HTTP {self.status}")
        if self.code:
            parts.append(self.code)
        return f"{self.message} ({' '.join(parts)})" if parts else self.message


class ProtocolError(KvfenceError):
    """The answer was not what the API defines: a wrong content type,
    malformed or non-strict JSON, a missing or mistyped member, a status
    that disagrees with the body, or a result that does not answer the call.
    Nothing in such an answer is taken as the receiver's word."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message, code="protocol", status=status)


class TransportError(KvfenceError):
    """The receiver could not be reached, and the request was not sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="transport")


class UntrustedServerError(TransportError):
    """The unix socket is served, or its file owned, by a uid the client
    does not trust to be the receiver; nothing was sent."""


class OutcomeUnknownError(KvfenceError):
    """The call may or may not have taken effect: the receiver's store lost
    its commit's answer (503 ``outcome_unknown``), the connection failed
    after a change was sent, or something between answered with a server
    error. Repeating the same envelope is safe: one that applied is
    answered ``already_applied`` from its receipt."""


class NotAcknowledgedError(KvfenceError):
    """The change committed but the receiver could not acknowledge it
    (``not_acknowledged``): check the state before repeating the call."""


class DeniedError(KvfenceError):
    """The receiver denied the envelope (outcome ``denied``, HTTP 403):
    its decision, recorded in the audit chain. ``reason`` is the stable
    denial reason and ``result`` the whole decision."""

    result: "SubmitResult"

    def __init__(self, result: "SubmitResult", *, status: int = 403) -> None:
        msg = f"denied: {result.reason}"
        if result.detail:
            msg += f": {result.detail}"
        super().__init__(msg, code=result.reason, status=status)
        self.result = result

    @property
    def reason(self) -> str:
        """The stable denial reason code."""
        return self.result.reason

    @property
    def receipt_seq(self) -> int:
        """On a denial of an action this executor applied already, the audit
        seq of the applied decision; 0 otherwise."""
        return self.result.receipt_seq


class StaleAuthorityError(DeniedError):
    """A denial because the caller's authority is stale (one of
    :data:`STALE_REASONS`): the worker has been superseded and must stop."""


class UnauthenticatedError(KvfenceError):
    """The receiver found no usable identity on the channel (401)."""


class ForbiddenError(KvfenceError):
    """The caller's identity may not make this call (403 ``forbidden``):
    a worker at an administrative endpoint. Not a fence decision."""


class BadRequestError(KvfenceError):
    """The receiver refused the request as malformed or invalid (400, 404,
    405, 415; ``invalid_argument``, ``malformed_request``, ``ttl_too_long``,
    ...)."""


class NotFoundError(KvfenceError):
    """The named scope, target, grant or receipt does not exist (404)."""


class ConflictError(KvfenceError):
    """The call conflicts with the receiver's state (409): the scope or
    target exists, the scope is not held, ..."""


class EpochMismatchError(ConflictError):
    """The scope is not at the epoch the call expected (``epoch_mismatch``)."""


class HoldIDConflictError(ConflictError):
    """The hold id was used before for another hold (``hold_id_conflict``)."""


class TooLargeError(KvfenceError):
    """The request was over the receiver's size limit (413); nothing was
    decided or recorded."""


class UnavailableError(KvfenceError):
    """The receiver cannot take the call now (storage busy, storage
    reserve reached, record limit, closed, read-only); nothing was
    written."""


class IntegrityError(KvfenceError):
    """The receiver met an integrity problem (a rollback, a fork, a moved
    anchor) while serving the call."""


class ServerError(KvfenceError):
    """The receiver failed (500) before the call could take effect."""


class CanceledError(KvfenceError):
    """The receiver canceled the call before it took effect."""


class MalformedRequestError(KvfenceError):
    """A request is not one kvfence accepts (built here or decoded)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="malformed_request")


class MalformedEnvelopeError(KvfenceError):
    """An envelope is not one kvfence accepts (built here or decoded)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="malformed_envelope")


class AssignmentError(KvfenceError):
    """An assignment file is not a complete Assignment."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="invalid_assignment")


class TLSFileError(KvfenceError):
    """A certificate, key or CA file is missing or cannot be used."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="tls_file")


# The receiver's error codes and the class each maps to; a code not here is
# mapped by its HTTP status (error_for).
_BY_CODE: dict[str, type[KvfenceError]] = {
    "not_acknowledged": NotAcknowledgedError,
    "outcome_unknown": OutcomeUnknownError,
    # A hold that committed while a write to a remote target decided before
    # it had not settled: repeat it with the same hold id.
    "hold_not_settled": UnavailableError,
    "storage_busy": UnavailableError,
    "storage_reserve": UnavailableError,
    "record_limit": UnavailableError,
    "closed": UnavailableError,
    "read_only": UnavailableError,
    "scope_exists": ConflictError,
    "target_exists": ConflictError,
    # An etcd target's key is another target's, or holds another value.
    "target_key_in_use": ConflictError,
    "not_held": ConflictError,
    "epoch_mismatch": EpochMismatchError,
    "hold_id_conflict": HoldIDConflictError,
    "epoch_exhausted": ConflictError,
    "grant_not_active": ConflictError,
    "grant_expired": ConflictError,
    "unknown_scope": NotFoundError,
    "unknown_target": NotFoundError,
    "not_found": NotFoundError,
    # A kubernetes target's object does not exist.
    "remote_not_found": NotFoundError,
    "invalid_window": BadRequestError,
    "ttl_too_long": BadRequestError,
    "malformed_request": BadRequestError,
    "invalid_argument": BadRequestError,
    "bad_request": BadRequestError,
    "no_such_endpoint": BadRequestError,
    "method_not_allowed": BadRequestError,
    "unsupported_media_type": BadRequestError,
    "unauthenticated": UnauthenticatedError,
    "forbidden": ForbiddenError,
    "too_large": TooLargeError,
    "canceled": CanceledError,
    "integrity": IntegrityError,
    "internal": ServerError,
    "snapshot_unsupported": ServerError,
    # The receiver cannot create a target of this kind (etcd on a database
    # file; func, never over the API), or has no identity for a kubernetes
    # target's cluster.
    "kind_unsupported": ServerError,
    "no_dispatcher": ServerError,
}


def _by_status(status: int) -> type[KvfenceError]:
    if status == 401:
        return UnauthenticatedError
    if status == 403:
        return ForbiddenError
    if status == 413:
        return TooLargeError
    if 400 <= status < 500:
        return BadRequestError
    return ServerError


def error_for(status: int, code: str, message: str, *, change: bool) -> KvfenceError:
    """Return the exception for an error answer.

    ``code`` is empty when the answer carried no error object; a server
    error without one came from something between the client and the
    receiver, after which a change may have applied (OutcomeUnknownError).
    """
    if not code:
        if change and status >= 500:
            return OutcomeUnknownError(message or f"HTTP {status} without an error object", status=status)
        return _by_status(status)(message or f"HTTP {status} without an error object", status=status)
    cls: Optional[type[KvfenceError]] = _BY_CODE.get(code)
    if cls is None:
        cls = _by_status(status)
    return cls(message, code=code, status=status)
