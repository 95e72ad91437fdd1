"""A sim env as the robot an `ActorSession` drives in-process: reset to a start pose, then one safe absolute command
per control step.

The ROS actor node sends its safe commands to the sim node (robot_rl.sim.node); in-process `robot-rl train` hands
them to this adapter instead, so both go through the same session and safety layer. A command is executed as the
env's own delta action towards its target (`robot_rl.safety.sim_env_action`, as `SafetyWrapper` does), so the env
moves exactly as when stepped with the action the command came from.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.safety import SafeCommand, SafetyConfig, check_sim_env, sim_env_action, sim_safety_config


@dataclasses.dataclass(frozen=True, eq=False)
class RobotStart:
    """An episode's first observation and the pose and gripper it starts from (the controller's target)."""

    observation: dict[str, np.ndarray]
    tcp_position: np.ndarray
    tcp_quat: np.ndarray
    gripper: float


@dataclasses.dataclass(frozen=True, eq=False)
class ExecutedCommand:
    """What one control step with a command produced: the env's step."""

    observation: dict[str, np.ndarray]
    reward: float
    success: bool
    terminated: bool
    truncated: bool
    info: dict[str, Any]

    @property
    def episode_key(self) -> str | None:
        """The `ActorSession` episode key for this step: "reset" when the env ended the episode (success, time
        limit, unstable physics), so the session ends it at the same step even after a held command; else None."""
        return "reset" if self.terminated or self.truncated else None


class SimRobotAdapter:
    """A robot_rl sim env behind the robot's interface: safe absolute commands in; observation, reward, success out."""

    def __init__(self, env: gym.Env):
        check_sim_env(env, "SimRobotAdapter")
        limit = env.spec.max_episode_steps if env.spec is not None else None
        if not limit:
            raise ValueError("SimRobotAdapter needs an env with a time limit (make it with robot_rl.loop.make_env)")
        self.env = env
        self.max_episode_steps = int(limit)
        """The env's time limit: give it to the `ActorSession` so both end an episode at the same step."""

    def safety_config(self, **overrides: Any) -> SafetyConfig:
        """The env's limits as a `SafetyConfig` (the limits of robots/sim_panda.yaml, which the ROS actor uses)."""
        return sim_safety_config(self.env, **overrides)

    def reset(self, seed: int | None = None) -> RobotStart:
        observation, _ = self.env.reset(seed=seed)
        base = self.env.unwrapped
        position, quat = base.target_pose()
        return RobotStart(observation, position, quat, float(base.gripper_command))

    def execute(self, command: SafeCommand) -> ExecutedCommand:
        """One control step towards `command`'s target; a held command holds the env's target and gripper."""
        position, quat = self.env.unwrapped.target_pose()
        observation, reward, terminated, truncated, info = self.env.step(
            sim_env_action(self.env, command, position, quat))
        return ExecutedCommand(observation, float(reward), bool(info.get("success", False)), bool(terminated),
                               bool(truncated), info)

    def close(self) -> None:
        self.env.close()
