"""The `robot-rl` command: one entry point, a subcommand per job, typed dataclass configs."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated, Literal

import tyro

from robot_rl.train import TrainConfig

ObsMode = Literal["state", "pixels", "state+pixels"]


@dataclasses.dataclass(frozen=True)
class Record:
    """Record episodes to a zarr dataset: the scripted expert in the sim mirror, or teleoperation on a running graph."""

    out: Path
    """Dataset directory (created, or appended to if it exists)."""
    task: str = "PickCube-v0"
    """Task name, e.g. PickCube-v0 or PegInsert-v0 (with --source ros: its limits and episode length)."""
    source: Literal["sim", "ros"] = "sim"
    """`sim`: run the scripted expert in-process. `ros`: join a running ROS 2 graph (robot drivers or the sim node,
    and a teleop node) and record what the human does; ends after --episodes or on Ctrl-C."""
    namespace: str = "/"
    """With --source ros: the robot's namespace, e.g. /robot1."""
    mode: Literal["realtime", "lockstep"] = "realtime"
    """With --source ros: realtime (a robot, or the sim node in real time) or lockstep (the sim node in lock-step)."""
    policy: Literal["scripted"] = "scripted"
    """Who acts with --source sim: `scripted` is the privileged scripted expert."""
    episodes: int = 10
    """Number of episodes to keep."""
    obs_mode: ObsMode = "state+pixels"
    """Which observations to store."""
    image_size: int = 128
    """Camera image height and width in pixels."""
    noise: float = 0.0
    """Std of Gaussian noise added to the expert's actions."""
    seed: int = 0
    """Seed of the first episode; episode k uses seed + k."""
    only_successes: bool = False
    """Keep only successful episodes (tries up to 3x --episodes)."""


@dataclasses.dataclass(frozen=True)
class Info:
    """Summarise a dataset: episodes, steps, success rate, keys and sizes."""

    path: tyro.conf.Positional[Path]
    """Dataset directory."""
    json: bool = False
    """Print the summary as JSON."""


@dataclasses.dataclass(frozen=True)
class Replay:
    """Render an episode's stored camera frames to a video file."""

    path: tyro.conf.Positional[Path]
    """Dataset directory."""
    out: Path = Path("replay.mp4")
    """Output video (.mp4)."""
    episode: int = 0
    """Episode index (negative counts from the end)."""
    cameras: tuple[str, ...] = ()
    """Cameras to tile side by side (default: every stored camera)."""


@dataclasses.dataclass(frozen=True)
class Train:
    """Train SAC in the sim mirror from demos, online data and (optionally) simulated human interventions."""

    config: Annotated[TrainConfig, tyro.conf.arg(name="")] = TrainConfig()
    resume: Path | None = None
    """Resume the run in this folder from its last checkpoint (its saved config is used)."""


@dataclasses.dataclass(frozen=True)
class Launch:
    """Run a ROS 2 YAML launch file with the project's launcher (robot_rl.ros.launch)."""

    file: Annotated[tyro.conf.Positional[Path], tyro.conf.arg(metavar="FILE")]
    """Launch file (ROS 2 YAML launch format)."""
    arguments: Annotated[tyro.conf.Positional[tuple[str, ...]], tyro.conf.arg(metavar="NAME:=VALUE")] = ()
    """Launch arguments as name:=value."""
    domain_id: int | None = None
    """ROS_DOMAIN_ID of every process (default: $ROS_DOMAIN_ID, else 0)."""
    grace_s: float = 10.0
    """Seconds processes get to exit after SIGINT before SIGTERM, then SIGKILL."""
    dry_run: bool = False
    """Print the resolved command lines, one per process, and exit."""


Command = (
    Annotated[Train, tyro.conf.subcommand("train")]
    | Annotated[Record, tyro.conf.subcommand("record")]
    | Annotated[Info, tyro.conf.subcommand("info")]
    | Annotated[Replay, tyro.conf.subcommand("replay")]
    | Annotated[Launch, tyro.conf.subcommand("launch")]
)


def run_record_ros(cfg: Record) -> None:
    """Run an actor node with no policy in the graph's namespace; it writes each finished episode to the dataset."""
    from robot_rl.ros.actor_node import main as actor_main

    obs_mode = {"state+pixels": "state+pixels", "pixels": "pixels", "state": "state"}[cfg.obs_mode]
    status = actor_main([
        "robot-rl record", "--ros-args", "-r", f"__ns:={cfg.namespace}", "-r", "__node:=recorder",
        "-p", f"task:={cfg.task}", "-p", f"obs_mode:={obs_mode}", "-p", f"mode:={cfg.mode}", "-p", "policy:=none",
        "-p", "stream_transitions:=false", "-p", f"record_path:={cfg.out}", "-p", f"episodes:={cfg.episodes}"])
    if status:
        raise SystemExit(status)


def run_record(cfg: Record) -> None:
    if cfg.source == "ros":
        run_record_ros(cfg)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from robot_rl.loop import make_env, record_episodes, writer_for_env
    from robot_rl.sim.expert import make_expert

    env = make_env(cfg.task, obs_mode=cfg.obs_mode, image_size=cfg.image_size)
    try:
        expert = make_expert(env, noise=cfg.noise, seed=cfg.seed)
        writer = writer_for_env(env, cfg.out, cfg.task, attrs={"policy": cfg.policy, "noise": cfg.noise})
        kept = {"n": 0, "success": 0}
        with Progress(
            TextColumn("[bold]recording"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
        ) as progress:
            bar = progress.add_task("record", total=cfg.episodes, status="")

            def on_episode(result, keep):
                if keep:
                    kept["n"] += 1
                    kept["success"] += int(result.success)
                    progress.update(bar, advance=1, status=f"success {kept['success']}/{kept['n']}")

            results = record_episodes(
                env, expert, writer, cfg.episodes, seed=cfg.seed, only_successes=cfg.only_successes,
                on_episode=on_episode,
            )
    finally:
        env.close()
    successes = sum(r.success for r in results)
    print(f"recorded {len(results)} episodes ({sum(r.steps for r in results)} steps, "
          f"{successes}/{len(results)} successful) to {cfg.out}; dataset now holds {writer.num_episodes} episodes")
    if len(results) < cfg.episodes:
        print(f"error: only {len(results)} of {cfg.episodes} episodes kept", file=sys.stderr)
        raise SystemExit(1)


def run_info(cfg: Info) -> None:
    from rich.console import Console
    from rich.table import Table

    from robot_rl.data.episodes import EpisodeDataset

    summary = EpisodeDataset(cfg.path).summary()
    if cfg.json:
        print(json.dumps(summary, indent=2))
        return
    console = Console()
    lengths = summary["episode_length"]
    console.print(f"[bold]{summary['path']}[/bold]  task {summary['task']}  robot {summary['robot']}  {summary['fps']:g} fps")
    console.print(
        f"episodes {summary['episodes']}  steps {summary['steps']}  success rate {summary['success_rate']:.1%}  "
        f"intervention rate {summary['intervention_rate']:.1%}  episode length {lengths['min']}/"
        f"{lengths['mean']:.1f}/{lengths['max']} (min/mean/max)"
    )
    if summary["uncommitted_steps"]:
        console.print(f"[yellow]{summary['uncommitted_steps']} uncommitted steps (an interrupted episode) ignored")
    table = Table("key", "shape", "dtype", "on disk")
    for key, spec in summary["keys"].items():
        table.add_row(key, str(tuple(spec["shape"])), spec["dtype"], _human_bytes(summary["bytes_on_disk"][f"data/{key}"]))
    console.print(table)
    console.print(f"total on disk {_human_bytes(summary['total_bytes'])}")


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def run_replay(cfg: Replay) -> None:
    from robot_rl.data.episodes import EpisodeDataset
    from robot_rl.data.video import write_video

    dataset = EpisodeDataset(cfg.path)
    episode = dataset.episode(cfg.episode)
    cameras = [k for k in episode["obs"] if k.startswith("images/")]
    if cfg.cameras:
        wanted = [c if c.startswith("images/") else f"images/{c}" for c in cfg.cameras]
        missing = [c for c in wanted if c not in cameras]
        if missing:
            raise SystemExit(f"error: camera(s) {missing} not in dataset; stored cameras: {cameras}")
        cameras = wanted
    if not cameras:
        raise SystemExit(
            f"error: {cfg.path} stores no camera frames (keys: {sorted(episode['obs'])}); "
            "record with --obs-mode pixels or state+pixels"
        )
    frames = [episode["obs"][c] for c in cameras]
    n = write_video(cfg.out, frames, fps=dataset.fps)
    print(f"wrote {cfg.out}: episode {cfg.episode % dataset.num_episodes}, {n} frames, cameras {cameras}, "
          f"success={episode['success']}")


def run_launch(cfg: Launch) -> None:
    from robot_rl.ros.launch import LaunchError, launch

    try:
        status = launch(cfg.file, cfg.arguments, domain_id=cfg.domain_id, grace_s=cfg.grace_s, dry_run=cfg.dry_run)
    except LaunchError as exc:
        raise SystemExit(f"error: {exc}") from None
    if status:
        raise SystemExit(status)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `robot-rl` console script."""
    cfg = tyro.cli(Command, args=argv, prog="robot-rl", description="robot_rl: real-robot RL with a MuJoCo mirror.")
    from robot_rl.data.episodes import DatasetError

    try:
        match cfg:
            case Train():
                from robot_rl.train import train

                train(cfg.config, resume=cfg.resume)
            case Record():
                run_record(cfg)
            case Info():
                run_info(cfg)
            case Replay():
                run_replay(cfg)
            case Launch():
                run_launch(cfg)
    except (DatasetError, ValueError, IndexError) as exc:  # bad input: a clear one-line error, not a traceback
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
