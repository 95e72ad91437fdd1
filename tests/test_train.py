"""Training in the sim mirror end to end: it learns, it reports, and a killed run resumes where it stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robot_rl.train import TrainConfig, config_from_json, config_to_json, train


def test_config_json_round_trip():
    cfg = TrainConfig(task="PegInsert-v0", obs_mode="pixels", run_dir=Path("x/y"), steps=7)
    assert config_from_json(TrainConfig, json.loads(json.dumps(config_to_json(cfg)))) == cfg


@pytest.mark.slow
def test_state_pick_cube_learns_from_demos(tmp_path):
    cfg = TrainConfig(
        task="PickCube-v0", obs_mode="state", demos=20, steps=1500, eval_every=1500, eval_episodes=10,
        run_dir=tmp_path / "run", video=True, seed=0,
    )
    run_dir = train(cfg)
    state = json.loads((run_dir / "checkpoint" / "learner.json").read_text())["extra"]
    evals = {row["env_step"]: row["success_rate"] for row in state["evals"]}
    assert evals[0] == 0.0  # the untrained policy never lifts the cube
    assert evals[1500] >= 0.8, evals
    for name in ("report.md", "learning_curve.png", "eval.mp4", "config.json"):
        assert (run_dir / name).stat().st_size > 0, name
    assert any((run_dir / "tensorboard").iterdir())
    assert "Final eval success" in (run_dir / "report.md").read_text()


@pytest.mark.slow
def test_killed_run_resumes_from_its_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    command = [
        sys.executable, "-m", "robot_rl.cli", "train", "--steps", "400", "--demos", "3", "--eval-every", "400",
        "--eval-episodes", "2", "--checkpoint-every", "100", "--no-video", "--run-dir", str(run_dir),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    checkpoint = run_dir / "checkpoint" / "learner.json"
    deadline = time.monotonic() + 300
    while not (checkpoint.exists() and json.loads(checkpoint.read_text())["extra"]["env_step"] >= 100):
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    saved = json.loads(checkpoint.read_text())
    assert 100 <= saved["extra"]["env_step"] < 400

    resumed = subprocess.run(
        [sys.executable, "-m", "robot_rl.cli", "train", "--resume", str(run_dir)],
        capture_output=True, text=True, timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"from env step {saved['extra']['env_step']}" in resumed.stdout
    final = json.loads(checkpoint.read_text())
    assert final["extra"]["env_step"] == 400
    assert final["transitions"] == 400  # nothing trained on twice, nothing lost between checkpoint and resume
    assert final["updates"] > saved["updates"]
    assert (run_dir / "report.md").exists()


def test_interventions_during_training_are_flagged_and_reach_both_buffers(tmp_path):
    from robot_rl.learner import LearnerConfig
    from robot_rl.sim.human import SimulatedHumanConfig

    cfg = TrainConfig(
        demos=0, steps=150, eval_every=150, eval_episodes=1, intervene=True, video=False, run_dir=tmp_path / "run",
        human=SimulatedHumanConfig(stuck_window=3, stuck_distance=0.05, takeover_steps=4, episode_budget=8),
        learner=LearnerConfig(batch_size=32, utd=1, n_step=3),
    )
    run_dir = train(cfg)
    state = json.loads((run_dir / "checkpoint" / "learner.json").read_text())
    episodes = state["extra"]["episodes_log"]
    assert 0 < state["interventions"] <= 8 * len(episodes)
    assert any(e["intervention_rate"] > 0 for e in episodes)
    from robot_rl.data.replay import ReplayBuffer

    online = ReplayBuffer.load(run_dir / "checkpoint" / "online.zarr")
    demo = ReplayBuffer.load(run_dir / "checkpoint" / "demo.zarr")
    assert online.intervention[online.valid].sum() == state["interventions"] == len(demo)
    assert "Human interventions" in (run_dir / "report.md").read_text()
