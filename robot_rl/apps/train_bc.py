"""Behaviour cloning of a chunked policy (`robot-rl train-bc`): demos in, a policy folder, curves and an evaluation out.

The output folder holds ``policy/`` (``policy.json`` + ``model.safetensors``, EMA weights: what `robot-rl eval`, the
in-process tools and the ROS actor node load), ``config.json``, ``metrics.jsonl``, ``tensorboard/``, ``eval.json``,
``eval.mp4`` and ``report.md`` with the loss curves. Training windows come from :mod:`robot_rl.data.sequences`
(episode-edge padding); validation episodes are held out whole. Ctrl-C saves the policy trained so far and the report,
then exits 130.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np

from robot_rl.policies.config import DiffusionConfig

POLICY_DIR = "policy"
LOSS_CURVES = "loss_curves.png"


@dataclasses.dataclass(frozen=True)
class TrainBCConfig:
    """Train a chunked policy (Diffusion Policy) by behaviour cloning on demo datasets: writes policy/
    (safetensors + JSON, what eval and the ROS actor load), metrics, TensorBoard logs, an evaluation in the sim mirror
    and report.md to --out."""

    dataset: tuple[Path, ...]
    """Demo datasets (zarr, from `robot-rl record` or teleop recording); give several with --dataset A B."""
    out: Path
    """Output folder (must not exist or be empty)."""
    policy: Literal["diffusion"] = "diffusion"
    """Policy kind to train."""
    diffusion: DiffusionConfig = DiffusionConfig()
    """The diffusion policy's network, horizons and schedulers."""
    observation_keys: tuple[str, ...] = ()
    """Observations the policy reads (default: every camera and `state`; privileged sim keys such as
    object_state only when named)."""
    steps: int = 3000
    """Gradient steps."""
    batch_size: int = 64
    """Windows per gradient step."""
    learning_rate: float = 1e-3
    """AdamW peak learning rate (cosine schedule after the warm-up); Diffusion Policy uses 1e-4 over hundreds of
    thousands of steps, a CPU run of a few thousand needs the larger step."""
    weight_decay: float = 1e-6
    """AdamW weight decay."""
    warmup_steps: int = 200
    """Linear learning-rate warm-up steps."""
    ema_power: float = 0.75
    """Power of the EMA warm-up (the decay grows as 1 - (1 + step)^-power); the EMA weights are saved."""
    validation_fraction: float = 0.1
    """Fraction of episodes held out for the validation loss."""
    validate_every: int = 250
    """Gradient steps between validation losses."""
    task: str | None = None
    """Sim task to evaluate in at the end (default: the datasets' task when it is a sim task; none: no evaluation)."""
    eval_episodes: int = 20
    """Evaluation episodes in the sim mirror at the end (0: none)."""
    video: bool = True
    """Film the first evaluation episodes to eval.mp4."""
    device: str = "auto"
    """Torch device: auto (cuda when there is one), cpu, cuda or cuda:N."""
    threads: int = 1
    """Torch CPU threads (1 on a shared machine: more spin-wait for cores other jobs hold)."""
    seed: int = 0
    """Seed of the split, the initialisation and the sampling."""

    def __post_init__(self) -> None:
        problems = [f"{name}={getattr(self, name)} must be >= {low}" for name, low in (
            ("steps", 1), ("batch_size", 1), ("warmup_steps", 0), ("validate_every", 1), ("eval_episodes", 0),
            ("threads", 1), ("seed", 0)) if getattr(self, name) < low]
        if not self.dataset:
            problems.append("no --dataset given")
        if not 0.0 <= self.validation_fraction < 1.0:
            problems.append(f"validation_fraction={self.validation_fraction} must be in [0, 1)")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            problems.append(f"learning_rate={self.learning_rate} must be > 0")
        if not self.ema_power > 0:
            problems.append(f"ema_power={self.ema_power} must be > 0")
        if problems:
            raise ValueError(f"invalid train-bc options: {'; '.join(problems)}")


def default_observation_keys(spec) -> tuple[str, ...]:
    """Every camera, the proprioceptive `state` and a recorded wrist `wrench`: what a real robot has (no privileged
    sim keys)."""
    return tuple(k for k, s in spec.items() if s.is_image) + tuple(k for k in ("state", "wrench") if k in spec)


def _to_device(batch, device: str) -> dict[str, Any]:
    import torch

    return {"obs": {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in batch.obs.items()},
            "actions": torch.from_numpy(np.ascontiguousarray(batch.actions)).to(device)}


def sim_task_of(task: str) -> str | None:
    """`task` if it is a registered sim task, else None."""
    import gymnasium as gym

    import robot_rl.sim  # noqa: F401  (registers the envs)
    from robot_rl.sim.loop import env_id

    return task if env_id(task) in gym.registry else None


LOSS_POINTS = 100
LOSS_EVERY_MAX = 50
"""Training-loss points a run logs (metrics.jsonl, TensorBoard, the loss curve): about LOSS_POINTS, one every
steps // LOSS_POINTS steps (1 to LOSS_EVERY_MAX, so a long run stopped early still has a curve), each the mean loss
of the steps since the one before."""


@dataclasses.dataclass
class FitResult:
    """How a `fit` loop ended: steps done, whether a stop request ended it, the metric rows and the last values
    (None where there is none: no step done, no validation yet, or not a finite number)."""

    steps: int
    stopped: bool
    metrics: list[dict[str, Any]]
    train_loss: float | None
    validation: float | None


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def fit(loss_of_batch, optimizer, schedule, *, steps: int, validate_every: int, validate, out: Path,
        validation_name: str, ema=None, parameters=None, on_progress=None, should_stop=None,
        validation: float | None = None, log_every: int | None = None) -> FitResult:
    """The optimisation loop of train-bc and distill: `loss_of_batch()` -> loss tensor, one optimiser and
    learning-rate step each (and an EMA step of `parameters`). Every `log_every` steps (default: steps //
    LOSS_POINTS, within [1, LOSS_EVERY_MAX]) the mean training loss since the last row, and every `validate_every`
    steps `validate()`, go to ``metrics.jsonl`` and TensorBoard (``loss/train``, ``validation/<validation_name>``):
    a row has ``train_loss`` and / or `validation_name` (null: not a finite number), and the training-loss points
    are evenly spaced. `should_stop()` is checked before each step (a stop logs the steps since the last row);
    `on_progress(step, loss, validation)` after each."""
    from tensorboard.summary import Writer

    log_every = log_every or min(max(1, steps // LOSS_POINTS), LOSS_EVERY_MAX)
    started = time.perf_counter()
    parameters = list(parameters) if parameters is not None else None  # stepped every call: not a generator
    tb = Writer(str(out / "tensorboard"))
    if validation is not None:
        tb.add_scalar(f"validation/{validation_name}", validation, 0)
    metrics: list[dict[str, Any]] = []
    step, train_loss, stopped, recent = 0, None, False, []
    with open(out / "metrics.jsonl", "a") as metrics_file:

        def log(train: bool, validated: bool) -> None:
            nonlocal train_loss
            row: dict[str, Any] = {"step": step}
            if train and recent:
                train_loss = _finite(float(np.mean(recent)))
                recent.clear()
                row["train_loss"] = train_loss
                if train_loss is not None:
                    tb.add_scalar("loss/train", train_loss, step)
            if validated:
                row[validation_name] = _finite(validation)
                if row[validation_name] is not None:
                    tb.add_scalar(f"validation/{validation_name}", validation, step)
            row.update(learning_rate=schedule.get_last_lr()[0], seconds=round(time.perf_counter() - started, 1))
            tb.add_scalar("learning_rate", row["learning_rate"], step)
            metrics.append(row)
            metrics_file.write(json.dumps(row, allow_nan=False) + "\n")
            metrics_file.flush()
            tb.flush()

        while step < steps:
            if should_stop is not None and should_stop():
                stopped = True
                if recent:  # the steps since the last row: a run stopped early still has its loss
                    log(train=True, validated=False)
                break
            loss = loss_of_batch()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            if ema is not None:
                ema.step(parameters)
            step += 1
            loss_value = loss.item()
            recent.append(loss_value)
            validate_now = step % validate_every == 0 or step == steps
            train_now = step % log_every == 0 or step == steps
            if validate_now:
                validation = validate()
            if validate_now or train_now:
                log(train=train_now, validated=validate_now)
            if on_progress is not None:
                on_progress(step, loss_value, validation)
    tb.close()
    return FitResult(step, stopped, metrics, train_loss, _finite(validation))


def train_bc(cfg: TrainBCConfig, *, on_progress=None, should_stop=None) -> dict[str, Any]:
    """Train, save the EMA policy, evaluate in the sim mirror and write the report; returns the summary.

    `on_progress(step, train_loss, validation_loss)` after every step; `should_stop()` is checked between steps:
    when it returns True the policy trained so far is saved, the report says so, and the summary has
    ``"stopped": True``.
    """
    import torch
    from diffusers.optimization import get_cosine_schedule_with_warmup
    from diffusers.training_utils import EMAModel

    from robot_rl.core.config_io import config_to_json
    from robot_rl.data.sequences import SequenceWindows
    from robot_rl.policies.base import resolve_device
    from robot_rl.policies.diffusion import DiffusionPolicy
    from robot_rl.policies.normalizer import Normalizer
    from robot_rl.core.report import json_safe
    from robot_rl.core.types import ObservationSpec

    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out} exists and is not an empty folder; choose another one")
    device = resolve_device(cfg.device)
    started = time.perf_counter()
    from robot_rl.data.episodes import EpisodeDataset

    datasets = [EpisodeDataset(path) for path in cfg.dataset]
    first = datasets[0]
    keys = cfg.observation_keys or default_observation_keys(first.observation_spec)
    available = dict(first.observation_spec.items())
    unread = [k for k in available if k not in keys]
    if not cfg.observation_keys and not any(available[k].is_image for k in keys) and unread:
        print(f"note: no camera in the dataset; the policy reads only {', '.join(keys)} and not "
              f"{', '.join(unread)} (privileged sim state: name it with --observation-keys to use it)",
              file=sys.stderr)
    config = cfg.diffusion
    windows = SequenceWindows(datasets, keys, obs_horizon=config.obs_horizon,
                              prediction_horizon=config.prediction_horizon, action_horizon=config.action_horizon)
    tasks = sorted({d.task for d in datasets})
    task = cfg.task or (sim_task_of(tasks[0]) if len(tasks) == 1 else None)
    transforms = [d.attrs.get("image_transforms") for d in datasets if d.attrs.get("image_transforms")]
    if any(t != transforms[0] for t in transforms):
        raise ValueError("the datasets' cameras were cropped / resized differently (image_transforms attributes "
                         "differ); train on datasets recorded one way")
    train_index, validation_index = windows.split(cfg.validation_fraction, cfg.seed)
    spec = ObservationSpec.from_shapes(windows.observation_spec)
    normalizer = Normalizer().fit(windows.vector_statistics())
    torch.manual_seed(cfg.seed)
    policy = DiffusionPolicy.create(config, spec, windows.action_dim, normalizer, device=device, seed=cfg.seed)
    ema_policy = DiffusionPolicy.create(config, spec, windows.action_dim, normalizer, device=device, seed=cfg.seed)
    parameters = sum(p.numel() for p in policy.model.parameters())
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=cfg.learning_rate, betas=(0.95, 0.999),
                                  weight_decay=cfg.weight_decay)
    schedule = get_cosine_schedule_with_warmup(optimizer, cfg.warmup_steps, cfg.steps)
    ema = EMAModel(policy.model.parameters(), use_ema_warmup=True, inv_gamma=1.0, power=cfg.ema_power,
                   decay=0.9999)

    out.mkdir(parents=True, exist_ok=True)
    settings = {**config_to_json(cfg), "observation_keys": list(keys), "device": device, "task": task,
                "parameters": parameters}
    (out / "config.json").write_text(json.dumps(settings, indent=2) + "\n")
    rng = np.random.default_rng(cfg.seed)
    validation_rng = np.random.default_rng(cfg.seed + 1)
    validation_batches = [windows.batch(validation_rng.choice(validation_index, min(cfg.batch_size,
                                                                                     len(validation_index))))
                          for _ in range(4)] if len(validation_index) else []

    def validate() -> float | None:
        if not validation_batches:
            return None
        ema.copy_to(ema_policy.model.parameters())
        ema_policy.model.eval()
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(cfg.seed + 7)  # the same timesteps and noise at every validation: comparable numbers
        with torch.no_grad():
            losses = [float(ema_policy.loss(_to_device(b, device))) for b in validation_batches]
        torch.random.set_rng_state(generator_state)
        return float(np.mean(losses))

    policy.model.train()
    result = fit(lambda: policy.loss(_to_device(windows.batch(rng.choice(train_index, cfg.batch_size)), device)),
                 optimizer, schedule, steps=cfg.steps, validate_every=cfg.validate_every, validate=validate, out=out,
                 validation_name="validation_loss", ema=ema, parameters=policy.model.parameters(),
                 on_progress=on_progress, should_stop=should_stop)
    metrics, step, stopped = result.metrics, result.steps, result.stopped
    train_loss, validation_loss = result.train_loss, result.validation
    ema.copy_to(ema_policy.model.parameters())
    training_seconds = time.perf_counter() - started
    datasets_text = [str(d.path) for d in datasets]
    ema_policy.save(out / POLICY_DIR, {"trained": {"datasets": datasets_text, "steps": step, "task": task,
                                                   "observation_keys": list(keys), "seconds": round(training_seconds)}})
    summary: dict[str, Any] = {
        "out": str(out), "policy": str(out / POLICY_DIR), "steps": step, "stopped": stopped, "device": device,
        "parameters": parameters, "episodes": windows.num_episodes, "windows": len(windows),
        "train_windows": len(train_index), "validation_windows": len(validation_index),
        "final_train_loss": train_loss, "final_validation_loss": validation_loss,
        "training_seconds": round(training_seconds, 1), "task": task, "evaluation": None}
    if task is not None and cfg.eval_episodes and not stopped:
        from robot_rl.sim.evaluate import evaluate_policy

        summary["evaluation"] = evaluate_policy(ema_policy, task, cfg.eval_episodes, out=out, video=cfg.video,
                                                seed=cfg.seed)
    summary = json_safe(summary)  # null, not NaN: JSON has no NaN
    (out / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    write_bc_report(out, summary, metrics, settings)
    return summary


def write_bc_report(out: Path, summary: dict[str, Any], metrics: list[dict[str, Any]], settings: dict) -> Path:
    """report.md and loss_curves.png (none before the first logged loss) of a behaviour-cloning run."""
    from robot_rl.core.report import format_duration, git_commit, interrupted_text, loss_value_text, plot_losses, \
        success_text

    curves = {"train": [(m["step"], m["train_loss"]) for m in metrics if m.get("train_loss") is not None],
              "validation (EMA weights)": [(m["step"], m["validation_loss"]) for m in metrics
                                           if m.get("validation_loss") is not None]}
    plotted = plot_losses(out / LOSS_CURVES, curves, ylabel="denoising loss", title="behaviour cloning")
    evaluation = summary.get("evaluation")
    lines = [f"# Behaviour cloning report: {settings['policy']} policy", ""]
    if summary["stopped"]:
        lines += [f"**{interrupted_text(summary['steps'], settings['steps'])}: the policy saved is the one trained so "
                  "far; no evaluation.**", ""]
    if evaluation:
        lines.append(f"- Eval success in {evaluation['task']}: **{success_text(evaluation['successes'], evaluation['episodes'])}** "
                     f"({evaluation['episodes']} episodes, held-out seeds).")
    elif summary["stopped"]:
        lines.append(f"- No evaluation: {interrupted_text(summary['steps'], settings['steps']).lower()}.")
    else:
        lines.append("- No evaluation (no sim task, or --eval-episodes 0).")
    lines += [
        f"- {summary['parameters'] / 1e6:.2f} M parameters on {summary['device']}; {summary['steps']} gradient steps "
        f"in {format_duration(summary['training_seconds'])}.",
        f"- {summary['episodes']} demo episodes, {summary['train_windows']} training and "
        f"{summary['validation_windows']} validation windows.",
        f"- Final losses: train {loss_value_text(summary['final_train_loss'])}, validation "
        f"{loss_value_text(summary['final_validation_loss'])}.",
        f"- Git commit: `{git_commit()}`; written {time.strftime('%Y-%m-%d %H:%M:%S')}.", ""]
    lines += ([f"![loss curves]({LOSS_CURVES})", ""] if plotted
              else ["No loss curve: no finite loss was logged (stopped before its first step?).", ""])
    if evaluation and evaluation.get("video"):
        lines += [f"Eval video: [{Path(evaluation['video']).name}]({Path(evaluation['video']).name})", ""]
    lines += ["## Config", "", "```json", json.dumps(settings, indent=2), "```", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
