"""What every actor <-> learner payload shares: the protocol version, `TransportError`, the ids that name a stream
(a *source*, ``"<actor id>/<incarnation>"``) and a learner run, and the checks of a decoded payload's common fields.

A *source* is one run of one actor: the incarnation changes each time an actor process starts, so a restarted actor's
sequence numbers (which start again at 0) are never mistaken for duplicates. A *run* is one learner run folder: its id
is made when the folder is first opened and kept across learner restarts; each learner start is a new *learner
incarnation* (1, 2, ...) of that run. Payloads are msgpack (robot_rl.core.codec); nothing here is pickled.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import numpy as np

from robot_rl.core.codec import CodecError, unpack

PROTOCOL_VERSION = 1
_SOURCE_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,64}/[A-Za-z0-9_.\-]{1,64}")
_RUN_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


class TransportError(ValueError):
    """A payload is malformed or from another protocol version; the message names the problem."""


def make_source(actor_id: str, incarnation: str | None = None) -> str:
    """`actor_id/incarnation` (a fresh random incarnation unless one is given)."""
    source = f"{actor_id}/{incarnation or uuid.uuid4().hex[:12]}"
    if not _SOURCE_PATTERN.fullmatch(source):
        raise ValueError(f"actor id {actor_id!r} must be 1-64 letters, digits, '_', '.' or '-'")
    return source


def make_run_id() -> str:
    """A new run's id: 32 random hex digits."""
    return uuid.uuid4().hex


def run_id_problem(run_id: str) -> str | None:
    """Why `run_id` cannot be a run id, or None."""
    if _RUN_PATTERN.fullmatch(run_id):
        return None
    return f"run id {run_id!r:.80} must be 1-64 letters, digits, '_', '.' or '-'"


def as_integer(value: Any, what: str) -> int:
    """`value` as an int; TransportError naming `what` if it is not an integer."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TransportError(f"{what} must be an integer, got {type(value).__name__}")
    return int(value)


def decode_payload(payload: bytes | bytearray | memoryview, kind: str, *others: str) -> dict[str, Any]:
    """The map of a `kind` payload (or one of `others`); TransportError names what is wrong."""
    try:
        message = unpack(payload)
    except CodecError as error:
        raise TransportError(f"undecodable {kind} payload: {error}") from None
    if not isinstance(message, dict):
        raise TransportError(f"{kind} payload is a {type(message).__name__}, not a map")
    if message.get("kind") not in (kind, *others):
        expected = " or ".join(repr(k) for k in (kind, *others))
        raise TransportError(f"expected a {expected} payload, got kind {message.get('kind')!r}")
    if message.get("protocol") != PROTOCOL_VERSION:
        raise TransportError(f"{kind} payload has protocol {message.get('protocol')!r}, this side speaks "
                             f"{PROTOCOL_VERSION}")
    return message


def as_source(value: Any) -> str:
    """`value` as a source (`make_source`); TransportError if it is not one."""
    if not isinstance(value, str) or not _SOURCE_PATTERN.fullmatch(value):
        raise TransportError(f"invalid source {value!r}: expected 'actor_id/incarnation'")
    return value


def run_of(message: dict[str, Any], kind: str) -> str | None:
    """The run id a payload names (None: it names none, as payloads from before run ids)."""
    run = message.get("run")
    if run is not None and not (isinstance(run, str) and _RUN_PATTERN.fullmatch(run)):
        raise TransportError(f"{kind} payload has a malformed run {run!r:.80}: expected 1-64 letters, digits, '_', "
                             "'.' or '-'")
    return run


def incarnation_of(message: dict[str, Any], kind: str) -> int | None:
    """The learner incarnation a payload names (None: it names none)."""
    incarnation = message.get("incarnation")
    if incarnation is None:
        return None
    if isinstance(incarnation, bool) or not isinstance(incarnation, int) or incarnation < 1:
        raise TransportError(f"{kind} payload has a malformed incarnation {incarnation!r:.80}: expected an integer "
                             ">= 1")
    return int(incarnation)


def run_fields(run: str | None, incarnation: int | None) -> dict[str, Any]:
    """The run and incarnation entries of a payload (absent where None, so payloads without them stay as before)."""
    return {**({"run": str(run)} if run is not None else {}),
            **({"incarnation": int(incarnation)} if incarnation is not None else {})}
