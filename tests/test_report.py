"""Run reports from plain data: success with a Wilson interval, wall time, git commit, the two plots."""

from __future__ import annotations

import subprocess

import matplotlib.image
import pytest

from robot_rl.core.report import git_commit, success_text, wilson_interval, write_report


def test_wilson_interval_matches_known_values():
    low, high = wilson_interval(19, 20)
    assert low == pytest.approx(0.7639, abs=1e-4) and high == pytest.approx(0.9911, abs=1e-4)
    assert wilson_interval(0, 10) == (0.0, pytest.approx(0.2775, abs=1e-4))
    assert wilson_interval(10, 10) == (pytest.approx(0.7225, abs=1e-4), 1.0)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert success_text(19, 20) == "95 % (19/20 episodes, 95 % CI 76-99 %)"


def _git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True,
                   capture_output=True)


def test_git_commit_names_the_commit_marks_changes_and_never_fails(tmp_path, monkeypatch):
    outside = tmp_path / "not_a_repo"
    outside.mkdir()
    assert git_commit(outside) == "unknown"
    assert git_commit(tmp_path / "missing") == "unknown"

    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    _git(repo, "add", "code.py")
    _git(repo, "commit", "-q", "-m", "first")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert git_commit(repo) == head
    (repo / "code.py").write_text("x = 2\n")
    assert git_commit(repo) == f"{head} (dirty)"

    monkeypatch.setenv("PATH", str(tmp_path / "no_git_here"))
    assert git_commit(repo) == "unknown"


EVALS = [
    {"env_step": 0, "episodes": 20, "successes": 0, "success_rate": 0.0, "mean_return": 0.0, "mean_length": 50.0},
    {"env_step": 500, "episodes": 20, "successes": 19, "success_rate": 0.95, "mean_return": 0.95, "mean_length": 21.5,
     "failure_modes": {"cube not in the hand": 1}},  # rows of runs before failure modes have none
]
EPISODES = [{"env_step": 50 * (i + 1), "success": i > 4, "return": float(i > 4), "length": 50,
             "intervention_rate": 0.0} for i in range(10)]
METRICS = [{"env_step": 50 * (i + 1), "updates": 100 * (i + 1), "critic_loss": 0.1 / (i + 1), "q_mean": 0.1 * i,
            "target_q_mean": 0.1 * i, "temperature": 0.01, "updates_per_s": 40.0} for i in range(10)]
COUNTERS = {"transitions": 500, "updates": 1000, "interventions": 0, "demo_buffer": 300, "online_buffer": 500}


def test_report_from_plain_data(tmp_path):
    """What the ROS learner node can call: rows and counters, no Learner, no TrainConfig."""
    path = write_report(tmp_path, title="PickCube-v0, obs state", config={"task": "PickCube-v0", "steps": 500},
                        evals=EVALS, episodes=EPISODES, metrics=METRICS, counters=COUNTERS, wall_seconds=187.0,
                        video=tmp_path / "eval.mp4")
    text = path.read_text()
    assert "Final eval success: **95 % (19/20 episodes, 95 % CI 76-99 %)** at env step 500" in text
    assert "Wall-clock time: 3 min 07 s" in text
    assert f"Git commit: `{git_commit()}`" in text
    assert "![training curves" in text and "(training_curves.png)" in text and "[eval.mp4](eval.mp4)" in text
    assert "| 0 | 0 % | 20 | 0-16 % | 0.00 | 50.0 |  |" in text
    assert "| 500 | 95 % | 20 | 76-99 % | 0.95 | 21.5 | cube not in the hand 1 |" in text
    assert '"steps": 500' in text
    for name in ("learning_curve.png", "training_curves.png"):
        image = matplotlib.image.imread(tmp_path / name)
        assert image.shape[0] > 300 and image.std() > 0.05, name  # a drawn figure, not a blank canvas


def test_the_report_of_a_stopped_run_does_not_call_its_last_evaluation_final(tmp_path):
    status = "Interrupted at env step 512 of 5000: resume with `robot-rl train --resume x`."
    text = write_report(tmp_path, title="t", config={}, evals=EVALS, episodes=EPISODES, metrics=METRICS,
                        counters=COUNTERS, wall_seconds=60.0, status=status).read_text()
    assert text.startswith(f"# Training report: t\n\n**{status}**\n")
    assert "- Latest eval success: **95 % (19/20 episodes, 95 % CI 76-99 %)** at env step 500" in text
    assert "Final eval" not in text


def test_report_of_a_run_stopped_before_any_update_or_eval(tmp_path):
    path = write_report(tmp_path, title="t", config={}, evals=[], episodes=[], metrics=[],
                        counters={"transitions": 0}, wall_seconds=1.5,
                        status="Interrupted at env step 0 of 100: resume with `robot-rl train --resume x`.")
    text = path.read_text()
    assert "**Interrupted at env step 0 of 100" in text and "No evaluation yet" in text
    assert (tmp_path / "training_curves.png").stat().st_size > 0


def test_json_safe_turns_nan_into_null_everywhere():
    import json

    import numpy as np

    from robot_rl.core.report import json_safe

    value = {"loss": float("nan"), "rows": [{"v": np.float32("inf")}, (1.5, -float("inf"))], "n": 3, "s": "x"}
    assert json.dumps(json_safe(value), allow_nan=False) == \
        '{"loss": null, "rows": [{"v": null}, [1.5, null]], "n": 3, "s": "x"}'


def test_loss_curves_are_not_drawn_without_a_finite_point(tmp_path):
    from robot_rl.core.report import plot_losses

    assert not plot_losses(tmp_path / "a.png", {"train": [], "validation": [(5, float("nan"))]}, ylabel="l", title="t")
    assert not (tmp_path / "a.png").exists()
    assert plot_losses(tmp_path / "b.png", {"train": [(1, 0.5), (2, 0.25)], "validation": []}, ylabel="l", title="t")
    assert min(matplotlib.image.imread(tmp_path / "b.png").shape[:2]) > 400


def test_progress_lines_come_every_few_seconds_and_only_when_enabled():
    import io

    from robot_rl.core.progress import ProgressLines

    now, stream = [100.0], io.StringIO()
    lines = ProgressLines("train-bc", 300, enabled=True, every_s=5.0, clock=lambda: now[0], stream=stream)
    for step in range(1, 301):  # 0.125 s a step: a line every 40 steps
        now[0] = 100.0 + 0.125 * step
        lines.update(step, f"loss {1 / step:.4f}")
    printed = stream.getvalue().splitlines()
    assert [line.split()[2] for line in printed] == [f"{k}/300" for k in range(40, 300, 40)], printed
    assert printed[0] == "train-bc: step 40/300 (13 %)  loss 0.0250  elapsed 5.0 s", printed
    off = ProgressLines("train-bc", 300, enabled=False, every_s=0.0, stream=stream)
    assert not off.update(1, "loss 1") and len(stream.getvalue().splitlines()) == len(printed)
