"""In-process sim tools: make envs by task name, run any policy through the actor (`as_actor`), record episodes.

Episodes run in the one episode loop (robot_rl.actor.runner.EpisodeRunner over robot_rl.sim.robot_adapter.SimLink), so
every command goes through an `ActorSession` and the safety layer, as on the robot."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from robot_rl.actor.runner import EpisodeResult
from robot_rl.core.protocols import Policy
from robot_rl.data.episode_format import specs_from_spaces
from robot_rl.data.episode_writer import EpisodeWriter
from robot_rl.data.episodes import DatasetError
from robot_rl.policies.base import ActionChunk, PolicyBase

ENV_NAMESPACE = "robot_rl"


def env_id(task: str) -> str:
    """`PickCube-v0` or `robot_rl/PickCube-v0` -> the registered gymnasium id."""
    return task if "/" in task else f"{ENV_NAMESPACE}/{task}"


def make_env(task: str, **kwargs) -> gym.Env:
    """Create a registered robot_rl env, with a clear error for an unknown task."""
    import robot_rl.sim  # noqa: F401  (registers the envs)

    name = env_id(task)
    if name not in gym.registry:
        known = sorted(k.split("/", 1)[1] for k in gym.registry if k.startswith(f"{ENV_NAMESPACE}/"))
        raise ValueError(f"unknown task {task!r}; known tasks: {', '.join(known)}")
    return gym.make(name, **kwargs)


def sim_task_episode_steps(task: str) -> int:
    """A registered sim task's episode length (its task spec), or 0 for a task that is not a sim task."""
    import robot_rl.sim  # noqa: F401  (registers the envs)

    try:
        return int(gym.spec(env_id(task)).max_episode_steps or 0)
    except gym.error.Error:
        return 0


def sim_run_steps(robot, task: str) -> int:
    """The sim task's episode length when a run on robot file `robot` runs `task` in the sim mirror (a `sim: true`
    file and a registered sim task), else 0: a real robot's file decides, whatever its task is named."""
    return sim_task_episode_steps(task) if robot.sim else 0


def run_episode_steps(robot, task: str) -> int:
    """A run's episode length: the sim task's in the sim mirror (`sim_run_steps`), else the robot file's."""
    return sim_run_steps(robot, task) or robot.max_episode_steps


class StepPolicy(PolicyBase):
    """An `act(obs)` policy (robot_rl.core.protocols.Policy: a scripted expert) as a robot_rl.policies Policy of one-action
    chunks, so an `Actor` runs it."""

    obs_horizon = 1
    chunk_length = 1
    observation_spec = None
    observation_keys: tuple[str, ...] = ()
    device = "cpu"

    def __init__(self, policy: Policy, action_dim: int):
        self.policy = policy
        self.action_dim = int(action_dim)
        self.kind = type(policy).__name__

    def reset(self) -> None:
        self.policy.reset()

    def act_chunk(self, history, *, deterministic: bool = True) -> ActionChunk:
        action = np.asarray(self.policy.act(history[-1]), dtype=np.float32)[None]
        return ActionChunk(action, action)

    def learner_action_of(self, executed: np.ndarray, info) -> np.ndarray:
        return np.asarray(executed, dtype=np.float32)


def as_actor(policy, action_dim: int):
    """`policy` as the robot_rl.actor.session.Actor an `ActorSession` drives: an Actor as it is; a robot_rl.policies Policy
    acting deterministically (chunks executed receding-horizon); an `act(obs)` policy through `StepPolicy`."""
    from robot_rl.actor.session import Actor

    if isinstance(policy, Actor):
        return policy
    return Actor(policy if hasattr(policy, "act_chunk") else StepPolicy(policy, action_dim), deterministic=True)


def max_attempts_for(episodes: int, only_successes: bool) -> int:
    """How many episodes `record_episodes` may run to keep `episodes` of them."""
    return 3 * episodes if only_successes else episodes


def first_seed(writer: EpisodeWriter, seed: int | None, attempts: int) -> int:
    """The seed of the first episode to record: `seed`, or (None) one past the dataset's stored seeds.

    An explicit seed whose range would repeat a stored episode's seed is refused: it would record duplicates.
    """
    if seed is None:
        return writer.next_seed
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    stored = writer.seeds
    repeated = np.unique(stored[(stored >= seed) & (stored < seed + attempts)])
    if len(repeated):
        shown = ", ".join(map(str, repeated[:5])) + (", ..." if len(repeated) > 5 else "")
        raise DatasetError(
            f"{writer.path} already holds episodes with seeds {shown}; seeds {seed}..{seed + attempts - 1} would "
            f"record them again: leave the seed out to continue at {writer.next_seed}"
        )
    return seed


def record_episodes(
    env: gym.Env,
    policy: Policy,
    writer: EpisodeWriter,
    episodes: int,
    *,
    seed: int | None = None,
    only_successes: bool = False,
    max_attempts: int | None = None,
    on_episode: Callable[[EpisodeResult, bool], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[EpisodeResult]:
    """Record `episodes` episodes to `writer` (optionally keeping only successful ones): `policy` (see `as_actor`)
    acts through an `ActorSession` and the safety layer, and each step's transition is stored (the executed action,
    as the actor node records; a command the safety layer held leaves no step).

    Attempt k is reset with seed `seed + k`, stored with the episode; `seed=None` continues after the stored seeds.
    `should_stop()` is checked between env steps: when it returns True the episode under way is discarded and
    the episodes recorded so far are returned.
    """
    from robot_rl.actor.runner import run_episodes
    from robot_rl.sim.robot_adapter import SimLink, SimRobotAdapter, sim_runner

    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    results: list[EpisodeResult] = []
    max_attempts = max_attempts if max_attempts is not None else max_attempts_for(episodes, only_successes)
    seed = first_seed(writer, seed, max_attempts)

    def on_episode_end(end) -> None:
        result = link.episode_result(end)
        keep = bool(end.steps) and (result.success or not only_successes)  # no steps: every command was held
        if keep:
            started = end.steps[0][1]
            for transition, wall_time in end.steps:
                writer.add_step(transition.observation, transition.action, transition.reward, transition.terminated,
                                transition.truncated, transition.intervention, wall_time - started)
            writer.end_episode(end.final_observation, success=result.success, seed=result.seed)
            results.append(result)
        if on_episode is not None:
            on_episode(result, keep)

    link = SimLink(SimRobotAdapter(env), range(seed, seed + max_attempts))
    runner = sim_runner(link, as_actor(policy, env.action_space.shape[0]), source="record",
                        on_episode_end=on_episode_end)
    for _ in range(max_attempts):
        if len(results) >= episodes or not run_episodes(runner, 1, should_stop=should_stop):
            break
    return results


def writer_for_env(env: gym.Env, path, task: str, **kwargs) -> EpisodeWriter:
    """An `EpisodeWriter` whose specs and fps come from the env."""
    obs_spec, action_spec = specs_from_spaces(env.observation_space, env.action_space)
    fps = env.metadata.get("render_fps") or 1.0 / env.unwrapped.control_dt
    return EpisodeWriter(path, obs_spec, action_spec, fps=fps, task=task, **kwargs)
