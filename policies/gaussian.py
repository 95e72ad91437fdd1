"""The SAC tanh-Gaussian policy (JAX) behind the common `Policy` interface: one observation in, a one-action chunk
out; its learner action is the robot action itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from robot_rl.core.config_io import config_from_json, config_to_json
from robot_rl.policies.base import ActionChunk, Observation, PolicyBase, PolicyError
from robot_rl.policies.registry import GAUSSIAN, LearnerPlan, PolicyKind
from robot_rl.wire.weights import WeightsMessage


class GaussianPolicy(PolicyBase):
    """A SAC actor as a `Policy` (obs horizon 1, chunks of one action); `update_weights` swaps in newer weights."""

    kind = GAUSSIAN
    obs_horizon = 1
    chunk_length = 1

    def __init__(self, agent, *, seed: int = 0, device: str = "auto"):
        import jax

        # `cpu` pins the actor to the host even where JAX's default device is a GPU: at batch 1 a head this small is
        # bound by kernel launches and copies, 5x slower on an H200 than on a 2-core CPU (docs/results.md).
        self._pinned = jax.devices("cpu")[0] if device == "cpu" else None
        self.device = "cpu" if self._pinned is not None or jax.default_backend() == "cpu" else "cuda"
        self.agent = self._placed(agent)
        self.observation_spec = agent.observation_spec
        self.observation_keys = tuple(agent.observation_spec.keys)
        self.action_dim = int(agent.action_dim)
        self.weights_version = 0
        with self._on_device():
            self._key = jax.random.PRNGKey(seed)

    def _placed(self, agent):
        import jax

        return agent if self._pinned is None else jax.device_put(agent, self._pinned)

    def _on_device(self):
        import contextlib

        import jax

        return contextlib.nullcontext() if self._pinned is None else jax.default_device(self._pinned)

    @classmethod
    def from_message(cls, message, *, seed: int = 0, device: str = "auto") -> GaussianPolicy:
        """Built from scratch from a `WeightsMessage` (a policy file or the learner's broadcast); it runs on JAX's
        default device, so a GPU `device` JAX does not see is refused rather than ignored."""
        import jax

        from robot_rl.agents.sac import SACAgent, SACConfig

        if device.startswith("cuda") and jax.default_backend() != "gpu":
            raise PolicyError(f"--device {device}: a SAC policy runs in JAX, which sees no GPU here (its devices: "
                              f"{', '.join(sorted({d.platform for d in jax.devices()}))}); use cpu or auto")

        agent = SACAgent.create(seed, message.observation_spec, message.action_dim,
                                config_from_json(SACConfig, message.policy_config))
        policy = cls(agent, seed=seed, device=device)
        policy.update_weights(message.policy, max(int(message.version), 1))
        return policy

    def weights_message(self, *, version: int, transitions: int = 0, updates: int = 0) -> WeightsMessage:
        """This policy's weights as a `WeightsMessage` (what the learner broadcasts and policy files hold)."""
        agent = self.agent
        return WeightsMessage(version=int(version), policy=agent.policy_to_bytes(),
                              observation_spec=agent.observation_spec, action_dim=agent.action_dim,
                              policy_config=config_to_json(agent.config), policy_kind=self.kind,
                              transitions=int(transitions), updates=int(updates))

    def update_weights(self, policy_bytes: bytes, version: int) -> None:
        """Swap in actor weights produced by `SACAgent.policy_to_bytes` (ignored if not newer)."""
        if version > self.weights_version:
            self.agent = self._placed(self.agent.with_policy_bytes(policy_bytes))
            self.weights_version = int(version)

    def reset(self) -> None:
        pass

    def act_chunk(self, history: Sequence[Observation], *, deterministic: bool = True) -> ActionChunk:
        import jax

        if not history:
            raise PolicyError("act_chunk needs at least one observation")
        newest = history[-1]
        try:
            obs = {key: newest[key] for key in self.observation_keys}
        except KeyError as error:
            raise PolicyError(f"observation has no {error.args[0]!r} (the policy reads "
                              f"{list(self.observation_keys)})") from None
        with self._on_device():
            if deterministic:
                action = self.agent.eval_actions(obs)
            else:
                self._key, key = jax.random.split(self._key)
                action = self.agent.sample_actions(obs, key)
            action = np.asarray(action, dtype=np.float32)[None]
        return ActionChunk(action, action)

    def learner_action_of(self, executed: np.ndarray, info: Mapping[str, np.ndarray]) -> np.ndarray | None:
        return np.asarray(executed, dtype=np.float32)


def learner_plan(kind: PolicyKind, options, provided, action_dim: int) -> LearnerPlan:
    """Plain SAC (the registry's plan of this kind): the SAC action is the robot action, on the robot's
    observations."""
    return LearnerPlan(kind, GaussianPolicy, provided, action_dim, options.sac)


def weights_message(agent, *, version: int, transitions: int = 0, updates: int = 0) -> WeightsMessage:
    """A SAC agent's actor weights as a `WeightsMessage` (what the learner broadcasts and policy files hold)."""
    return GaussianPolicy(agent).weights_message(version=version, transitions=transitions, updates=updates)
