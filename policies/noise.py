"""Noise-space RL (DSRL) on a frozen diffusion policy: the SAC action is the initial noise the base denoises.

The head (a SAC Gaussian over the newest observation) outputs w in [-1, 1]^(prediction_horizon x action_dim); the
base (a diffusion policy, sampled with deterministic DDIM, or its one-step student) denoises `bound * w` into a chunk,
whose first `execute` actions the robot executes. One decision per chunk: every step of the chunk carries the same
learner action w and its `chunk_step`, and the learner joins a chunk's steps into one transition (first observation,
w, summed reward, the observation after the chunk; `Learner(chunk_decisions=True)`). The head's last layer starts at
zero, so the untrained policy is the base acting from zero noise (its deterministic behaviour).

A human's action has no known noise, so this kind cannot map it (`learner_action_of` is None): the learner skips
those steps, cutting the chunk they interrupt. Noise aliasing (DSRL-NA, a head whose SAC config sets
`aliased_chunk_dim`) keeps them: its action critic scores executed chunks, and at each decision this policy also
denoises `aliasing_samples` noises drawn from the base's own N(0, I) (w = clip(noise / bound, -1, 1)) in one
batched call, recorded as per-step info `alias_noise` / `alias_chunks` for the noise critic to regress on.

`repeat=True` makes the head's action one control step's noise (action_dim numbers) repeated over the chunk: a
low-dimensional noise space (DSRL's pi0 variant repeats a small noise vector over its chunk), far easier for SAC to
search than prediction_horizon x action_dim numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.config_io import config_to_json
from robot_rl.policies.base import ActionChunk, Observation, Policy, PolicyError
from robot_rl.policies.registry import CHUNK_KEYS, NOISE, LearnerPlan, PolicyKind
from robot_rl.policies.residual import FrozenBase, HeadOnFrozenBase, load_base, run_base

KIND = NOISE
CHUNK_STEP_KEY = CHUNK_KEYS.step
"""Per-step info of a noise-space chunk: the step's index in its chunk (0 starts a decision)."""
ALIAS_NOISE_KEY = CHUNK_KEYS.alias_noise
"""Per-step info of a noise-aliasing head: (samples, noise_dim) head actions w the base also denoised."""
ALIAS_CHUNKS_KEY = CHUNK_KEYS.alias_chunks
"""Per-step info of a noise-aliasing head: (samples, execute x action_dim) the executed chunks those w give."""


def noise_dim(base: Policy, repeat: bool = False) -> int:
    """Size of the noise a head steers `base` with (`repeat`: one step's, repeated over the chunk); PolicyError for a
    base that is not a diffusion policy."""
    shape = getattr(base, "noise_shape", None)
    if shape is None or not hasattr(base, "chunk_from_noise"):
        raise PolicyError(f"a noise-space head needs a diffusion or one-step base; a {base.kind} policy has no "
                          "initial noise to steer")
    return int(shape[-1]) if repeat else int(np.prod(shape))


class NoisePolicy(HeadOnFrozenBase):
    """A SAC head choosing the initial noise of a frozen diffusion policy (kind "noise"): one decision per chunk."""

    kind = KIND

    def __init__(self, base: Policy, head, bound: float = 1.5, *, execute: int | None = None,
                 path: str | None = None, seed: int = 0, repeat: bool = False):
        from robot_rl.policies.gaussian import GaussianPolicy
        from robot_rl.core.types import ObservationSpec

        if not (np.isfinite(bound) and bound > 0):
            raise PolicyError(f"noise bound={bound} must be > 0")
        self.repeat = bool(repeat)
        """The head's action is one step's noise (action_dim), repeated over the chunk (DSRL-pi0's low-dimensional
        noise); else the whole prediction_horizon x action_dim noise."""
        dim = noise_dim(base, self.repeat)
        self.base = base
        self.base_path = path
        self.head = head if isinstance(head, GaussianPolicy) else GaussianPolicy(head)
        if self.head.action_dim != dim:
            raise PolicyError(f"the noise head acts in {self.head.action_dim} dims; the base's noise has {dim} "
                              + ("(one step's, repeated)" if self.repeat
                                 else f"({' x '.join(map(str, base.noise_shape))})"))
        self.bound = float(bound)
        self.chunk_length = base.chunk_length if execute is None else int(execute)
        if not 1 <= self.chunk_length <= base.chunk_length:
            raise PolicyError(f"execute={execute} must be in [1, the base's chunk_length={base.chunk_length}]")
        self.obs_horizon = base.obs_horizon
        self.action_dim = int(base.action_dim)
        self.device = getattr(base, "device", "cpu")
        robot = dict(base.observation_spec.entries)
        robot.update(self.head.observation_spec.entries)
        self.observation_spec = ObservationSpec.from_shapes(robot)
        self.observation_keys = tuple(self.observation_spec.keys)
        self.learner_observation_spec = self.head.observation_spec
        """What the head and the learner see (its entries of the newest observation)."""
        config = self.head.agent.config
        self.aliasing_samples = 0 if config.aliased_chunk_dim is None else int(config.aliasing_samples)
        """(noise, chunk) pairs denoised per decision for a noise-aliasing learner (0: none)."""
        if self.aliasing_samples and config.aliased_chunk_dim != self.chunk_length * self.action_dim:
            raise PolicyError(f"the head's action critic scores {config.aliased_chunk_dim}-number chunks; this "
                              f"policy executes {self.chunk_length} x {self.action_dim}")
        self._rng = np.random.default_rng(seed)

    def reset(self) -> None:
        self.base.reset()

    def noise_of(self, learner_action: np.ndarray) -> np.ndarray:
        """The initial noise (noise_shape) a head action in [-1, 1] stands for; (K, head dim) gives (K, *noise_shape)."""
        w = np.asarray(learner_action, np.float32)
        batch = w.shape[:-1]
        if self.repeat:
            w = np.broadcast_to(w[..., None, :], (*batch, *self.base.noise_shape))
        return self.bound * w.reshape(*batch, *self.base.noise_shape)

    def act_chunk(self, history: Sequence[Observation], *, deterministic: bool = True) -> ActionChunk:
        if not history:
            raise PolicyError("act_chunk needs at least one observation")
        w = self.head.act_chunk([history[-1]], deterministic=deterministic).actions[0]
        chunk = self.base.chunk_from_noise(history, self.noise_of(w))
        n = self.chunk_length
        info = {CHUNK_STEP_KEY: np.arange(n, dtype=np.int32)}
        if self.aliasing_samples and not deterministic:  # evaluation feeds no learner
            noise = self._rng.standard_normal((self.aliasing_samples, self.head.action_dim)).astype(np.float32)
            aliases = np.clip(noise / self.bound, -1.0, 1.0)
            chunks = self.base.chunks_from_noises(history, self.noise_of(aliases))[:, :n]
            info[ALIAS_NOISE_KEY] = np.repeat(aliases.reshape(1, self.aliasing_samples, -1), n, axis=0)
            info[ALIAS_CHUNKS_KEY] = np.repeat(chunks.reshape(1, self.aliasing_samples, -1), n, axis=0)
        return ActionChunk(chunk.actions[:n], np.repeat(w[None], n, axis=0), info)

    def learner_action_of(self, executed: np.ndarray, info: Mapping[str, np.ndarray]) -> np.ndarray | None:
        return None  # the noise behind a human's action is unknown

    def policy_config(self) -> dict[str, Any]:
        return {"sac": config_to_json(self.head.agent.config), "bound": self.bound, "base": self.base_path,
                "execute": self.chunk_length, "repeat": self.repeat}

    @classmethod
    def _from_parts(cls, base: Policy, head, config: Mapping[str, Any], base_path: str) -> NoisePolicy:
        return cls(base, head, float(config["bound"]), execute=config.get("execute"), path=base_path,
                   repeat=bool(config.get("repeat", False)))


def load_noise_base(path: str | Path, *, device: str = "auto", execute: int | None = None) -> FrozenBase:
    """The frozen diffusion / one-step policy at `path` (its absolute path kept); PolicyError for another kind."""
    base = load_base(path, device=device, execute=execute)
    noise_dim(base.policy)
    return base


def learner_plan(kind: PolicyKind, options, provided, action_dim: int) -> LearnerPlan:
    """DSRL on the run's --base (the registry's plan of this kind): the SAC action is the base's initial noise, one
    decision per executed chunk (the chunk's discount, steps joined by CHUNK_KEYS), the head's last layer starts at
    zero (the base's deterministic behaviour), no BC term; noise aliasing adds an action critic on executed chunks."""
    from robot_rl.policies.gaussian import GaussianPolicy

    base, provided = run_base(options, load_noise_base, provided, action_dim)
    sac = dataclasses.replace(options.sac, actor_zero_init_last=True, bc_weight=0.0,
                              discount=options.sac.discount ** base.execute,
                              aliased_chunk_dim=base.execute * action_dim if options.noise_aliasing else None)

    def make_noise_policy(agent, seed: int = 0) -> NoisePolicy:
        return NoisePolicy(base.policy, GaussianPolicy(agent, seed=seed), options.noise_bound, execute=base.execute,
                           path=base.path, seed=seed, repeat=options.noise_repeat)

    return LearnerPlan(kind, make_noise_policy, provided, noise_dim(base.policy, options.noise_repeat), sac,
                       robot_action_dim=action_dim)
