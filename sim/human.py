"""A simulated human supervisor: the scripted expert takes over when the policy is stuck or pushing out of bounds."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from robot_rl.sim.expert import make_expert


@dataclasses.dataclass(frozen=True)
class SimulatedHumanConfig:
    """When and for how long the simulated human intervenes."""

    takeover_steps: int = 5
    """Steps the expert keeps control once it took over."""
    episode_budget: int = 15
    """At most this many intervention steps per episode."""
    total_budget: int | None = None
    """At most this many intervention steps over the whole run (None: no limit)."""
    stuck_window: int = 6
    """The policy is stuck if the TCP moved less than `stuck_distance` over this many steps..."""
    stuck_distance: float = 0.01
    """...in metres."""
    boundary_margin: float = 0.005
    """The policy heads out of the workspace if the target is within this margin of a face and the action pushes
    further out, `boundary_steps` times in a row."""
    boundary_steps: int = 3
    noise: float = 0.0
    """Action noise of the expert, to make it a less-than-perfect human."""

    def __post_init__(self) -> None:
        if self.takeover_steps < 1 or self.episode_budget < 0 or self.stuck_window < 2 or self.boundary_steps < 1:
            raise ValueError(f"invalid SimulatedHumanConfig: {self}")


class SimulatedHuman:
    """Plays the human supervisor in the sim mirror, with the scripted expert as the human's hands."""

    def __init__(self, env, config: SimulatedHumanConfig = SimulatedHumanConfig(), seed: int | None = None):
        self.env = env.unwrapped
        self.config = config
        self.expert = make_expert(env, noise=config.noise, seed=seed)
        self.total_steps = 0
        self.reset()

    def reset(self) -> None:
        self.expert.reset()
        self.episode_steps = 0
        self._remaining = 0
        self._positions: collections.deque = collections.deque(maxlen=self.config.stuck_window)
        self._pushing_out = 0

    def _budget_left(self) -> bool:
        total = self.config.total_budget
        return self.episode_steps < self.config.episode_budget and (total is None or self.total_steps < total)

    def _pushes_out(self, policy_action: np.ndarray) -> bool:
        target = self.env.target_pose()[0]
        margin = self.config.boundary_margin
        action = np.nan_to_num(np.asarray(policy_action, dtype=np.float64)[:3])
        at_low = target <= self.env.workspace_low + margin
        at_high = target >= self.env.workspace_high - margin
        return bool(np.any(at_low & (action < -0.5)) or np.any(at_high & (action > 0.5)))

    def _stuck(self) -> bool:
        if len(self._positions) < self._positions.maxlen:
            return False
        return float(np.linalg.norm(self._positions[-1] - self._positions[0])) < self.config.stuck_distance

    def act(self, obs, policy_action: np.ndarray) -> np.ndarray | None:
        """The expert's action while intervening, else None (the policy acts)."""
        self._positions.append(self.env.tcp_pose()[0])
        self._pushing_out = self._pushing_out + 1 if self._pushes_out(policy_action) else 0
        if self._remaining == 0 and self._budget_left():
            if self._stuck() or self._pushing_out >= self.config.boundary_steps or not np.all(np.isfinite(policy_action)):
                self._remaining = self.config.takeover_steps
                self._positions.clear()
                self._pushing_out = 0
        if self._remaining == 0 or not self._budget_left():
            self._remaining = 0
            return None
        self._remaining -= 1
        self.episode_steps += 1
        self.total_steps += 1
        return self.expert.act(obs)
