"""The Assignment a worker is handed when a grant is activated for it, as
``kvfence activate --assignment-out FILE`` writes it (Go's
client.Assignment): everything its envelope must carry."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Union

from . import _json
from .errors import AssignmentError
from .wire import MAX_ENVELOPE_SIZE, Envelope, encode_envelope

__all__ = ["Assignment", "MAX_ASSIGNMENT_SIZE", "load_assignment", "decode_assignment"]

#: The largest assignment file load_assignment reads (Go's MaxAssignmentSize).
MAX_ASSIGNMENT_SIZE = 2 * MAX_ENVELOPE_SIZE + 4096


@dataclass(frozen=True)
class Assignment:
    """A worker's hand-off: the scope, epoch, grant, executor and claim the
    grant names, and the exact request bytes it binds.

    An assignment is not authority: the receiver decides each envelope by
    its current state, and after a hold the same assignment is denied.
    """

    scope: str
    epoch: int
    grant: str
    executor: str
    claim: str
    request: bytes

    def envelope(self) -> bytes:
        """The canonical envelope of the assignment: the bytes a worker
        submits."""
        return encode_envelope(Envelope(scope=self.scope, epoch=self.epoch, grant=self.grant, executor=self.executor,
                                        claim=self.claim, request=self.request))


def decode_assignment(b: bytes) -> Assignment:
    """Decode Assignment JSON strictly (a member unknown, given twice or in
    another case is refused) and check that every member is present and
    non-zero. Raises AssignmentError."""
    try:
        o = _json.Obj(_json.loads(b), "assignment", ("scope", "epoch", "grant", "executor", "claim", "request_b64"),
                      strict=True)
        a = Assignment(scope=o.text("scope", optional=True), epoch=o.uint("epoch", optional=True),
                       grant=o.text("grant", optional=True), executor=o.text("executor", optional=True),
                       claim=o.text("claim", optional=True), request=o.b64("request_b64", optional=True))
    except ValueError as e:
        raise AssignmentError(f"invalid assignment: {e}") from None
    for name, missing in (("scope", a.scope == ""), ("epoch", a.epoch == 0), ("grant", a.grant == ""),
                          ("executor", a.executor == ""), ("claim", a.claim == ""),
                          ("request_b64", len(a.request) == 0)):
        if missing:
            raise AssignmentError(f"invalid assignment: no {name}")
    return a


def load_assignment(path: Union[str, "os.PathLike[str]"]) -> Assignment:
    """Read the Assignment JSON at path, as ``kvfence activate
    --assignment-out`` writes it, strictly (decode_assignment), at most
    MAX_ASSIGNMENT_SIZE bytes. A file that cannot be read raises OSError;
    one that is not a complete assignment AssignmentError."""
    with open(path, "rb") as f:
        b = f.read(MAX_ASSIGNMENT_SIZE + 1)
    if len(b) > MAX_ASSIGNMENT_SIZE:
        raise AssignmentError(f"invalid assignment: {os.fspath(path)} is over {MAX_ASSIGNMENT_SIZE} bytes")
    try:
        return decode_assignment(b)
    except AssignmentError as e:
        raise AssignmentError(f"{os.fspath(path)}: {e.message}") from None
