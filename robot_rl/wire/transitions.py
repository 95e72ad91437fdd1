"""Transitions and their acknowledgements as they cross the wire: `StampedTransition` (one step with its actor's
sequence number), the transitions payload an actor sends, and the ack payload a learner answers with. Acknowledgements
are cumulative per source ("every sequence number <= N is persisted"), with selective ranges above a gap.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from robot_rl.core.codec import pack
from robot_rl.wire.protocol import (PROTOCOL_VERSION, TransportError, as_integer, as_source, decode_payload,
                                    incarnation_of, run_fields, run_of)


@dataclasses.dataclass(frozen=True, eq=False)
class StampedTransition:
    """One step an actor took, with its place in the actor's stream (sequence number, episode, step)."""

    seq: int
    episode: int
    step: int
    observation: Mapping[str, np.ndarray]
    action: np.ndarray
    reward: float
    terminated: bool
    truncated: bool
    next_observation: Mapping[str, np.ndarray] | None
    """None when it came over the wire without it (`next_frame_follows`): the learner takes it from the next step's
    transition."""
    intervention: bool = False
    success: bool = False
    learner_action: np.ndarray | None = None
    """The learner head's own action at this step (plain SAC: the action; residual: the correction; noise-space:
    the initial noise); None where unknown (a human's action a policy cannot map)."""
    policy_info: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    """The policy's per-step extras, e.g. `base_action` of a residual policy."""
    next_frame_follows: bool = False
    """The episode's next transition starts from `next_observation` (not the last step, nor one before a held
    command): its first send leaves that frame out, so each frame crosses the wire once; a re-send carries it (the
    next transition may have arrived long before, or be lost). Not on the wire."""

    def to_wire(self, first_send: bool = False) -> dict[str, Any]:
        wire = {
            "seq": int(self.seq), "episode": int(self.episode), "step": int(self.step),
            "obs": {k: np.asarray(v) for k, v in self.observation.items()},
            "action": np.asarray(self.action, dtype=np.float32), "reward": float(self.reward),
            "terminated": bool(self.terminated), "truncated": bool(self.truncated),
            "intervention": bool(self.intervention), "success": bool(self.success),
        }
        if self.next_observation is not None and not (first_send and self.next_frame_follows):
            wire["next_obs"] = {k: np.asarray(v) for k, v in self.next_observation.items()}
        if self.learner_action is not None:
            wire["learner_action"] = np.asarray(self.learner_action, dtype=np.float32)
        if self.policy_info:
            wire["info"] = {k: np.asarray(v) for k, v in self.policy_info.items()}
        return wire

    @classmethod
    def from_wire(cls, item: Any, index: int) -> StampedTransition:
        where = f"transition {index}"
        if not isinstance(item, dict):
            raise TransportError(f"{where} is a {type(item).__name__}, not a map")
        try:
            values = dict(
                seq=as_integer(item["seq"], f"{where} seq"), episode=as_integer(item["episode"], f"{where} episode"),
                step=as_integer(item["step"], f"{where} step"), observation=_observation(item["obs"], f"{where} obs"),
                action=_array(item["action"], f"{where} action"), reward=_number(item["reward"], f"{where} reward"),
                terminated=_boolean(item["terminated"], f"{where} terminated"),
                truncated=_boolean(item["truncated"], f"{where} truncated"),
                next_observation=(None if item.get("next_obs") is None
                                  else _observation(item["next_obs"], f"{where} next_obs")),
                intervention=_boolean(item.get("intervention", False), f"{where} intervention"),
                success=_boolean(item.get("success", False), f"{where} success"),
                learner_action=(None if item.get("learner_action") is None
                                else _array(item["learner_action"], f"{where} learner_action")),
                policy_info=_observation(item["info"], f"{where} info") if item.get("info") not in (None, {}) else {},
            )
        except KeyError as missing:
            raise TransportError(f"{where} lacks field {missing}") from None
        if values["seq"] < 0:
            raise TransportError(f"{where} has a negative sequence number {values['seq']}")
        if values["next_observation"] is None and (values["terminated"] or values["truncated"]):
            raise TransportError(f"{where} (seq {values['seq']}) ends its episode without its next_obs")
        if not np.all(np.isfinite(values["action"])) or not np.isfinite(values["reward"]):
            raise TransportError(f"{where} (seq {values['seq']}) has a non-finite action or reward")
        learner_action = values["learner_action"]
        if learner_action is not None and not (
                learner_action.dtype.kind == "f" and np.all(np.isfinite(learner_action))):
            raise TransportError(f"{where} (seq {values['seq']}) has a non-finite or non-float learner_action")
        return cls(**values)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TransportError(f"{what} must be a number, got {type(value).__name__}")
    return float(value)


def _boolean(value: Any, what: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TransportError(f"{what} must be a bool, got {type(value).__name__}")
    return bool(value)


def _array(value: Any, what: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise TransportError(f"{what} must be an array, got {type(value).__name__}")
    return value


def _observation(value: Any, what: str) -> dict[str, np.ndarray]:
    if not isinstance(value, dict) or not value:
        raise TransportError(f"{what} must be a non-empty map of arrays")
    return {str(k): _array(v, f"{what}[{k!r}]") for k, v in value.items()}


class TransitionsMessage(NamedTuple):
    """An actor's transitions, and the run they are addressed to (None: any, the actor serves no run yet)."""

    source: str
    items: list[StampedTransition]
    run: str | None = None
    floor: int | None = None
    """The lowest sequence number the actor still holds: none below it will come (acknowledged, or dropped from a
    full outbox), so the learner's cumulative acknowledgement may pass the gaps below it (None: not said)."""


def encode_transitions(source: str, items: Sequence[StampedTransition], run: str | None = None,
                       floor: int | None = None, first_sends: Container[int] = ()) -> bytes:
    """A transitions payload; the items whose seq is in `first_sends` leave out a next frame that follows
    (`StampedTransition.next_frame_follows`)."""
    return pack({"kind": "transitions", "protocol": PROTOCOL_VERSION, "source": source,
                 "items": [item.to_wire(item.seq in first_sends) for item in items], **run_fields(run, None),
                 **({"floor": int(floor)} if floor is not None else {})})


def decode_transitions(payload: bytes | bytearray | memoryview) -> tuple[str, list[StampedTransition]]:
    """(source, transitions) of a payload from `encode_transitions`; TransportError names what is wrong."""
    return transitions_of(decode_payload(payload, "transitions"))


def decode_transitions_message(payload: bytes | bytearray | memoryview) -> TransitionsMessage:
    """A payload from `encode_transitions` with the run it is addressed to; TransportError names what is wrong."""
    message = decode_payload(payload, "transitions")
    floor = message.get("floor")
    if floor is not None and (as_integer(floor, "transitions floor") < 0):
        raise TransportError(f"transitions floor must be >= 0, got {floor}")
    return TransitionsMessage(*transitions_of(message), run_of(message, "transitions"), floor)


def transitions_of(message: dict[str, Any]) -> tuple[str, list[StampedTransition]]:
    """(source, transitions) of a decoded transitions map (`decode_payload`); TransportError names what is wrong."""
    items = message.get("items")
    if not isinstance(items, list):
        raise TransportError("transitions payload has no list of items")
    return as_source(message.get("source")), [StampedTransition.from_wire(item, i) for i, item in enumerate(items)]


# ----- acknowledgements -----------------------------------------------------------------------------------------

MAX_ACK_RANGES = 64
"""Selective acknowledgements carry at most this many ranges of sequence numbers per source."""


@dataclasses.dataclass(frozen=True)
class AckMessage:
    """A learner's acknowledgements, with the run and learner incarnation that persisted what they cover."""

    acks: dict[str, int]
    """Cumulative: {source: last seq of the persisted prefix}."""
    above: dict[str, list[tuple[int, int]]] = dataclasses.field(default_factory=dict)
    """Selective: {source: inclusive ranges of seqs persisted above that prefix}."""
    run: str | None = None
    incarnation: int | None = None


def encode_ack(acks: Mapping[str, int], above: Mapping[str, Sequence[tuple[int, int]]] | None = None, *,
               run: str | None = None, incarnation: int | None = None) -> bytes:
    """Cumulative acks {source: last seq of the persisted prefix}, and optionally selective ones: {source: inclusive
    ranges of seqs persisted above that prefix} (so an actor re-sends only what is missing), from learner
    `incarnation` of `run`."""
    payload = {"kind": "ack", "protocol": PROTOCOL_VERSION, "acks": {k: int(v) for k, v in acks.items()},
               **run_fields(run, incarnation)}
    if above:
        payload["above"] = {k: [[int(a), int(b)] for a, b in ranges[:MAX_ACK_RANGES]] for k, ranges in above.items()
                            if ranges}
    return pack(payload)


def decode_ack(payload: bytes | bytearray | memoryview) -> dict[str, int]:
    return _acks(decode_payload(payload, "ack"))


def decode_ack_message(payload: bytes | bytearray | memoryview) -> AckMessage:
    """Every part of an ack payload; TransportError names what is wrong."""
    message = decode_payload(payload, "ack")
    return AckMessage(_acks(message), _acks_above(message), run_of(message, "ack"), incarnation_of(message, "ack"))


def _acks(message: dict[str, Any]) -> dict[str, int]:
    acks = message.get("acks")
    if not isinstance(acks, dict):
        raise TransportError("ack payload has no map of acks")
    return {as_source(k): as_integer(v, f"ack of {k}") for k, v in acks.items()}


def decode_ack_above(payload: bytes | bytearray | memoryview) -> dict[str, list[tuple[int, int]]]:
    """The selective acknowledgements of an ack payload ({} if it has none): {source: inclusive seq ranges}."""
    return _acks_above(decode_payload(payload, "ack"))


def _acks_above(message: dict[str, Any]) -> dict[str, list[tuple[int, int]]]:
    above = message.get("above", {})
    if not isinstance(above, dict):
        raise TransportError("ack payload's 'above' is not a map")
    out: dict[str, list[tuple[int, int]]] = {}
    for key, ranges in above.items():
        if not isinstance(ranges, list) or len(ranges) > MAX_ACK_RANGES:
            raise TransportError(f"selective ack of {key} must be a list of at most {MAX_ACK_RANGES} ranges")
        pairs = []
        for pair in ranges:
            if not isinstance(pair, list) or len(pair) != 2:
                raise TransportError(f"selective ack of {key} has a range that is not [first, last]")
            first, last = as_integer(pair[0], f"ack range of {key}"), as_integer(pair[1], f"ack range of {key}")
            if first > last:
                raise TransportError(f"selective ack of {key} has an empty range [{first}, {last}]")
            pairs.append((first, last))
        out[as_source(key)] = pairs
    return out
