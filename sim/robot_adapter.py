"""A sim env as the robot an `ActorSession` drives in-process: reset to a start pose, then one safe absolute command
per control step.

The ROS actor node sends its safe commands to the sim node (robot_rl.sim.node); the in-process tools (`robot-rl
train` and its evaluations, `eval`, `record`, `validate`) hand them to this adapter instead, behind a `SimLink` that
the one episode loop (robot_rl.actor.runner.EpisodeRunner, built by `sim_runner`) drives, so all go through the same
session and safety layer. A command is executed as the env's own delta action towards its target
(`robot_rl.actor.safety.sim_env_action`), so the env moves exactly as when stepped with the action the command came from.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from robot_rl.actor.safety import SafeCommand, Safety, SafetyConfig, check_sim_env, sim_env_action, sim_safety_config

if TYPE_CHECKING:
    from robot_rl.actor.runner import EpisodeEnd, EpisodeResult, EpisodeRunner
    from robot_rl.sim.human import SimulatedHuman
    from robot_rl.wire.outbox import Outbox


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


def _outermost(env: gym.Env, method: str) -> Callable[[], Any] | None:
    """The bound `method` of the outermost wrapper of `env` that defines it (a perturbation wrapper), or None."""
    layer = env
    while isinstance(layer, gym.Wrapper):
        own = getattr(type(layer), method, None)
        if own is not None:
            return own.__get__(layer)
        layer = layer.env
    return None


def commanded_target_pose(env: gym.Env) -> tuple[np.ndarray, np.ndarray]:
    """The target a command's step is taken from: where the commands so far lead. A wrapper that delays commands
    (robot_rl.sim.perturb.PerturbedEnv under action latency) knows it; otherwise it is the env's controller target."""
    own = _outermost(env, "commanded_target_pose")
    return own() if own is not None else env.unwrapped.target_pose()


def sensor_ages(env: gym.Env) -> dict[str, float]:
    """How old each key of the env's last observation is [s]: what a wrapper that delays or drops sensor readings
    (robot_rl.sim.perturb.PerturbedEnv) says, else nothing is old."""
    own = _outermost(env, "sensor_ages")
    return own() if own is not None else {}


@functools.lru_cache(maxsize=None)
def _sensors_of(key: str) -> tuple[str, ...]:
    """The sensors behind observation key `key` (none for a reading without a sensor of its own: the wrench)."""
    from robot_rl.actor.sensors import sensors_for

    try:
        return sensors_for([key])
    except ValueError:
        return ()


class SimRobotAdapter:
    """A robot_rl sim env behind the robot's interface: safe absolute commands in; observation, reward, success out."""

    def __init__(self, env: gym.Env):
        check_sim_env(env, "SimRobotAdapter")
        limit = env.spec.max_episode_steps if env.spec is not None else None
        if not limit:
            raise ValueError("SimRobotAdapter needs an env with a time limit (make it with robot_rl.sim.loop.make_env)")
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
        position, quat = commanded_target_pose(self.env)
        observation, reward, terminated, truncated, info = self.env.step(
            sim_env_action(self.env, command, position, quat))
        return ExecutedCommand(observation, float(reward), bool(info.get("success", False)), bool(terminated),
                               bool(truncated), info)

    def close(self) -> None:
        self.env.close()


class SimLink:
    """A sim env as the `robot_rl.actor.runner.RobotLink` the episode runner drives in-process: every reset and command
    answers at once (lock-step), each frame one control period after the last on the link's own clock.

    Reset k uses the k-th of `seeds`; `on_reset(start)` sees each episode's start, `on_executed(executed)` each env
    step (filming, statistics). The env steps, reward and success of the episode under way are tallied
    (`episode_result`). A `human` (robot_rl.sim.human.SimulatedHuman) is shown what the scripted teleop node sees
    over ROS (each episode's start, each command's target, each frame) and answers through the runner's `inputs`,
    as that node's teleop messages do; it does not answer a frame the episode ends at.
    """

    name = "the sim env's reset"

    def __init__(self, adapter: SimRobotAdapter, seeds: Iterable[int | None], *,
                 on_reset: Callable[[RobotStart], None] | None = None,
                 on_executed: Callable[[ExecutedCommand], None] | None = None, human: SimulatedHuman | None = None):
        from robot_rl.actor.runner import StepInputs

        if human is not None and human.env is not adapter.env.unwrapped:
            raise ValueError("the simulated human must watch the env the link steps")
        self.adapter = adapter
        self.human = human
        self.seeds: Iterator[int | None] = iter(seeds)
        self.on_reset = on_reset
        self.on_executed = on_executed
        self.control_dt = float(adapter.env.unwrapped.control_dt)
        self.reset_service = self
        self.stamp: float | None = None
        self.inputs = StepInputs(lambda: self.stamp or 0.0)
        self.start: RobotStart | None = None
        self.last_seed: int | None = None
        self.episode_steps = 0  # env steps of the episode under way (held commands too)
        self.episode_reward = 0.0
        self.episode_success = False
        self._observation: dict[str, np.ndarray] | None = None

    def _next_frame(self, observation: dict[str, np.ndarray], period: float | None = None) -> None:
        """The next frame, `period` (default: the control period) after the last on the link's clock."""
        self.stamp = 0.0 if self.stamp is None else self.stamp + (self.control_dt if period is None else period)
        self._observation = observation

    # ResetService
    def ready(self) -> bool:
        return True

    def call(self) -> RobotStart:
        self.last_seed = next(self.seeds)
        self.start = self.adapter.reset(seed=self.last_seed)
        self.episode_steps, self.episode_reward, self.episode_success = 0, 0.0, False
        self._next_frame(self.start.observation)
        if self.on_reset is not None:
            self.on_reset(self.start)
        return self.start

    def result(self, handle) -> tuple[bool, str]:
        return True, ""

    def abandon(self, handle) -> None:
        pass

    # RobotLink
    def now(self) -> float:
        return self.stamp or 0.0

    def frame_stamp(self) -> float | None:
        return self.stamp

    pose_stamp = frame_stamp

    def observation(self, now: float) -> tuple[dict[str, np.ndarray] | None, tuple[str, ...]]:
        return self._observation, ()

    def sensor_stamps(self) -> dict[str, float]:
        """When each key of the observation and each sensor behind it was read, on the link's clock: the frame's
        stamp, less the age a delayed or repeated reading has (a sensor is as old as its oldest key)."""
        if self._observation is None:
            return {}
        ages = sensor_ages(self.adapter.env)
        stamps: dict[str, float] = {}
        for key in self._observation:
            stamp = self.stamp - ages.get(key, 0.0)
            for name in (key, *_sensors_of(key)):
                stamps[name] = min(stamp, stamps.get(name, stamp))
        return stamps

    def tcp_pose(self) -> tuple[np.ndarray, np.ndarray] | None:
        return None if self.start is None else (self.start.tcp_position, self.start.tcp_quat)

    def start_gripper(self) -> float | None:
        return None if self.start is None else self.start.gripper

    def missing_sensors_text(self) -> str:
        return "the sim env steps only when commanded"

    def reset_begun(self) -> None:
        pass

    def episode_started(self, episode: int) -> None:
        if self.human is not None:
            self.human.episode_started(self.inputs)

    def send(self, command: SafeCommand, stamp: float | None) -> None:
        """Execute the command for one control step; its reward and success (and "reset" when the env ended the
        episode) go to the runner's inputs with the next frame, and the simulated human's answer to that frame."""
        data = self.adapter.env.unwrapped.data
        started = data.time
        if self.human is not None:
            self.human.commanded(command.target_position)
        executed = self.adapter.execute(command)
        self.episode_steps += 1
        self.episode_reward += executed.reward
        self.episode_success = self.episode_success or executed.success
        self._next_frame(executed.observation, data.time - started)  # the step's own period (rate jitter)
        self.inputs.reward(executed.reward)
        self.inputs.success(executed.success)
        if executed.episode_key is not None:
            self.inputs.key(executed.episode_key)
        if self.on_executed is not None:
            self.on_executed(executed)
        if self.human is not None:
            if self.inputs.episode_key is None:
                self.human.frame(self.inputs, self.stamp)
            else:  # the episode ends at this frame (the env's end, or the caller's key in on_executed)
                self.human.hand_back(self.inputs)
        return None

    def runner_config(self, episodes: int = 0):
        """The runner settings for this link: lock-step at the env's rate and action scaling (a human's twist back
        into the env's action), its reset, `episodes` episodes."""
        from robot_rl.actor.runner import RunnerConfig

        base = self.adapter.env.unwrapped
        return RunnerConfig(mode="lockstep", control_dt=self.control_dt, reset="service", episodes=episodes,
                            frame_timeout_s=math.inf, reset_timeout_s=math.inf,
                            max_translation=float(base.max_translation), max_rotation=float(base.max_rotation))

    def episode_result(self, end: EpisodeEnd) -> EpisodeResult:
        """The episode `end` closed, as the in-process tools report it: its seed, env steps, reward and success, the
        task's failure mode if it failed, and the task's measurements at its end (the scene is as it left it)."""
        from robot_rl.actor.runner import EpisodeResult

        task = self.adapter.env.unwrapped
        failure = None if self.episode_success else task.failure_mode()
        return EpisodeResult(self.last_seed, self.episode_steps, self.episode_reward, self.episode_success,
                             float(end.record["seconds"]), failure=failure,
                             end={name: round(value, 2) for name, value in task.task_measures().items()})


def sim_runner(link: SimLink, actor, *, safety: Safety | None = None, source: str = "sim",
               outbox: Outbox | None = None, **options: Any) -> EpisodeRunner:
    """The episode loop driving `actor` (a robot_rl.actor.session.Actor) on `link`'s sim env through an `ActorSession` and
    the safety layer (the env's own limits unless `safety` is given), its transitions into `outbox` (default: none
    kept, for evaluations and recordings, which take them from the episode's end); `options` go to the
    `EpisodeRunner` (hooks, `uniform`, `log`); ValueError for a safety layer of another action size than the env's."""
    from robot_rl.actor.session import ActorSession
    from robot_rl.actor.runner import EpisodeRunner
    from robot_rl.wire.outbox import Outbox

    adapter = link.adapter
    safety = safety if safety is not None else Safety(adapter.safety_config())
    env_dim = adapter.env.action_space.shape[0]
    if safety.config.action_dim != env_dim:
        raise ValueError(f"the safety layer is configured for {safety.config.action_dim}-d actions; the env takes "
                         f"{env_dim}-d actions")
    outbox = outbox if outbox is not None else Outbox(capacity=1)
    session = ActorSession(safety, source, outbox, max_episode_steps=adapter.max_episode_steps, actor=actor)
    return EpisodeRunner(session, link, link.runner_config(), inputs=link.inputs, **options)
