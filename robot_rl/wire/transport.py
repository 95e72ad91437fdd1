"""Actor <-> learner payloads and delivery bookkeeping, without any transport: transitions carry an actor id and a
sequence number, the actor keeps them in a bounded `Outbox` until the learner acknowledges them, the learner drops
duplicates with an `Inbox`, logs what it accepted in a `TransitionLog` (so an acknowledged transition survives a
crash), and broadcasts versioned weights. Payloads are msgpack (robot_rl.core.codec); nothing here is pickled.

A *source* is one run of one actor: ``"<actor id>/<incarnation>"``. The incarnation changes each time an actor
process starts, so a restarted actor's sequence numbers (which start again at 0) are never mistaken for duplicates.
Acknowledgements are cumulative per source: "every sequence number <= N is persisted".

A *run* is one learner run folder: its id is made when the folder is first opened and kept across learner restarts;
each learner start is a new *learner incarnation* (1, 2, ...) of that run. Weights and acknowledgements carry both,
and an actor serves one run (`RunBinding`): weights and acknowledgements of any other run never reach its policy or
its outbox, and weights versions are compared only within one (run, learner incarnation).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import enum
import math
import re
import uuid
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from robot_rl.core.codec import CodecError, pack, unpack
from robot_rl.core.files import atomic_write_bytes, make_dirs_durably
from robot_rl.policies.registry import GAUSSIAN

if TYPE_CHECKING:  # robot_rl.core.types imports flax and JAX: the learner acknowledges transitions without them
    from robot_rl.core.types import ObservationSpec

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
                seq=_integer(item["seq"], f"{where} seq"), episode=_integer(item["episode"], f"{where} episode"),
                step=_integer(item["step"], f"{where} step"), observation=_observation(item["obs"], f"{where} obs"),
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


def _integer(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TransportError(f"{what} must be an integer, got {type(value).__name__}")
    return int(value)


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


def _decode(payload: bytes | bytearray | memoryview, kind: str, *others: str) -> dict[str, Any]:
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


def _source(value: Any) -> str:
    if not isinstance(value, str) or not _SOURCE_PATTERN.fullmatch(value):
        raise TransportError(f"invalid source {value!r}: expected 'actor_id/incarnation'")
    return value


def _run(message: dict[str, Any], kind: str) -> str | None:
    """The run id a payload names (None: it names none, as payloads from before run ids)."""
    run = message.get("run")
    if run is not None and not (isinstance(run, str) and _RUN_PATTERN.fullmatch(run)):
        raise TransportError(f"{kind} payload has a malformed run {run!r:.80}: expected 1-64 letters, digits, '_', "
                             "'.' or '-'")
    return run


def _incarnation(message: dict[str, Any], kind: str) -> int | None:
    """The learner incarnation a payload names (None: it names none)."""
    incarnation = message.get("incarnation")
    if incarnation is None:
        return None
    if isinstance(incarnation, bool) or not isinstance(incarnation, int) or incarnation < 1:
        raise TransportError(f"{kind} payload has a malformed incarnation {incarnation!r:.80}: expected an integer "
                             ">= 1")
    return int(incarnation)


def _run_fields(run: str | None, incarnation: int | None) -> dict[str, Any]:
    """The run and incarnation entries of a payload (absent where None, so payloads without them stay as before)."""
    return {**({"run": str(run)} if run is not None else {}),
            **({"incarnation": int(incarnation)} if incarnation is not None else {})}


# ----- transitions ----------------------------------------------------------------------------------------------

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
                 "items": [item.to_wire(item.seq in first_sends) for item in items], **_run_fields(run, None),
                 **({"floor": int(floor)} if floor is not None else {})})


def decode_transitions(payload: bytes | bytearray | memoryview) -> tuple[str, list[StampedTransition]]:
    """(source, transitions) of a payload from `encode_transitions`; TransportError names what is wrong."""
    return _transitions(_decode(payload, "transitions"))


def decode_transitions_message(payload: bytes | bytearray | memoryview) -> TransitionsMessage:
    """A payload from `encode_transitions` with the run it is addressed to; TransportError names what is wrong."""
    message = _decode(payload, "transitions")
    floor = message.get("floor")
    if floor is not None and (_integer(floor, "transitions floor") < 0):
        raise TransportError(f"transitions floor must be >= 0, got {floor}")
    return TransitionsMessage(*_transitions(message), _run(message, "transitions"), floor)


def _transitions(message: dict[str, Any]) -> tuple[str, list[StampedTransition]]:
    items = message.get("items")
    if not isinstance(items, list):
        raise TransportError("transitions payload has no list of items")
    return _source(message.get("source")), [StampedTransition.from_wire(item, i) for i, item in enumerate(items)]


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
               **_run_fields(run, incarnation)}
    if above:
        payload["above"] = {k: [[int(a), int(b)] for a, b in ranges[:MAX_ACK_RANGES]] for k, ranges in above.items()
                            if ranges}
    return pack(payload)


def decode_ack(payload: bytes | bytearray | memoryview) -> dict[str, int]:
    return _acks(_decode(payload, "ack"))


def decode_ack_message(payload: bytes | bytearray | memoryview) -> AckMessage:
    """Every part of an ack payload; TransportError names what is wrong."""
    message = _decode(payload, "ack")
    return AckMessage(_acks(message), _acks_above(message), _run(message, "ack"), _incarnation(message, "ack"))


def _acks(message: dict[str, Any]) -> dict[str, int]:
    acks = message.get("acks")
    if not isinstance(acks, dict):
        raise TransportError("ack payload has no map of acks")
    return {_source(k): _integer(v, f"ack of {k}") for k, v in acks.items()}


def decode_ack_above(payload: bytes | bytearray | memoryview) -> dict[str, list[tuple[int, int]]]:
    """The selective acknowledgements of an ack payload ({} if it has none): {source: inclusive seq ranges}."""
    return _acks_above(_decode(payload, "ack"))


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
            first, last = _integer(pair[0], f"ack range of {key}"), _integer(pair[1], f"ack range of {key}")
            if first > last:
                raise TransportError(f"selective ack of {key} has an empty range [{first}, {last}]")
            pairs.append((first, last))
        out[_source(key)] = pairs
    return out


# ----- weights --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, eq=False)
class WeightsMessage:
    """A learner head's weights with what an actor needs to build that policy from scratch, whatever its kind."""

    version: int
    policy: bytes
    observation_spec: ObservationSpec
    action_dim: int
    policy_config: dict[str, Any]
    """The head's config as JSON (for `gaussian`, the SAC agent config)."""
    policy_kind: str = GAUSSIAN
    """Which policy kind the weights belong to (robot_rl.policies.registry; policy_from_weights builds it)."""
    transitions: int = 0
    """Transitions of the run the learner had trained on when it produced these weights (every actor's)."""
    updates: int = 0
    training_done: bool = False
    """The learner reached its budget: no newer weights will come (actors stop waiting for them)."""
    files: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Bundle digests (robot_rl.wire.file_share) of the files the policy names (its base): name -> sha256. An actor uses
    its own copy only if it has these bytes, else fetches them from the learner (robot_rl.ros.nodes.file_share_node)."""
    run: str | None = None
    """The run the weights belong to (None: a learner or policy file from before run ids)."""
    incarnation: int | None = None
    """The start of that run's learner that sent them (1, 2, ...); versions compare only within one."""

    @property
    def stamp(self) -> WeightsStamp:
        return WeightsStamp(self.run, self.incarnation, self.version)


class WeightsStamp(NamedTuple):
    """Where weights stand: their run, the learner incarnation that sent them, and their version within it."""

    run: str | None
    incarnation: int | None
    version: int

    def supersedes(self, in_use: WeightsStamp | None) -> bool:
        """Whether weights of this stamp replace those `in_use`: a higher version of the same (run, incarnation),
        or any version of another one (a learner restart, or a run the actor switched to: `RunBinding` let only
        those through)."""
        if in_use is None or (self.run, self.incarnation) != (in_use.run, in_use.incarnation):
            return True
        return self.version > in_use.version


def encode_weights(message: WeightsMessage) -> bytes:
    return pack({
        "kind": "weights", "protocol": PROTOCOL_VERSION, "version": int(message.version), "policy": message.policy,
        "observation_spec": {k: v.to_json() for k, v in message.observation_spec.entries},
        "action_dim": int(message.action_dim), "policy_kind": str(message.policy_kind),
        "policy_config": message.policy_config,
        "transitions": int(message.transitions), "updates": int(message.updates),
        **({"training_done": True} if message.training_done else {}),  # policy files stay as they were
        **({"files": dict(message.files)} if message.files else {}),
        **_run_fields(message.run, message.incarnation),
    })


def reversion_weights(payload: bytes | bytearray | memoryview, version: int, *, run: str | None = None,
                      incarnation: int | None = None) -> bytes:
    """A weights payload with another version (and, where given, run and learner incarnation), without decoding the
    policy (TransportError if not weights)."""
    return pack({**_decode(payload, "weights"), "version": int(version), **_run_fields(run, incarnation)})


def decode_weights(payload: bytes | bytearray | memoryview) -> WeightsMessage:
    """The weights of an `encode_weights` payload; policy files written before weights named their kind (a SAC
    config under ``sac_config``) read as `gaussian`."""
    from robot_rl.core.types import ArraySpec, ObservationSpec

    message = _decode(payload, "weights")
    try:
        spec = message["observation_spec"]
        if "policy_config" not in message and "sac_config" in message:
            kind, config = GAUSSIAN, message["sac_config"]
        else:
            kind, config = message["policy_kind"], message["policy_config"]
        if not isinstance(spec, dict) or not isinstance(message["policy"], bytes) or not isinstance(config, dict) \
                or not isinstance(kind, str):
            raise TransportError("weights payload has a malformed observation_spec, policy, policy_kind or "
                                 "policy_config")
        return WeightsMessage(
            version=_integer(message["version"], "weights version"), policy=message["policy"],
            observation_spec=ObservationSpec.from_shapes({k: ArraySpec.from_json(v) for k, v in spec.items()}),
            action_dim=_integer(message["action_dim"], "weights action_dim"), policy_config=config,
            policy_kind=kind, transitions=_integer(message.get("transitions", 0), "weights transitions"),
            updates=_integer(message.get("updates", 0), "weights updates"),
            training_done=message.get("training_done", False) is True, files=_files(message.get("files", {})),
            run=_run(message, "weights"), incarnation=_incarnation(message, "weights"))
    except KeyError as missing:
        raise TransportError(f"weights payload lacks field {missing}") from None
    except (TypeError, ValueError) as error:
        if isinstance(error, TransportError):
            raise
        raise TransportError(f"weights payload is malformed: {error}") from None


def _files(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) and len(v) == 64
                                              for k, v in value.items()):
        raise TransportError("weights files must map names to sha256 digests")
    return dict(value)


# ----- actor side -----------------------------------------------------------------------------------------------

class Outbox:
    """Bounded FIFO of transitions the learner has not acknowledged yet; re-sends what stays unacknowledged.

    When full, the oldest transition is dropped (the robot keeps acting) and counted in `dropped`.

    Flow control: at most `max_in_flight` transitions are out (sent less than `resend_after_s` ago and not
    acknowledged) at once. Acknowledgements are cumulative, so after a loss everything above the gap stays
    unacknowledged; re-sending all of it in one burst would overflow the learner's bounded reader queue, which drops
    the oldest messages, the gap itself among them, at every round. A window keeps each round small enough to arrive,
    oldest first, so the gap is filled and the cumulative acknowledgement jumps over what arrived above it.

    Re-send timeout: `resend_after_s` until acknowledgements are timed, then the smoothed round trip plus four times
    its deviation (RFC 6298's estimator, sampled only from transitions sent once), never below `resend_after_s` nor
    above MAX_RESEND_S. A learner that acknowledges late (pixel batches on a busy CPU: 2-4 s) would otherwise get every
    transition again and again, its duplicates filling the link.
    """

    MAX_RESEND_S = 30.0

    def __init__(self, capacity: int = 3000, resend_after_s: float = 2.0, max_in_flight: int = 256):
        problems = [f"{name}={value!r} must be {rule}" for name, value, rule, ok in (
            ("capacity", capacity, ">= 1", capacity >= 1), ("max_in_flight", max_in_flight, ">= 1", max_in_flight >= 1),
            ("resend_after_s", resend_after_s, "> 0", math.isfinite(resend_after_s) and resend_after_s > 0)) if not ok]
        if problems:
            raise ValueError(f"invalid Outbox: {'; '.join(problems)}")
        self.capacity = int(capacity)
        self.resend_after_s = float(resend_after_s)
        self.max_in_flight = int(max_in_flight)
        self._items: collections.OrderedDict[int, StampedTransition] = collections.OrderedDict()
        self._sent_at: dict[int, float] = {}
        self.dropped = 0
        self.acknowledged_through = -1
        self.resent = 0
        self.round_trip_s: float | None = None  # smoothed send -> acknowledgement time
        self.round_trip_deviation_s = 0.0
        self._resent_seqs: set[int] = set()  # sent more than once: their round trip is ambiguous (Karn)

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: StampedTransition) -> None:
        if item.seq <= self.acknowledged_through or item.seq in self._items:
            raise ValueError(f"sequence number {item.seq} was already used")
        self._items[item.seq] = item
        while len(self._items) > self.capacity:
            seq, _ = self._items.popitem(last=False)
            self._sent_at.pop(seq, None)
            self.dropped += 1

    def resend_timeout(self) -> float:
        """Seconds an unacknowledged transition waits before it is sent again (see the class doc)."""
        if self.round_trip_s is None:
            return self.resend_after_s
        return min(self.MAX_RESEND_S,
                   max(self.resend_after_s, self.round_trip_s + 4.0 * self.round_trip_deviation_s))

    def in_flight(self, now: float) -> int:
        """Transitions sent less than the re-send timeout ago and not acknowledged yet."""
        timeout = self.resend_timeout()
        return sum(1 for sent in self._sent_at.values() if now - sent < timeout)

    def due(self, now: float, max_items: int = 64) -> list[StampedTransition]:
        """Oldest first: transitions never sent, or sent more than `resend_after_s` ago without an ack, as many as
        the in-flight window allows (at most `max_items`)."""
        budget = min(int(max_items), self.max_in_flight - self.in_flight(now))
        out = []
        if budget <= 0:
            return out
        timeout = self.resend_timeout()
        for seq, item in self._items.items():
            sent = self._sent_at.get(seq)
            if sent is None or now - sent >= timeout:
                out.append(item)
                if len(out) >= budget:
                    break
        return out

    def due_messages(self, source: str, now: float, max_items: int = 64, max_messages: int = 8,
                     run: str | None = None) -> list[bytes]:
        """What is due now as transitions messages of `source` addressed to `run` (`encode_transitions`, at most
        `max_items` each), each marked sent."""
        messages = []
        for _ in range(max_messages):
            due = self.due(now, max_items)
            if not due:
                break
            first_sends = {item.seq for item in due if item.seq not in self._sent_at}
            messages.append(encode_transitions(source, due, run, floor=next(iter(self._items)),
                                               first_sends=first_sends))
            self.mark_sent(due, now)
        return messages

    def take_ack(self, payload: bytes | bytearray | memoryview, source: str, now: float) -> None:
        """Apply a learner's acknowledgement payload for `source` (see `apply_ack`); TransportError if malformed."""
        self.apply_ack(decode_ack_message(payload), source, now)

    def apply_ack(self, message: AckMessage, source: str, now: float) -> None:
        """Apply a learner's acknowledgements for `source`: its cumulative ack, and the ranges it holds above a gap
        (only the gap is re-sent). Whether they come from the run this actor serves is `RunBinding`'s to say."""
        if source in message.acks:
            self.acknowledge(message.acks[source], now)
        if source in message.above:
            self.acknowledge_ranges(message.above[source], now)

    def mark_sent(self, items: Sequence[StampedTransition], now: float) -> None:
        for item in items:
            if item.seq in self._sent_at:
                self.resent += 1
                self._resent_seqs.add(item.seq)
            self._sent_at[item.seq] = now

    def resend_all(self) -> int:
        """Make every unacknowledged transition due now (a learner appeared that may lack them); returns how many."""
        for seq in self._items:
            self._sent_at[seq] = -float("inf")
            self._resent_seqs.add(seq)
        return len(self._items)

    def _time_round_trip(self, seq: int, now: float | None) -> None:
        """One round-trip sample from the newest transition an acknowledgement covered (if it was sent once)."""
        sent = self._sent_at.get(seq)
        if now is None or sent is None or seq in self._resent_seqs or not math.isfinite(sent):
            return
        sample = max(0.0, now - sent)
        if self.round_trip_s is None:
            self.round_trip_s, self.round_trip_deviation_s = sample, sample / 2
        else:
            self.round_trip_deviation_s = 0.75 * self.round_trip_deviation_s + 0.25 * abs(self.round_trip_s - sample)
            self.round_trip_s = 0.875 * self.round_trip_s + 0.125 * sample

    def _forget(self, seq: int) -> None:
        del self._items[seq]
        self._sent_at.pop(seq, None)
        self._resent_seqs.discard(seq)

    def acknowledge_ranges(self, ranges: Sequence[tuple[int, int]], now: float | None = None) -> int:
        """Forget the transitions whose seq lies in one of the inclusive `ranges` (selective acknowledgements: the
        learner has them above a gap); returns how many were removed (`now`: time the round trip)."""
        if not ranges:
            return 0
        starts = sorted(ranges)
        firsts = [a for a, _ in starts]
        covered = []
        for seq in [s for s in self._items if s > self.acknowledged_through]:
            i = bisect.bisect_right(firsts, seq) - 1
            if i >= 0 and seq <= starts[i][1]:
                covered.append(seq)
        if covered:
            self._time_round_trip(covered[-1], now)
        for seq in covered:
            self._forget(seq)
        return len(covered)

    def acknowledge(self, through: int, now: float | None = None) -> int:
        """Forget every transition with seq <= `through`; returns how many were removed (`now`: time the round
        trip)."""
        if through <= self.acknowledged_through:
            return 0
        if through in self._items:
            self._time_round_trip(through, now)
        self.acknowledged_through = int(through)
        removed = 0
        while self._items:
            seq = next(iter(self._items))
            if seq > through:
                break
            self._forget(seq)
            removed += 1
        return removed


class LearnerWatch:
    """When the actor last heard from its learner (an acknowledgement or weights), and whether the learner is away:
    nothing of it for `after_s` after it was heard once. Counts the outages and their seconds."""

    def __init__(self, after_s: float = 5.0):
        if not (math.isfinite(after_s) and after_s > 0):
            raise ValueError(f"invalid LearnerWatch: after_s={after_s!r} must be > 0")
        self.after_s = float(after_s)
        self.heard_at: float | None = None
        self.outages = 0  # times the learner went away
        self.away_s = 0.0  # seconds away, over the ended outages
        self._away_since: float | None = None

    def heard(self, now: float) -> float | None:
        """The learner spoke at `now`; returns how long it had been away [s] if this ends an outage, else None."""
        self.heard_at = now
        if self._away_since is None:
            return None
        away, self._away_since = now - self._away_since, None
        self.away_s += away
        return away

    def away(self, now: float) -> bool:
        """True while the learner, once heard, has been silent for `after_s` (the first call after that counts an
        outage, starting when it was last heard)."""
        if self._away_since is not None:
            return True
        if self.heard_at is None or now - self.heard_at < self.after_s:
            return False
        self._away_since = self.heard_at
        self.outages += 1
        return True

    @property
    def is_away(self) -> bool:
        """In an outage (as the last `away` call found)."""
        return self._away_since is not None

    def silent_s(self, now: float) -> float | None:
        """Seconds since the learner was last heard (None: never)."""
        return None if self.heard_at is None else now - self.heard_at

    def to_json(self, now: float) -> dict[str, Any]:
        silent = self.silent_s(now)
        return {"away": self.is_away, "silent_s": None if silent is None else round(silent, 2),
                "outages": self.outages, "away_s": round(self.away_s, 1)}


class AckGaps:
    """The gaps between a learner's acknowledgements at an actor: the longest, and the last `keep` of at least
    `record_s` with the unix time each began (a bench tells those of its own faults from the others by time)."""

    def __init__(self, record_s: float = 1.0, keep: int = 100):
        self.record_s = float(record_s)
        self.longest_s = 0.0
        self.gaps: collections.deque[tuple[float, float]] = collections.deque(maxlen=int(keep))
        self._last: tuple[float, float] | None = None  # (monotonic, unix) of the last acknowledgement

    def heard(self, monotonic: float, unix: float) -> None:
        if self._last is not None:
            gap = monotonic - self._last[0]
            self.longest_s = max(self.longest_s, gap)
            if gap >= self.record_s:
                self.gaps.append((round(self._last[1], 3), round(gap, 3)))
        self._last = (monotonic, unix)

    def to_json(self) -> dict[str, Any]:
        return {"longest_s": round(self.longest_s, 3), "gaps": [list(gap) for gap in self.gaps]}


class Heard(enum.Enum):
    """What a `RunBinding` made of the run and learner incarnation of a learner's weights or acknowledgements."""

    UNMARKED = "unmarked"  # no run id (a learner from before run ids) while no run is served: used as before
    BOUND = "bound"  # the first incarnation heard of the run now served
    CURRENT = "current"  # the served run's newest incarnation
    RESTARTED = "restarted"  # a higher incarnation of the served run: its learner restarted
    SWITCHED = "switched"  # a new run, now served (follow_new_run)
    FOREIGN = "foreign"  # another run: ignored
    STALE = "stale"  # an older incarnation of the served run: ignored

    @property
    def admitted(self) -> bool:
        """Whether the message belongs to the run served (its weights may be used, its acks release the outbox)."""
        return self not in (Heard.FOREIGN, Heard.STALE)


class RunBinding:
    """The learner run an actor serves: the first run heard, or the one named (`run_id`); weights and acks of any
    other run, or of an older learner incarnation of the served run, are ignored (each foreign run logged once).
    With `follow_new_run` a run not served before takes over instead (said in one line)."""

    def __init__(self, run_id: str = "", *, follow_new_run: bool = False,
                 log: Callable[[str], None] = lambda line: None, warn: Callable[[str], None] | None = None):
        problem = run_id_problem(run_id) if run_id else None
        if problem:
            raise ValueError(problem)
        if run_id and follow_new_run:
            raise ValueError(f"run_id={run_id!r} serves that run only: follow_new_run would leave it")
        self.run: str | None = run_id or None
        self.incarnation: int | None = None  # the newest learner incarnation heard of the served run
        self.named = bool(run_id)
        self.follow_new_run = bool(follow_new_run)
        self.ignored: collections.Counter[str] = collections.Counter()  # messages ignored, by run ("" for none)
        self.switches = 0
        self._left: set[str | None] = set()  # runs served before a switch: never taken back (no flapping)
        self._logged: set[str | None] = set()  # foreign runs already logged
        self._log = log
        self._warn = warn or log  # a learner of another run on the graph

    def hear(self, run: str | None, incarnation: int | None) -> Heard:
        """Judge a learner message of `run`, learner `incarnation` (None: 0), binding or switching on the way."""
        incarnation = int(incarnation or 0)
        if run is None and self.run is None:
            return Heard.UNMARKED
        if run is not None and run == self.run:
            if self.incarnation is None:
                self.incarnation = incarnation
                self._log(f"serving run {run} (named by run_id; learner incarnation {incarnation})")
                return Heard.BOUND
            if incarnation > self.incarnation:
                self.incarnation = incarnation
                self._log(f"the learner of run {run} restarted (incarnation {incarnation}): using its weights and "
                          "acknowledgements")
                return Heard.RESTARTED
            if incarnation == self.incarnation:
                return Heard.CURRENT
            self.ignored[run] += 1  # its messages were late, or overtaken by the restart's
            return Heard.STALE
        if run is not None and self.run is None:
            self.run, self.incarnation = run, incarnation
            self._log(f"serving run {run} (learner incarnation {incarnation}), the first run heard")
            return Heard.BOUND
        if run is not None and self.follow_new_run and run not in self._left:
            self._log(f"a learner of a new run (run {run}, incarnation {incarnation}) is on the graph: switching to "
                      f"it from run {self.run} (follow_new_run); unacknowledged transitions go to it")
            self._left.add(self.run)
            self.run, self.incarnation = run, incarnation
            self.switches += 1
            return Heard.SWITCHED
        if run not in self._logged:
            self._logged.add(run)
            learner = (f"a learner of another run (run {run}, incarnation {incarnation})" if run is not None
                       else "a learner without a run id (from before run ids)")
            hint = ("" if self.follow_new_run else " (named by run_id)" if self.named
                    else " (set follow_new_run:=true to switch to a new run)")
            self._warn(f"{learner} is on the graph: ignoring its weights and acknowledgements; this actor serves "
                       f"run {self.run}{hint}")
        self.ignored[run or ""] += 1
        return Heard.FOREIGN

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "incarnation": self.incarnation, "follow_new_run": self.follow_new_run,
                "ignored": dict(self.ignored), "switches": self.switches}


# ----- learner side ---------------------------------------------------------------------------------------------

class SequenceTracker:
    """Which sequence numbers of one source were accepted: a contiguous prefix plus a sparse set above it."""

    def __init__(self, through: int = -1, above: Sequence[int] = ()):
        self.through = int(through)
        self.above: set[int] = {int(s) for s in above if s > through}
        self._advance()

    def _advance(self) -> None:
        while self.through + 1 in self.above:
            self.through += 1
            self.above.remove(self.through)

    def seen(self, seq: int) -> bool:
        return seq <= self.through or seq in self.above

    def settle_below(self, floor: int) -> None:
        """Nothing below `floor` will come: the prefix reaches floor - 1 (a gap the source dropped, or sequence
        numbers another run acknowledged, no longer holds the cumulative acknowledgement back)."""
        if floor - 1 > self.through:
            self.through = int(floor) - 1
            self.above = {seq for seq in self.above if seq > self.through}
            self._advance()

    def add(self, seq: int) -> bool:
        """Record `seq`; False if it was already seen (a duplicate)."""
        if self.seen(seq):
            return False
        self.above.add(int(seq))
        self._advance()
        return True

    def ranges(self, limit: int = MAX_ACK_RANGES) -> list[tuple[int, int]]:
        """The seqs seen above the contiguous prefix as inclusive ranges, lowest first (at most `limit`)."""
        out: list[tuple[int, int]] = []
        for seq in sorted(self.above):
            if out and seq == out[-1][1] + 1:
                out[-1] = (out[-1][0], seq)
            elif len(out) < limit:
                out.append((seq, seq))
            else:
                break
        return out

    def to_json(self) -> dict[str, Any]:
        return {"through": self.through, "above": sorted(self.above)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SequenceTracker:
        return cls(int(data["through"]), [int(s) for s in data.get("above", ())])


class Inbox:
    """Learner-side de-duplication by (source, sequence number) and the cumulative acks to send back."""

    def __init__(self, trackers: Mapping[str, SequenceTracker] | None = None):
        self.trackers: dict[str, SequenceTracker] = dict(trackers or {})
        self.duplicates = 0

    def accept(self, source: str, items: Sequence[StampedTransition], floor: int | None = None
               ) -> list[StampedTransition]:
        """The items of `items` not seen before (also de-duplicated within the batch), in order; `floor`: the
        source holds nothing below it (`TransitionsMessage.floor`), so the gaps below it are settled."""
        tracker = self.trackers.setdefault(source, SequenceTracker())
        if floor is not None:
            tracker.settle_below(floor)
        fresh = [item for item in items if tracker.add(item.seq)]
        self.duplicates += len(items) - len(fresh)
        return fresh

    def acks(self) -> dict[str, int]:
        return {source: tracker.through for source, tracker in self.trackers.items()}

    def acks_above(self) -> dict[str, list[tuple[int, int]]]:
        """Selective acks: per source, the ranges seen above its contiguous prefix (only sources with a gap)."""
        return {source: tracker.ranges() for source, tracker in self.trackers.items() if tracker.above}

    def to_json(self) -> dict[str, Any]:
        return {source: tracker.to_json() for source, tracker in self.trackers.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Inbox:
        return cls({source: SequenceTracker.from_json(value) for source, value in data.items()})


class LoggedBatch(NamedTuple):
    """A transition log entry: transitions of one source, as accepted."""

    source: str
    items: list[StampedTransition]


class ClosedEpisodes(NamedTuple):
    """A transition log entry: the learner closed these (source, episode) pairs without their last step (their
    actor went silent); logged so that a restart closes them at the same point of the log."""

    episodes: tuple[tuple[str, int], ...]


def encode_closed_episodes(entry: ClosedEpisodes) -> bytes:
    return pack({"kind": "closed", "protocol": PROTOCOL_VERSION,
                 "episodes": [[_source(source), int(episode)] for source, episode in entry.episodes]})


def decode_log_entry(payload: bytes | bytearray | memoryview) -> LoggedBatch | ClosedEpisodes:
    """A transition log entry (transitions or closed episodes); TransportError names what is wrong."""
    message = _decode(payload, "transitions", "closed")
    return _closed_episodes(message) if message["kind"] == "closed" else LoggedBatch(*_transitions(message))


def _closed_episodes(message: dict[str, Any]) -> ClosedEpisodes:
    episodes = message.get("episodes")
    if not isinstance(episodes, list) or not all(isinstance(e, list) and len(e) == 2 for e in episodes):
        raise TransportError("closed-episodes payload has no list of [source, episode] pairs")
    return ClosedEpisodes(tuple((_source(source), _integer(episode, "closed episode")) for source, episode in episodes))


class TransitionLog:
    """Write-ahead log of the learner: one msgpack file per entry (a `LoggedBatch` of accepted transitions or a
    `ClosedEpisodes` decision), fsynced before the transitions are acknowledged.

    A checkpoint records the index of the last entry it contains; after a crash the learner restores the checkpoint
    and replays the entries after that index, so nothing it acknowledged is lost.
    """

    SUFFIX = ".msgpack"

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        make_dirs_durably(self.directory)  # its entries are acknowledged: the folder must outlast a power cut too
        indices = self.indices()
        self.next_index = (indices[-1] + 1) if indices else 0

    def continue_after(self, index: int) -> None:
        """Number new entries after `index` (a checkpoint's last entry), even if the log was emptied since."""
        self.next_index = max(self.next_index, int(index) + 1)

    def indices(self) -> list[int]:
        return sorted(int(p.stem) for p in self.directory.glob(f"*{self.SUFFIX}") if p.stem.isdigit())

    def _path(self, index: int) -> Path:
        return self.directory / f"{index:012d}{self.SUFFIX}"

    def append(self, source: str, items: Sequence[StampedTransition]) -> int:
        """Persist one batch of transitions; returns its index."""
        return self._write(encode_transitions(source, items))

    def append_closed(self, entry: ClosedEpisodes) -> int:
        """Persist a decision to close episodes; returns its index."""
        return self._write(encode_closed_episodes(entry))

    def _write(self, payload: bytes) -> int:
        """Atomically (temp file, fsync, rename) write the next entry."""
        index = self.next_index
        atomic_write_bytes(self._path(index), payload, fsync=True)
        self.next_index = index + 1
        return index

    def replay(self, after: int = -1) -> Iterator[tuple[int, LoggedBatch | ClosedEpisodes]]:
        """(index, entry) of every logged entry with index > `after`, in order."""
        for index in self.indices():
            if index > after:
                try:
                    entry = decode_log_entry(self._path(index).read_bytes())
                except TransportError as error:
                    raise TransportError(f"transition log {self._path(index)} is corrupt ({error}): move that file "
                                         "out of the log to go on without its transitions") from None
                yield index, entry

    def truncate(self, through: int) -> int:
        """Delete the entries with index <= `through` (they are in a checkpoint); returns how many."""
        return self._delete(lambda index: index <= through)

    def discard_after(self, index: int) -> int:
        """Delete the entries with index > `index` (a checkpoint's last entry), for an actor restarted from that
        checkpoint with its learner, which collects them again; returns how many."""
        return self._delete(lambda entry: entry > index)

    def _delete(self, chosen: Callable[[int], bool]) -> int:
        removed = 0
        for index in self.indices():
            if chosen(index):
                self._path(index).unlink(missing_ok=True)
                removed += 1
        return removed
