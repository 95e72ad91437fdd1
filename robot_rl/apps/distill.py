"""One-step distillation of a Diffusion Policy (`robot-rl distill`): a DDIM teacher in, a one-step student out.

The student (:class:`robot_rl.policies.one_step.OneStepPolicy`) starts from the teacher's weights and learns to map
(initial noise, observations) to the teacher's DDIM chunk from that noise in one denoiser call. Observation windows
come from demonstration datasets (by default the ones the teacher was trained on); whole episodes are held out for
the validation gap (student-teacher MSE on fixed noise, normalised actions). The output folder holds ``policy/``
(the student: what `robot-rl eval` and the actors load), ``config.json``, ``metrics.jsonl``, ``tensorboard/``,
``eval_student/`` and ``eval_teacher/`` (the same held-out seeds), ``summary.json`` and ``report.md`` with success and
batch-1 latency of both. Ctrl-C saves the student trained so far and the report, then exits 130.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

POLICY_DIR = "policy"
LOSS_CURVES = "loss_curves.png"
VALIDATION_BATCHES = 4
WARMUP_CALLS = 5


@dataclasses.dataclass(frozen=True)
class DistillConfig:
    """Distil a DDIM diffusion policy into a one-step student (one denoiser call per chunk)."""

    teacher: Path
    """Teacher: a diffusion policy folder (holding policy.json), or a `robot-rl train-bc` run folder."""
    out: Path
    """Output folder (must not exist or be empty)."""
    dataset: tuple[Path, ...] = ()
    """Datasets whose observation windows the student learns on (default: the teacher's training datasets, as its
    policy.json names them); give several with --dataset A B."""
    steps: int = 2000
    """Gradient steps."""
    batch_size: int = 64
    """Windows (each with its own noise) per gradient step; the teacher runs its full DDIM on each."""
    learning_rate: float = 1e-4
    """AdamW peak learning rate (cosine schedule after the warm-up)."""
    weight_decay: float = 1e-6
    """AdamW weight decay."""
    warmup_steps: int = 100
    """Linear learning-rate warm-up steps."""
    ema: bool = True
    """Keep an EMA of the student's weights and save it (else the last weights are saved)."""
    ema_power: float = 0.75
    """Power of the EMA warm-up (the decay grows as 1 - (1 + step)^-power)."""
    zero_noise_fraction: float = 0.125
    """Share of each batch distilled from zero noise, the noise both policies act from deterministically (the rest
    is standard normal, where zero is never drawn)."""
    random_crop: bool = True
    """Randomly crop the student's camera images while distilling (the teacher sees the centre crop it acts on)."""
    validation_fraction: float = 0.1
    """Fraction of episodes held out for the validation gap."""
    validate_every: int = 250
    """Gradient steps between validation gaps."""
    task: str | None = None
    """Sim task to evaluate student and teacher in at the end (default: the teacher's training task; none: no
    evaluation)."""
    eval_episodes: int = 20
    """Evaluation episodes of each policy in the sim mirror, on the same held-out seeds (0: none)."""
    video: bool = True
    """Film the student's first evaluation episodes to eval_student/eval.mp4."""
    latency_calls: int = 30
    """Timed batch-1 `act_chunk` calls of each policy (one torch thread, after a warm-up) for the latency p50."""
    device: str = "auto"
    """Torch device: auto (cuda when there is one), cpu, cuda or cuda:N."""
    threads: int = 1
    """Torch CPU threads (1 on a shared machine: more spin-wait for cores other jobs hold)."""
    seed: int = 0
    """Seed of the split, the noise and the crops."""

    def __post_init__(self) -> None:
        problems = [f"{name}={getattr(self, name)} must be >= {low}" for name, low in (
            ("steps", 1), ("batch_size", 1), ("warmup_steps", 0), ("validate_every", 1), ("eval_episodes", 0),
            ("latency_calls", 1), ("threads", 1), ("seed", 0)) if getattr(self, name) < low]
        if not 0.0 <= self.zero_noise_fraction <= 1.0:
            problems.append(f"zero_noise_fraction={self.zero_noise_fraction} must be in [0, 1]")
        if not 0.0 <= self.validation_fraction < 1.0:
            problems.append(f"validation_fraction={self.validation_fraction} must be in [0, 1)")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            problems.append(f"learning_rate={self.learning_rate} must be > 0")
        if not self.ema_power > 0:
            problems.append(f"ema_power={self.ema_power} must be > 0")
        if problems:
            raise ValueError(f"invalid distill options: {'; '.join(problems)}")


def teacher_folder(path: Path) -> Path:
    """The policy folder `path` names (the folder itself or a run folder's policy/); ValueError when there is none."""
    from robot_rl.policies.checkpoint import policy_folder

    folder = policy_folder(path) or (policy_folder(path / POLICY_DIR) if path.is_dir() else None)
    if folder is None:
        raise ValueError(f"--teacher {path}: not a diffusion policy folder (no policy.json"
                         + (")" if path.exists() else "; it does not exist)"))
    return folder


def teacher_datasets(folder: Path, description: dict[str, Any]) -> tuple[Path, ...]:
    """The datasets the teacher's policy.json says it was trained on; ValueError when it names none or one is gone."""
    trained = description.get("trained")
    names = trained.get("datasets") if isinstance(trained, dict) else None
    if not names or not isinstance(names, list):
        raise ValueError(f"no --dataset given and {folder / 'policy.json'} names no training datasets")
    paths = tuple(Path(name) for name in names)
    for path in paths:
        if not path.exists():
            raise ValueError(f"the teacher's training dataset {path} (named in {folder / 'policy.json'}) does not "
                             "exist; give --dataset")
    return paths


def history_of(obs: dict[str, np.ndarray], index: int) -> list[dict[str, np.ndarray]]:
    """Window `index` of a batch's observations {key: (B, To, ...)} as an observation history, oldest first."""
    steps = next(iter(obs.values())).shape[1]
    return [{key: value[index, t] for key, value in obs.items()} for t in range(steps)]


def act_chunk_latency_ms(policy, histories: list[list[dict[str, np.ndarray]]], calls: int) -> dict[str, float]:
    """p50 / p90 wall time in ms of batch-1 `act_chunk` on one torch thread, after a warm-up."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for i in range(WARMUP_CALLS):
            policy.act_chunk(histories[i % len(histories)])
        times = np.empty(calls)
        for i in range(calls):
            start = time.perf_counter()
            policy.act_chunk(histories[i % len(histories)])
            times[i] = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    return {"p50_ms": round(1e3 * float(np.median(times)), 2),
            "p90_ms": round(1e3 * float(np.percentile(times, 90)), 2), "calls": calls}


def distill(cfg: DistillConfig, *, on_progress=None, should_stop=None) -> dict[str, Any]:
    """Distil, save the student, evaluate student and teacher in the sim mirror, time both and write the report;
    returns the summary.

    `on_progress(step, train_loss, validation_mse)` after every step; `should_stop()` is checked between steps:
    when it returns True the student trained so far is saved, the report says so, there is no evaluation, and the
    summary has ``"stopped": True``.
    """
    import torch
    from diffusers.optimization import get_cosine_schedule_with_warmup
    from diffusers.training_utils import EMAModel

    from robot_rl.core.config_io import config_to_json
    from robot_rl.data.episodes import EpisodeDataset
    from robot_rl.data.sequences import SequenceWindows
    from robot_rl.policies.base import PolicyError, resolve_device
    from robot_rl.policies.checkpoint import read_policy_files
    from robot_rl.policies.diffusion import ACTION_KEY
    from robot_rl.policies.one_step import OneStepPolicy, teacher_from_files
    from robot_rl.core.report import json_safe
    from robot_rl.apps.train_bc import fit, sim_task_of

    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out} exists and is not an empty folder; choose another one")
    device = resolve_device(cfg.device)
    started = time.perf_counter()
    folder = teacher_folder(Path(cfg.teacher))
    description, tensors = read_policy_files(folder)
    try:
        teacher = teacher_from_files(description, tensors, device)
    except PolicyError as error:
        raise PolicyError(f"--teacher {folder}: {error}") from None
    trained = description.get("trained") if isinstance(description.get("trained"), dict) else {}
    dataset_paths = cfg.dataset or teacher_datasets(folder, description)
    datasets = [EpisodeDataset(path) for path in dataset_paths]
    config = teacher.config
    windows = SequenceWindows(datasets, teacher.observation_keys, obs_horizon=config.obs_horizon,
                              prediction_horizon=config.prediction_horizon, action_horizon=config.action_horizon)
    for key, spec in teacher.observation_spec.entries:
        if windows.observation_spec[key].shape != spec.shape:
            raise ValueError(f"{key} is {windows.observation_spec[key].shape} in the datasets but {spec.shape} for "
                             f"the teacher {folder}")
    task = cfg.task or trained.get("task")
    if task is not None and cfg.eval_episodes and sim_task_of(task) is None:
        raise ValueError(f"--task {task}: not a sim task to evaluate in (--eval-episodes 0 skips the evaluation)")
    train_index, validation_index = windows.split(cfg.validation_fraction, cfg.seed)

    torch.manual_seed(cfg.seed)
    teacher_path = str(folder.resolve())
    # the teacher's seed: the student's stochastic acting noise is drawn as the teacher's is
    student = OneStepPolicy.from_teacher(teacher, seed=teacher.seed, teacher_path=teacher_path)
    saved = OneStepPolicy.from_teacher(teacher, seed=teacher.seed, teacher_path=teacher_path) if cfg.ema else student
    parameters = sum(p.numel() for p in student.model.parameters())
    optimizer = torch.optim.AdamW(student.model.parameters(), lr=cfg.learning_rate, betas=(0.95, 0.999),
                                  weight_decay=cfg.weight_decay)
    schedule = get_cosine_schedule_with_warmup(optimizer, cfg.warmup_steps, cfg.steps)
    ema = (EMAModel(student.model.parameters(), use_ema_warmup=True, inv_gamma=1.0, power=cfg.ema_power,
                    decay=0.9999) if cfg.ema else None)

    out.mkdir(parents=True, exist_ok=True)
    settings = {**config_to_json(cfg), "teacher": teacher_path, "dataset": [str(d.path) for d in datasets],
                "observation_keys": list(teacher.observation_keys), "device": device, "task": task,
                "parameters": parameters, "teacher_inference_steps": config.inference_steps}
    (out / "config.json").write_text(json.dumps(settings, indent=2) + "\n")
    rng = np.random.default_rng(cfg.seed)

    def to_device(obs: dict[str, np.ndarray]) -> dict[str, Any]:
        return {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in obs.items()}

    # validation: held-out windows with fixed noise; the teacher is frozen, so its chunks are computed once
    validation_rng = np.random.default_rng(cfg.seed + 1)
    noise_generator = torch.Generator().manual_seed(cfg.seed + 7)
    validation = []
    for _ in range(VALIDATION_BATCHES if len(validation_index) else 0):
        batch = windows.batch(validation_rng.choice(validation_index, min(cfg.batch_size, len(validation_index))))
        obs = to_device(batch.obs)
        noise = torch.randn((len(batch.actions), config.prediction_horizon, teacher.action_dim),
                            generator=noise_generator).to(device)
        validation.append((obs, noise, teacher.normalizer.normalize(ACTION_KEY, teacher.sample(obs, noise))))

    def validate() -> float | None:
        if not validation:
            return None
        if ema is not None:
            ema.copy_to(saved.model.parameters())
        gaps = [float(torch.mean((saved.normalizer.normalize(ACTION_KEY, saved.sample(obs, noise)) - target) ** 2))
                for obs, noise, target in validation]
        return float(np.mean(gaps))

    initial_validation = validate()

    zero_noise_rows = round(cfg.zero_noise_fraction * cfg.batch_size)

    def loss_of_batch():
        obs = to_device(windows.batch(rng.choice(train_index, cfg.batch_size)).obs)
        return student.distillation_loss(obs, teacher, random_crop=cfg.random_crop, zero_noise_rows=zero_noise_rows)

    result = fit(loss_of_batch, optimizer, schedule, steps=cfg.steps, validate_every=cfg.validate_every,
                 validate=validate, out=out, validation_name="validation_mse", ema=ema,
                 parameters=student.model.parameters() if ema is not None else None, on_progress=on_progress,
                 should_stop=should_stop, validation=initial_validation)
    metrics, step, stopped = result.metrics, result.steps, result.stopped
    train_loss, validation_mse = result.train_loss, result.validation
    if ema is not None:
        ema.copy_to(saved.model.parameters())
    saved.model.eval()
    training_seconds = time.perf_counter() - started
    datasets_text = [str(d.path) for d in datasets]
    saved.save(out / POLICY_DIR, {"trained": {"datasets": datasets_text, "steps": step, "task": task,
                                              "observation_keys": list(teacher.observation_keys),
                                              "seconds": round(training_seconds),
                                              "validation_mse": validation_mse}})

    latency_batch = windows.batch((validation_index if len(validation_index) else train_index)[:8]).obs
    histories = [history_of(latency_batch, i) for i in range(len(next(iter(latency_batch.values()))))]
    teacher_latency = act_chunk_latency_ms(teacher, histories, cfg.latency_calls)
    student_latency = act_chunk_latency_ms(saved, histories, cfg.latency_calls)
    summary: dict[str, Any] = {
        "out": str(out), "policy": str(out / POLICY_DIR), "teacher": teacher_path, "steps": step, "stopped": stopped,
        "device": device, "parameters": parameters, "episodes": windows.num_episodes, "windows": len(windows),
        "train_windows": len(train_index), "validation_windows": len(validation_index),
        "final_train_loss": train_loss, "initial_validation_mse": initial_validation,
        "final_validation_mse": validation_mse, "training_seconds": round(training_seconds, 1), "task": task,
        "teacher_inference_steps": config.inference_steps,
        "latency": {"teacher": teacher_latency, "student": student_latency,
                    "speedup_p50": round(teacher_latency["p50_ms"] / student_latency["p50_ms"], 1)},
        "evaluation": None}
    if task is not None and cfg.eval_episodes and not stopped:
        from robot_rl.sim.evaluate import evaluate_policy

        summary["evaluation"] = {
            "student": evaluate_policy(saved, task, cfg.eval_episodes, out=out / "eval_student", video=cfg.video,
                                       seed=cfg.seed, name="student"),
            "teacher": evaluate_policy(teacher, task, cfg.eval_episodes, out=out / "eval_teacher", video=False,
                                       seed=cfg.seed, name="teacher")}
    summary = json_safe(summary)  # null, not NaN: JSON has no NaN
    (out / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    write_distill_report(out, summary, metrics, settings)
    return summary


def write_distill_report(out: Path, summary: dict[str, Any], metrics: list[dict[str, Any]],
                         settings: dict[str, Any]) -> Path:
    """report.md and loss_curves.png (none before the first logged loss) of a distillation run."""
    from robot_rl.core.report import format_duration, git_commit, interrupted_text, loss_value_text, plot_losses, \
        success_text

    validation = [(0, summary["initial_validation_mse"])] if summary["initial_validation_mse"] is not None else []
    validation += [(m["step"], m["validation_mse"]) for m in metrics if m.get("validation_mse") is not None]
    plotted = plot_losses(out / LOSS_CURVES, {
        "train (distillation loss)": [(m["step"], m["train_loss"]) for m in metrics
                                      if m.get("train_loss") is not None],
        "validation student-teacher MSE" + (" (EMA weights)" if settings["ema"] else ""): validation},
        ylabel="MSE (normalised actions)", title="one-step distillation")

    latency = summary["latency"]
    steps = summary["teacher_inference_steps"]
    lines = ["# Distillation report: one-step student of a DDIM diffusion policy", ""]
    if summary["stopped"]:
        lines += [f"**{interrupted_text(summary['steps'], settings['steps'])}: the student saved is the one trained "
                  "so far; no evaluation.**", ""]
    lines += ["| | student (1 denoiser call) | teacher (DDIM-%d) |" % steps, "|---|---|---|"]
    evaluation = summary["evaluation"]
    if evaluation:
        student, teacher = evaluation["student"], evaluation["teacher"]
        lines.append(f"| success in {student['task']} | {success_text(student['successes'], student['episodes'])} | "
                     f"{success_text(teacher['successes'], teacher['episodes'])} |")
    lines += [f"| batch-1 `act_chunk` p50 ({summary['device']}, 1 thread) | {latency['student']['p50_ms']:.1f} ms | "
              f"{latency['teacher']['p50_ms']:.1f} ms |",
              f"| batch-1 `act_chunk` p90 | {latency['student']['p90_ms']:.1f} ms | "
              f"{latency['teacher']['p90_ms']:.1f} ms |", ""]
    lines.append(f"- Speed-up (p50): **{latency['speedup_p50']:.1f}x**.")
    if evaluation:
        lines.append(f"- Both evaluated on the same {evaluation['student']['episodes']} held-out seeds from "
                     f"{evaluation['student']['first_seed']}.")
    elif summary["stopped"]:
        lines.append(f"- No evaluation: {interrupted_text(summary['steps'], settings['steps']).lower()}.")
    else:
        lines.append("- No evaluation (no sim task, or --eval-episodes 0).")
    initial, final = summary["initial_validation_mse"], summary["final_validation_mse"]
    gap = ("n/a (no held-out episodes)" if final is None
           else f"{loss_value_text(initial, '.4g')} undistilled -> {loss_value_text(final, '.4g')}")
    lines += [
        f"- Validation student-teacher MSE (normalised actions, held-out episodes, fixed noise): {gap}.",
        f"- Teacher: `{summary['teacher']}`.",
        f"- {summary['parameters'] / 1e6:.2f} M parameters on {summary['device']}; {summary['steps']} gradient steps "
        f"in {format_duration(summary['training_seconds'])}; {summary['episodes']} episodes, "
        f"{summary['train_windows']} training and {summary['validation_windows']} validation windows.",
        f"- Git commit: `{git_commit()}`; written {time.strftime('%Y-%m-%d %H:%M:%S')}.", ""]
    lines += ([f"![loss curves]({LOSS_CURVES})", ""] if plotted
              else ["No loss curve: no finite loss was logged (stopped before its first step?).", ""])
    if evaluation and evaluation["student"].get("video"):
        video = Path(evaluation["student"]["video"])
        lines += [f"Student eval video: [{video.parent.name}/{video.name}]({video.parent.name}/{video.name})", ""]
    lines += ["## Config", "", "```json", json.dumps(settings, indent=2), "```", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
