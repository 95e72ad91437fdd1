"""Validation in the sim mirror: each perturbation changes what it claims (and nothing compounds across episodes; the
per-step ones are checked as properties in tests/test_perturbations.py), suites load or fail with one clear line,
intervals and verdicts on known counts, a validation run reproduces with any number of workers and writes its report
and record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco loads (robot_rl sets it too, but mujoco comes first here)

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from robot_rl.sim.loop import make_env  # noqa: E402
from robot_rl.sim.perturb import Condition, ConditionError, PerturbedEnv  # noqa: E402
from robot_rl.actor.deploy_gate import policy_digest, read_records, record_path, write_record  # noqa: E402
from robot_rl.sim.validation import (  # noqa: E402
    Suite, ValidateConfig, condition_summary, load_suite, validate, verdict)


def condition(*perturbations, name="test") -> Condition:
    return Condition.from_dict({"name": name, "perturbations": list(perturbations)}, "test")


@pytest.fixture(scope="module")
def pixel_env():
    env = make_env("PickCube-v0", obs_mode="pixels", image_size=64)
    yield env
    env.close()


def perturbed(env, *perturbations, seed=3):
    wrapped = PerturbedEnv(env, condition(*perturbations))
    obs, _ = wrapped.reset(seed=seed)
    return wrapped, obs


def test_nominal_changes_nothing_and_camera_jitter_moves_the_rendered_image(pixel_env):
    nominal, _ = pixel_env.reset(seed=3)
    _, same = perturbed(pixel_env)
    np.testing.assert_array_equal(same["images/front"], nominal["images/front"])
    wrapped, moved = perturbed(pixel_env, {"type": "camera_pose", "cameras": ["front"], "position_m": 0.03,
                                           "rotation_deg": 3})
    difference = np.abs(moved["images/front"].astype(int) - nominal["images/front"]).mean()
    assert difference > 1  # the whole view shifts (3 grey levels per pixel on average here)
    np.testing.assert_array_equal(moved["images/wrist"], nominal["images/wrist"])  # only the front camera moved
    drawn = wrapped.drawn["0:camera_pose"]["front"]
    assert max(map(abs, drawn["offset_m"])) <= 0.03 and 0 < drawn["angle_deg"] <= 3
    _, again = perturbed(pixel_env)  # the next episode's reset restores the nominal camera
    np.testing.assert_array_equal(again["images/front"], nominal["images/front"])


def test_lighting_and_colour_change_the_image_as_drawn(pixel_env):
    nominal, _ = pixel_env.reset(seed=3)
    _, bright = perturbed(pixel_env, {"type": "lighting", "brightness": [1.4, 1.4]})
    _, dark = perturbed(pixel_env, {"type": "lighting", "brightness": [0.6, 0.6]})
    assert dark["images/front"].mean() < nominal["images/front"].mean() < bright["images/front"].mean()
    wrapped, _ = perturbed(pixel_env, {"type": "colour", "geoms": ["table"], "shift": 0.2})
    table = mujoco.mj_name2id(wrapped.unwrapped.model, mujoco.mjtObj.mjOBJ_GEOM, "table")
    change = np.abs(wrapped.unwrapped.model.geom_rgba[table, :3] - wrapped._nominal["geom_rgba"][table, :3])
    assert 0 < change.max() <= 0.2
    wrapped.reset(seed=3)
    assert np.abs(wrapped.unwrapped.model.geom_rgba[table, :3] - wrapped._nominal["geom_rgba"][table, :3]).max() > 0


def test_object_mass_and_size_change_the_physics_without_compounding():
    env = make_env("PickCube-v0", obs_mode="state")
    try:
        env.reset(seed=3)
        base = env.unwrapped
        cube = mujoco.mj_name2id(base.model, mujoco.mjtObj.mjOBJ_BODY, "cube")
        dof = base.model.jnt_dofadr[base.model.body_jntadr[cube]]
        nominal_weight = base.data.qfrc_bias[dof + 2]  # gravity on the cube's vertical dof: m g
        wrapped = PerturbedEnv(env, condition({"type": "object", "bodies": "objects", "mass_scale": [3.0, 3.0],
                                               "size_scale": [1.25, 1.25]}))
        for _ in range(2):  # a second reset draws from the nominal model again: no compounding
            wrapped.reset(seed=3)
            np.testing.assert_allclose(base.data.qfrc_bias[dof + 2], 3.0 * nominal_weight, rtol=1e-6)
            np.testing.assert_allclose(base.model.geom_size[base.model.body_geomadr[cube]], 1.25 * 0.02)
        for _ in range(10):  # the bigger cube settles on the table at its larger half size
            wrapped.step(np.array([0, 0, 0, -1], np.float32))
        assert base.data.xpos[cube][2] == pytest.approx(1.25 * 0.02, abs=1e-3)
    finally:
        env.close()


def test_control_rate_jitter_varies_the_control_period_and_proprio_noise_stays_a_pose():
    env = make_env("PickCube-v0", obs_mode="state")
    try:
        wrapped, _ = perturbed(env, {"type": "control_rate_jitter", "fraction": 0.2})
        periods = []
        for _ in range(8):
            before = wrapped.unwrapped.data.time
            wrapped.step(np.zeros(4, np.float32) + [0, 0, 0, -1])
            periods.append(wrapped.unwrapped.data.time - before)
        assert min(periods) >= 0.08 - 1e-9 and max(periods) <= 0.12 + 1e-9 and np.std(periods) > 0.005
        true = env.reset(seed=3)[0]["state"]
        wrapped, noisy = perturbed(env, {"type": "proprio_noise", "position_m": 0.005, "quaternion": 0.01})
        error = noisy["state"][:3] - true[:3]
        assert 0 < np.abs(error).max() < 0.03
        assert np.linalg.norm(noisy["state"][3:7]) == pytest.approx(1.0, abs=1e-6)
        np.testing.assert_array_equal(noisy["state"][7:], true[7:])  # no velocity or gripper noise was asked for
    finally:
        env.close()


def test_draws_are_seeded_by_suite_seed_condition_and_episode():
    env = make_env("PickCube-v0", obs_mode="state")
    try:
        spec = {"type": "object", "bodies": "objects", "mass_scale": [0.5, 2.0]}
        draws = {}
        for suite_seed, name, episode in ((0, "a", 1), (0, "a", 1), (1, "a", 1), (0, "b", 1), (0, "a", 2)):
            wrapped = PerturbedEnv(env, condition(spec, name=name), suite_seed)
            wrapped.reset(seed=episode)
            draws.setdefault((suite_seed, name, episode), []).append(wrapped.drawn["0:object"]["mass_scale"])
        first = draws[(0, "a", 1)]
        assert first[0] == first[1]
        others = [v[0] for k, v in draws.items() if k != (0, "a", 1)]
        assert all(v != first[0] for v in others)
    finally:
        env.close()


@pytest.mark.parametrize("item, words", [
    ({"type": "wobble"}, "unknown perturbation type 'wobble'"),
    ({"type": "lighting", "brightness": [1.5, 0.5]}, "lighting.brightness=[1.5, 0.5] must be [low, high]"),
    ({"type": "action_latency", "steps": 1.5}, "action_latency.steps=1.5 must be an integer"),
    ({"type": "lighting", "colour": 1}, "lighting takes brightness; not colour"),
])
def test_bad_perturbations_are_named_in_one_line(item, words):
    with pytest.raises(ConditionError, match=words.replace("[", r"\[").replace("]", r"\]")):
        condition(item)


def test_a_name_the_model_lacks_is_refused_with_the_names_it_has():
    env = make_env("PickCube-v0", obs_mode="state")
    try:
        with pytest.raises(ConditionError, match="names body 'mug', which this task's model lacks .*cube"):
            PerturbedEnv(env, condition({"type": "object", "bodies": ["mug"], "mass_scale": [1, 2]}))
    finally:
        env.close()


def test_the_shipped_suite_loads_and_bad_suite_files_fail_in_one_line(tmp_path):
    suite = load_suite("default")
    assert suite.nominal.name == "nominal" and len(suite.conditions) == 8 and suite.episodes == 50
    assert len(suite.sha256) == 64
    with pytest.raises(ConditionError, match="no suite 'nope': give a YAML file or one of default"):
        load_suite("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("conditions:\n- name: jitter\n  perturbations: [{type: sensor_delay, steps: 1}]\n")
    with pytest.raises(ConditionError, match="the first condition \\(jitter\\) is the nominal one"):
        load_suite(bad)
    bad.write_text("conditions:\n- {name: nominal}\n- {name: nominal}\n")
    with pytest.raises(ConditionError, match="condition names repeat: nominal"):
        load_suite(bad)


def test_intervals_and_the_verdict_on_known_counts():
    episodes = lambda n, k: [{"success": i < k, "length": 10, "holds": 0, "failure": None if i < k else "x"}  # noqa
                             for i in range(n)]
    half = condition_summary(condition(), episodes(50, 25))
    assert half["success_ci95"] == pytest.approx([0.3664, 0.6336], abs=1e-4)  # Wilson, z = 1.96
    none = condition_summary(condition(), episodes(50, 0))
    assert none["success_ci95"] == pytest.approx([0.0, 0.0713], abs=1e-4) and none["failure_modes"] == {"x": 50}
    full = condition_summary(condition(), episodes(50, 50))
    assert full["success_ci95"][0] == pytest.approx(0.9287, abs=1e-4)
    suite = Suite("s", conditions=(Condition("nominal"), Condition("a"), Condition("b", min_success=0.3)), min_success=0.8,
                  max_drop=0.1)
    rates = lambda *r: [{"success_rate": x} for x in r]  # noqa: E731
    assert verdict(suite, rates(0.9, 0.8, 0.85)) == (True, [])  # a drop of exactly max_drop passes
    ok, reasons = verdict(suite, rates(0.9, 0.8, 0.35))
    assert not ok and reasons == ["b: success 35% is 55% below nominal (90%; at most 10%)"]
    ok, reasons = verdict(suite, rates(0.9, 0.7, 0.85))
    assert not ok and reasons == ["a: success 70% < 80%"]
    assert verdict(suite, rates(0.9, 0.85, 0.8)) == (True, [])
    assert verdict(suite, rates(0.7, 0.7, 0.7))[1] == ["nominal: success 70% < 80%", "a: success 70% < 80%"]
    few = [{"success_rate": 1.0, "episodes": 5}] * 3  # too little evidence for a pass
    assert verdict(suite, few) == (False, ["5 episodes per condition: a verdict needs at least 20"])


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory) -> Path:
    """A (random) SAC policy file on PickCube state, in a run folder whose config names the task."""
    from robot_rl.agents.sac import SACAgent, SACConfig
    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import write_policy_file

    env = make_env("PickCube-v0", obs_mode="state")
    agent = SACAgent.create(1, env.observation_space, 4, SACConfig(actor_hidden_dims=(16,), critic_hidden_dims=(16,)))
    env.close()
    run = tmp_path_factory.mktemp("run")
    (run / "config.json").write_text(json.dumps({"task": "PickCube-v0"}))
    write_policy_file(run / "policy.msgpack", weights_message(agent, version=1))
    return run


def test_a_validation_reproduces_with_any_number_of_workers_and_writes_report_and_record(tiny_policy, tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: small\nepisodes: 3\nseed: 4\nconditions:\n- {name: nominal}\n"
                     "- name: heavy\n  perturbations: [{type: object, bodies: objects, mass_scale: [0.5, 2]}]\n"
                     "- name: late\n  perturbations: [{type: action_latency, steps: 2}]\n")
    one = validate(ValidateConfig(tiny_policy, suite=str(suite), workers=1, out=tmp_path / "one", video=True))
    two = validate(ValidateConfig(tiny_policy, suite=str(suite), workers=2, out=tmp_path / "two", video=False))
    assert [c["per_episode"] for c in one["conditions"]] == [c["per_episode"] for c in two["conditions"]]
    heavy = one["conditions"][1]["per_episode"]
    assert len({e["perturbation"]["0:object"]["mass_scale"] for e in heavy}) == 3  # one draw per episode
    assert [e["seed"] for e in heavy] == [1_000_004, 1_000_005, 1_000_006]  # every condition: the same seeds
    for name in ("report.md", "results.json", "success.png"):
        assert (tmp_path / "one" / name).is_file()
    report = (tmp_path / "one" / "report.md").read_text()
    assert "| heavy |" in report and f"**Verdict: {one['verdict'].upper()}**" in report
    if any(not e["success"] for c in one["conditions"] for e in c["per_episode"]):
        assert (tmp_path / "one" / "failures.mp4").stat().st_size > 0
    # failed episodes carry the task's own failure modes (PickCube's), after physics and safety holds
    modes = {e["failure"] for c in one["conditions"] for e in c["per_episode"] if not e["success"]}
    assert modes <= {"physics unstable", "held by the safety layer", "cube not in the hand",
                     "cube in the hand, not lifted enough"}, modes
    records = read_records(tiny_policy)
    assert len(records) == 1  # the second run for the same robot file and suite replaced the first
    assert records[0]["policy_sha256"] == policy_digest(tiny_policy) and records[0]["verdict"] == one["verdict"]
    assert records[0]["robot_name"] == "sim_panda" and records[0]["suite"] == "small"


def test_a_stopped_validation_leaves_no_report_folder_and_no_record(tiny_policy, tmp_path, monkeypatch):
    import shutil

    import robot_rl.sim.validation as validate_module

    policy = tmp_path / "run"
    shutil.copytree(tiny_policy, policy)
    record_path(policy).unlink(missing_ok=True)
    done = []

    def run_block(block):  # the user presses Ctrl-C during the second block
        if done:
            raise KeyboardInterrupt
        done.append(block)
        return original(block)

    original = validate_module.run_block
    monkeypatch.setattr(validate_module, "run_block", run_block)
    with pytest.raises(KeyboardInterrupt):
        validate(ValidateConfig(policy, episodes=2, workers=1, out=tmp_path / "out"))
    assert len(done) == 1 and not (tmp_path / "out").exists() and read_records(policy) == []


def test_a_record_is_tied_to_the_policy_bytes(tiny_policy, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_policy, copy)
    record_path(copy).unlink(missing_ok=True)
    before = policy_digest(copy)
    write_record(copy, {"robot_sha256": "r", "suite_sha256": "s", "verdict": "pass", "policy_sha256": before})
    write_record(copy, {"robot_sha256": "r2", "suite_sha256": "s", "verdict": "fail", "policy_sha256": before})
    assert [r["robot_sha256"] for r in read_records(copy)] == ["r", "r2"]
    data = bytearray((copy / "policy.msgpack").read_bytes())
    data[-1] ^= 1
    (copy / "policy.msgpack").write_bytes(bytes(data))
    assert policy_digest(copy) != before


def test_the_deployment_gate_refuses_and_accepts_as_specified(tiny_policy, tmp_path):
    import shutil

    from robot_rl.actor.robot_config import resolve_robot_path
    from robot_rl.actor.deploy_gate import deployment_problem, file_digest

    policy = tmp_path / "run"
    shutil.copytree(tiny_policy, policy)
    record_path(policy).unlink(missing_ok=True)
    franka = resolve_robot_path("franka_fr3")
    problem = deployment_problem(policy, "franka_fr3", "PickCube-v0")
    assert "has no validation record for robot file" in problem and str(franka) in problem
    assert f"robot-rl validate --policy {policy / 'policy.msgpack'} --robot {franka} --task PickCube-v0" in problem
    assert "allow_unvalidated:=true" in problem and "\n" not in problem
    default = load_suite("default")
    record = {"policy_sha256": policy_digest(policy), "robot_sha256": file_digest(franka), "suite": default.name,
              "suite_path": default.path, "suite_sha256": default.sha256, "thresholds": default.thresholds,
              "verdict": "fail", "verdict_reasons": ["lighting_colour: success 30% < 80%"], "report": "r.md"}
    write_record(policy, record)
    problem = deployment_problem(policy, "franka_fr3")
    assert "failed its validation with default.yaml" in problem and "lighting_colour: success 30% < 80%" in problem
    write_record(policy, {**record, "verdict": "pass", "verdict_reasons": []})  # re-validated: replaces the record
    assert deployment_problem(policy, "franka_fr3") is None
    assert "no validation record" in deployment_problem(policy, "ur5e_ros2_control")  # a record is per robot file
    other_robot = tmp_path / "franka.yaml"  # the same robot file edited (a limit changed): not validated
    other_robot.write_text(franka.read_text().replace("max_translation: 0.02 ", "max_translation: 0.03 "))
    assert "no validation record" in deployment_problem(policy, other_robot)
    data = bytearray((policy / "policy.msgpack").read_bytes())
    data[-1] ^= 1  # the policy changed since
    (policy / "policy.msgpack").write_bytes(bytes(data))
    assert "changed since it was validated" in deployment_problem(policy, "franka_fr3")


LENIENT = ("name: lenient\nepisodes: 1\nthresholds: {min_success: 0.0, max_drop: 1.0, min_episodes: 1}\n"
           "conditions:\n- {name: nominal}\n")


def gate_case(tiny_policy, tmp_path, validation: str = "") -> tuple[Path, Path]:
    """A copy of the tiny policy without records, and a real robot's file written from scratch (its `validation:`
    section as given) with a lenient one-condition suite beside it."""
    import shutil

    policy = tmp_path / "run"
    shutil.copytree(tiny_policy, policy)
    record_path(policy).unlink(missing_ok=True)
    folder = tmp_path / "robots"
    folder.mkdir()
    (folder / "lenient.yaml").write_text(LENIENT)
    robot = folder / "arm.yaml"
    robot.write_text("name: arm\ncontrol_rate_hz: 10\n" + (f"validation: {validation}\n" if validation else ""))
    return policy, robot


def fabricated(policy, robot, suite: Suite, verdict: str, when: str, **changes) -> dict:
    """A record as `robot-rl validate` writes it, without running an episode."""
    from robot_rl.actor.deploy_gate import file_digest

    return {"policy_sha256": policy_digest(policy), "robot": str(robot), "robot_sha256": file_digest(robot),
            "suite": suite.name, "suite_path": suite.path, "suite_sha256": suite.sha256,
            "thresholds": suite.thresholds, "verdict": verdict, "validated_at": when, "report": "report.md",
            "verdict_reasons": [] if verdict == "pass" else ["camera_pose: success 40% < 80%"],
            "conditions": [{"condition": c.name, "successes": 19 - i, "episodes": 20}
                           for i, c in enumerate(suite.conditions)], **changes}


def write_records(policy, records) -> None:
    """The policy's record file as given (in this order), as an older tool or a merged copy may leave it."""
    from robot_rl.actor.deploy_gate import RECORD_FORMAT

    record_path(policy).write_text(json.dumps({"format": RECORD_FORMAT, "version": 1, "records": records}))


EARLY, LATE = "2025-03-01T09:00:00+00:00", "2025-03-02T09:00:00+00:00"


def test_a_pass_of_another_suite_does_not_open_the_gate_of_a_robot_file_that_requires_default(tiny_policy, tmp_path):
    from robot_rl.actor.deploy_gate import deployment_problem

    policy, robot = gate_case(tiny_policy, tmp_path)  # no validation section: the default suite
    lenient, default = load_suite(robot.parent / "lenient.yaml"), load_suite("default")
    write_record(policy, fabricated(policy, robot, lenient, "pass", LATE))
    problem = deployment_problem(policy, robot, "PickCube-v0")
    located = policy / "policy.msgpack"
    assert problem.startswith(f"policy {located} was validated with lenient.yaml (PASS); robot file arm.yaml "
                              f"requires default.yaml: robot-rl validate --policy {located} --robot {robot} "
                              "--task PickCube-v0, or set allow_unvalidated:=true"), problem
    write_record(policy, fabricated(policy, robot, default, "fail", EARLY))  # the default suite failed it
    problem = deployment_problem(policy, robot)
    assert "failed its validation with default.yaml" in problem and "camera_pose: success 40% < 80%" in problem
    assert "not counted: lenient.yaml (PASS), as robot file arm.yaml requires default.yaml" in problem
    assert "\n" not in problem


def test_the_newest_record_of_the_required_suite_decides(tiny_policy, tmp_path):
    from robot_rl.actor.session import ActorSession
    from robot_rl.actor.policy_slot import PolicySettings, PolicySlot
    from robot_rl.actor.robot_config import load_robot_config
    from robot_rl.actor.safety import Safety, SafetyConfig
    from robot_rl.actor.deploy_gate import deployment_decision, deployment_problem

    policy, robot = gate_case(tiny_policy, tmp_path, "{suite: default}")
    default = load_suite("default")
    passed, failed = (fabricated(policy, robot, default, verdict, when)
                      for verdict, when in (("pass", EARLY), ("fail", LATE)))
    write_records(policy, [passed, failed])  # a later FAIL revokes an earlier PASS
    assert "failed its validation with default.yaml" in deployment_problem(policy, robot)
    write_records(policy, [failed, passed])  # in any order in the file: the dates decide
    assert "failed its validation" in deployment_problem(policy, robot)
    passed_later, failed_earlier = {**passed, "validated_at": LATE}, {**failed, "validated_at": EARLY}
    write_records(policy, [passed_later, failed_earlier])
    assert deployment_decision(policy, robot) == (None, passed_later)  # a later PASS after a FAIL admits

    # what `robot-rl validate` writes: each new record replaces the one of the same robot file and suite
    record_path(policy).unlink()
    write_record(policy, passed)
    write_record(policy, failed)
    assert [r["verdict"] for r in read_records(policy)] == ["fail"] and deployment_problem(policy, robot)
    write_record(policy, passed_later)
    assert deployment_problem(policy, robot) is None
    lenient = load_suite(robot.parent / "lenient.yaml")
    write_record(policy, fabricated(policy, robot, lenient, "fail", EARLY))  # kept in time order
    assert [r["validated_at"] for r in read_records(policy)] == [EARLY, LATE]

    # the actor logs the record that admitted the policy at start-up
    class Lines(list):
        def info(self, message):
            self.append(message)

        warning = error = info

    lines = Lines()
    slot = PolicySlot(ActorSession(Safety(SafetyConfig(action_dim=4)), "test"), load_robot_config(robot),
                      PolicySettings(task="PickCube-v0"), log=lines)
    assert slot.deployment_problem(str(policy)) is None
    conditions = ", ".join(f"{c.name} {19 - i}/20" for i, c in enumerate(default.conditions))
    assert lines == [f"policy {policy} validated for robot file {robot}: suite default (default.yaml), validated "
                     f"{LATE}, PASS: {conditions}"]
    assert conditions.startswith("nominal 19/20, camera_pose 18/20, ")


def test_a_pass_judged_looser_than_the_robot_file_asks_does_not_admit(tiny_policy, tmp_path):
    from robot_rl.actor.deploy_gate import deployment_decision

    policy, robot = gate_case(tiny_policy, tmp_path, "{min_success: 0.9, min_episodes: 30}")
    default = load_suite("default")
    write_record(policy, fabricated(policy, robot, default, "pass", EARLY))  # judged at the suite's 0.8 and 20
    problem, record = deployment_decision(policy, robot)
    assert record is None and "passed default.yaml for robot file" in problem and "\n" not in problem
    assert "min_success 0.8 where the robot file asks 0.9, min_episodes 20 where the robot file asks 30" in problem
    tight = fabricated(policy, robot, default, "pass", LATE,
                       thresholds={"min_success": 0.95, "max_drop": 0.2, "min_episodes": 30})
    write_record(policy, tight)
    assert deployment_decision(policy, robot) == (None, tight)


def test_a_robot_file_may_name_a_suite_next_to_it(tiny_policy, tmp_path, monkeypatch):
    from robot_rl.actor.robot_config import load_validation_config
    from robot_rl.actor.deploy_gate import deployment_decision, deployment_problem
    from robot_rl.sim.validation import required_suite

    policy, robot = gate_case(tiny_policy, tmp_path, "{suite: lenient.yaml}")
    monkeypatch.chdir(policy)  # relative to the robot file, not to the working folder
    lenient = load_suite(robot.parent / "lenient.yaml")
    assert required_suite(*load_validation_config(robot)).sha256 == lenient.sha256
    write_record(policy, fabricated(policy, robot, load_suite("default"), "pass", LATE))
    assert "was validated with default.yaml (PASS); robot file arm.yaml requires lenient.yaml" in \
        deployment_problem(policy, robot)
    record = fabricated(policy, robot, lenient, "pass", EARLY)
    write_record(policy, record)
    assert deployment_decision(policy, robot) == (None, record)


def test_the_cli_names_a_missing_policy_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "robot_rl.apps.cli", "validate", "--policy", str(tmp_path / "nope"),
                             "--task", "PickCube-v0"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
    assert "nope" in result.stderr
