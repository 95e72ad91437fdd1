"""The reward classifier's commands: `robot-rl label` (frames of a dataset labelled success or failure, in a window
or from the command line or a file) and `robot-rl train-reward` (the classifier trained on datasets and their
labels)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from robot_rl.apps.cli import Label, TrainReward


def run_train_reward(cfg: TrainReward) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from robot_rl.agents.reward_classifier_training import (
        check_output_folder,
        save_atomically,
        summary_line,
        train_reward_classifier,
    )

    check_output_folder(cfg.out)
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]training reward classifier"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[loss]}"), console=console, transient=True,
                  disable=not console.is_terminal) as progress:
        bar = progress.add_task("train", total=cfg.config.steps, loss="")
        classifier, metrics = train_reward_classifier(
            cfg.dataset, cfg.config,
            on_progress=lambda step, loss: progress.update(bar, completed=step, loss=f"loss {loss:.4f}"))
    save_atomically(classifier, cfg.out, metrics)
    print(summary_line(cfg.out, metrics))


def run_label(cfg: Label) -> None:
    from robot_rl.agents.frame_labels import FrameLabels, label_interactively, parse_frames

    chosen = [name for name in ("success", "failure", "clear") if getattr(cfg, name)]
    if len(chosen) > 1:
        raise ValueError(f"give one of --success, --failure, --clear, not {' and '.join('--' + c for c in chosen)}")
    if cfg.import_ is not None and (cfg.frames is not None or chosen):
        raise ValueError("--import applies a labels file: give it without --frames / --success / --failure / --clear")
    if cfg.frames is None and chosen:
        raise ValueError(f"--{chosen[0]} needs --episode N --frames A:B")
    if cfg.frames is not None and (cfg.episode is None or not chosen):
        raise ValueError("--frames needs --episode N and one of --success, --failure, --clear")
    if cfg.import_ is None and cfg.frames is None:
        counts = label_interactively(cfg.path, episode=cfg.episode or 0, cameras=cfg.cameras)
        print(f"{cfg.path}: {counts['success']} success and {counts['failure']} failure frames labelled in "
              f"{counts['episodes']} episodes")
        return
    labels = FrameLabels.load(cfg.path)
    if cfg.import_ is not None:
        changed = labels.import_file(cfg.import_)
        what = f"applied {changed} frame labels from {cfg.import_}"
    else:
        episode = labels.episode_index(cfg.episode)
        frames = parse_frames(cfg.frames, labels.frames(episode))
        changed = labels.set(episode, frames, {"success": True, "failure": False, "clear": None}[chosen[0]])
        verb = "cleared" if chosen[0] == "clear" else f"labelled {chosen[0]}:"
        what = f"{verb} {changed} frames of episode {episode} ({frames.start}..{frames.stop - 1})"
    path = labels.save()
    counts = labels.counts()
    print(f"{what}; {path} now holds {counts['success']} success and {counts['failure']} failure frames in "
          f"{counts['episodes']} episodes")
