"""`make demo`, the first thing a user runs, with a reduced budget: it learns (state PickCube from 20 demos, 1000 env
steps), and leaves a report, curves, TensorBoard logs, an H.264 video and a policy file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import av
import pytest

REPO = Path(__file__).resolve().parents[1]
SMALL_BUDGET = ["DEMO_STEPS=1000", "DEMO_EVAL_EVERY=1000"]  # 20 demos and 10-episode evals, as documented


def make(*args: str, timeout: float) -> subprocess.CompletedProcess:
    # -o setup: use this environment's robot-rl (VENV) instead of creating a virtualenv
    return subprocess.run(["make", "-o", "setup", *args, f"VENV={sys.prefix}"], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})


def test_demo_budget_defaults_are_the_documented_run():
    dry = make("-n", "demo", timeout=60)
    assert dry.returncode == 0, dry.stderr
    command = " ".join(dry.stdout.replace("\\\n", " ").split())
    assert ("robot-rl train --task PickCube-v0 --obs-mode state --demos 20 --steps 1500 --eval-every 500 "
            "--eval-episodes 10 --run-dir runs/demo") in command


@pytest.mark.slow
def test_make_demo_with_a_small_budget_learns(tmp_path):
    run = tmp_path / "demo"
    result = make("demo", f"RUN={run}", *SMALL_BUDGET, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"report: {run}/report.md" in result.stdout
    state = json.loads((run / "checkpoint" / "learner.json").read_text())["extra"]
    evals = {row["env_step"]: row["success_rate"] for row in state["evals"]}
    assert evals[0] == 0.0  # the untrained policy never lifts the cube
    assert evals[1000] >= 0.8, evals  # 3 seeds reach >= 95 % by 1000 env steps (docs/results.md)
    for name in ("report.md", "learning_curve.png", "training_curves.png", "eval.mp4", "policy.msgpack"):
        assert (run / name).stat().st_size > 0, name
    assert any((run / "tensorboard").iterdir())
    report = (run / "report.md").read_text()
    assert re.search(r"Final eval success: \*\*\d+ % \(\d+/10 episodes, 95 % CI \d+-\d+ %\)\*\*", report), report
    assert "Wall-clock time:" in report and "Git commit:" in report
    assert {"critic_loss", "q_mean", "temperature", "updates_per_s"} <= set(state["metrics"][-1])
    with av.open(str(run / "eval.mp4")) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264" and stream.width == 2 * stream.height
