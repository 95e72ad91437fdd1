"""One-step student of a DDIM teacher: initialisation from the teacher, one denoiser call per chunk, the same noise
giving the same chunk, policy files, distillation shrinking the student-teacher gap, and `robot-rl distill` end to
end with its one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from robot_rl.apps.cli import main
from robot_rl.data.episode_writer import EpisodeWriter
from robot_rl.data.sequences import SequenceWindows
from robot_rl.policies.base import ActionChunk, Policy, PolicyError
from robot_rl.policies.checkpoint import POLICY_CONFIG, POLICY_WEIGHTS, load_policy
from robot_rl.policies.diffusion import DiffusionConfig, DiffusionPolicy
from robot_rl.policies.normalizer import Normalizer
from robot_rl.policies.one_step import OneStepPolicy
from robot_rl.core.types import ArraySpec, ObservationSpec

torch.set_num_threads(1)

TINY = DiffusionConfig(obs_horizon=2, prediction_horizon=8, action_horizon=4, down_dims=(16, 32), groups=4,
                       step_embedding_dim=16, image_channels=(8, 16), image_features=8, state_features=16,
                       train_timesteps=20, inference_steps=5)
STATE_DIM, ACTION_DIM = 4, 2


def run_cli(argv, capsys) -> tuple[int, str, str]:
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    """8 state-only episodes of 24 steps; the action is a fixed smooth function of the state."""
    path = tmp_path_factory.mktemp("one_step") / "demos.zarr"
    rng = np.random.default_rng(0)
    weights = rng.normal(size=(STATE_DIM, ACTION_DIM))
    with EpisodeWriter(path, {"state": ArraySpec((STATE_DIM,), "float32")}, ArraySpec((ACTION_DIM,), "float32"),
                       fps=10.0, task="Toy-v0") as writer:
        for episode in range(8):
            phase = rng.uniform(0, 6)
            for t in range(24):
                state = np.array([np.sin(t / 4 + phase), np.cos(t / 4 + phase), np.sin(t / 7 + 2 * phase), t / 24],
                                 np.float32)
                writer.add_step({"state": state}, np.tanh(state @ weights).astype(np.float32), 0.0, False, t == 23)
            writer.end_episode({"state": state}, success=True, seed=episode)
    return path


@pytest.fixture(scope="module")
def windows(demos):
    return SequenceWindows([demos], ["state"], obs_horizon=TINY.obs_horizon,
                           prediction_horizon=TINY.prediction_horizon, action_horizon=TINY.action_horizon)


def _obs(windows, indices) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v) for k, v in windows.batch(np.asarray(indices)).obs.items()}


@pytest.fixture(scope="module")
def teacher(demos, windows, tmp_path_factory):
    """A tiny diffusion policy behaviour-cloned for 100 steps, and its saved folder (naming its dataset)."""
    torch.manual_seed(0)
    policy = DiffusionPolicy.create(TINY, ObservationSpec.from_shapes(windows.observation_spec), windows.action_dim,
                                    Normalizer().fit(windows.vector_statistics()))
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    for _ in range(100):
        batch = windows.batch(rng.choice(len(windows), 32))
        loss = policy.loss({"obs": {k: torch.from_numpy(v) for k, v in batch.obs.items()},
                            "actions": torch.from_numpy(batch.actions)})
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    optimizer.zero_grad()
    folder = policy.save(tmp_path_factory.mktemp("teacher") / "policy",
                         {"trained": {"datasets": [str(demos)], "steps": 100, "task": None}})
    return policy, folder


def test_from_teacher_copies_the_weights_and_jumps_from_the_first_ddim_step(teacher, windows):
    teacher, _ = teacher
    student = OneStepPolicy.from_teacher(teacher, teacher_path="somewhere")
    assert isinstance(student, Policy) and student.kind == "one_step" and student.teacher == "somewhere"
    assert (student.observation_keys, student.action_dim, student.obs_horizon, student.chunk_length) == (
        teacher.observation_keys, teacher.action_dim, teacher.obs_horizon, teacher.chunk_length)
    student_weights, teacher_weights = student.model.state_dict(), teacher.model.state_dict()
    assert student_weights.keys() == teacher_weights.keys()
    assert all(torch.equal(student_weights[name], teacher_weights[name]) for name in teacher_weights)
    with torch.no_grad():  # a copy: training the student leaves the teacher alone
        next(student.model.parameters()).add_(1.0)
    assert not torch.equal(next(student.model.parameters()), next(teacher.model.parameters()))
    next(student.model.parameters()).data.sub_(1.0)

    # undistilled, the student's chunk is the teacher's clean-chunk estimate at its first DDIM step
    obs = _obs(windows, [0, 30, 60])
    noise = torch.randn(3, TINY.prediction_horizon, ACTION_DIM, generator=torch.Generator().manual_seed(3))
    scheduler, first = teacher.sample_scheduler, teacher.sample_scheduler.timesteps[0]
    with torch.no_grad():
        output = teacher.model.denoiser(noise, first.expand(3), teacher._encode(obs))
        estimate = scheduler.step(output, first, noise, eta=0.0).pred_original_sample.clamp(-1, 1)
    expected = teacher.normalizer.unnormalize("action", estimate).clamp(-1, 1)
    assert torch.allclose(student.sample(obs, noise), expected, atol=1e-5)
    with pytest.raises(PolicyError, match="must be a diffusion policy"):
        OneStepPolicy.from_teacher(student)


def test_one_denoiser_call_per_chunk(teacher, windows):
    teacher, _ = teacher
    student = OneStepPolicy.from_teacher(teacher)
    calls = []
    hooks = [p.model.denoiser.register_forward_hook(lambda module, args, out, name=name: calls.append(name))
             for p, name in ((student, "student"), (teacher, "teacher"))]
    try:
        history = [{"state": np.full(STATE_DIM, 0.1 * t, np.float32)} for t in range(2)]
        student.act_chunk(history)
        assert calls == ["student"]
        student.act_chunk(history, deterministic=False)
        student.sample(_obs(windows, range(5)))
        assert calls == ["student"] * 3
        calls.clear()
        teacher.act_chunk(history)
        assert calls == ["teacher"] * TINY.inference_steps
    finally:
        for hook in hooks:
            hook.remove()


def test_the_same_noise_gives_the_same_chunk(teacher, windows):
    teacher, _ = teacher
    student = OneStepPolicy.from_teacher(teacher, seed=5)
    obs = _obs(windows, [3, 40])
    noise = torch.randn(2, TINY.prediction_horizon, ACTION_DIM, generator=torch.Generator().manual_seed(0))
    chunk = student.sample(obs, noise)
    assert chunk.shape == (2, TINY.prediction_horizon, ACTION_DIM) and chunk.abs().max() <= 1
    assert torch.equal(student.sample(obs, noise.clone()), chunk)
    assert not torch.equal(student.sample(obs, -noise), chunk)
    assert torch.equal(student.sample(obs, generator=torch.Generator().manual_seed(9)),
                       student.sample(obs, generator=torch.Generator().manual_seed(9)))
    with pytest.raises(PolicyError, match="noise has shape"):
        student.sample(obs, noise[:1])

    history = [{"state": np.full(STATE_DIM, 0.2 * t, np.float32)} for t in range(2)]
    first = student.act_chunk(history)
    assert isinstance(first, ActionChunk) and first.actions.shape == (TINY.action_horizon, ACTION_DIM)
    assert np.array_equal(student.act_chunk(history).actions, first.actions)
    assert np.array_equal(first.learner_actions, first.actions)
    drawn = [student.act_chunk(history, deterministic=False).actions for _ in range(2)]
    assert not np.array_equal(drawn[0], drawn[1])
    student.reset()
    assert np.array_equal(student.act_chunk(history, deterministic=False).actions, drawn[0])
    with pytest.raises(PolicyError, match="state"):
        student.act_chunk([{"other": np.zeros(3)}])


def test_saved_student_loads_and_samples_exactly_the_same(teacher, windows, tmp_path):
    teacher, teacher_folder = teacher
    student = OneStepPolicy.from_teacher(teacher, teacher_path=teacher_folder)
    with torch.no_grad():
        for parameter in student.model.parameters():
            parameter.mul_(1.01)
    folder = student.save(tmp_path / "student", {"trained": {"steps": 7}})
    assert {p.name for p in folder.iterdir()} == {POLICY_CONFIG, POLICY_WEIGHTS}  # no pickle
    description = json.loads((folder / POLICY_CONFIG).read_text())
    assert description["kind"] == "one_step" and description["teacher"] == str(teacher_folder)
    assert description["action_dim"] == ACTION_DIM and list(description["observation_spec"]) == ["state"]
    assert DiffusionConfig.from_json(description["config"]) == TINY and description["trained"]["steps"] == 7

    loaded = load_policy(tmp_path / "student", device="cpu")
    assert isinstance(loaded, OneStepPolicy) and loaded.teacher == str(teacher_folder)
    obs = _obs(windows, [1, 2, 50])
    noise = torch.randn(3, TINY.prediction_horizon, ACTION_DIM, generator=torch.Generator().manual_seed(1))
    assert torch.equal(loaded.sample(obs, noise), student.sample(obs, noise))
    assert not torch.equal(OneStepPolicy.from_teacher(teacher).sample(obs, noise), student.sample(obs, noise))
    with pytest.raises(PolicyError, match="teacher"):
        student.save(tmp_path / "clash", {"teacher": "x"})


def test_distillation_shrinks_the_gap_to_the_teacher(teacher, windows):
    teacher, _ = teacher
    student = OneStepPolicy.from_teacher(teacher)
    train, held_out = windows.split(0.25, seed=0)
    obs = _obs(windows, held_out)
    noise = torch.randn(len(held_out), TINY.prediction_horizon, ACTION_DIM, generator=torch.Generator().manual_seed(2))
    target = teacher.normalizer.normalize("action", teacher.sample(obs, noise))

    def gap() -> float:
        return float(torch.mean((student.normalizer.normalize("action", student.sample(obs, noise)) - target) ** 2))

    undistilled = gap()
    assert undistilled > 1e-3  # one step of the teacher's own network is not yet its 5-step DDIM
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(student.model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    for _ in range(100):
        loss = student.distillation_loss(_obs(windows, rng.choice(train, 32)), teacher)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert gap() < 0.4 * undistilled
    assert all(p.grad is None for p in teacher.model.parameters())


def test_distillation_with_zero_noise_rows_teaches_the_deterministic_chunk(teacher, windows):
    teacher, _ = teacher
    student = OneStepPolicy.from_teacher(teacher)
    train, held_out = windows.split(0.25, seed=0)
    obs = _obs(windows, held_out)
    zeros = torch.zeros(len(held_out), TINY.prediction_horizon, ACTION_DIM)
    target = teacher.normalizer.normalize("action", teacher.sample(obs, zeros))

    def gap() -> float:
        return float(torch.mean((student.normalizer.normalize("action", student.sample(obs, zeros)) - target) ** 2))

    undistilled = gap()
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(student.model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    for _ in range(100):
        loss = student.distillation_loss(_obs(windows, rng.choice(train, 32)), teacher, zero_noise_rows=8)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert gap() < 0.4 * undistilled
    # acting deterministically is sampling from zero noise, for the student and the teacher alike
    history = [{"state": obs["state"][0, t].numpy()} for t in range(TINY.obs_horizon)]
    history_tensors = teacher.history_tensors(history)
    for policy in (student, teacher):
        expected = teacher.executed_chunk(policy.sample(history_tensors, zeros[:1])).actions
        assert np.array_equal(policy.act_chunk(history).actions, expected)


def test_distill_command_writes_a_student_that_load_policy_returns(teacher, demos, tmp_path, capsys):
    _, teacher_folder = teacher
    out = tmp_path / "distilled"
    code, stdout, err = run_cli(["distill", "--teacher", teacher_folder.parent, "--out", out, "--steps", "20",
                                 "--batch-size", "16", "--validate-every", "10", "--learning-rate", "3e-3",
                                 "--warmup-steps", "0", "--validation-fraction", "0.25", "--eval-episodes", "0",
                                 "--latency-calls", "5", "--device", "cpu", "--zero-noise-fraction", "0"], capsys)
    assert code == 0, err
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["steps"] == 20 and not summary["stopped"] and summary["task"] is None
    assert summary["policy"] == str(out / "policy") and summary["teacher"] == str(teacher_folder.resolve())
    assert summary["final_validation_mse"] < summary["initial_validation_mse"]
    latency = summary["latency"]
    assert latency["student"]["p50_ms"] > 0 and latency["teacher"]["p50_ms"] > 0 and latency["speedup_p50"] > 0
    assert "student_success_rate" not in summary
    assert sorted(p.name for p in (out / "policy").iterdir()) == [POLICY_WEIGHTS, POLICY_CONFIG]
    for name in ("config.json", "summary.json", "report.md", "loss_curves.png"):
        assert (out / name).is_file(), name
    assert any((out / "tensorboard").iterdir())
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "train_loss" in m] == list(range(1, 21))  # every steps // 100 steps, at least 1
    assert [m["step"] for m in metrics if m.get("validation_mse") is not None] == [10, 20]
    assert "Speed-up (p50)" in (out / "report.md").read_text()

    student = load_policy(out, device="cpu")
    assert isinstance(student, OneStepPolicy) and student.teacher == str(teacher_folder.resolve())
    trained = json.loads((out / "policy" / POLICY_CONFIG).read_text())["trained"]
    assert trained["datasets"] == [str(demos)] and trained["steps"] == 20  # the teacher's datasets by default


def test_ctrl_c_saves_the_student_trained_so_far(teacher, tmp_path, capsys, monkeypatch):
    from robot_rl.apps import distill

    _, teacher_folder = teacher
    real, calls = distill.distill, {"n": 0}

    def stop_after_3(cfg, *, on_progress=None, should_stop=None):
        def stop() -> bool:
            calls["n"] += 1
            return calls["n"] > 3

        return real(cfg, on_progress=on_progress, should_stop=stop)

    monkeypatch.setattr(distill, "distill", stop_after_3)
    out = tmp_path / "distilled"
    code, _, err = run_cli(["distill", "--teacher", teacher_folder, "--out", out, "--steps", "50", "--batch-size",
                            "8", "--latency-calls", "2", "--device", "cpu"], capsys)
    assert code == 130, err
    assert "interrupted at step 3/50" in err and str(out / "policy") in err
    assert json.loads((out / "policy" / POLICY_CONFIG).read_text())["trained"]["steps"] == 3
    report = (out / "report.md").read_text()
    assert "Interrupted at step 3/50" in report and "No evaluation: interrupted at step 3/50" in report, report
    summary = json.loads((out / "summary.json").read_text(), parse_constant=pytest.fail)  # no NaN: valid JSON
    assert isinstance(summary["final_train_loss"], float)


@pytest.mark.parametrize(("teacher_arg", "extra", "message"), [
    ("{missing}", [], "not a diffusion policy folder (no policy.json; it does not exist)"),
    ("{demos}", [], "not a diffusion policy folder (no policy.json)"),
    ("{student}", [], "the teacher must be a diffusion policy"),
    ("{bare}", [], "names no training datasets"),
    ("{teacher}", ["--dataset", "{missing}"], "missing: not a robot_rl dataset"),
    ("{teacher}", ["--steps", "0"], "steps=0 must be >= 1"),
    ("{teacher}", ["--device", "tpu"], "device 'tpu' must be auto, cpu, cuda or cuda:N"),
])
def test_bad_input_is_one_line_and_exit_status_2(teacher, demos, tmp_path, capsys, teacher_arg, extra, message):
    policy, folder = teacher
    student = OneStepPolicy.from_teacher(policy).save(tmp_path / "student")
    bare = policy.save(tmp_path / "bare")
    places = {"missing": tmp_path / "missing", "demos": demos, "student": student, "bare": bare, "teacher": folder}
    out = tmp_path / "out"
    argv = ["distill", "--teacher", teacher_arg, "--out", out, "--eval-episodes", "0", *extra]
    code, stdout, err = run_cli([str(a).format(**places) for a in argv], capsys)
    assert code == 2, (stdout, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert not out.exists()


def test_help_text_breaks_lines_only_where_the_terminal_is_full(capsys, monkeypatch):
    from test_cli import test_help_texts_break_lines_only_where_the_terminal_is_full as check_help

    check_help("distill", capsys, monkeypatch)
