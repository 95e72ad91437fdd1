"""The actor: observation -> action with the latest policy weights, with a human who may take over at any step."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from robot_rl.agents.sac import SACAgent
from robot_rl.core import InterventionSource, Observation


@dataclasses.dataclass(frozen=True)
class ActorStep:
    """What the actor decided: the action to execute and whether a human chose it."""

    action: np.ndarray
    intervention: bool
    policy_action: np.ndarray


class Actor:
    """Runs the SAC policy with the newest weights it was given; an `InterventionSource` can override any action."""

    def __init__(
        self,
        agent: SACAgent,
        *,
        seed: int = 0,
        deterministic: bool = False,
        human: InterventionSource | None = None,
    ):
        self.agent = agent
        self.deterministic = deterministic
        self.human = human
        self.weights_version = 0
        self._key = jax.random.PRNGKey(seed)

    def update_weights(self, policy_bytes: bytes, version: int) -> None:
        """Swap in actor weights produced by `SACAgent.policy_to_bytes` (ignored if not newer)."""
        if version > self.weights_version:
            self.agent = self.agent.with_policy_bytes(policy_bytes)
            self.weights_version = version

    def reset(self) -> None:
        if self.human is not None:
            self.human.reset()

    def policy_action(self, obs: Observation) -> np.ndarray:
        if self.deterministic:
            return np.asarray(self.agent.eval_actions(obs), dtype=np.float32)
        self._key, key = jax.random.split(self._key)
        return np.asarray(self.agent.sample_actions(obs, key), dtype=np.float32)

    def step(self, obs: Observation) -> ActorStep:
        policy_action = self.policy_action(obs)
        if self.human is not None:
            human_action = self.human.act(obs, policy_action)
            if human_action is not None:
                return ActorStep(np.asarray(human_action, dtype=np.float32), True, policy_action)
        return ActorStep(policy_action, False, policy_action)

    def act(self, obs: Observation) -> np.ndarray:
        """`Policy` interface: the action to execute."""
        return self.step(obs).action
