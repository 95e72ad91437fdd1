"""The one policy interface (the "method side"): observation history in, an action chunk out.

Every policy kind (SAC Gaussian, diffusion, one-step, and later residual / noise-space heads) implements
:class:`Policy`. The actor, the in-process loop and the ROS actor node hold a `Policy` and never ask which kind it is:
they keep an :class:`ObservationHistory` of `obs_horizon` observations, call `act_chunk` and execute the chunk's
actions one control period apart (:mod:`robot_rl.policies.chunking`).

A chunk says what the learner needs besides the executed actions: `learner_actions` is the SAC head's own output
(the robot action for plain SAC, the residual, or the initial noise), `info` holds per-step extras such as the base
action. A kind without a learner head (a frozen diffusion policy) gives its executed actions there.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

Observation = Mapping[str, np.ndarray]


class PolicyError(ValueError):
    """A policy cannot be built, loaded or run on this input; the message names the file, key or value."""


@dataclasses.dataclass(frozen=True)
class ActionChunk:
    """Actions to execute one control period apart, the first at the stamp of the newest observation used."""

    actions: np.ndarray
    """(n, action_dim) float32 in [-1, 1]: what the robot executes (before the safety layer)."""
    learner_actions: np.ndarray
    """(n, learner_dim) float32: the learner head's own output per step (plain SAC: equal to `actions`)."""
    info: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    """Per-step extras, each (n, ...): e.g. `base_action` of a residual head, `noise` of a noise-space head."""

    def __post_init__(self) -> None:
        actions = np.asarray(self.actions, dtype=np.float32)
        if actions.ndim != 2 or len(actions) == 0:
            raise PolicyError(f"a chunk's actions must be (n >= 1, action_dim), got shape {actions.shape}")
        if not np.all(np.isfinite(actions)):
            raise PolicyError("the policy produced a non-finite action")
        learner = np.asarray(self.learner_actions, dtype=np.float32)
        if len(learner) != len(actions) or any(len(np.asarray(v)) != len(actions) for v in self.info.values()):
            raise PolicyError(f"a chunk's learner_actions and info must have {len(actions)} steps like its actions")
        object.__setattr__(self, "actions", actions)
        object.__setattr__(self, "learner_actions", learner)

    def __len__(self) -> int:
        return len(self.actions)

    def step(self, index: int) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """(executed action, learner action, info) of step `index`."""
        return self.actions[index], self.learner_actions[index], {k: np.asarray(v[index]) for k, v in self.info.items()}


@runtime_checkable
class Policy(Protocol):
    """What every policy kind offers the actor: reset, an observation history in, an action chunk out."""

    kind: str
    """Registered kind name (robot_rl.policies.registry; for files and messages: the actor never branches on it)."""
    observation_spec: Any
    """robot_rl.core.types.ObservationSpec of the entries it reads (shapes and dtypes)."""
    observation_keys: tuple[str, ...]
    """Observation entries it reads (the spec's keys)."""
    action_dim: int
    obs_horizon: int
    """How many past observations `act_chunk` takes (the newest last)."""
    chunk_length: int
    """How many actions one `act_chunk` returns (executed one control period apart)."""
    device: str

    def reset(self) -> None:
        """Forget anything carried from the previous episode."""

    def act_chunk(self, history: Sequence[Observation], *, deterministic: bool = True) -> ActionChunk:
        """Actions for the `obs_horizon` observations of `history` (oldest first, the newest is "now")."""

    def learner_action_of(self, executed: np.ndarray, info: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """A human's executed action mapped into the learner's action space (None where it cannot be)."""

    weights_version: int
    """Version of the learner weights it holds (0: none, or a frozen policy)."""

    def update_weights(self, policy_bytes: bytes, version: int) -> None:
        """Swap in the learner's newer weights; PolicyError for a frozen policy."""

    def augment_observation(self, obs: Observation) -> Observation:
        """This control step's observation as the policy and the learner see it (a head on a base adds the base's
        action; call once per step)."""

    def interrupt(self) -> None:
        """A human acted: drop any plan made for where the arm was."""


class PolicyBase:
    """The `Policy` contract's defaults, which every kind inherits: frozen weights, observations as they come,
    nothing to interrupt (a kind with a learner head or a base overrides them)."""

    weights_version = 0

    def update_weights(self, policy_bytes: bytes, version: int) -> None:
        raise PolicyError(f"a {self.kind} policy takes no weights from the learner")

    def augment_observation(self, obs: Observation) -> Observation:
        return obs

    def interrupt(self) -> None:
        pass


class ObservationHistory:
    """The last `horizon` observations of an episode; until there are that many, the first one stands in for the
    missing older ones (as Diffusion Policy pads episode starts)."""

    def __init__(self, horizon: int):
        if horizon < 1:
            raise PolicyError(f"obs_horizon={horizon} must be >= 1")
        self.horizon = int(horizon)
        self._items: collections.deque[Observation] = collections.deque(maxlen=self.horizon)

    def reset(self) -> None:
        self._items.clear()

    def append(self, obs: Observation) -> None:
        if not self._items:
            self._items.extend([obs] * (self.horizon - 1))
        self._items.append(obs)

    def __len__(self) -> int:
        return len(self._items)

    def observations(self) -> list[Observation]:
        """The `horizon` observations, oldest first (empty before the first `append`)."""
        return list(self._items)


def stack_history(history: Sequence[Observation], keys: Sequence[str], horizon: int) -> dict[str, np.ndarray]:
    """{key: (horizon, ...) array} of the last `horizon` observations (the first repeated where there are fewer);
    PolicyError names a missing key."""
    if not history:
        raise PolicyError("act_chunk needs at least one observation")
    items = list(history)[-horizon:]
    items = [items[0]] * (horizon - len(items)) + items
    stacked = {}
    for key in keys:
        try:
            stacked[key] = np.stack([np.asarray(obs[key]) for obs in items])
        except KeyError:
            raise PolicyError(f"observation has no {key!r} (the policy reads {list(keys)})") from None
    return stacked


class ChunkRunner:
    """Runs any `Policy` as a one-action-per-call policy (`reset` / `act`, see robot_rl.core.protocols.Policy) for lock-step
    loops such as the sim evaluation: it queries a chunk when the previous one is used up (receding horizon)."""

    def __init__(self, policy: Policy, *, deterministic: bool = True, execute: int | None = None):
        self.policy = policy
        self.deterministic = deterministic
        self.execute = policy.chunk_length if execute is None else int(execute)
        if not 1 <= self.execute <= policy.chunk_length:
            raise PolicyError(f"execute={execute} must be in [1, chunk_length={policy.chunk_length}]")
        self.history = ObservationHistory(policy.obs_horizon)
        self._queue: collections.deque[np.ndarray] = collections.deque()
        self.chunks = 0

    def reset(self) -> None:
        self.policy.reset()
        self.history.reset()
        self._queue.clear()

    def act(self, obs: Observation) -> np.ndarray:
        self.history.append(obs)
        if not self._queue:
            chunk = self.policy.act_chunk(self.history.observations(), deterministic=self.deterministic)
            self._queue.extend(chunk.actions[: self.execute])
            self.chunks += 1
        return self._queue.popleft()


def set_inference_steps(policy: Policy, steps: int) -> None:
    """Give a policy that samples by DDIM `steps` steps per chunk; PolicyError for a kind without DDIM steps or an
    out-of-range count."""
    from robot_rl.policies.registry import kind_of

    if not kind_of(policy.kind).ddim_steps:
        raise PolicyError(f"inference_steps={steps}: a {policy.kind} policy has no DDIM steps to set (only diffusion "
                          "policies have)")
    policy.set_inference_steps(steps)


def resolve_device(device: str) -> str:
    """`auto` -> "cuda" when torch sees a GPU, else "cpu"; "cpu" / "cuda" / "cuda:N" checked (PolicyError if the GPU
    asked for is not there)."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return "cpu"
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise PolicyError(f"--device {device}: torch sees no CUDA GPU here (use cpu or auto)")
        return device
    raise PolicyError(f"device {device!r} must be auto, cpu, cuda or cuda:N")


def as_json_ready(value: Any) -> Any:
    """Tuples to lists, recursively (configs written to JSON)."""
    if isinstance(value, Mapping):
        return {k: as_json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json_ready(v) for v in value]
    return value
