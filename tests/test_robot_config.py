"""Robot files: every shipped one loads, errors name the file and the key, the sim robot matches the sim tasks."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from robot_rl.actor.robot_config import (
    ROBOTS_DIR,
    RobotConfigError,
    load_robot_config,
    robot_config_from_dict,
)

SHIPPED = sorted(p.stem for p in ROBOTS_DIR.glob("*.yaml"))


def test_there_are_shipped_robot_files():
    assert "sim_panda" in SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_robot_file_loads(name, tmp_path):
    text = (ROBOTS_DIR / f"{name}.yaml").read_text()
    model = yaml.safe_load(text).get("arm", {}).get("model")
    if model and not (ROBOTS_DIR / model).is_file():
        # a lab's own model (not shipped): loading names it, and the file says how to make it
        assert f"> robots/{model}" in text, f"{name}: arm.model {model} is neither shipped nor documented"
        with pytest.raises(RobotConfigError, match=f"arm.model: .*{model} does not exist .*xacro"):
            load_robot_config(name)
        (tmp_path / "models").mkdir()
        (tmp_path / model).write_text("<robot name='x'/>")  # stands in for the lab's URDF
        (tmp_path / f"{name}.yaml").write_text(text)
        name = tmp_path / f"{name}.yaml"
    robot = load_robot_config(name)
    assert robot.name
    # the flat JSON recorded with datasets reads back to the same robot
    again = robot_config_from_dict(robot.to_json(), path=robot.path)
    assert again == robot


def test_sim_robot_matches_the_sim_tasks():
    """robots/sim_panda.yaml's limits are the sim env's: a policy trained in-process runs over ROS unchanged."""
    from robot_rl.sim.loop import make_env
    from robot_rl.actor.safety import sim_safety_config

    robot = load_robot_config("sim_panda")
    for task in ("PickCube-v0", "PegInsert-v0"):
        env = make_env(task, obs_mode="state")
        try:
            expected = sim_safety_config(env, stale_timeout=robot.sensor_age_limit)
            assert robot.safety_config(action_dim=env.action_space.shape[0]) == dataclasses.replace(
                expected, initial_gripper=robot.home_gripper)
            assert robot.control_period == pytest.approx(env.unwrapped.control_dt)
        finally:
            env.close()


def _write(tmp_path, text: str):
    path = tmp_path / "robot.yaml"
    path.write_text(text)
    return path


def _base() -> dict:
    return yaml.safe_load((ROBOTS_DIR / "sim_panda.yaml").read_text())


@pytest.mark.parametrize("change, key", [
    (lambda d: d.update(colour="red"), "colour: unknown key"),
    (lambda d: d["cameras"]["front"].update(qos="fast"), "cameras.front.qos: 'fast' must be one of"),
    (lambda d: d["cameras"]["front"].update(quality=3), "cameras.front.quality: unknown key"),
    (lambda d: d["cameras"]["front"].pop("topic"), "cameras.front.topic: missing"),
    (lambda d: d["workspace"].update(low=[0.1, 0.2]), "workspace.low: must have 3 values"),
    (lambda d: d["workspace"].update(low=[0.7, -0.22, 0.015]), "workspace: low"),
    (lambda d: d["limits"].update(max_translation="fast"), "limits.max_translation: must be a finite number"),
    (lambda d: d["limits"].update(max_translation=0.5), "limits.max_translation: 0.5 must be in (0, 0.2]"),
    (lambda d: d["home"].update(position=[0.0, 0.0, 0.25]), "home.position"),
    (lambda d: d["home"].update(gripper="half"), "home.gripper: 'half' must be open, closed"),
    (lambda d: d.pop("name"), "name: missing"),
    (lambda d: d.update(control_rate_hz=0), "control_rate_hz: 0.0 must be in (0, 1000]"),
    (lambda d: d["arm"].update(state="joint_states"), "arm.model: arm.state joint_states needs"),
    (lambda d: d["command"].update(interface="joint_trajectory"), "arm.model: command.interface joint_trajectory"),
    (lambda d: d["gripper"].update(state="joint_states"), "gripper.finger_joints"),
    (lambda d: d["reset"].update(kind="move_home"), "mode: lockstep"),
    (lambda d: d.update(limits=[1, 2]), "limits: must be a mapping"),
    (lambda d: d["home"].update(quat=[1.0, 0.0, 0.0, 0.0]), "home.quat: .* outside the orientation box"),
    (lambda d: d.update(sim="yes"), "sim: must be true or false"),
    (lambda d: d.update(learner_lost={"action": "pause"}), "learner_lost.action: 'pause' must be one of"),
    (lambda d: d.update(learner_lost={"after_s": 0}), "learner_lost.after_s: 0.0 must be > 0"),
    (lambda d: (d["arm"].update(state="joint_states", model="models/nope.urdf")), "arm.model: .*nope.urdf does not "
                                                                                  "exist"),
    (lambda d: d.update(validation={"suit": "default"}), "validation.suit: unknown key"),
    (lambda d: d.update(validation={"suite": "nope.yaml"}), "validation.suite: suite file .*nope.yaml: No such file"),
    (lambda d: d.update(validation={"min_success": 1.5}), "validation.min_success: 1.5 must be in [0, 1]"),
    (lambda d: d.update(validation={"min_episodes": 2.5}), "validation.min_episodes: must be an integer"),
])
def test_errors_name_the_file_and_the_key(tmp_path, change, key):
    data = _base()
    change(data)
    path = _write(tmp_path, yaml.safe_dump(data))
    with pytest.raises(RobotConfigError) as error:
        load_robot_config(path)
    message = str(error.value)
    assert message.startswith(f"{path}: "), message
    assert re.search(key, message) if ".*" in key else key in message, message
    assert "\n" not in message


@pytest.mark.parametrize("key, value, suites", [("min_success", 0.5, 0.8), ("max_drop", 0.3, 0.2),
                                                ("min_episodes", 10, 20)])
def test_a_robot_file_may_tighten_its_suites_thresholds_but_not_loosen_them(tmp_path, key, value, suites):
    from robot_rl.actor.robot_config import load_validation_config

    path = _write(tmp_path, "name: arm\nvalidation:\n  suite: default\n" + f"  {key}: {value}\n")
    for load in (load_robot_config, load_validation_config):  # the robot file, and what the deployment gate reads
        with pytest.raises(RobotConfigError) as error:
            load(path)
        message = str(error.value)
        assert message.startswith(f"{path}: validation.{key}: {value:g} is looser than suite default's {suites:g}")
        assert "\n" not in message
    path.write_text("name: arm\nvalidation: {min_success: 0.9, max_drop: 0.1, min_episodes: 30}\n")
    robot = load_robot_config(path)
    assert (robot.validation.min_success, robot.validation.max_drop, robot.validation.min_episodes) == (0.9, 0.1, 30)
    assert robot.suite_location() == "default" and robot_config_from_dict(robot.to_json(), path=robot.path) == robot
    (tmp_path / "lenient.yaml").write_text("thresholds: {min_success: 0.0}\nconditions:\n- {name: nominal}\n")
    path.write_text("name: arm\nvalidation: {suite: lenient.yaml, min_success: 0.1}\n")  # relative to the file
    assert load_robot_config(path).suite_location() == tmp_path / "lenient.yaml"


def test_yaml_syntax_error_names_file_line_and_column(tmp_path):
    path = _write(tmp_path, "name: x\ncameras: {front: {topic: a\n")
    with pytest.raises(RobotConfigError, match=rf"^{path}:\d+:\d+: YAML syntax error"):
        load_robot_config(path)


def test_a_key_given_twice_is_an_error(tmp_path):
    text = (ROBOTS_DIR / "sim_panda.yaml").read_text() + "cameras: {}\n"
    path = _write(tmp_path, text)
    with pytest.raises(RobotConfigError, match=rf"^{path}:\d+:1: duplicate key 'cameras'"):
        load_robot_config(path)


def test_the_sim_node_serves_only_sim_robot_files():
    from robot_rl.sim.node import DriverProfile

    assert load_robot_config("sim_panda_driver").sim
    with pytest.raises(RobotConfigError, match="sim: false: this robot file describes a real robot"):
        DriverProfile.from_robot(load_robot_config("franka_fr3"))


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(RobotConfigError, match="cannot read it"):
        load_robot_config(tmp_path / "nope.yaml")
    with pytest.raises(RobotConfigError, match="not a shipped robot .shipped: .*sim_panda"):
        load_robot_config("no_such_robot")


def test_a_real_robot_task_gets_its_spaces_from_the_robot_file():
    """The learner of a task that is not a sim task builds its observation spec from the robot file's cameras."""
    from robot_rl.ros.nodes.learner_params import robot_task_spaces
    from robot_rl.ros.node_util import NodeStartupError

    spec, action_dim = robot_task_spaces("franka_fr3", "pixels", 96)
    assert dict(spec.entries) == {
        "images/front": spec["images/front"], "images/wrist": spec["images/wrist"], "state": spec["state"]}
    assert spec["images/wrist"].shape == (96, 96, 3) and spec["state"].shape == (14,)
    assert action_dim == 4
    with pytest.raises(NodeStartupError, match="object_state"):
        robot_task_spaces("franka_fr3", "state", 64)
    with pytest.raises(NodeStartupError, match="robot: .*no_such_robot"):
        robot_task_spaces("no_such_robot", "pixels", 64)


def test_a_real_robot_file_decides_the_runs_spaces_and_episode_length_whatever_the_task(tmp_path):
    """On a robot file with sim: false the learner's observation spec holds exactly the keys its actor builds from
    the file, and the episode length is the file's, even under a sim task's name; a sim robot file keeps the sim
    task's env and length (robot-rl train, sim_train.yaml)."""
    from ros_harness import third_party_robot_file

    from robot_rl.sim.loop import run_episode_steps, sim_run_steps
    from robot_rl.actor.robot_io import observed_sensors
    from robot_rl.ros.nodes.learner_params import run_spaces
    from robot_rl.ros.node_util import NodeStartupError
    from robot_rl.training.config import TrainConfig

    real = load_robot_config(third_party_robot_file(tmp_path / "arm.yaml", sim=False, max_episode_steps=80))
    cfg = TrainConfig(task="PickCube-v0", obs_mode="pixels", image_size=32, demos=0)
    spec, action_dim = run_spaces(real, cfg)
    actor_keys, _ = observed_sensors(real, "pixels", ())
    assert set(spec.keys) == set(actor_keys) == {"state", "images/scene", "images/hand"} and action_dim == 4
    assert spec["images/scene"].shape == (32, 32, 3) and spec["images/hand"].dtype == "uint8"
    assert sim_run_steps(real, "PickCube-v0") == 0 and run_episode_steps(real, "PickCube-v0") == 80
    with pytest.raises(NodeStartupError, match=r"obs_mode=state needs a sim task's object_state; a run on robot file "
                                               r".*arm.yaml \(sim: false\) uses obs_mode pixels"):
        run_spaces(real, dataclasses.replace(cfg, obs_mode="state"))
    sim = load_robot_config("sim_panda")
    spec, action_dim = run_spaces(sim, dataclasses.replace(cfg, obs_mode="state"))
    assert "object_state" in spec.spaces and action_dim == 4  # the sim task's env
    assert run_episode_steps(sim, "PegInsert-v0") == 60 and run_episode_steps(sim, "pick") == sim.max_episode_steps


def test_the_learner_refuses_a_real_robots_run_it_cannot_observe_before_ros_starts(tmp_path):
    from ros_harness import third_party_robot_file

    from robot_rl.ros.nodes.learner_params import NODE_NAME, PARAMETERS, check_parameters
    from robot_rl.ros.node_util import NodeStartupError, check_command_line

    real = third_party_robot_file(tmp_path / "arm.yaml", sim=False)
    argv = ["prog", "--ros-args", "-p", f"run_dir:={tmp_path / 'run'}", "-p", f"robot:={real}"]
    check_command_line([*argv, "-p", "obs_mode:=pixels", "-p", "task:=PickCube-v0"], NODE_NAME, PARAMETERS,
                       check_parameters)
    with pytest.raises(NodeStartupError, match="obs_mode=state needs a sim task's object_state"):
        check_command_line([*argv, "-p", "obs_mode:=state"], NODE_NAME, PARAMETERS, check_parameters)
    with pytest.raises(NodeStartupError, match="robot: .*nowhere.yaml"):
        check_command_line([*argv[:-1], f"robot:={tmp_path / 'nowhere.yaml'}"], NODE_NAME, PARAMETERS,
                           check_parameters)
