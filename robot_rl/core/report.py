"""Run reports: a learning-curve PNG, a training-curves PNG and a markdown summary, from plain data.

`write_report` takes rows and counters, not live objects, so the in-process trainer and the ROS learner node write
the same report.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.files import atomic_write_text

LEARNING_CURVE = "learning_curve.png"
TRAINING_CURVES = "training_curves.png"
REPORT = "report.md"

# (metric key, panel title) of the training-curves plot; the trainer records these per episode.
TRAINING_METRICS = (
    ("critic_loss", "critic loss"), ("q_mean", "Q (mean over batch)"), ("temperature", "temperature"),
    ("updates_per_s", "gradient updates / s"),
)


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a success rate (95 % for z = 1.96); (0, 1) for no trials."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def json_safe(value: Any) -> Any:
    """`value` with every NaN or infinite float (numpy's too) replaced by None, in nested dicts, lists and tuples:
    what `json.dumps(..., allow_nan=False)` accepts (JSON has no NaN; Python would write an invalid `NaN`)."""
    if isinstance(value, Mapping):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def success_text(successes: int, trials: int) -> str:
    """E.g. "95 % (19/20 episodes, 95 % CI 76-99 %)"."""
    low, high = wilson_interval(successes, trials)
    rate = successes / trials if trials else 0.0
    return f"{percent(rate)} ({successes}/{trials} episodes, 95 % CI {low * 100:.0f}-{percent(high)})"


def failure_modes_text(modes: dict[str, int]) -> str:
    """Failure modes and their counts (an evaluation's `failure_modes`) in a line: "peg turned in the hand 3,
    beside the hole 1"; empty without failures."""
    return ", ".join(f"{mode} {count}" for mode, count in modes.items())


def percent(rate: float) -> str:
    """E.g. "95 %"."""
    return f"{rate * 100:.0f} %"


def format_duration(seconds: float) -> str:
    """E.g. "1 h 02 min", "3 min 07 s", "42.5 s"."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def git_commit(path: str | Path | None = None) -> str:
    """The commit of the git checkout holding `path` (default: this code), "+ (dirty)" if it has uncommitted
    changes, or "unknown" (not a checkout, no git)."""
    cwd = Path(path) if path is not None else Path(__file__).resolve().parent

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit} (dirty)" if dirty else commit


def learner_counters(learner) -> dict[str, int]:
    """The counters a report shows, from a `robot_rl.learner.learner.Learner`."""
    return {"transitions": learner.transitions, "updates": learner.updates, "interventions": learner.interventions,
            "demo_buffer": len(learner.demo), "online_buffer": len(learner.online)}


def _successes(row: Mapping[str, Any]) -> int:
    return int(row["successes"]) if "successes" in row else round(row["success_rate"] * row["episodes"])


def plot_learning_curve(path: Path, evals: Sequence[Mapping[str, Any]], episodes: Sequence[Mapping[str, Any]],
                        title: str) -> Path:
    """Eval success (with its 95 % interval) and the running training success / intervention rate vs env step."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 4), dpi=120)
    steps = [r["env_step"] for r in evals]
    bounds = np.array([wilson_interval(_successes(r), r["episodes"]) for r in evals]).reshape(-1, 2)
    ax.fill_between(steps, bounds[:, 0], bounds[:, 1], alpha=0.2, label="eval 95 % interval")
    ax.plot(steps, [r["success_rate"] for r in evals], "o-", label="eval success rate")
    if episodes:
        episode_steps = np.array([e["env_step"] for e in episodes])
        window = max(1, min(20, len(episodes) // 5))
        kernel = np.ones(window) / window
        success = np.convolve([float(e["success"]) for e in episodes], kernel, mode="valid")
        interventions = np.convolve([e["intervention_rate"] for e in episodes], kernel, mode="valid")
        ax.plot(episode_steps[window - 1 :], success, alpha=0.6, label=f"training success ({window}-episode mean)")
        if interventions.any():
            ax.plot(episode_steps[window - 1 :], interventions, alpha=0.6, label="intervention rate")
    ax.set(xlabel="environment steps", ylabel="rate", ylim=(-0.02, 1.02), title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # beside the axes: it hides no point
    return _save(fig, path)


def plot_training_curves(path: Path, metrics: Sequence[Mapping[str, Any]], title: str) -> Path:
    """Critic loss, Q, temperature and gradient updates/s vs env step (one panel each)."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(9, 6), dpi=120, sharex=True)
    for ax, (key, label) in zip(axes.flat, TRAINING_METRICS):
        rows = [m for m in metrics if m.get(key) is not None and math.isfinite(m[key])]
        ax.plot([m["env_step"] for m in rows], [m[key] for m in rows], ".-", markersize=3)
        if key == "q_mean":
            targets = [m for m in rows if m.get("target_q_mean") is not None]
            ax.plot([m["env_step"] for m in targets], [m["target_q_mean"] for m in targets], alpha=0.6)
            ax.legend(["Q", "TD target"], fontsize=8)
        values = [m[key] for m in rows]
        if key in ("critic_loss", "temperature") and values and min(values) > 0 and max(values) > 10 * min(values):
            ax.set_yscale("log")
        if not rows:
            ax.text(0.5, 0.5, "no gradient updates yet", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("environment steps")
    fig.suptitle(title)
    return _save(fig, path)


def plot_losses(path: Path, curves: Mapping[str, Sequence[tuple[int, float]]], *, ylabel: str, title: str) -> bool:
    """Loss curves (label -> (gradient step, value) points; log scale when every value is > 0) to `path`; returns
    False, writing nothing, when there is no finite point to draw (a run stopped before its first logged loss)."""
    curves = {label: [(s, v) for s, v in points if v is not None and math.isfinite(v)]
              for label, points in curves.items()}
    if not any(curves.values()):
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for label, points in curves.items():
        if points:
            ax.plot([s for s, _ in points], [v for _, v in points], ".-" if len(points) <= 30 else "-", label=label,
                    markersize=4)
    positive = all(v > 0 for points in curves.values() for _, v in points)
    ax.set(xlabel="gradient steps", ylabel=ylabel, yscale="log" if positive else "linear", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, path)
    return True


def interrupted_text(step: int, total: int) -> str:
    """E.g. "Interrupted at step 3/300"."""
    return f"Interrupted at step {step}/{total}"


def loss_value_text(value: float | None, spec: str = ".4f") -> str:
    """A loss for a report line: "n/a" where there is none (no step, no validation, not finite)."""
    return "n/a" if value is None or not math.isfinite(value) else format(value, spec)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")  # keeps a legend placed beside the axes
    plt.close(fig)
    return path


def write_report(
    run_dir: str | Path,
    *,
    title: str,
    config: Mapping[str, Any],
    evals: Sequence[Mapping[str, Any]],
    episodes: Sequence[Mapping[str, Any]],
    metrics: Sequence[Mapping[str, Any]],
    counters: Mapping[str, int],
    wall_seconds: float,
    video: str | Path | None = None,
    status: str | None = None,
) -> Path:
    """Write `report.md`, `learning_curve.png` and `training_curves.png` in `run_dir`; returns the report's path.

    `evals`: rows with env_step, episodes, success_rate (and successes), mean_return, mean_length; `episodes`: rows
    with env_step, success, intervention_rate; `metrics`: rows with env_step and any of critic_loss, q_mean,
    target_q_mean, temperature, updates_per_s; `counters`: see `learner_counters`; `status`: a line shown on top
    of the report of a run that did not finish (e.g. that it was interrupted and how to resume it).
    """
    run_dir = Path(run_dir)
    plot_learning_curve(run_dir / LEARNING_CURVE, evals, episodes, title)
    plot_training_curves(run_dir / TRAINING_CURVES, metrics, title)
    transitions = int(counters.get("transitions", 0))
    lines = [f"# Training report: {title}", ""]
    if status:
        lines += [f"**{status}**", ""]
    if evals:
        last = evals[-1]
        best = max(evals, key=lambda r: r["success_rate"])
        which = "Latest" if status else "Final"  # a stopped run has had no final evaluation
        lines.append(f"- {which} eval success: **{success_text(_successes(last), last['episodes'])}** at env step "
                     f"{last['env_step']} (best {percent(best['success_rate'])} at env step {best['env_step']}).")
    else:
        lines.append("- No evaluation yet.")
    lines += [
        f"- Wall-clock time: {format_duration(wall_seconds)} "
        f"({transitions / max(wall_seconds, 1e-9):.1f} env steps/s overall).",
        f"- Git commit: `{git_commit()}`; written {time.strftime('%Y-%m-%d %H:%M:%S')}.",
        f"- Env steps: {transitions}, gradient updates: {counters.get('updates', 0)}, episodes: {len(episodes)}.",
        f"- Human interventions: {counters.get('interventions', 0)} steps "
        f"({counters.get('interventions', 0) / max(1, transitions):.1%} of env steps).",
        f"- Demo buffer: {counters.get('demo_buffer', 0)} transitions, online buffer: "
        f"{counters.get('online_buffer', 0)}.",
        "",
        f"![learning curve]({LEARNING_CURVE})",
        "",
        f"![training curves: critic loss, Q, temperature, updates/s]({TRAINING_CURVES})",
        "",
    ]
    if video is not None:
        name = Path(video).name
        lines += [f"Eval video (front and wrist cameras): [{name}]({name})", ""]
    lines += ["| env step | eval success | episodes | 95 % CI | mean return | mean length | failure modes |",
              "|---:|---:|---:|---:|---:|---:|---|"]
    for row in evals:
        low, high = wilson_interval(_successes(row), row["episodes"])
        lines.append(f"| {row['env_step']} | {percent(row['success_rate'])} | {row['episodes']} | "
                     f"{low * 100:.0f}-{percent(high)} | {row['mean_return']:.2f} | {row['mean_length']:.1f} | "
                     f"{failure_modes_text(row.get('failure_modes', {}))} |")
    lines += ["", "## Config", "", "```json", json.dumps(config, indent=2), "```", ""]
    return atomic_write_text(run_dir / REPORT, "\n".join(lines))
