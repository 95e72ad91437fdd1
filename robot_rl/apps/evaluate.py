"""`robot-rl eval`: a saved policy of any kind evaluated in the sim mirror under a progress bar; prints the summary as
one JSON line."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from robot_rl.apps.cli import Eval


def run_eval(cfg: Eval) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from robot_rl.sim.evaluate import evaluate_policy_file

    progress = Progress(TextColumn("[bold]evaluating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
    bar = progress.add_task("eval", total=cfg.episodes)

    def on_episode(result) -> None:
        if not progress.live.is_started:  # drawn from the first episode on: bad input fails with nothing drawn
            progress.start()
        progress.advance(bar)

    try:
        summary = evaluate_policy_file(
            cfg.policy, task=cfg.task, episodes=cfg.episodes, seed=cfg.seed, obs_mode=cfg.obs_mode,
            image_size=cfg.image_size, out=cfg.out, video=cfg.video, video_episodes=cfg.video_episodes,
            on_episode=on_episode, device=cfg.device, inference_steps=cfg.inference_steps)
    finally:
        if progress.live.is_started:
            progress.stop()
    print(json.dumps(summary))
