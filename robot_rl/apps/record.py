"""`robot-rl record`: record episodes to a zarr dataset, from the scripted expert in the sim mirror (a progress bar,
every finished episode kept when stopped) or from teleoperation on a running ROS 2 graph (an actor node with no
policy)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from robot_rl.core import interrupts

if TYPE_CHECKING:
    from robot_rl.apps.cli import Record


def run_record_ros(cfg: Record) -> None:
    """Run an actor node with no policy in the graph's namespace; it writes each finished episode to the dataset."""
    from robot_rl.ros.nodes.actor_node import main as actor_main

    obs_mode = {"state+pixels": "state+pixels", "pixels": "pixels", "state": "state"}[cfg.obs_mode]
    status = actor_main([
        "robot-rl record", "--ros-args", "-r", f"__ns:={cfg.namespace}", "-r", "__node:=recorder",
        "-p", f"task:={cfg.task}", "-p", f"obs_mode:={obs_mode}", "-p", f"mode:={cfg.mode}", "-p", "policy:=none",
        "-p", f"robot:={cfg.robot}", "-p", f"image_size:={cfg.image_size}",
        "-p", "stream_transitions:=false", "-p", f"record_path:={cfg.out}", "-p", f"episodes:={cfg.episodes}"])
    interrupts.check()  # stopped by SIGINT / SIGTERM: the finished episodes are kept, and the exit status is 130 / 143
    if status:
        raise SystemExit(status)


def run_record(cfg: Record) -> None:
    if cfg.source == "ros":
        run_record_ros(cfg)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from robot_rl.sim.loop import first_seed, make_env, max_attempts_for, record_episodes, writer_for_env
    from robot_rl.sim.expert import make_expert

    env = make_env(cfg.task, obs_mode=cfg.obs_mode, image_size=cfg.image_size, wrench=cfg.wrench)
    results = []
    writer, held_before = None, 0
    try:
        if cfg.randomize:
            from robot_rl.training.trainer import randomized_env

            env = randomized_env(env, cfg.randomize)
        writer = writer_for_env(env, cfg.out, cfg.task, attrs={"policy": cfg.policy, "noise": cfg.noise,
                                                              **({"randomize": cfg.randomize} if cfg.randomize else {})})
        held_before = writer.num_episodes
        seed = first_seed(writer, cfg.seed, max_attempts_for(cfg.episodes, cfg.only_successes))
        expert = make_expert(env, noise=cfg.noise, seed=seed)
        with Progress(
            TextColumn("[bold]recording"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
        ) as progress:
            bar = progress.add_task("record", total=cfg.episodes, status="")

            def on_episode(result, keep):
                interrupts.check()  # a stop request eaten on the way (robot_rl.core.interrupts) ends it here
                if keep:
                    results.append(result)
                    successes = sum(r.success for r in results)
                    progress.update(bar, advance=1, status=f"success {successes}/{len(results)}")

            record_episodes(env, expert, writer, cfg.episodes, seed=seed, only_successes=cfg.only_successes,
                            on_episode=on_episode)
    except BaseException as exc:  # stopped: every finished episode is committed; the one under way is dropped
        stopped = isinstance(exc, KeyboardInterrupt) or interrupts.requested() is not None  # or a converted interrupt
        kept = writer.seeds[held_before:] if stopped and writer is not None else []  # committed is kept
        if len(kept):
            print(f"kept the {len(kept)} finished episodes in {cfg.out} (seeds {kept[0]}..{kept[-1]}); dataset now "
                  f"holds {writer.num_episodes} episodes", file=sys.stderr)
        raise
    finally:
        if writer is not None:
            writer.close()
        env.close()
    successes = sum(r.success for r in results)
    seeds = f", seeds {results[0].seed}..{results[-1].seed}" if results else ""
    print(f"recorded {len(results)} episodes ({sum(r.steps for r in results)} steps, "
          f"{successes}/{len(results)} successful{seeds}) to {cfg.out}; dataset now holds {writer.num_episodes} "
          "episodes")
    if len(results) < cfg.episodes:
        print(f"error: only {len(results)} of {cfg.episodes} episodes kept", file=sys.stderr)
        raise SystemExit(1)
