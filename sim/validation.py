"""Validate a policy in the sim mirror before a robot moves: a suite of real-world conditions, a report, a record.

`robot-rl validate --policy P --robot R --task T` runs the policy (any kind) through the same actor, safety layer
and sim adapter as in-process training, under each condition of a suite (sim/suites/<name>.yaml, or a YAML file:
perturbations are described in robot_rl.sim.perturb), every condition on the same held-out episode seeds. A policy
that reads images sees through the robot file's cameras, each rendered from the sim camera it maps to and cut and
fitted as on the robot (robot_rl.sim.robot_cameras); the record says what each was rendered from. Per
condition: success rate with a 95 % Wilson interval, episode length, safety holds and the failure modes seen. It
writes report.md (a table, a bar chart of success per condition against nominal, a grid video of failures),
results.json, and a validation record next to the policy (policy and robot file hashes, suite, results, verdict
against the suite's thresholds) that the deployment gate checks before a real robot runs the policy.

Conditions run in worker processes (episodes split into blocks); every episode's draws are seeded by (suite seed,
condition, episode seed), so results do not depend on the number of workers.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from robot_rl.actor.deploy_gate import (SuiteTerms, file_digest, policy_digest, policy_location, read_suite_file,
                                        suite_terms_of, tightened, write_record)
from robot_rl.core.report import wilson_interval
if TYPE_CHECKING:
    from robot_rl.sim.perturb import Condition

BLOCK_EPISODES = 10  # episodes per worker task
FILM_SIZE = 128


@dataclasses.dataclass(frozen=True)
class ValidateConfig:
    """Validate a policy in the sim mirror under a suite of real-world conditions; writes a report and a validation
    record next to the policy (what a real robot's actor checks before it runs the policy). Exit status: 0 the
    verdict is PASS, 1 it is FAIL, 2 bad input, 130 / 143 stopped (SIGINT / SIGTERM)."""

    policy: Path
    """Policy to validate: a policy folder, a policy.msgpack, or a run folder holding one."""
    robot: str = "sim_panda"
    """Robot file (path, or a shipped robot's name) the record is for: its limits drive the safety layer in the sim,
    a pixel policy sees through its cameras (each rendered from its sim camera: cameras.<name>.sim_camera) and its
    hash goes in the record."""
    task: str | None = None
    """Sim task (default: the task of the run folder holding the policy)."""
    suite: str | None = None
    """Suite: a shipped suite's name (sim/suites/) or a YAML file (default: the robot file's `validation.suite`, judged
    with its thresholds: the suite the deployment gate asks for)."""
    episodes: int | None = None
    """Episodes per condition (default: the suite's)."""
    seed: int | None = None
    """Suite seed: episode seeds and perturbation draws (default: the suite's)."""
    workers: int | None = None
    """Worker processes (default: one per CPU core, at most one per block of episodes)."""
    out: Path | None = None
    """Report folder (default: validation/<suite>-<robot> next to the policy)."""
    video: bool = True
    """Film the first failed episode of each condition into a grid video."""
    device: str = "auto"
    """Torch device of a torch policy: auto (cuda when there is one), cpu, cuda or cuda:N (as `robot-rl eval`)."""

    def __post_init__(self) -> None:
        problems = []
        if self.episodes is not None and self.episodes < 1:
            problems.append(f"episodes={self.episodes} must be >= 1")
        if self.workers is not None and self.workers < 1:
            problems.append(f"workers={self.workers} must be >= 1")
        if self.seed is not None and self.seed < 0:
            problems.append(f"seed={self.seed} must be >= 0")
        if problems:
            raise ValueError(f"invalid validate options: {'; '.join(problems)}")


@dataclasses.dataclass(frozen=True)
class Suite(SuiteTerms):
    """A validation suite: its conditions (the first is nominal), episodes per condition, seed, and the gate's terms."""

    conditions: tuple[Condition, ...] = ()
    episodes: int = 50
    seed: int = 0

    @property
    def nominal(self) -> Condition:
        return self.conditions[0]


def required_suite(validation, location: str | Path) -> Suite:
    """The suite a policy must pass to drive a robot: the suite at `location` with the thresholds its robot file's
    `validation` section (a robot_rl.actor.robot_config.ValidationConfig) tightens."""
    return tightened(load_suite(location), validation)


def load_suite(name_or_path: str | Path) -> Suite:
    """A shipped suite by name or a suite YAML file; ConditionError (a ValueError) names what is wrong."""
    from robot_rl.sim.perturb import Condition, ConditionError

    try:
        data, text, where = read_suite_file(name_or_path)
        terms = suite_terms_of(data, text, where)
    except ConditionError:
        raise
    except ValueError as error:
        raise ConditionError(str(error)) from None
    items = data.get("conditions")
    if not isinstance(items, list) or not items:
        raise ConditionError(f"suite file {where}: `conditions` must be a non-empty list (the first is nominal)")
    conditions = tuple(Condition.from_dict(c, f"{where} condition {i + 1}") for i, c in enumerate(items))
    names = [c.name for c in conditions]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConditionError(f"suite file {where}: condition names repeat: {', '.join(repeated)}")
    if conditions[0].perturbations:
        raise ConditionError(f"suite file {where}: the first condition ({names[0]}) is the nominal one: it takes no "
                             "perturbations")
    episodes, seed = data.get("episodes", 50), data.get("seed", 0)
    if not (isinstance(episodes, int) and episodes >= 1 and isinstance(seed, int) and seed >= 0):
        raise ConditionError(f"suite file {where}: episodes={episodes!r} must be >= 1 and seed={seed!r} >= 0")
    return Suite(**dataclasses.asdict(terms), conditions=conditions, episodes=episodes, seed=seed)


# ----- running episodes ---------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Block:
    """A worker's task: episodes [first, first + count) of one condition."""

    policy: str
    robot: str
    task: str
    condition: Condition
    suite_seed: int
    first: int
    count: int
    device: str
    film: tuple[int, ...] = ()
    """Episodes of the block to film (front and wrist cameras)."""


_WORKER_CACHE: dict[str, Any] = {}


def _cached_policy(path: str | Path, device: str):
    """The policy at `path`, loaded once per process (and again only when its bytes change)."""
    from robot_rl.policies.checkpoint import load_policy

    try:
        key = f"{policy_digest(path)}|{device}"
    except OSError:  # missing or unreadable: load_policy says what is wrong
        key = None
    if key is None or _WORKER_CACHE.get("key") != key:
        _WORKER_CACHE.clear()
        _WORKER_CACHE["policy"] = load_policy(path, device=device)
        _WORKER_CACHE["key"] = key
    return _WORKER_CACHE["policy"]


def _worker_setup() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


def _pool_worker_init() -> None:
    """A worker process leaves Ctrl-C to the parent, which stops the pool (no traceback from every worker)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker_setup()


def run_block(block: Block) -> dict[str, Any]:
    """Run one block of episodes; returns per-episode results (and frames of the filmed ones)."""
    from robot_rl.actor.session import Actor
    from robot_rl.actor.runner import run_episodes
    from robot_rl.actor.robot_config import load_robot_config
    from robot_rl.actor.safety import Safety
    from robot_rl.actor.sensors import sensors_for
    from robot_rl.sim.evaluate import EVAL_SEED_OFFSET
    from robot_rl.sim.perturb import PerturbedEnv
    from robot_rl.sim.robot_adapter import sim_runner
    from robot_rl.sim.robot_cameras import validation_env

    _worker_setup()
    policy = _cached_policy(block.policy, block.device)
    robot = load_robot_config(block.robot)  # the policy's images come through its cameras
    env = PerturbedEnv(validation_env(block.task, policy.observation_spec, robot), block.condition, block.suite_seed)
    try:
        indices = range(block.first, block.first + block.count)
        watch = _EpisodeWatch(env, block.film, indices, [EVAL_SEED_OFFSET + block.suite_seed + i for i in indices])
        # The sensors the policy reads are watched as on the robot: a delayed or repeated reading older than the
        # robot file's limit holds the command.
        required = sensors_for(k for k in policy.observation_spec.keys
                               if k in ("state", "object_state") or k.startswith("images/"))
        runner = sim_runner(watch.link, Actor(policy, deterministic=True),
                            safety=Safety(robot.safety_config(action_dim=policy.action_dim, required_sensors=required)),
                            source="validate", on_episode_end=watch.ended)
        run_episodes(runner, block.count)
        return {"condition": block.condition.name, "first": block.first, "episodes": watch.episodes,
                "frames": {i: {k: np.stack(v) for k, v in f.items()} for i, f in watch.frames.items() if f},
                "fps": 1.0 / env.unwrapped.control_dt}
    finally:
        env.close()


class _EpisodeWatch:
    """The sim link of a block's episodes (episode `indices[k]` reset with `seeds[k]`), and what each episode did:
    physics, object motion, safety holds, its film."""

    def __init__(self, env, film: Sequence[int], indices: range, seeds: Sequence[int]):
        from robot_rl.sim.perturb import free_bodies
        from robot_rl.sim.robot_adapter import SimLink, SimRobotAdapter

        self.link = SimLink(SimRobotAdapter(env), seeds, on_reset=self.started, on_executed=self.executed)
        self.env = env
        self.base = env.unwrapped
        self.objects = free_bodies(self.base.model)
        self.film = film
        self.indices = indices
        self.episodes: list[dict[str, Any]] = []
        self.frames: dict[int, dict[str, list[np.ndarray]]] = {}

    def started(self, start) -> None:
        self.index = self.indices[len(self.episodes)]
        self.start_positions = self.base.data.xpos[self.objects].copy()
        self.moved, self.lifted, self.unstable = 0.0, 0.0, False

    def executed(self, executed) -> None:
        self.unstable = self.unstable or bool(executed.info.get("physics_unstable", False))
        if self.objects:
            offsets = self.base.data.xpos[self.objects] - self.start_positions
            self.moved = max(self.moved, float(np.linalg.norm(offsets, axis=1).max()))
            self.lifted = max(self.lifted, float(offsets[:, 2].max()))
        if self.index in self.film:
            film = self.frames.setdefault(self.index, {})
            for camera, frame in self.base.camera_frames(FILM_SIZE).items():
                film.setdefault(camera, []).append(frame)

    def ended(self, end) -> None:
        link = self.link
        holds = link.episode_steps - end.record["steps"]  # executed commands the safety layer held: no transition
        success = link.episode_success
        self.episodes.append({
            "seed": link.last_seed, "success": success, "length": link.episode_steps, "holds": int(holds),
            "failure": None if success else failure_mode(self.unstable, holds, self.base.failure_mode(),
                                                         bool(self.objects), self.moved, self.lifted),
            "perturbation": dict(self.env.drawn)})


def failure_mode(unstable: bool, holds: int, task_mode: str | None, has_objects: bool, moved_m: float,
                 lifted_m: float) -> str:
    """A failed episode's most telling failure mode, from what the episode did: unstable physics, safety holds, then
    the task's own reading of its end (`task_mode`, the env's failure_mode), then how far the objects moved."""
    if unstable:
        return "physics unstable"
    if holds:
        return "held by the safety layer"
    if task_mode is not None:
        return task_mode
    if not has_objects:
        return "task not completed"
    if moved_m < 0.01:
        return "object never moved"
    if lifted_m < 0.01:
        return "object pushed, never lifted"
    return "object lifted, task not completed"


# ----- results ------------------------------------------------------------------------------------------------------

def condition_summary(condition: Condition, episodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Success rate with its 95 % Wilson interval, mean length, safety holds and failure modes of one condition."""
    successes = sum(bool(e["success"]) for e in episodes)
    low, high = wilson_interval(successes, len(episodes))
    return {
        "condition": condition.name, "description": condition.description, "episodes": len(episodes),
        "successes": successes, "success_rate": successes / len(episodes), "success_ci95": [low, high],
        "mean_length": float(np.mean([e["length"] for e in episodes])),
        "safety_holds": int(sum(e["holds"] for e in episodes)),
        "episodes_with_holds": int(sum(e["holds"] > 0 for e in episodes)),
        "failure_modes": dict(Counter(e["failure"] for e in episodes if e["failure"]).most_common()),
        "per_episode": list(episodes),
    }


def verdict(suite: Suite, results: Sequence[Mapping[str, Any]]) -> tuple[bool, list[str]]:
    """(pass, the reasons it does not): every condition reaches its minimum and loses at most max_drop to nominal,
    over at least min_episodes episodes each."""
    nominal = results[0]["success_rate"]
    failures = []
    fewest = min(r.get("episodes", suite.min_episodes) for r in results)
    if fewest < suite.min_episodes:
        failures.append(f"{fewest} episodes per condition: a verdict needs at least {suite.min_episodes}")
    for condition, result in zip(suite.conditions, results, strict=True):
        floor = suite.min_success if condition.min_success is None else condition.min_success
        rate = result["success_rate"]
        if rate < floor:
            failures.append(f"{condition.name}: success {rate:.0%} < {floor:.0%}")
        elif condition is not suite.nominal and nominal - rate > suite.max_drop + 1e-9:
            failures.append(f"{condition.name}: success {rate:.0%} is {nominal - rate:.0%} below nominal "
                            f"({nominal:.0%}; at most {suite.max_drop:.0%})")
    return not failures, failures


def validate(cfg: ValidateConfig, *, on_block: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run the suite on the policy, write the report, results.json and the validation record; returns the results.

    Bad input (a missing policy, an unknown robot or suite, a task without the policy's observations) raises a
    ValueError naming it before any episode runs. `on_block(done, total)` reports progress in episodes.
    """
    from robot_rl.actor.robot_config import load_robot_config, resolve_robot_path
    from robot_rl.sim.evaluate import task_of_run

    located = policy_location(cfg.policy)
    robot_path = resolve_robot_path(cfg.robot)
    robot = load_robot_config(robot_path)
    suite = _suite_for(cfg.suite, robot)
    task = cfg.task or task_of_run(located)
    if task is None:
        raise ValueError(f"no --task given and no run config.json next to {located} to take it from")
    episodes = cfg.episodes or suite.episodes
    seed = suite.seed if cfg.seed is None else cfg.seed
    _check_policy(located, task, cfg.device, suite, robot)
    out = cfg.out or located.parent / "validation" / f"{suite.name}-{robot.name}"
    from robot_rl.core.interrupts import first_missing

    created = first_missing(out)  # the outermost folder made for it (`validation/` too, the first time)
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _validate(cfg, suite, located, robot, robot_path, task, episodes, seed, out, on_block)
    except BaseException:
        if created is not None:  # stopped (Ctrl-C) or failed: no half-made report folder, and no record
            shutil.rmtree(created, ignore_errors=True)
        raise


def _suite_for(name_or_path: str | None, robot) -> Suite:
    """The suite to validate with: the robot file's (with its thresholds) unless another one is named."""
    required = required_suite(robot.validation, robot.suite_location())
    if name_or_path is None:
        return required
    suite = load_suite(name_or_path)
    return required if suite.sha256 == required.sha256 else suite


def _validate(cfg: ValidateConfig, suite: Suite, located: Path, robot, robot_path: Path, task: str, episodes: int,
              seed: int, out: Path, on_block) -> dict[str, Any]:
    """`validate` once its inputs are checked and `out` exists."""
    from robot_rl.sim.robot_cameras import camera_sources

    cameras = camera_sources(robot, _cached_policy(located, cfg.device).observation_spec)
    blocks = [Block(str(located), str(robot_path), task, condition, seed, first,
                    min(BLOCK_EPISODES, episodes - first), cfg.device)
              for condition in suite.conditions for first in range(0, episodes, BLOCK_EPISODES)]
    workers = max(1, min(cfg.workers or (os.cpu_count() or 1), len(blocks)))
    started = time.perf_counter()
    outputs = _run_blocks(blocks, workers, on_block, episodes * len(suite.conditions))
    by_condition: dict[str, list[dict]] = {c.name: [] for c in suite.conditions}
    for output in sorted(outputs, key=lambda o: (o["condition"], o["first"])):
        by_condition[output["condition"]].extend(output["episodes"])
    results = [condition_summary(c, by_condition[c.name]) for c in suite.conditions]
    passed, reasons = verdict(suite, results)
    for result in results:
        result["passed"] = not any(reason.startswith(f"{result['condition']}: ") for reason in reasons)

    video = None
    if cfg.video:
        firsts = [(c, next((i for i, e in enumerate(by_condition[c.name]) if not e["success"]), None))
                  for c in suite.conditions]
        film = [Block(str(located), str(robot_path), task, c, seed, i, 1, cfg.device, (i,))
                for c, i in firsts if i is not None]
        if film:
            filmed = _run_blocks(film, min(workers, len(film)), None, 0)
            video = write_failure_grid(out / "failures.mp4", filmed, filmed[0]["fps"])
    seconds = time.perf_counter() - started
    summary = {
        "policy": str(located), "policy_sha256": policy_digest(located), "robot": str(robot_path),
        "robot_name": robot.name, "robot_sha256": file_digest(robot_path), "cameras": cameras, "task": task,
        "suite": suite.name,
        "suite_path": suite.path, "suite_sha256": suite.sha256, "episodes_per_condition": episodes,
        "seed": seed, "workers": workers, "seconds": round(seconds, 1),
        "thresholds": suite.thresholds,
        "verdict": "pass" if passed else "fail", "verdict_reasons": reasons,
        "conditions": results, "video": str(video) if video else None,
        "validated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    (out / "results.json").write_text(json.dumps(summary, indent=2))
    summary["report"] = str(write_report(out, summary))
    record = {k: summary[k] for k in ("policy_sha256", "robot", "robot_name", "robot_sha256", "task", "suite",
                                      "suite_path", "suite_sha256", "seed", "episodes_per_condition", "thresholds",
                                      "verdict", "verdict_reasons", "validated_at")}
    record["report"] = summary["report"]
    record["cameras"] = cameras  # what each camera the policy reads was rendered from
    record["conditions"] = [{k: r[k] for k in ("condition", "episodes", "successes", "success_rate", "success_ci95",
                                               "mean_length", "safety_holds", "failure_modes")} for r in results]
    summary["record"] = str(write_record(located, record))
    return summary


def _check_policy(located: Path, task: str, device: str, suite: Suite, robot) -> None:
    """ValueError before any episode if the policy cannot run on `task`, reads a camera the robot file lacks or the
    sim cannot render, or a condition names what the task lacks."""
    from robot_rl.policies.base import PolicyError
    from robot_rl.sim.evaluate import _check_observations, env_settings_for
    from robot_rl.sim.perturb import PerturbedEnv
    from robot_rl.sim.robot_cameras import validation_env

    try:
        policy = _cached_policy(located, device)  # workers=1 runs its episodes with this one
    except PolicyError as error:
        raise ValueError(str(error)) from None
    settings = env_settings_for(policy.observation_spec)
    env = validation_env(task, policy.observation_spec, robot)
    try:
        _check_observations(env, policy.observation_spec, policy.action_dim, located, task, settings["obs_mode"],
                            settings["image_size"])
        for condition in suite.conditions:
            PerturbedEnv(env, condition)  # names resolve against the task's model
    finally:
        env.close()


def _run_blocks(blocks: Sequence[Block], workers: int, on_block, total: int) -> list[dict[str, Any]]:
    done = 0
    if on_block is not None:
        on_block(done, total)
    if workers == 1:
        outputs = []
        for block in blocks:
            outputs.append(run_block(block))
            done += block.count
            if on_block is not None:
                on_block(done, total)
        return outputs
    import multiprocessing
    import multiprocessing.util

    context = multiprocessing.get_context("spawn")  # no forked JAX / torch / GL state
    outputs = []
    pool = context.Pool(workers, initializer=_pool_worker_init)
    try:
        for output in pool.imap_unordered(run_block, blocks):
            outputs.append(output)
            done += len(output["episodes"])
            if on_block is not None:
                on_block(done, total)
    except BaseException:
        pool.terminate()
        pool.join()
        # A CLI stopped here leaves with os._exit (JAX threads), which skips multiprocessing's exit-time finalisers:
        # run them now, so the pool's semaphores are released (else the resource tracker warns of leaked ones).
        multiprocessing.util._run_finalizers(0)
        raise
    pool.close()
    pool.join()
    return outputs


# ----- report -------------------------------------------------------------------------------------------------------

def write_failure_grid(path: Path, filmed: Sequence[Mapping[str, Any]], fps: float, columns: int = 4) -> Path | None:
    """One tile per condition (its first failed episode, front and wrist cameras side by side, captioned), tiled
    `columns` wide; shorter episodes hold their last frame."""
    import cv2

    from robot_rl.data.video import write_video

    tiles = []
    for output in sorted(filmed, key=lambda o: o["condition"]):
        for index, streams in output["frames"].items():
            frames = np.concatenate([streams[k] for k in sorted(streams)], axis=2)  # (T, H, W * cameras, 3)
            frames = frames.copy()
            for t in range(len(frames)):
                cv2.putText(frames[t], f"{output['condition']} ep {index}", (4, 14), cv2.FONT_HERSHEY_SIMPLEX, 0.4,
                            (255, 255, 255), 1, cv2.LINE_AA)
            tiles.append(frames)
    if not tiles:
        return None
    length = max(len(t) for t in tiles)
    tiles = [np.concatenate([t, np.repeat(t[-1:], length - len(t), axis=0)]) for t in tiles]
    blank = np.zeros_like(tiles[0])
    while len(tiles) % columns and len(tiles) > columns:
        tiles.append(blank)
    rows = [np.concatenate(tiles[i:i + columns], axis=2) for i in range(0, len(tiles), columns)]
    write_video(path, [np.concatenate(rows, axis=1)], fps=fps)
    return path


def write_report(out: Path, summary: Mapping[str, Any]) -> Path:
    """report.md and success.png (success per condition with 95 % intervals, the nominal rate as a line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = summary["conditions"]
    names = [r["condition"] for r in results]
    rates = np.array([r["success_rate"] for r in results])
    low = rates - np.array([r["success_ci95"][0] for r in results])
    high = np.array([r["success_ci95"][1] for r in results]) - rates
    figure, axes = plt.subplots(figsize=(max(6.0, 0.9 * len(names)), 3.6))
    colours = ["tab:blue" if r["passed"] else "tab:red" for r in results[:1]]
    colours += ["tab:green" if r["passed"] else "tab:red" for r in results[1:]]
    axes.bar(range(len(names)), 100 * rates, yerr=100 * np.stack([low, high]), color=colours, capsize=3)
    axes.axhline(100 * rates[0], color="tab:blue", linestyle="--", linewidth=1, label="nominal")
    axes.axhline(100 * summary["thresholds"]["min_success"], color="grey", linestyle=":", linewidth=1,
                 label="minimum")
    axes.set_xticks(range(len(names)), names, rotation=30, ha="right")
    axes.set_ylabel("success %")
    axes.set_ylim(0, 105)
    axes.set_title(f"{summary['task']}: {summary['suite']} suite, {summary['episodes_per_condition']} episodes each")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # beside the bars: it hides none
    figure.tight_layout()
    figure.savefig(out / "success.png", dpi=100, bbox_inches="tight")
    plt.close(figure)

    lines = [
        f"# Validation: {summary['task']}, suite {summary['suite']}, robot {summary['robot_name']}",
        "",
        f"**Verdict: {summary['verdict'].upper()}** (every condition >= {summary['thresholds']['min_success']:.0%} "
        f"success and at most {summary['thresholds']['max_drop']:.0%} below nominal, over at least "
        f"{summary['thresholds']['min_episodes']} episodes each)",
        *[f"- {reason}" for reason in summary["verdict_reasons"]],
        "",
        f"Policy `{summary['policy']}` (sha256 {summary['policy_sha256'][:16]}...), robot file `{summary['robot']}` "
        f"(sha256 {summary['robot_sha256'][:16]}...), suite `{summary['suite_path']}`, seed {summary['seed']}, "
        f"{summary['workers']} workers, {summary['seconds']:.0f} s.",
        "",
        _cameras_line(summary.get("cameras") or {}),
        "",
        "![success per condition](success.png)",
        "",
        "| condition | success | 95 % CI | mean length | safety holds | failure modes |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        modes = ", ".join(f"{mode} ({count})" for mode, count in r["failure_modes"].items()) or "-"
        lines.append(f"| {r['condition']} | {r['successes']}/{r['episodes']} ({r['success_rate']:.0%}) | "
                     f"{r['success_ci95'][0]:.0%}-{r['success_ci95'][1]:.0%} | {r['mean_length']:.1f} | "
                     f"{r['safety_holds']} | {modes} |")
    if summary.get("video"):
        lines += ["", f"Failures (the first failed episode of each condition): [{Path(summary['video']).name}]"
                      f"({Path(summary['video']).name})"]
    lines += ["", "Conditions:", ""]
    lines += [f"- **{r['condition']}**: {r['description'] or '-'}" for r in results]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _cameras_line(cameras: Mapping[str, str]) -> str:
    """The report's line on what each camera the policy reads was rendered from in the sim mirror."""
    if not cameras:
        return "Cameras: none (the policy reads no images)."
    views = "; ".join(f"`{name}` from sim camera {source}" for name, source in cameras.items())
    return f"Cameras (the robot file's, rendered in the sim mirror): {views}."


def format_table(summary: Mapping[str, Any]) -> str:
    """The per-condition results as aligned text lines (for the terminal)."""
    rows = [("condition", "success", "95 % CI", "length", "holds", "failure modes")]
    for r in summary["conditions"]:
        modes = ", ".join(f"{m} ({c})" for m, c in r["failure_modes"].items()) or "-"
        rows.append((r["condition"], f"{r['successes']}/{r['episodes']} ({r['success_rate']:.0%})",
                     f"{r['success_ci95'][0]:.0%}-{r['success_ci95'][1]:.0%}", f"{r['mean_length']:.1f}",
                     str(r["safety_holds"]), modes))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row[:5], widths, strict=True)) + "  " + row[5]
                     for row in rows)

