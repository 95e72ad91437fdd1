"""A training run's folder: what it holds (``config.json``, ``checkpoint/``, ``eval.mp4`` ...), where a new run
goes, and what a resumed one continues with (its saved config and progress, and the options a resume may change).
Cheap to import (no JAX): the ROS learner node checks its parameters against a run folder before it imports JAX."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robot_rl.core.config_io import config_from_json, config_to_json

if TYPE_CHECKING:
    from robot_rl.training.config import TrainConfig

CONFIG_FILE = "config.json"
CHECKPOINT_DIR = "checkpoint"
VIDEO_FILE = "eval.mp4"
# Options a resumed run may change: its schedule and outputs, nothing the learning depends on.
RESUME_OPTIONS = ("steps", "eval_every", "eval_episodes", "final_eval_episodes", "eval_latest_weights",
                  "checkpoint_every", "video")


class RunError(ValueError):
    """A run folder cannot be used as asked: not a run, nothing to resume, or an option --resume cannot change."""


@dataclasses.dataclass(frozen=True)
class RunStart:
    """How a run starts: its config, its folder, whether it resumes, and whether a resume changed the saved config."""

    cfg: TrainConfig
    run_dir: Path
    resuming: bool
    config_changed: bool


def start_run(cfg: TrainConfig | None = None, resume: Path | None = None) -> RunStart:
    """The run `cfg` asks for, or the run folder `resume` continues with its saved config (`cfg` may then change
    RESUME_OPTIONS); RunError for a folder that cannot be used so, before anything is written."""
    from robot_rl.learner.learner import Learner
    from robot_rl.training.config import TrainConfig

    if resume is not None:
        run_dir = Path(resume)
        saved, progress = load_run(run_dir)
        cfg = resumed_config(run_dir, saved, progress, cfg)
        return RunStart(cfg, run_dir, resuming=True, config_changed=cfg != saved)
    cfg = cfg if cfg is not None else TrainConfig()
    run_dir = Path(cfg.run_dir) if cfg.run_dir is not None else default_run_dir(cfg)
    if (run_dir / CONFIG_FILE).exists():
        hint = (f"resume it with --resume {run_dir}" if Learner.checkpoint_path(run_dir / CHECKPOINT_DIR)
                else "it has no checkpoint: delete it")
        raise RunError(f"{run_dir} already holds a run; {hint} or choose another --run-dir")
    return RunStart(cfg, run_dir, resuming=False, config_changed=False)


def default_run_dir(cfg: TrainConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.task}-{cfg.obs_mode.replace('+', '_')}-{stamp}"


def load_run(run_dir: Path) -> tuple[TrainConfig, dict[str, Any]]:
    """The saved config and progress (checkpoint state) of a run folder; RunError if there is nothing to resume."""
    from robot_rl.learner.learner import Learner
    from robot_rl.training.config import TrainConfig

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunError(f"--resume {run_dir}: no such folder")
    config_file = run_dir / CONFIG_FILE
    if not config_file.is_file():
        raise RunError(f"--resume {run_dir}: not a training run (no {CONFIG_FILE})")
    try:
        saved = config_from_json(TrainConfig, json.loads(config_file.read_text()))
    except (ValueError, TypeError, KeyError) as error:
        raise RunError(f"{config_file} is not a valid run config: {error}") from None
    checkpoint = Learner.checkpoint_path(run_dir / CHECKPOINT_DIR)
    if checkpoint is None:
        raise RunError(f"nothing to resume: {run_dir} has no checkpoint (it stopped before its first one); "
                       "delete it or start a new run with another --run-dir")
    try:
        progress = json.loads((checkpoint / "learner.json").read_text())["extra"]
    except (OSError, ValueError, KeyError) as error:
        raise RunError(f"{checkpoint / 'learner.json'} is unreadable: {error}") from None
    return saved, progress


def resumed_config(run_dir: Path, saved: TrainConfig, progress: dict[str, Any],
                   requested: TrainConfig | None) -> TrainConfig:
    """The config a resumed run continues with: the saved one, with the changes `requested` may make
    (RESUME_OPTIONS); RunError for any other change, or a --steps the run cannot continue to."""
    requested = saved if requested is None else requested
    old, new = _flat(config_to_json(saved)), _flat(config_to_json(requested))
    changed = [k for k in new if new[k] != old.get(k) and k not in RESUME_OPTIONS
               and not (k == "run_dir" and new[k] == str(run_dir))]
    if changed:
        changes = ", ".join(f"{option_name(k)} ({old.get(k)} -> {new[k]})" for k in changed)
        allowed = ", ".join(option_name(k) for k in RESUME_OPTIONS)
        raise RunError(f"--resume {run_dir} keeps the run's saved config; cannot change {changes} "
                       f"(a resumed run may change {allowed})")
    cfg = dataclasses.replace(requested, run_dir=saved.run_dir)
    done = int(progress.get("env_step", 0))
    if cfg.steps < done:
        raise RunError(f"--steps {cfg.steps} is below the {done} env steps {run_dir} has done")
    if cfg.steps == done and progress.get("finished"):
        raise RunError(f"nothing to resume: {run_dir} finished its {done} env steps; extend it with "
                       f"--resume {run_dir} --steps N (N > {done})")
    return cfg


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def option_name(field_path: str) -> str:
    """`sac.init_temperature` -> `--sac.init-temperature` (how the command line spells a config field)."""
    return "--" + field_path.replace("_", "-")

