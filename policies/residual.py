"""Residual RL on a frozen base policy: executed action = base action + scale x SAC action, per control step.

The base (any `Policy`: diffusion, one-step, SAC) runs receding-horizon over its own chunks; each control step takes
the next base action, and a SAC Gaussian head that sees the observation *and* that base action adds a scaled
correction (ResiP / ResFiT: per-step residual over a chunked base, last layer zero-initialised, scale ~0.1). The
base action is an observation entry (`base_action`) for the head and the learner: `augment_observation` adds it,
and the `ActorSession` stores augmented observations in its transitions, so the critic's next observation holds the
base action the next step was taken against. The learner's `SACConfig.residual_scale` makes its critic score the
executed action.

A residual policy file is the head's `WeightsMessage` (kind "residual") naming the base policy's path: the base is
loaded once from its own files, never sent with the head's weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.config_io import config_from_json, config_to_json
from robot_rl.policies.base import ActionChunk, ChunkRunner, Observation, Policy, PolicyBase, PolicyError
from robot_rl.policies.registry import RESIDUAL, LearnerPlan, PolicyKind

KIND = RESIDUAL
BASE_ACTION_KEY = "base_action"
"""Observation entry with the base policy's action for this step (what the residual head and critic see)."""


def residual_observation_spec(base: Policy, head_keys: Sequence[str] | None = None):
    """The head's observation spec: the base's entries (or `head_keys` of them) plus `base_action`."""
    from robot_rl.core.types import ArraySpec, ObservationSpec

    entries = dict(base.observation_spec.entries)
    if head_keys is not None:
        missing = [k for k in head_keys if k not in entries]
        if missing:
            raise PolicyError(f"the base policy reads no {missing} (it reads {sorted(entries)})")
        entries = {k: entries[k] for k in head_keys}
    entries[BASE_ACTION_KEY] = ArraySpec((int(base.action_dim),), "float32")
    return ObservationSpec.from_shapes(entries)


class FrozenBase(ChunkRunner):
    """A frozen policy run one action per control step, receding-horizon (a `ChunkRunner` acting deterministically):
    a new chunk when the last is used up (`execute` actions of each), a fresh one after `interrupt` (a human moved
    the arm). `path`: where its files are (what a head's policy file names)."""

    def __init__(self, policy: Policy, *, execute: int | None = None, path: str | None = None):
        if execute is not None and not 1 <= int(execute) <= policy.chunk_length:
            raise PolicyError(f"base execute={execute} must be in [1, the base's chunk_length={policy.chunk_length}]")
        super().__init__(policy, deterministic=True, execute=execute)
        self.path = path

    def interrupt(self) -> None:
        self._queue.clear()

    def action(self, obs: Observation) -> np.ndarray:
        """The base action for this control step's observation (advances the base by one step)."""
        return np.asarray(self.act(obs), dtype=np.float32)


class HeadOnFrozenBase(PolicyBase):
    """What the residual and noise-space kinds share: a learner-trained SAC head (`head`, a GaussianPolicy) over a
    frozen base loaded from its own files (`base_path`); the head's weights come from the learner, the base's never
    change. A subclass sets `kind`, `policy_config()` and `_from_parts`."""

    head: Any

    @property
    def weights_version(self) -> int:
        return self.head.weights_version

    def update_weights(self, policy_bytes: bytes, version: int) -> None:
        """Swap in newer head weights from the learner (the base never changes)."""
        self.head.update_weights(policy_bytes, version)

    def weights_message(self, *, version: int, transitions: int = 0, updates: int = 0):
        """The head's weights and this policy's config (the base by path) as a `WeightsMessage`."""
        from robot_rl.wire.weights import WeightsMessage

        agent = self.head.agent
        return WeightsMessage(version=int(version), policy=agent.policy_to_bytes(),
                              observation_spec=agent.observation_spec, action_dim=agent.action_dim,
                              policy_config=self.policy_config(), policy_kind=self.kind,
                              transitions=int(transitions), updates=int(updates))

    @classmethod
    def from_message(cls, message, *, seed: int = 0, device: str = "auto"):
        """The policy of a `WeightsMessage` (a policy file or the learner's broadcast); loads its base once."""
        from robot_rl.agents.sac import SACAgent, SACConfig
        from robot_rl.policies.checkpoint import load_policy
        from robot_rl.policies.gaussian import GaussianPolicy

        config = message.policy_config
        try:
            sac = config_from_json(SACConfig, config["sac"])
            base_path = config["base"]
        except (KeyError, TypeError, ValueError) as error:
            raise PolicyError(f"{cls.kind} policy config is malformed ({type(error).__name__}: {error})") from None
        if not isinstance(base_path, str) or not Path(base_path).exists():
            raise PolicyError(f"the {cls.kind} policy's base {base_path!r} does not exist (the base policy is loaded "
                              "from its own files; copy them there or retrain)")
        base = load_policy(base_path, device=device, seed=seed)
        agent = SACAgent.create(seed, message.observation_spec, message.action_dim, sac)
        try:
            policy = cls._from_parts(base, GaussianPolicy(agent, seed=seed, device=device), config, base_path)
        except (KeyError, TypeError, ValueError) as error:
            raise PolicyError(f"{cls.kind} policy config is malformed ({type(error).__name__}: {error})") from None
        policy.update_weights(message.policy, max(int(message.version), 1))
        return policy


class ResidualPolicy(HeadOnFrozenBase):
    """A SAC Gaussian head correcting a frozen base policy's actions (kind "residual"): chunks of one action."""

    kind = KIND
    obs_horizon = 1
    chunk_length = 1

    def __init__(self, base: FrozenBase, head, scale: float):
        from robot_rl.policies.gaussian import GaussianPolicy

        if not (np.isfinite(scale) and scale > 0):
            raise PolicyError(f"residual scale={scale} must be > 0")
        self.base = base
        self.head = head if isinstance(head, GaussianPolicy) else GaussianPolicy(head)
        self.scale = float(scale)
        spec = self.head.observation_spec
        if BASE_ACTION_KEY not in spec or spec[BASE_ACTION_KEY].shape != (base.policy.action_dim,):
            raise PolicyError(f"the residual head must read {BASE_ACTION_KEY!r} of shape ({base.policy.action_dim},)")
        if self.head.action_dim != base.policy.action_dim:
            raise PolicyError(f"the residual head acts in {self.head.action_dim} dims, the base in "
                              f"{base.policy.action_dim}")
        self.action_dim = int(base.policy.action_dim)
        self.device = getattr(base.policy, "device", "cpu")
        # What the robot must provide: the base's entries and the head's, less the base action the policy adds.
        from robot_rl.core.types import ObservationSpec

        robot = dict(base.policy.observation_spec.entries)
        robot.update((k, v) for k, v in spec.entries if k != BASE_ACTION_KEY)
        self.observation_spec = ObservationSpec.from_shapes(robot)
        self.observation_keys = tuple(self.observation_spec.keys)
        self.learner_observation_spec = spec
        """The augmented spec the head and the learner see (`observation_spec` + `base_action`)."""

    def reset(self) -> None:
        self.base.reset()

    def interrupt(self) -> None:
        """A human acted: the base plans its next chunk from the arm's new state."""
        self.base.interrupt()

    def augment_observation(self, obs: Observation) -> dict[str, np.ndarray]:
        """`obs` with this step's base action (advances the base by one control step; call once per step)."""
        if BASE_ACTION_KEY in obs:
            return dict(obs)
        return {**obs, BASE_ACTION_KEY: self.base.action(obs)}

    def act_chunk(self, history: Sequence[Observation], *, deterministic: bool = True) -> ActionChunk:
        if not history:
            raise PolicyError("act_chunk needs at least one observation")
        obs = self.augment_observation(history[-1])
        base_action = np.asarray(obs[BASE_ACTION_KEY], dtype=np.float32)
        residual = self.head.act_chunk([obs], deterministic=deterministic).actions[0]
        executed = np.clip(base_action + self.scale * residual, -1.0, 1.0)
        return ActionChunk(executed[None], residual[None], {BASE_ACTION_KEY: base_action[None]})

    def learner_action_of(self, executed: np.ndarray, info: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """(executed - base) / scale, clipped into the head's [-1, 1] (None without the base action)."""
        if BASE_ACTION_KEY not in info:
            return None
        base_action = np.asarray(info[BASE_ACTION_KEY], dtype=np.float32)
        return np.clip((np.asarray(executed, np.float32) - base_action) / self.scale, -1.0, 1.0).astype(np.float32)

    # ----- files and messages
    def policy_config(self) -> dict[str, Any]:
        return {"sac": config_to_json(self.head.agent.config), "scale": self.scale, "base": self.base.path,
                "base_execute": self.base.execute}

    @classmethod
    def _from_parts(cls, base: Policy, head, config: Mapping[str, Any], base_path: str) -> ResidualPolicy:
        return cls(FrozenBase(base, execute=config.get("base_execute"), path=base_path), head, float(config["scale"]))


def load_base(path: str | Path, *, device: str = "auto", execute: int | None = None) -> FrozenBase:
    """A frozen base policy from its files (any kind `load_policy` reads), with its absolute path kept."""
    from robot_rl.policies.checkpoint import load_policy

    path = Path(path).resolve()
    return FrozenBase(load_policy(path, device=device), execute=execute, path=str(path))


def run_base(options, load: Callable[..., FrozenBase], provided, action_dim: int):
    """(the run's frozen base, `load(options.base)` on the CPU executing `options.base_execute` actions of each
    chunk, and the robot's observation spec `provided` less `base_action`); PolicyError naming --base when it does not
    load, or reads or acts otherwise than the run gives."""
    from robot_rl.core.types import ObservationSpec

    try:
        base = load(options.base, device="cpu", execute=options.base_execute)
    except PolicyError as error:
        raise PolicyError(f"--base {options.base}: {error}") from None
    provided = ObservationSpec.from_shapes({k: v for k, v in provided.entries if k != BASE_ACTION_KEY})
    reads = base.policy.observation_spec
    wrong = [k for k in reads.keys if k not in provided or provided[k] != reads[k]]
    if wrong or base.policy.action_dim != action_dim:
        raise PolicyError(f"--base {options.base} reads {', '.join(f'{k} {reads[k].shape}' for k in wrong)} and acts "
                          f"in {base.policy.action_dim} dims; --task {options.task} --obs-mode {options.obs_mode} "
                          f"--image-size {options.image_size} gives {dict((k, v.shape) for k, v in provided.entries)} "
                          f"and {action_dim}-d actions")
    return base, provided


def learner_plan(kind: PolicyKind, options, provided, action_dim: int) -> LearnerPlan:
    """Residual RL on the run's --base (the registry's plan of this kind): the SAC action is a correction scaled by
    `residual_scale`, the head sees the base action, its last layer starts at zero and the critic scores the executed
    action; demos are labelled with the base's actions."""
    from robot_rl.policies.gaussian import GaussianPolicy

    base, provided = run_base(options, load_base, provided, action_dim)
    sac = dataclasses.replace(options.sac, residual_scale=options.residual_scale, actor_zero_init_last=True)

    def make_residual_policy(agent, seed: int = 0) -> ResidualPolicy:
        own_base = FrozenBase(base.policy, execute=base.execute, path=base.path)  # its own chunk queue
        return ResidualPolicy(own_base, GaussianPolicy(agent, seed=seed), options.residual_scale)

    return LearnerPlan(kind, make_residual_policy, residual_observation_spec(base.policy, provided.keys), action_dim,
                       sac)
