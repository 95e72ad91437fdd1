"""`robot-rl train-bc` end to end on scripted PickCube demos (a tiny network, a few steps): the policy folder, the
report, the evaluation in the sim mirror, `robot-rl eval` of the folder, Ctrl-C, and one-line errors."""

from __future__ import annotations

import json
import os

import pytest
import torch

from robot_rl.cli import main

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
    assert [m["step"] for m in metrics] == [5, 10] and all(m["validation_loss"] is not None for m in metrics)
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


def test_ctrl_c_saves_the_policy_trained_so_far(demos, tmp_path, capsys, monkeypatch):
    from robot_rl import train_bc

    out = tmp_path / "run"
    calls = {"n": 0}
    real = train_bc.train_bc

    def stop_after_3(cfg, *, on_progress=None, should_stop=None):
        def stop():
            calls["n"] += 1
            return calls["n"] > 3

        return real(cfg, on_progress=on_progress, should_stop=stop)

    monkeypatch.setattr(train_bc, "train_bc", stop_after_3)
    code, stdout, err = run_cli(["train-bc", "--dataset", str(demos), "--out", str(out), "--steps", "50", *TINY],
                                capsys)
    assert code == 130, err
    assert "interrupted at step 3/50" in err and str(out / "policy") in err
    assert json.loads((out / "policy" / "policy.json").read_text())["trained"]["steps"] == 3
    assert "Stopped at step 3/50" in (out / "report.md").read_text()
    assert not (out / "eval.json").exists()


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
