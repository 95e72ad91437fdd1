"""In-process env loop: make envs by task name, run and record episodes."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np

from robot_rl.core import Policy
from robot_rl.data.episodes import DatasetError, EpisodeWriter, specs_from_spaces

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


@dataclasses.dataclass
class EpisodeResult:
    """What one episode produced."""

    seed: int | None
    steps: int
    total_reward: float
    success: bool
    seconds: float


def run_episode(
    env: gym.Env,
    policy: Policy,
    *,
    seed: int | None = None,
    on_step: Callable[..., None] | None = None,
) -> tuple[EpisodeResult, dict]:
    """Run `policy` for one episode; `on_step(obs, action, reward, terminated, truncated, info)` sees each step.

    Returns the result and the final observation.
    """
    obs, info = env.reset(seed=seed)
    policy.reset()
    start = time.perf_counter()
    steps, total_reward, success = 0, 0.0, False
    while True:
        action = np.asarray(policy.act(obs), dtype=np.float32)
        next_obs, reward, terminated, truncated, info = env.step(action)
        if on_step is not None:
            on_step(obs, action, reward, terminated, truncated, info)
        steps += 1
        total_reward += float(reward)
        success = success or bool(info.get("success", False))
        obs = next_obs
        if terminated or truncated:
            break
    result = EpisodeResult(seed, steps, total_reward, success, time.perf_counter() - start)
    return result, obs


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


class _Stop(Exception):
    """`record_episodes`' should_stop said stop, in the middle of an episode."""


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
    """Record `episodes` episodes to `writer` (optionally keeping only successful ones).

    Attempt k is reset with seed `seed + k`, stored with the episode; `seed=None` continues after the stored seeds.
    `should_stop()` is checked after every env step: when it returns True the episode under way is discarded and
    the episodes recorded so far are returned.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    results: list[EpisodeResult] = []
    attempts = 0
    max_attempts = max_attempts if max_attempts is not None else max_attempts_for(episodes, only_successes)
    seed = first_seed(writer, seed, max_attempts)
    while len(results) < episodes and attempts < max_attempts:
        episode_seed = seed + attempts
        attempts += 1

        def on_step(obs, action, reward, terminated, truncated, info):
            writer.add_step(obs, action, reward, terminated, truncated)
            if should_stop is not None and should_stop():
                raise _Stop

        try:
            result, final_obs = run_episode(env, policy, seed=episode_seed, on_step=on_step)
        except _Stop:
            writer.discard_episode()
            break
        keep = result.success or not only_successes
        if keep:
            writer.end_episode(final_obs, success=result.success, seed=episode_seed)
            results.append(result)
        else:
            writer.discard_episode()
        if on_episode is not None:
            on_episode(result, keep)
    return results


def writer_for_env(env: gym.Env, path, task: str, **kwargs) -> EpisodeWriter:
    """An `EpisodeWriter` whose specs and fps come from the env."""
    obs_spec, action_spec = specs_from_spaces(env.observation_space, env.action_space)
    fps = env.metadata.get("render_fps") or 1.0 / env.unwrapped.control_dt
    return EpisodeWriter(path, obs_spec, action_spec, fps=fps, task=task, **kwargs)
