"""Evaluate a policy in the sim mirror in-process: success rate with a 95 % interval, returns, lengths and a video.

`robot-rl train` evaluates its policy with `evaluate`, the ROS learner node with the same episodes as an
`evaluation_job` in its worker thread; `robot-rl eval` runs `evaluate_policy_file` on a saved policy
(``<run_dir>/policy.msgpack``), and the ROS actor node writes the same ``eval.json`` (`write_actor_eval`) for the
episodes it ran with one. Episodes run in the one episode loop (robot_rl.actor.runner.EpisodeRunner), so
the policy's commands go through an `ActorSession` and the safety layer, as on the robot. Evaluation episodes use
held-out seeds (`EVAL_SEED_OFFSET` + k) that training episodes (seed + k) and demos never use.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from robot_rl.actor.runner import EpisodeResult
from robot_rl.core.report import success_text, wilson_interval
from robot_rl.core.types import ObservationSpec
from robot_rl.sim.loop import as_actor, make_env

if TYPE_CHECKING:
    from robot_rl.learner.evaluations import EvalWorker
    from robot_rl.sim.human import SimulatedHuman

EVAL_SEED_OFFSET = 1_000_000
VIDEO_EPISODES = 2


class StopRequested(Exception):
    """A `should_stop` callback asked a loop to stop between env steps (an evaluation's partial results are
    dropped)."""


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The episodes of one evaluation, in seed order, and their statistics."""

    episodes: tuple[EpisodeResult, ...]
    video: Path | None = None

    def __len__(self) -> int:
        return len(self.episodes)

    def __iter__(self) -> Iterator[EpisodeResult]:
        return iter(self.episodes)

    @property
    def successes(self) -> int:
        return sum(bool(e.success) for e in self.episodes)

    @property
    def success_rate(self) -> float:
        return self.successes / len(self.episodes)

    @property
    def success_interval(self) -> tuple[float, float]:
        """95 % Wilson score interval of the success rate."""
        return wilson_interval(self.successes, len(self.episodes))

    @property
    def failure_modes(self) -> dict[str, int]:
        """How many failed episodes ended in each failure mode (most frequent first; "unknown" where the task names
        none)."""
        modes = Counter(e.failure or "unknown" for e in self.episodes if not e.success)
        return dict(modes.most_common())

    @property
    def mean_return(self) -> float:
        return float(np.mean([e.total_reward for e in self.episodes]))

    @property
    def mean_length(self) -> float:
        return float(np.mean([e.steps for e in self.episodes]))

    def report_row(self, env_step: int) -> dict[str, Any]:
        """This evaluation as a row of a run report's eval table (robot_rl.core.report.write_report)."""
        return {"env_step": env_step, "episodes": len(self.episodes), "successes": self.successes,
                "success_rate": self.success_rate, "mean_return": self.mean_return, "mean_length": self.mean_length,
                "failure_modes": self.failure_modes}

    def summary(self) -> dict[str, Any]:
        """JSON-ready statistics and per-episode results."""
        low, high = self.success_interval
        return {
            "episodes": len(self.episodes), "successes": self.successes, "success_rate": self.success_rate,
            "success_ci95": [low, high], "mean_return": self.mean_return, "mean_length": self.mean_length,
            "failure_modes": self.failure_modes,
            "per_episode": [{"seed": e.seed, "success": bool(e.success), "return": e.total_reward, "length": e.steps,
                             **({"failure": e.failure} if e.failure else {}), **({"end": e.end} if e.end else {})}
                            for e in self.episodes],
        }


def evaluate(
    env,
    policy,
    episodes: int,
    seed: int,
    *,
    video_path: str | Path | None = None,
    video_episodes: int = VIDEO_EPISODES,
    should_stop: Callable[[], bool] | None = None,
    on_episode: Callable[[EpisodeResult], None] | None = None,
    human: SimulatedHuman | None = None,
) -> Evaluation:
    """Run `policy` (see robot_rl.sim.loop.as_actor; an `Actor` should be deterministic) for `episodes` episodes with
    seeds seed, seed + 1, ..., through an `ActorSession` and the safety layer (the env's limits); a simulated `human`
    of `env` takes over as in training.

    With `video_path`, the first `video_episodes` episodes are filmed with the front and wrist cameras side by side
    and a "episode e/E  step t  success" caption. `should_stop` is checked between env steps; StopRequested is
    raised when it returns True.
    """
    from robot_rl.actor.runner import run_episodes
    from robot_rl.sim.robot_adapter import SimLink, SimRobotAdapter, sim_runner

    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be >= 1")
    streams: dict[str, list[np.ndarray]] = {}
    captions: list[str] = []
    filmed = min(episodes, video_episodes) if video_path is not None else 0
    results: list[EpisodeResult] = []

    def film(executed) -> None:
        if len(results) < filmed:
            for camera, frame in env.unwrapped.camera_frames().items():
                streams.setdefault(camera, []).append(frame)
            captions.append(f"episode {len(results) + 1}/{filmed}  step {link.episode_steps}"
                            + ("  success" if link.episode_success else ""))

    def episode_done(end) -> None:
        results.append(link.episode_result(end))
        if on_episode is not None:
            on_episode(results[-1])

    link = SimLink(SimRobotAdapter(env), range(seed, seed + episodes), on_executed=film, human=human)
    runner = sim_runner(link, as_actor(policy, env.action_space.shape[0]), source="eval",
                        on_episode_end=episode_done)
    run_episodes(runner, episodes, should_stop=should_stop)
    if len(results) < episodes:
        raise StopRequested
    video = None
    if filmed:
        from robot_rl.data.video import write_video

        fps = env.metadata.get("render_fps") or 1.0 / env.unwrapped.control_dt
        write_video(video_path, [np.stack(frames) for frames in streams.values()], fps=fps, captions=captions)
        video = Path(video_path)
    return Evaluation(tuple(results), video)


def evaluation_job(policy, episodes: int, seed: int, video_path=None) -> Callable[[EvalWorker], Evaluation]:
    """A job for the learner node's `EvalWorker`: `episodes` deterministic episodes of `policy` (a snapshot of the
    learner's policy) in the worker's env, exactly as in-process training evaluates; returns the `Evaluation`
    (StopRequested if stopped)."""
    from robot_rl.actor.session import Actor

    def run(worker: EvalWorker) -> Evaluation:
        worker.progress = (0, episodes)

        def on_episode(result) -> None:
            worker.progress = (worker.progress[0] + 1, episodes)

        return evaluate(worker.env(), Actor(policy, deterministic=True), episodes, seed, video_path=video_path,
                        should_stop=worker.should_stop, on_episode=on_episode)

    return run


def env_settings_for(spec: ObservationSpec) -> dict[str, Any]:
    """make_env's settings (obs_mode, image_size, wrench) for the sim env whose observations a policy with this spec
    reads (image_size 64 where it reads no image)."""
    images = [spec[k] for k in spec.image_keys]
    if images:
        settings = {"obs_mode": "state+pixels" if "object_state" in spec else "pixels",
                    "image_size": images[0].shape[0]}
    else:
        settings = {"obs_mode": "state", "image_size": 64}
    return {**settings, "wrench": "wrench" in spec}


def task_of_run(policy_path: str | Path) -> str | None:
    """The task in the `config.json` of the run folder that holds the policy (file or folder), if there is one."""
    path = Path(policy_path)
    folder = path if path.is_dir() else path.parent
    for candidate in (folder, folder.parent):
        try:
            task = json.loads((candidate / "config.json").read_text()).get("task")
        except (OSError, ValueError, AttributeError):
            continue
        if task:
            return task
    return None


def evaluate_policy(
    policy,
    task: str,
    episodes: int,
    *,
    seed: int = EVAL_SEED_OFFSET,
    obs_mode: str | None = None,
    image_size: int | None = None,
    out: str | Path | None = None,
    video: bool = False,
    video_episodes: int = VIDEO_EPISODES,
    on_episode: Callable[[EpisodeResult], None] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """Evaluate any `robot_rl.policies.base.Policy` (deterministic sampling, chunks executed receding-horizon) in the sim
    mirror; with `out`, writes `eval.json` (and `eval.mp4`) there. Returns the summary. `seed` below
    EVAL_SEED_OFFSET is taken as an offset from it (held-out seeds)."""
    seed = seed if seed >= EVAL_SEED_OFFSET else EVAL_SEED_OFFSET + seed
    spec = policy.observation_spec
    needed = env_settings_for(spec)
    obs_mode = obs_mode or needed["obs_mode"]
    image_size = image_size or needed["image_size"]
    env = make_env(task, obs_mode=obs_mode, image_size=image_size, wrench=needed["wrench"])
    out = Path(out) if out is not None else None
    try:
        _check_observations(env, spec, policy.action_dim, name or f"({policy.kind})", task, obs_mode, image_size)
        created = out is not None and not out.exists()
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
        try:
            evaluation = evaluate(env, policy, episodes, seed,
                                  video_path=out / "eval.mp4" if video and out is not None else None,
                                  video_episodes=video_episodes, on_episode=on_episode)
        except BaseException:
            if created:  # no empty output folder from a stopped evaluation
                shutil.rmtree(out, ignore_errors=True)
            raise
    finally:
        env.close()
    summary = evaluation_summary(evaluation, task=task, obs_mode=obs_mode, policy_kind=policy.kind, first_seed=seed)
    if out is not None:
        (out / "eval.json").write_text(json.dumps(summary, indent=2))
    return summary


def evaluate_policy_file(
    policy_path: str | Path,
    *,
    task: str | None = None,
    episodes: int = 20,
    seed: int = EVAL_SEED_OFFSET,
    obs_mode: str | None = None,
    image_size: int | None = None,
    out: str | Path | None = None,
    video: bool = False,
    video_episodes: int = VIDEO_EPISODES,
    on_episode: Callable[[EpisodeResult], None] | None = None,
    device: str = "auto",
    inference_steps: int | None = None,
) -> dict[str, Any]:
    """Evaluate a saved policy of any kind (a SAC ``policy.msgpack``, a policy folder, or a run folder holding
    either) deterministically; writes `eval.json` (and `eval.mp4`) to `out`, returns the summary.

    `task` defaults to the task of the run folder holding the policy, `obs_mode` and `image_size` to what the
    policy's observation spec needs, `out` to an `eval` folder next to the policy; `inference_steps` overrides a
    diffusion policy's DDIM steps. Bad input (missing or foreign policy file, unknown task, observations that do not
    match the policy) raises a ValueError naming it.
    """
    from robot_rl.policies.base import set_inference_steps
    from robot_rl.policies.checkpoint import load_policy

    path = Path(policy_path)
    policy = load_policy(path, device=device)
    if inference_steps is not None:
        set_inference_steps(policy, inference_steps)
    located, fields = saved_policy_fields(path)
    task = task or task_of_run(located)
    if task is None:
        raise ValueError(f"no --task given and no run config.json next to {located} to take it from")
    out = Path(out) if out is not None else located.parent / "eval"
    summary = evaluate_policy(policy, task, episodes, seed=seed, obs_mode=obs_mode, image_size=image_size, out=out,
                              video=video, video_episodes=video_episodes, on_episode=on_episode, name=str(located))
    extra: dict[str, Any] = {"policy": fields.pop("policy")}
    if inference_steps is not None:
        extra["inference_steps"] = inference_steps
    summary = {**extra, **fields, **summary}
    (out / "eval.json").write_text(json.dumps(summary, indent=2))
    return summary


def evaluation_summary(evaluation: Evaluation, *, task: str, obs_mode: str, policy_kind: str,
                       first_seed: int | None) -> dict[str, Any]:
    """What `eval.json` holds about an evaluation (`robot-rl eval`, and the ROS graph's `sim_eval.yaml`)."""
    return {"task": task, "obs_mode": obs_mode, "policy_kind": policy_kind, "first_seed": first_seed,
            **evaluation.summary(), "video": str(evaluation.video) if evaluation.video else None}


def saved_policy_fields(policy_path: str | Path) -> tuple[Path, dict[str, Any]]:
    """(where the saved policy is, what `eval.json` says about it): its path, and for a SAC policy file its weights
    version and the transitions and updates it was trained with."""
    from robot_rl.policies.checkpoint import find_policy_folder
    from robot_rl.wire.policy_file import read_policy_file, resolve_policy_path

    folder = find_policy_folder(policy_path)
    located = folder if folder is not None else resolve_policy_path(policy_path)
    fields: dict[str, Any] = {"policy": str(located)}
    if folder is None:
        message = read_policy_file(located)
        fields.update({"weights_version": message.version, "policy_transitions": message.transitions,
                       "policy_updates": message.updates})
    return located, fields


def write_actor_eval(results: list[dict], *, weights_path: str, eval_out: str, policy, task: str, obs_mode: str,
                     inference_steps: int, mode: str, deterministic: bool) -> tuple[Path, str]:
    """`robot-rl eval`'s eval.json (the same statistics) for the episodes the ROS actor node ran with a saved policy
    (`results`: robot_rl.actor.runner.EpisodeRunner.results); the sim node's random stream places the objects, so
    episodes carry no seed. Returns the file and a one-line summary."""
    located, fields = saved_policy_fields(weights_path)
    out = located.parent / "eval" if eval_out == "auto" else Path(eval_out)
    evaluation = Evaluation(tuple(EpisodeResult(None, r["steps"], float(r["return"]), r["success"], r["seconds"])
                                  for r in results))
    obs_mode = obs_mode or env_settings_for(policy.observation_spec)["obs_mode"]
    summary = {"policy": fields.pop("policy"), **({"inference_steps": inference_steps} if inference_steps else {}),
               **fields, **evaluation_summary(evaluation, task=task, obs_mode=obs_mode, policy_kind=policy.kind,
                                              first_seed=None),
               "mode": mode, "deterministic": deterministic}
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(summary, indent=2))
    return out / "eval.json", (f"success {success_text(evaluation.successes, len(evaluation))}, return "
                               f"{evaluation.mean_return:.2f}, length {evaluation.mean_length:.1f}")


def _check_observations(env, spec: ObservationSpec, action_dim: int, policy_file: Path | str, task: str,
                        obs_mode: str, image_size: int) -> None:
    """ValueError if the env does not give the observation entries and action size the policy was trained on."""
    provided = ObservationSpec.from_space(env.observation_space)
    wrong = [f"{k} {spec[k].shape}" + (f" (env: {provided[k].shape})" if k in provided else " (env: missing)")
             for k in spec.keys if k not in provided or provided[k] != spec[k]]
    if wrong:
        raise ValueError(f"policy {policy_file} reads {', '.join(wrong)}: {task} with --obs-mode {obs_mode} "
                         f"--image-size {image_size} does not provide them")
    if env.action_space.shape != (action_dim,):
        raise ValueError(f"policy {policy_file} outputs {action_dim}-d actions but {task} takes "
                         f"{env.action_space.shape[0]}-d actions")
