"""Validation looks through the robot file's cameras: each maps to a sim camera (`sim_camera`, or the one of its name),
renders at the file's size, is cut and fitted as on the robot and may sit at its own `sim_mount`; a camera without a
mapping is one error line before anything runs; the record says what each camera was rendered from; the doctor
prints the mapping (no ROS needed here)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco loads

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from robot_rl.sim.loop import make_env  # noqa: E402
from robot_rl.actor.robot_config import SIM_CAMERAS, RobotConfigError, load_robot_config  # noqa: E402
from robot_rl.core.types import ObservationSpec  # noqa: E402
from robot_rl.core.vision import ImageTransform  # noqa: E402

COMPUTES_ONLY = True  # names robot_rl.ros modules, starts no ROS 2 node (tests/conftest.py)
TASK = "PickCube-v0"
SIZE = 32  # the policy's image side
STATE = ((14,), np.float32)
PIXEL_SPEC = ObservationSpec.from_shapes({"state": STATE, "images/cam_high": ((SIZE, SIZE, 3), np.uint8),
                                          "images/cam_low": ((SIZE, SIZE, 3), np.uint8)})
MOUNT = "{position: [0.9, 0.0, 0.7], quat: [0.656, 0.264, 0.264, 0.656]}"  # higher, looking down at the table

ROBOT = """\
name: two_cams
control_rate_hz: 10
mode: realtime
max_episode_steps: 100
max_sensor_age_s: 0.2
frames: {{base: fr3_link0, tcp: fr3_hand_tcp}}
workspace: {{low: [0.35, -0.20, 0.02], high: [0.65, 0.20, 0.30]}}
limits:
  max_translation: 0.02
  max_rotation: 0.10
  step_bound: norm
  nominal_quat: [0.0, 1.0, 0.0, 0.0]
  rotation_low: [-0.3, -0.3, -0.7853981633974483]
  rotation_high: [0.3, 0.3, 0.7853981633974483]
home: {{position: [0.45, 0.0, 0.25], quat: [0.0, 1.0, 0.0, 0.0], gripper: open}}
cameras:
  cam_high:
    topic: /cam_high/image_raw
    type: Image
    fit: crop
    width: 160
    height: 120
    encoding: rgb8
    rate_hz: 30
{high}
  cam_low:
    topic: /cam_low/image_raw/compressed
    type: CompressedImage
    fit: resize
    roi: [20, 0, 120, 120]
    width: 160
    height: 120
    encoding: jpeg
    rate_hz: 30
{low}
arm:
  state: tcp_pose
  tcp_pose_topic: /franka_robot_state_broadcaster/current_pose
  twist: derived
gripper:
  state: joint_states
  finger_joints: [fr3_finger_joint1, fr3_finger_joint2]
  max_opening: 0.08
  command: Float64
  command_topic: /gripper/command
command:
  interface: pose
  pose_topic: /cartesian_impedance_controller/equilibrium_pose
reset:
  kind: move_home
  timeout_s: 15.0
"""


def robot_file(folder: Path, high: str = "", low: str = "", name: str = "two_cams.yaml") -> Path:
    """A franka_fr3-like robot file with cameras cam_high / cam_low; `high` / `low`: extra keys of each camera."""
    indent = lambda text: "\n".join(f"    {line}" for line in text.splitlines())  # noqa: E731
    path = folder / name
    path.write_text(ROBOT.format(high=indent(high), low=indent(low)))
    return path


MAPPED = {"high": "sim_camera: front", "low": "sim_camera: wrist"}


@pytest.fixture(scope="module")
def pixel_policy(tmp_path_factory) -> Path:
    """An untrained tiny pixel SAC policy reading state, images/cam_high and images/cam_low, in a run folder."""
    from robot_rl.agents.sac import ImageEncoderConfig, SACAgent, SACConfig
    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import write_policy_file

    config = SACConfig(actor_hidden_dims=(16,), critic_hidden_dims=(16,),
                       image_encoder=ImageEncoderConfig(channels=(4,), kernel_sizes=(8,), strides=(8,), latent_dim=8))
    run = tmp_path_factory.mktemp("run")
    (run / "config.json").write_text(json.dumps({"task": TASK}))
    write_policy_file(run / "policy.msgpack", weights_message(SACAgent.create(0, PIXEL_SPEC, 4, config), version=1))
    return run


def suite_file(folder: Path) -> Path:
    path = folder / "suite.yaml"
    path.write_text("name: small\nepisodes: 1\nseed: 2\nthresholds: {min_episodes: 1}\nconditions:\n"
                    "- {name: nominal}\n"
                    "- name: camera_pose\n"
                    "  perturbations: [{type: camera_pose, cameras: [front], position_m: 0.01, rotation_deg: 1}]\n")
    return path


# ----- the robot file ---------------------------------------------------------------------------------------------

def test_sim_cameras_are_the_mirrors_and_mappings_default_by_name(tmp_path):
    from robot_rl.sim.env import CAMERA_NAMES

    assert SIM_CAMERAS == CAMERA_NAMES  # robot_config keeps its own copy (no MuJoCo there)
    franka = load_robot_config("franka_fr3")
    assert [franka.sim_camera(n) for n in franka.camera_names] == ["front", "wrist"]
    robot = load_robot_config(robot_file(tmp_path))
    assert [robot.sim_camera(n) for n in robot.camera_names] == [None, None]
    robot = load_robot_config(robot_file(tmp_path, f"sim_camera: front\nsim_mount: {MOUNT}", "sim_camera: wrist"))
    assert [robot.sim_camera(n) for n in robot.camera_names] == ["front", "wrist"]
    mount = robot.camera("cam_high").sim_mount
    assert mount.position == (0.9, 0.0, 0.7) and np.linalg.norm(mount.quat) == pytest.approx(1.0)


@pytest.mark.parametrize("high, words", [
    ("sim_camera: top", "cameras.cam_high.sim_camera: 'top' is not a camera of the sim mirror (it has front, wrist)"),
    ("sim_camera: front\nsim_mount: {quat: [0, 0, 0, 0]}", "cameras.cam_high.sim_mount.quat: [0, 0, 0, 0]"),
    ("sim_camera: front\nsim_mount: {}", "cameras.cam_high.sim_mount: give position"),
    ("sim_camera: front\nsim_mount: {position: [1, 0]}", "cameras.cam_high.sim_mount.position: must have 3 values"),
    ("sim_camera: front\nsim_mount: {pos: [1, 0, 0]}", "cameras.cam_high.sim_mount.pos: unknown key"),
    ("sim_mount: {position: [1, 0, 0.5]}", "cameras.cam_high.sim_mount: camera cam_high has no sim camera to mount"),
])
def test_bad_sim_camera_settings_are_one_line_naming_the_key(tmp_path, high, words):
    with pytest.raises(RobotConfigError) as error:
        load_robot_config(robot_file(tmp_path, high, "sim_camera: wrist"))
    assert words in str(error.value) and "\n" not in str(error.value)


def test_a_quat_is_normalised_and_two_cameras_on_one_sim_camera_need_one_mount(tmp_path):
    robot = load_robot_config(robot_file(tmp_path, "sim_camera: front\nsim_mount: {quat: [2, 0, 0, 0]}",
                                         "sim_camera: front\nsim_mount: {quat: [1, 0, 0, 0]}"))
    assert robot.camera("cam_high").sim_mount == robot.camera("cam_low").sim_mount  # [2, 0, 0, 0] normalised
    from robot_rl.actor.robot_config import robot_config_from_dict

    assert robot_config_from_dict(robot.to_json(), path=robot.path) == robot  # the flat record layout reads back
    with pytest.raises(RobotConfigError, match="cameras cam_high and cam_low both render from sim camera front"):
        load_robot_config(robot_file(tmp_path, f"sim_camera: front\nsim_mount: {MOUNT}", "sim_camera: front"))


# ----- validation through the robot's cameras ---------------------------------------------------------------------

def test_validation_without_sim_cameras_fails_before_running_in_one_line(pixel_policy, tmp_path, monkeypatch):
    import robot_rl.sim.validation as validate_module
    from robot_rl.sim.validation import ValidateConfig, validate

    monkeypatch.setattr(validate_module, "run_block", lambda block: pytest.fail("a block ran"))
    unmapped = robot_file(tmp_path)
    with pytest.raises(ValueError) as error:
        validate(ValidateConfig(pixel_policy, robot=str(unmapped), suite=str(suite_file(tmp_path)),
                                out=tmp_path / "out"))
    message = str(error.value)
    assert message == (f"robot file {unmapped}: cameras cam_high, cam_low have no sim camera: add \"sim_camera: "
                       "front\" or another of the mirror's (front, wrist) under cameras.cam_high and cameras.cam_low "
                       "to validate through them")
    half = robot_file(tmp_path, "", "sim_camera: wrist", name="half.yaml")
    with pytest.raises(ValueError) as error:
        validate(ValidateConfig(pixel_policy, robot=str(half), suite=str(suite_file(tmp_path)), out=tmp_path / "o"))
    assert str(error.value) == (f"robot file {half}: camera cam_high has no sim camera: add \"sim_camera: front\" (the "
                                "mirror has front, wrist) under cameras.cam_high to validate through it")
    with pytest.raises(ValueError) as error:  # the policy reads images/cam_high and images/cam_low: not sim_panda's
        validate(ValidateConfig(pixel_policy, suite=str(suite_file(tmp_path)), out=tmp_path / "p"))
    assert "the policy reads images/cam_high, images/cam_low, but robot file" in str(error.value)
    assert "has no such camera (its cameras: front, wrist)" in str(error.value)
    assert not (tmp_path / "out").exists() and not (tmp_path / "o").exists()


def test_the_wrapped_env_renders_each_camera_from_its_sim_camera_as_the_actor_cuts_it(tmp_path):
    from robot_rl.sim.robot_cameras import validation_env

    robot = load_robot_config(robot_file(tmp_path, **MAPPED))
    env = validation_env(TASK, PIXEL_SPEC, robot)
    try:
        obs, _ = env.reset(seed=5)
        assert ObservationSpec.from_space(env.observation_space) == PIXEL_SPEC  # object_state dropped: not read
        assert sorted(obs) == list(PIXEL_SPEC.keys)
        base = env.unwrapped
        for name, sim in (("cam_high", "front"), ("cam_low", "wrist")):
            camera = robot.camera(name)
            expected = ImageTransform.from_camera(camera, SIZE)(base.camera_image(sim, 160, 120))
            np.testing.assert_array_equal(obs[f"images/{name}"], expected)
        obs, *_ = env.step(np.array([0.5, 0, 0, -1], np.float32))
        np.testing.assert_array_equal(  # every step renders the cameras anew
            obs["images/cam_high"], ImageTransform.from_camera(robot.camera("cam_high"), SIZE)(
                base.camera_image("front", 160, 120)))
        assert env.sources == {"cam_high": "front 160x120 crop",
                               "cam_low": "wrist 160x120 roi [20, 0, 120, 120] resize"}
    finally:
        env.close()


def test_a_sim_mount_moves_the_image_and_camera_jitter_stays_around_it(tmp_path):
    from robot_rl.sim.perturb import Condition, PerturbedEnv
    from robot_rl.sim.robot_cameras import validation_env

    plain = validation_env(TASK, PIXEL_SPEC, load_robot_config(robot_file(tmp_path, **MAPPED)))
    robot = load_robot_config(robot_file(tmp_path, f"sim_camera: front\nsim_mount: {MOUNT}", MAPPED["low"],
                                         name="mounted.yaml"))
    jitter = Condition.from_dict({"name": "jitter", "perturbations": [
        {"type": "camera_pose", "cameras": ["front"], "position_m": 0.005, "rotation_deg": 0.5}]}, "test")
    mounted = PerturbedEnv(validation_env(TASK, PIXEL_SPEC, robot), jitter)
    try:
        before, _ = plain.reset(seed=5)
        after, _ = mounted.reset(seed=5)
        moved = np.abs(after["images/cam_high"].astype(int) - before["images/cam_high"]).mean()
        assert moved > 5  # another viewpoint
        np.testing.assert_array_equal(after["images/cam_low"], before["images/cam_low"])  # the wrist stays
        base = mounted.unwrapped
        front = base._camera_ids["front"]
        nominal = mounted._nominal["cam_pos"][front]  # the model PerturbedEnv restores at each reset
        np.testing.assert_allclose(nominal, [0.9, 0.0, 0.7])  # the mount is the pose jitter is drawn around
        assert 0 < np.abs(base.model.cam_pos[front] - nominal).max() <= 0.005
        assert mounted.env.sources["cam_high"] == "front at sim_mount 160x120 crop"
    finally:
        plain.close()
        mounted.close()


def test_sim_panda_gives_the_images_of_the_sim_env_itself():
    """sim_panda's cameras are front and wrist with no size: rendered square at the policy's size, unchanged."""
    from robot_rl.sim.robot_cameras import validation_env

    own = make_env(TASK, obs_mode="state+pixels", image_size=SIZE)
    spec = ObservationSpec.from_space(own.observation_space)
    seen = validation_env(TASK, spec, load_robot_config("sim_panda"))
    try:
        assert ObservationSpec.from_space(seen.observation_space) == spec
        for step in range(3):
            if step == 0:
                expected, got = own.reset(seed=7)[0], seen.reset(seed=7)[0]
            else:
                action = np.array([0.3, -0.2, -0.5, -1], np.float32)
                expected, got = own.step(action)[0], seen.step(action)[0]
            assert sorted(got) == sorted(expected)
            for key in expected:
                np.testing.assert_array_equal(got[key], expected[key])
    finally:
        own.close()
        seen.close()


def test_a_validation_runs_through_the_mapped_cameras_and_its_record_names_them(pixel_policy, tmp_path):
    from robot_rl.actor.deploy_gate import read_records
    from robot_rl.sim.validation import ValidateConfig, validate

    robot = robot_file(tmp_path, **MAPPED)
    summary = validate(ValidateConfig(pixel_policy, robot=str(robot), suite=str(suite_file(tmp_path)), workers=1,
                                      video=False, out=tmp_path / "out"))
    sources = {"cam_high": "front 160x120 crop", "cam_low": "wrist 160x120 roi [20, 0, 120, 120] resize"}
    assert summary["cameras"] == sources
    assert [c["episodes"] for c in summary["conditions"]] == [1, 1]
    assert "0:camera_pose" in summary["conditions"][1]["per_episode"][0]["perturbation"]
    record = next(r for r in read_records(pixel_policy) if r["robot_name"] == "two_cams")
    assert record["cameras"] == sources
    report = (tmp_path / "out" / "report.md").read_text()
    assert ("Cameras (the robot file's, rendered in the sim mirror): `cam_high` from sim camera front 160x120 crop; "
            "`cam_low` from sim camera wrist 160x120 roi [20, 0, 120, 120] resize.") in report


# ----- the doctor -------------------------------------------------------------------------------------------------

def test_the_doctor_prints_each_cameras_sim_camera_and_warns_without_failing(tmp_path):
    from rich.console import Console

    from robot_rl.ros.doctor_checks import check_reset, evaluate, render, sim_camera_notes

    half = load_robot_config(robot_file(tmp_path, "", "sim_camera: wrist"))
    assert sim_camera_notes(half) == [
        ("cam_high", None, "camera cam_high: no sim camera, so robot-rl validate cannot look through it: add "
                           "\"sim_camera: front\" (the mirror has front, wrist) under cameras.cam_high"),
        ("cam_low", "wrist", "camera cam_low: validation renders it from sim camera wrist at 160x120, resize")]
    full = load_robot_config(robot_file(tmp_path, **MAPPED, name="full.yaml"))
    reports = [evaluate(robot, {}, {}, [], check_reset(robot, "reset", True), duration_s=1.0) for robot in (half, full)]
    assert reports[0].first_thing_to_fix() == reports[1].first_thing_to_fix()  # a warning, not a failure
    out = io.StringIO()
    render(reports[0], Console(file=out, width=200))
    assert "warning  camera cam_high: no sim camera" in out.getvalue()
    assert "sim      camera cam_low: validation renders it from sim camera wrist" in out.getvalue()
    assert reports[0].to_json()["sim_cameras"]["cam_high"]["sim_camera"] is None
