"""The dataset commands: `robot-rl info` (a summary, and with --verify every checksum), `replay` (an episode's camera
frames to a video), `export` (to LeRobot's format) and `import` (from it)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from robot_rl.apps.cli import Export, Import, Info, Replay


def run_info(cfg: Info) -> None:
    from rich.console import Console
    from rich.table import Table

    from robot_rl.data.episodes import DatasetError, DatasetReader

    reader = DatasetReader(cfg.path)
    damage = reader.verify() if cfg.verify else reader.missing_chunks()
    if damage:
        for problem in damage:
            print(f"damaged: {problem}", file=sys.stderr)
        episodes = sorted({d.episode for d in damage})
        shown = ", ".join(map(str, episodes[:20])) + (", ..." if len(episodes) > 20 else "")
        hint = "" if cfg.verify else "; `robot-rl info --verify` also checks every value"
        raise DatasetError(f"{cfg.path}: {len(episodes)} of {reader.num_episodes} episodes are damaged "
                           f"(episodes {shown}; listed above){hint}")
    summary = reader.summary()
    summary["verified"] = bool(cfg.verify)
    if cfg.json:
        print(json.dumps(summary, indent=2))
        return
    console = Console()
    lengths = summary["episode_length"]
    console.print(f"[bold]{summary['path']}[/bold]  task {summary['task']}  robot {summary['robot']}  {summary['fps']:g} fps",
                  soft_wrap=True)
    console.print(  # one line, as a grep or a log reads it (rich would break it at 80 columns when piped)
        f"episodes {summary['episodes']}  steps {summary['steps']}  success rate {summary['success_rate']:.1%}  "
        f"intervention rate {summary['intervention_rate']:.1%}  episode length {lengths['min']}/"
        f"{lengths['mean']:.1f}/{lengths['max']} (min/mean/max)", soft_wrap=True
    )
    seeds = summary["seeds"]
    if seeds:
        console.print(f"seeds {seeds['min']}..{seeds['max']} ({seeds['count']} episodes seeded)")
    if summary["uncommitted_steps"]:
        console.print(f"[yellow]{summary['uncommitted_steps']} uncommitted steps (an interrupted episode) ignored")
    for note in summary["notes"]:
        console.print(f"[yellow]note: {note}")
    table = Table("key", "shape", "dtype", "on disk")
    for key, spec in summary["keys"].items():
        table.add_row(key, str(tuple(spec["shape"])), spec["dtype"], _human_bytes(summary["bytes_on_disk"][f"data/{key}"]))
    console.print(table)
    console.print(f"total on disk {_human_bytes(summary['total_bytes'])}")
    if cfg.verify:
        console.print(f"[green]verified: every value of all {summary['episodes']} episodes matches its checksum")


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def run_replay(cfg: Replay) -> None:
    from robot_rl.data.episodes import DatasetReader
    from robot_rl.data.video import write_video

    reader = DatasetReader(cfg.path)
    if not -reader.num_episodes <= cfg.episode < reader.num_episodes:
        raise IndexError(f"episode {cfg.episode} out of range: {cfg.path} has {reader.num_episodes} episodes")
    stored = [k for k, spec in reader.observation_spec.items() if spec.is_image]
    cameras = stored
    if cfg.cameras:
        cameras = [c if c.startswith("images/") else f"images/{c}" for c in cfg.cameras]
        missing = [c for c in cameras if c not in stored]
        if missing:
            raise ValueError(f"--cameras: {missing} not in {cfg.path}; stored cameras: {stored}")
    if not cameras:
        raise ValueError(
            f"{cfg.path} stores no camera frames (keys: {sorted(reader.observation_spec)}); "
            "record with --obs-mode pixels or state+pixels"
        )
    episode = reader.read_episode(cfg.episode, keys=cameras)  # verified: damage is an error, not black frames
    length = len(episode["action"])
    captions = [f"step {t + 1}/{length}" + ("  human" if episode["intervention"][t] else "") for t in range(length)]
    captions[-1] += "  success" if episode["success"] else "  failure"
    n = write_video(cfg.out, [episode["obs"][c] for c in cameras], fps=reader.fps, captions=captions)
    print(f"wrote {cfg.out}: episode {cfg.episode % reader.num_episodes}, {n} frames, cameras {cameras}, "
          f"success={episode['success']}")


def run_export(cfg: Export) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from robot_rl.data.episodes import DatasetReader
    from robot_rl.data.lerobot import export_lerobot

    total = DatasetReader(cfg.path).num_episodes
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]exporting"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as progress:
        bar = progress.add_task("export", total=total)
        info = export_lerobot(cfg.path, cfg.out, crf=cfg.crf, on_episode=lambda index: progress.advance(bar))
    print(f"wrote {cfg.out}: LeRobot {info['codebase_version']} dataset, {info['total_episodes']} episodes, "
          f"{info['total_frames']} frames at {info['fps']} fps")


def run_import(cfg: Import) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from robot_rl.data.lerobot import import_lerobot

    console = Console(stderr=True)
    with Progress(TextColumn("[bold]importing"), BarColumn(), TextColumn("episode {task.completed}"),
                  TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal) as progress:
        bar = progress.add_task("import", total=None)
        count = import_lerobot(cfg.path, cfg.out, task=cfg.task, on_episode=lambda index: progress.advance(bar))
    print(f"imported {count} episodes from {cfg.path} into {cfg.out}")
