"""Run reports: a learning-curve PNG and a markdown summary."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np


def plot_learning_curve(path: Path, evals: list[dict[str, float]], episodes: list[dict[str, Any]], title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    ax.plot([r["env_step"] for r in evals], [r["success_rate"] for r in evals], "o-", label="eval success rate")
    if episodes:
        steps = np.array([e["env_step"] for e in episodes])
        window = max(1, min(20, len(episodes) // 5))
        kernel = np.ones(window) / window
        success = np.convolve([float(e["success"]) for e in episodes], kernel, mode="valid")
        interventions = np.convolve([e["intervention_rate"] for e in episodes], kernel, mode="valid")
        ax.plot(steps[window - 1 :], success, alpha=0.6, label=f"training success ({window}-episode mean)")
        if interventions.any():
            ax.plot(steps[window - 1 :], interventions, alpha=0.6, label="intervention rate")
    ax.set(xlabel="environment steps", ylabel="rate", ylim=(-0.02, 1.02), title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_report(run_dir: Path, cfg, evals, episodes, learner, video: Path | None) -> Path:
    """`report.md` and `learning_curve.png` in the run folder."""
    from robot_rl.train import config_to_json

    plot_learning_curve(run_dir / "learning_curve.png", evals, episodes, f"{cfg.task} ({cfg.obs_mode})")
    final = evals[-1]
    best = max(evals, key=lambda r: r["success_rate"])
    lines = [
        f"# Training report: {cfg.task}, obs {cfg.obs_mode}",
        "",
        f"Written {time.strftime('%Y-%m-%d %H:%M:%S')}.",
        "",
        f"- Final eval success: **{final['success_rate']:.0%}** over {final['episodes']} episodes at env step "
        f"{final['env_step']} (best {best['success_rate']:.0%} at step {best['env_step']}).",
        f"- Env steps: {learner.transitions}, gradient updates: {learner.updates}, episodes: {len(episodes)}.",
        f"- Human interventions: {learner.interventions} steps "
        f"({learner.interventions / max(1, learner.transitions):.1%} of env steps).",
        f"- Demo buffer: {len(learner.demo)} transitions, online buffer: {len(learner.online)}.",
        "",
        "![learning curve](learning_curve.png)",
        "",
    ]
    if video is not None:
        lines += [f"Eval video: [{video.name}]({video.name})", ""]
    lines += ["| env step | eval success | mean return | mean length |", "|---:|---:|---:|---:|"]
    lines += [
        f"| {r['env_step']} | {r['success_rate']:.0%} | {r['mean_return']:.2f} | {r['mean_length']:.1f} |" for r in evals
    ]
    lines += ["", "## Config", "", "```json"]
    lines += [json.dumps(config_to_json(cfg), indent=2), "```", ""]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines))
    return path
