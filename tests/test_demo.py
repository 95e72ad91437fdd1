"""`make demo`, the first thing a user runs, with a reduced budget: report, curves, H.264 video, policy file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import av
import pytest

REPO = Path(__file__).resolve().parents[1]
SMALL_BUDGET = ["DEMO_DEMOS=3", "DEMO_STEPS=50", "DEMO_EVAL_EVERY=50", "DEMO_EVAL_EPISODES=2"]


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
def test_make_demo_with_a_small_budget(tmp_path):
    run = tmp_path / "demo"
    result = make("demo", f"RUN={run}", *SMALL_BUDGET, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"report: {run}/report.md" in result.stdout
    for name in ("report.md", "learning_curve.png", "training_curves.png", "eval.mp4", "policy.msgpack"):
        assert (run / name).stat().st_size > 0, name
    assert "Final eval success" in (run / "report.md").read_text()
    with av.open(str(run / "eval.mp4")) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264" and stream.width == 2 * stream.height
