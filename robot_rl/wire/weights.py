"""Weights as they cross the wire: `WeightsMessage` (a learner head's weights with what an actor needs to build its
policy from scratch), its `WeightsStamp` (run, learner incarnation, version: which weights replace which), and their
payload. A policy file (robot_rl.wire.policy_file) holds one weights payload.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from robot_rl.core.codec import pack
from robot_rl.wire.protocol import (PROTOCOL_VERSION, TransportError, as_integer, decode_payload, incarnation_of,
                                    run_fields, run_of)

if TYPE_CHECKING:  # robot_rl.core.types imports flax and JAX: the learner acknowledges transitions without them
    from robot_rl.core.types import ObservationSpec

DEFAULT_POLICY_KIND = "gaussian"
"""The kind of weights that name none (policy files from before weights named their kind): a SAC Gaussian policy,
registered under this name in robot_rl.policies.registry."""


@dataclasses.dataclass(frozen=True, eq=False)
class WeightsMessage:
    """A learner head's weights with what an actor needs to build that policy from scratch, whatever its kind."""

    version: int
    policy: bytes
    observation_spec: ObservationSpec
    action_dim: int
    policy_config: dict[str, Any]
    """The head's config as JSON (for `gaussian`, the SAC agent config)."""
    policy_kind: str = DEFAULT_POLICY_KIND
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
        **run_fields(message.run, message.incarnation),
    })


def reversion_weights(payload: bytes | bytearray | memoryview, version: int, *, run: str | None = None,
                      incarnation: int | None = None) -> bytes:
    """A weights payload with another version (and, where given, run and learner incarnation), without decoding the
    policy (TransportError if not weights)."""
    return pack({**decode_payload(payload, "weights"), "version": int(version), **run_fields(run, incarnation)})


def decode_weights(payload: bytes | bytearray | memoryview) -> WeightsMessage:
    """The weights of an `encode_weights` payload; policy files written before weights named their kind (a SAC
    config under ``sac_config``) read as `gaussian`."""
    from robot_rl.core.types import ArraySpec, ObservationSpec

    message = decode_payload(payload, "weights")
    try:
        spec = message["observation_spec"]
        if "policy_config" not in message and "sac_config" in message:
            kind, config = DEFAULT_POLICY_KIND, message["sac_config"]
        else:
            kind, config = message["policy_kind"], message["policy_config"]
        if not isinstance(spec, dict) or not isinstance(message["policy"], bytes) or not isinstance(config, dict) \
                or not isinstance(kind, str):
            raise TransportError("weights payload has a malformed observation_spec, policy, policy_kind or "
                                 "policy_config")
        return WeightsMessage(
            version=as_integer(message["version"], "weights version"), policy=message["policy"],
            observation_spec=ObservationSpec.from_shapes({k: ArraySpec.from_json(v) for k, v in spec.items()}),
            action_dim=as_integer(message["action_dim"], "weights action_dim"), policy_config=config,
            policy_kind=kind, transitions=as_integer(message.get("transitions", 0), "weights transitions"),
            updates=as_integer(message.get("updates", 0), "weights updates"),
            training_done=message.get("training_done", False) is True, files=_files(message.get("files", {})),
            run=run_of(message, "weights"), incarnation=incarnation_of(message, "weights"))
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
