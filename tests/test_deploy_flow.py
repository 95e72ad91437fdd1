"""The validate -> deploy flow for every policy kind, as a user runs it: `robot-rl validate` on a train-bc folder, a
distill folder, a SAC policy file, a residual head on a folder base and a noise head on a folder base, with the suite
a real robot's robot file names, writes a passing record, the deployment gate of that robot file then lets each run,
and one changed byte of the weights (of the policy, or of a head's base) is refused. `validate` exits 1 on a FAIL
verdict, and a PASS of another suite than the robot file's does not open its gate."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from robot_rl.actor.robot_config import resolve_robot_path  # noqa: E402
from robot_rl.actor.deploy_gate import (  # noqa: E402
    deployment_decision, deployment_problem, policy_digest, read_records)
from robot_rl.sim.validation import ValidateConfig, validate  # noqa: E402

ROBOT = "franka_fr3"  # a real robot's file: the gate applies (its suite: default)
# One short condition, and thresholds an untrained policy passes: this tests the flow, not the policies.
LENIENT = ("name: lenient\nepisodes: 1\nseed: 3\nthresholds: {min_success: 0.0, max_drop: 1.0, min_episodes: 1}\n"
           "conditions:\n- {name: nominal}\n")
STRICT = LENIENT.replace("name: lenient", "name: strict").replace("min_success: 0.0", "min_success: 0.5")


def policies(root: Path) -> dict[str, Path]:
    """A policy of every kind on PickCube state, saved as the tools save them (untrained: this is about files)."""
    import torch

    from robot_rl.agents.sac import SACAgent, SACConfig
    from robot_rl.sim.loop import make_env
    from robot_rl.policies.diffusion import DiffusionConfig, DiffusionPolicy
    from robot_rl.policies.noise import NoisePolicy, noise_dim
    from robot_rl.policies.normalizer import Normalizer
    from robot_rl.policies.one_step import OneStepPolicy
    from robot_rl.policies.residual import FrozenBase, ResidualPolicy, residual_observation_spec
    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import write_policy_file
    from robot_rl.core.types import ObservationSpec

    torch.set_num_threads(1)
    env = make_env("PickCube-v0", obs_mode="state")
    spec = ObservationSpec.from_space(env.observation_space)
    action_dim = int(env.action_space.shape[0])
    env.close()
    tiny = DiffusionConfig(obs_horizon=2, prediction_horizon=8, action_horizon=4, down_dims=(16, 32), groups=4,
                           step_embedding_dim=16, state_features=16, train_timesteps=20, inference_steps=3)
    rng = np.random.default_rng(0)
    data = {key: rng.normal(size=(50, int(np.prod(spec[key].shape)))) for key in spec.vector_keys}
    data["action"] = rng.uniform(-1, 1, (50, action_dim))
    diffusion = DiffusionPolicy.create(tiny, spec, action_dim, Normalizer().fit(data), seed=0)
    bc = diffusion.save(root / "dp" / "policy")
    distilled = OneStepPolicy.from_teacher(diffusion, teacher_path=bc).save(root / "distilled" / "policy")
    small = SACConfig(actor_hidden_dims=(16,), critic_hidden_dims=(16,), critic_ensemble_size=2,
                      actor_zero_init_last=True)
    sac = write_policy_file(root / "sac" / "policy.msgpack",
                            weights_message(SACAgent.create(0, spec, action_dim, small), version=1))
    base = FrozenBase(diffusion, path=str(bc.resolve()))
    head = SACAgent.create(0, residual_observation_spec(diffusion), action_dim, small)
    residual = write_policy_file(root / "residual" / "policy.msgpack",
                                 ResidualPolicy(base, head, 0.1).weights_message(version=1))
    noise_head = SACAgent.create(0, spec, noise_dim(diffusion), small)
    noise = write_policy_file(root / "noise" / "policy.msgpack",
                              NoisePolicy(diffusion, noise_head, path=str(bc.resolve())).weights_message(version=1))
    return {"train-bc": bc, "distill": distilled, "sac": sac, "residual": residual, "noise": noise}


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    """Every kind validated (no --suite) for a copy of the real robot's file that names the lenient suite beside it."""
    root = tmp_path_factory.mktemp("flow")
    (root / "robots").mkdir()
    (root / "robots" / "lenient.yaml").write_text(LENIENT)
    robot = root / "robots" / "my_fr3.yaml"
    robot.write_text(Path(resolve_robot_path(ROBOT)).read_text() + "validation: {suite: lenient.yaml}\n")
    made = policies(root / "policies")
    summaries = {kind: validate(ValidateConfig(path, robot=str(robot), task="PickCube-v0", workers=1, video=False))
                 for kind, path in made.items()}
    return made, summaries, robot


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", ["train-bc", "distill", "sac", "residual", "noise"])
def test_a_validated_policy_of_every_kind_passes_the_gate_and_a_changed_byte_is_refused(validated, kind):
    made, summaries, robot = validated
    policy = made[kind]
    assert summaries[kind]["verdict"] == "pass", summaries[kind]["verdict_reasons"]
    records = read_records(policy)
    assert [r["verdict"] for r in records] == ["pass"] and records[0]["policy_sha256"] == policy_digest(policy)
    record = records[0]  # the suite the robot file names, its hash, the thresholds and the date (UTC)
    assert (record["suite"], Path(record["suite_path"]).name) == ("lenient", "lenient.yaml")
    assert record["thresholds"] == {"min_success": 0.0, "max_drop": 1.0, "min_episodes": 1}
    assert len(record["suite_sha256"]) == 64 and record["validated_at"].endswith("+00:00")
    assert deployment_decision(policy, robot, "PickCube-v0") == (None, record)  # the folder it validated deploys

    # One changed byte of what it acts with (the weights; for a head, its own file or its base's) is refused.
    weights = policy / "model.safetensors" if policy.is_dir() else policy
    targets = [weights] + ([made["train-bc"] / "model.safetensors"] if kind in ("residual", "noise") else [])
    for target in targets:
        flip_last_byte(target)
        try:
            problem = deployment_problem(policy, robot)
        finally:
            flip_last_byte(target)
        assert problem is not None and "changed since it was validated" in problem, (target, problem)
    assert deployment_problem(policy, robot) is None


def test_validate_exits_1_on_a_fail_verdict_and_0_on_a_pass(validated, tmp_path, capsys):
    from robot_rl.apps.cli import main

    made, *_ = validated
    strict = tmp_path / "strict.yaml"
    strict.write_text(STRICT)
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text(LENIENT)
    common = ["validate", "--policy", str(made["sac"]), "--robot", ROBOT, "--task", "PickCube-v0", "--workers", "1",
              "--no-video"]
    with pytest.raises(SystemExit) as failed:
        main([*common, "--suite", str(strict), "--out", str(tmp_path / "strict")])
    assert failed.value.code == 1 and "verdict: FAIL" in capsys.readouterr().out
    main([*common, "--suite", str(lenient), "--out", str(tmp_path / "lenient")])  # returns: exit status 0
    out = capsys.readouterr().out
    assert "verdict: PASS" in out and "note: robot file franka_fr3.yaml requires default.yaml" in out
    assert json.loads((tmp_path / "strict" / "results.json").read_text())["verdict"] == "fail"
    # franka_fr3.yaml names no suite: the default one; a PASS of the lenient suite does not open its gate
    problem = deployment_problem(made["sac"], ROBOT)
    assert f"policy {made['sac']} was validated with strict.yaml (FAIL), lenient.yaml (PASS); robot file " \
           "franka_fr3.yaml requires default.yaml: robot-rl validate --policy " in problem and "\n" not in problem


def test_eval_refuses_a_gpu_a_sac_policy_cannot_use_instead_of_ignoring_it(validated, capsys):
    import jax

    from robot_rl.apps.cli import main

    if jax.default_backend() == "gpu":
        pytest.skip("JAX sees a GPU here")
    with pytest.raises(SystemExit) as failed:
        main(["eval", "--policy", str(validated[0]["sac"]), "--task", "PickCube-v0", "--episodes", "1",
              "--device", "cuda"])
    error = capsys.readouterr().err.strip().splitlines()
    assert failed.value.code == 2 and error == [
        "error: --device cuda: a SAC policy runs in JAX, which sees no GPU here (its devices: cpu); use cpu or auto"]


def test_validate_judges_with_the_thresholds_the_robot_file_tightens(validated, tmp_path):
    import shutil

    policy = tmp_path / "policy.msgpack"
    shutil.copy(validated[0]["sac"], policy)
    (tmp_path / "lenient.yaml").write_text(LENIENT)
    robot = tmp_path / "my_fr3.yaml"
    robot.write_text(Path(resolve_robot_path(ROBOT)).read_text()
                     + "validation: {suite: lenient.yaml, min_episodes: 2}\n")
    config = ValidateConfig(policy, robot=str(robot), task="PickCube-v0", workers=1, video=False)
    summary = validate(config)  # the suite's 1 episode: too few for this robot file
    assert summary["verdict"] == "fail" and summary["verdict_reasons"] == [
        "1 episodes per condition: a verdict needs at least 2"]
    assert read_records(policy)[0]["thresholds"] == {"min_success": 0.0, "max_drop": 1.0, "min_episodes": 2}
    assert "failed its validation with lenient.yaml" in deployment_problem(policy, robot)
    record = read_records(policy)
    summary = validate(ValidateConfig(policy, robot=str(robot), task="PickCube-v0", episodes=2, workers=1,
                                      video=False))
    assert summary["verdict"] == "pass" and read_records(policy) != record  # the new record replaced the FAIL
    assert deployment_decision(policy, robot)[0] is None
