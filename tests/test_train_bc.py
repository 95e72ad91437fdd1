"""`robot-rl train-bc` end to end on scripted PickCube demos (a tiny network, a few steps): the policy folder, the
report, the evaluation in the sim mirror, `robot-rl eval` of the folder, Ctrl-C, and one-line errors."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch

from robot_rl.apps.cli import main

torch.set_num_threads(1)
os.environ.setdefault("MUJOCO_GL", "egl")

TINY = ["--diffusion.down-dims", "16", "32", "--diffusion.image-channels", "8", "--diffusion.groups", "4",
        "--diffusion.state-features", "16", "--diffusion.step-embedding-dim", "16",
        "--diffusion.inference-steps", "4", "--batch-size", "16", "--validate-every", "5"]


def run_cli(argv, capsys) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    path = tmp_path_factory.mktemp("bc") / "demos.zarr"
    main(["record", "--out", str(path), "--task", "PickCube-v0", "--episodes", "3", "--obs-mode", "state"])
    return path


def test_train_bc_writes_a_policy_that_eval_loads(demos, tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, err = run_cli(["train-bc", "--dataset", str(demos), "--out", str(out), "--steps", "10",
                                 "--eval-episodes", "2", "--no-video", "--validation-fraction", "0.34", *TINY], capsys)
    assert code == 0, err
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["steps"] == 10 and summary["task"] == "PickCube-v0" and summary["eval_episodes"] == 2
    assert 0.0 <= summary["success_rate"] <= 1.0
    assert sorted(p.name for p in (out / "policy").iterdir()) == ["model.safetensors", "policy.json"]  # no pickle
    description = json.loads((out / "policy" / "policy.json").read_text())
    assert description["kind"] == "diffusion" and list(description["observation_spec"]) == ["state"]
    # A state-only dataset: the one line says the policy is blind to the object and how to give it the sim's state.
    assert "no camera in the dataset" in err and "not object_state" in err and "--observation-keys" in err
    assert description["trained"]["steps"] == 10 and description["trained"]["task"] == "PickCube-v0"
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "train_loss" in m] == list(range(1, 11))  # every steps // 100 steps, at least 1
    assert [m["step"] for m in metrics if m.get("validation_loss") is not None] == [5, 10]
    report = (out / "report.md").read_text()
    assert "Eval success in PickCube-v0" in report and (out / "loss_curves.png").is_file()
    assert any((out / "tensorboard").iterdir())
    evaluation = json.loads((out / "eval.json").read_text())
    # `robot-rl eval` of the run folder: the same held-out seeds, the same deterministic policy, the same episodes
    code, stdout, err = run_cli(["eval", "--policy", str(out), "--episodes", "2", "--out", str(tmp_path / "eval"),
                                 "--device", "cpu"], capsys)
    assert code == 0, err
    again = json.loads(stdout.strip().splitlines()[-1])
    assert again["policy_kind"] == "diffusion" and again["task"] == "PickCube-v0"
    assert again["per_episode"] == evaluation["per_episode"]
    code, stdout, err = run_cli(["eval", "--policy", str(out), "--episodes", "1", "--out", str(tmp_path / "eval1"),
                                 "--device", "cpu", "--inference-steps", "1"], capsys)
    assert code == 0, err
    assert json.loads(stdout.strip().splitlines()[-1])["inference_steps"] == 1


def strict_json(text: str):
    """json.loads that refuses NaN / Infinity (Python writes them; JSON has none)."""
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in JSON: {text[:300]}"))


def test_ctrl_c_saves_the_policy_trained_so_far(demos, tmp_path, capsys, monkeypatch):
    # Stopped before the first validation (--validate-every 5): valid JSON (null, never NaN), a loss curve of the
    # steps done, a report saying it was interrupted, and (stderr is not a terminal) plain progress lines.
    from robot_rl.core import progress
    from robot_rl.apps import train_bc

    out, stop_after = tmp_path / "run", 3
    calls = {"n": 0}
    real = train_bc.train_bc

    def stop_after_n(cfg, *, on_progress=None, should_stop=None):
        def stop():
            calls["n"] += 1
            return calls["n"] > stop_after

        return real(cfg, on_progress=on_progress, should_stop=stop)

    monkeypatch.setattr(train_bc, "train_bc", stop_after_n)
    monkeypatch.setattr(progress, "EVERY_S", 0.0)  # a progress line at every step (stderr is not a terminal here)
    code, stdout, err = run_cli(["train-bc", "--dataset", str(demos), "--out", str(out), "--steps", "50", *TINY],
                                capsys)
    assert code == 130, err
    assert f"interrupted at step {stop_after}/50" in err and str(out / "policy") in err
    assert json.loads((out / "policy" / "policy.json").read_text())["trained"]["steps"] == stop_after
    printed, saved = strict_json(stdout.strip().splitlines()[-1]), strict_json((out / "summary.json").read_text())
    assert printed["final_validation_loss"] is None and saved["final_validation_loss"] is None
    report = (out / "report.md").read_text()
    assert f"Interrupted at step {stop_after}/50" in report and f"No evaluation: interrupted at step {stop_after}/50" \
        in report, report
    assert not (out / "eval.json").exists()
    metrics = [strict_json(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, stop_after + 1))
    assert isinstance(saved["final_train_loss"], float) and saved["final_train_loss"] == metrics[-1]["train_loss"]
    assert re.search(r"Final losses: train \d+\.\d{4}, validation n/a\.", report), report
    assert (out / "loss_curves.png").stat().st_size > 10_000 and "![loss curves]" in report
    lines = [line for line in err.splitlines() if line.startswith("train-bc: step ")]
    assert [line.split()[2] for line in lines] == [f"{k}/50" for k in range(1, stop_after + 1)], err
    assert "loss " in lines[-1] and "elapsed" in lines[-1], lines


@pytest.mark.parametrize(("args", "message"), [
    (["--steps", "0"], "steps=0 must be >= 1"),
    (["--diffusion.action-horizon", "20"], "exceeds prediction_horizon=16"),
    (["--diffusion.down-dims", "12", "24", "--diffusion.groups", "8"], "groups=8 must divide every down_dims"),
    (["--observation-keys", "images/front"], "has no observation images/front"),
    (["--device", "tpu"], "device 'tpu' must be auto, cpu, cuda or cuda:N"),
])
def test_bad_options_are_one_line_errors_and_leave_nothing(demos, tmp_path, capsys, args, message):
    out = tmp_path / "run"
    code, _, err = run_cli(["train-bc", "--dataset", str(demos), "--out", str(out), *args], capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert not out.exists()


def test_an_existing_output_folder_is_refused(demos, tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "keep.txt").write_text("mine")
    code, _, err = run_cli(["train-bc", "--dataset", str(demos), "--out", str(tmp_path / "run")], capsys)
    assert code == 2 and "exists and is not an empty folder" in err
    assert (tmp_path / "run" / "keep.txt").read_text() == "mine"


def test_fit_logs_the_training_loss_evenly_and_null_for_nan(tmp_path):
    # A long run stopped early still has its curve (a point every 50 steps at most); a NaN loss is null, not NaN.
    from robot_rl.apps.train_bc import LOSS_EVERY_MAX, fit

    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    stop_at, losses = {"step": 120}, {"nan": False}
    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        return calls["n"] > stop_at["step"]

    def loss():
        value = (weight ** 2).sum()
        return value * float("nan") if losses["nan"] else value

    result = fit(loss, optimizer, schedule, steps=100_000, validate_every=10**9, validate=lambda: None,
                 out=tmp_path, validation_name="validation_loss", should_stop=stop)
    assert result.stopped and result.steps == 120 and LOSS_EVERY_MAX == 50
    rows = [strict_json(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [50, 100, 120] and all(r["train_loss"] > 0 for r in rows)
    assert result.train_loss == rows[-1]["train_loss"] and result.validation is None
    (tmp_path / "metrics.jsonl").unlink()
    losses["nan"], calls["n"], stop_at["step"] = True, 0, 3
    result = fit(loss, optimizer, schedule, steps=300, validate_every=2, validate=lambda: float("nan"), out=tmp_path,
                 validation_name="validation_loss", should_stop=stop)
    rows = [strict_json(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    # a point every 3 steps (300 // 100), a validation every 2: rows for either, each with what it measured
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in rows] == [
        {"step": 2, "validation_loss": None, "learning_rate": 0.01},
        {"step": 3, "train_loss": None, "learning_rate": 0.01}]
    assert result.train_loss is None and result.validation is None
