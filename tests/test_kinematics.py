"""Arm kinematics from an MJCF / URDF: the shipped sim arm matches the sim, IK reaches targets, bad input is named."""

import importlib.util
import math
from pathlib import Path

import mujoco
import numpy as np
import pytest

from robot_rl.core.kinematics import ArmKinematics, KinematicsError
from robot_rl.sim import robot
from robot_rl.sim.env import RobotEnv

ROOT = Path(__file__).resolve().parent.parent
SIM_PANDA = ROOT / "robots" / "models" / "sim_panda.xml"
NOMINAL = np.array([0.0, 1.0, 0.0, 0.0])


def _angle(a, b) -> float:
    return 2 * math.acos(min(1.0, abs(float(np.dot(a, b)))))


@pytest.fixture(scope="module")
def sim_panda():
    return ArmKinematics.from_file(SIM_PANDA, robot.JOINT_NAMES, "tcp")


@pytest.fixture(scope="module")
def env():
    env = RobotEnv()
    yield env
    env.close()


def test_shipped_model_matches_the_sim_tcp_pose(sim_panda, env):
    rng = np.random.default_rng(0)
    for _ in range(20):
        q = rng.uniform(robot.JOINT_LIMITS[:, 0], robot.JOINT_LIMITS[:, 1])
        env.data.qpos[env._arm_qpos_adr] = q
        env.data.qpos[env._finger_qpos_adr] = rng.uniform(0, robot.FINGER_TRAVEL, 2)
        mujoco.mj_forward(env.model, env.data)
        sim_position, sim_quat = env.tcp_pose()
        position, quat = sim_panda.forward(q)
        assert position.shape == (3,) and quat.shape == (4,)
        np.testing.assert_allclose(position, sim_position, atol=1e-6)
        assert _angle(quat, sim_quat) < 1e-6
    assert sim_panda.joint_names == robot.JOINT_NAMES
    np.testing.assert_array_equal(np.stack([sim_panda.lower, sim_panda.upper], 1), robot.JOINT_LIMITS)


def test_shipped_model_has_the_sim_names_and_regenerates_identically():
    model = mujoco.MjModel.from_xml_path(str(SIM_PANDA))
    joints = {model.joint(i).name for i in range(model.njnt)}
    assert joints == set(robot.JOINT_NAMES) | set(robot.FINGER_JOINT_NAMES)
    assert mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, "tcp") >= 0
    assert model.ncam == 0
    spec = importlib.util.spec_from_file_location("export_sim_panda", SIM_PANDA.parent / "export_sim_panda.py")
    exporter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exporter)
    assert exporter.sim_panda_xml() == SIM_PANDA.read_text(), (
        "robots/models/sim_panda.xml is out of date: run python robots/models/export_sim_panda.py")


def test_solve_reaches_workspace_targets_from_the_current_configuration(sim_panda, env):
    rng = np.random.default_rng(1)
    q = robot.HOME_QPOS.copy()
    for _ in range(10):
        target = rng.uniform(env.workspace_low, env.workspace_high)
        rotation = rng.uniform(env.rotation_low, env.rotation_high)
        target_quat = np.empty(4)
        mujoco.mju_axisAngle2Quat(target_quat, rotation / np.linalg.norm(rotation), float(np.linalg.norm(rotation)))
        mujoco.mju_mulQuat(target_quat, target_quat.copy(), NOMINAL)
        for _call in range(5):
            q = sim_panda.solve(q, target, target_quat)
            position, quat = sim_panda.forward(q)
            if np.linalg.norm(position - target) < 1e-3 and _angle(quat, target_quat) < 0.01:
                break
        assert np.linalg.norm(position - target) < 1e-3 and _angle(quat, target_quat) < 0.01, (target, rotation)
        assert np.all(q >= robot.JOINT_LIMITS[:, 0]) and np.all(q <= robot.JOINT_LIMITS[:, 1])


def test_small_steps_move_the_tcp_by_the_step_and_keep_the_configuration_close(sim_panda):
    q = robot.HOME_QPOS.copy()
    position, quat = sim_panda.forward(q)
    for step in ([0.01, 0, 0], [0, -0.02, 0], [0, 0, 0.015]):
        target = position + step
        q_next = sim_panda.solve(q, target, quat)
        reached, reached_quat = sim_panda.forward(q_next)
        np.testing.assert_allclose(reached, target, atol=1e-6)
        assert _angle(reached_quat, quat) < 1e-5
        assert np.abs(q_next - q).max() < 0.1  # a differential step, not a jump to another IK branch
        q, position = q_next, reached


def test_unreachable_targets_stay_within_joint_limits(sim_panda):
    q = sim_panda.solve(robot.HOME_QPOS, [3.0, 0.0, 0.2], NOMINAL)
    assert np.all(np.isfinite(q))
    assert np.all(q >= robot.JOINT_LIMITS[:, 0]) and np.all(q <= robot.JOINT_LIMITS[:, 1])
    # A start outside the limits (a real arm a hair past one) is clamped.
    outside = robot.HOME_QPOS.copy()
    outside[3] = 0.2
    q = sim_panda.solve(outside, sim_panda.forward(robot.HOME_QPOS)[0], NOMINAL)
    assert q[3] <= robot.JOINT_LIMITS[3, 1]


URDF = """<?xml version="1.0"?>
<robot name="planar">
  <link name="base"/>
  <link name="link1">
    <inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry><mesh filename="package://planar_description/meshes/link1.stl"/></geometry></collision>
  </link>
  <link name="link2">
    <inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial>
  </link>
  <link name="tool"/>
  <joint name="shoulder" type="revolute">
    <parent link="base"/><child link="link1"/><origin xyz="0 0 0.1"/><axis xyz="0 0 1"/>
    <limit lower="-3" upper="3" effort="10" velocity="1"/>
  </joint>
  <joint name="elbow" type="revolute">
    <parent link="link1"/><child link="link2"/><origin xyz="0.5 0 0"/><axis xyz="0 0 1"/>
    <limit lower="-2.5" upper="2.5" effort="10" velocity="1"/>
  </joint>
  <joint name="tool_mount" type="fixed">
    <parent link="link2"/><child link="tool"/><origin xyz="0.4 0 0" rpy="0 0 0"/>
  </joint>
</robot>
"""


@pytest.fixture
def planar(tmp_path):
    path = tmp_path / "planar.urdf"
    path.write_text(URDF)
    return path


def test_urdf_fixed_tool_link_and_missing_meshes(planar):
    """A URDF whose TCP is a fixed link (which MuJoCo would fuse away) and whose mesh files do not resolve."""
    kinematics = ArmKinematics.from_file(planar, ["shoulder", "elbow"], "tool")
    for q1, q2 in ((0.0, 0.0), (0.3, -1.1), (-2.0, 2.2)):
        position, quat = kinematics.forward([q1, q2])
        expected = [0.5 * math.cos(q1) + 0.4 * math.cos(q1 + q2), 0.5 * math.sin(q1) + 0.4 * math.sin(q1 + q2), 0.1]
        np.testing.assert_allclose(position, expected, atol=1e-9)
        yaw = q1 + q2
        assert _angle(quat, [math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)]) < 1e-9
    goal = np.array([0.4, 0.9])
    target_position, target_quat = kinematics.forward(goal)
    q = kinematics.solve([0.1, 0.5], target_position, target_quat)
    np.testing.assert_allclose(q, goal, atol=1e-6)


def test_a_body_tcp_and_joint_subsets_of_an_mjcf(tmp_path):
    path = tmp_path / "arm.xml"
    path.write_text("""<mujoco><worldbody><body name="b1"><joint name="slide" type="slide" axis="1 0 0"/>
        <geom size="0.1" mass="1"/><body name="tip" pos="0 0 0.3"><joint name="hinge" axis="0 1 0" range="-1 1"/>
        <geom size="0.1" mass="1"/></body></body></worldbody></mujoco>""")
    kinematics = ArmKinematics.from_file(path, ["slide"], "tip")  # the hinge stays at its zero position
    np.testing.assert_allclose(kinematics.forward([0.25])[0], [0.25, 0, 0.3], atol=1e-12)
    q = kinematics.solve([0.0], [0.6, 0.0, 0.3], [1, 0, 0, 0])
    np.testing.assert_allclose(q, [0.6], atol=1e-6)
    assert kinematics.upper[0] == np.inf


@pytest.mark.parametrize("joints, tcp, reason", [
    (["shoulder", "wrist"], "tool", r"unknown joints \['wrist'\]; the model's hinge/slide joints: \['shoulder', "
                                    r"'elbow'\]"),
    (["shoulder", "shoulder"], "tool", "duplicates"),
    ([], "tool", "non-empty"),
    ("shoulder", "tool", "non-empty list"),
    (["shoulder", "elbow"], "flange", "no site or body named 'flange'"),
])
def test_unknown_joints_and_tcp_are_named(planar, joints, tcp, reason):
    with pytest.raises(KinematicsError, match=reason):
        ArmKinematics.from_file(planar, joints, tcp)


def test_unreadable_models_are_named(tmp_path):
    with pytest.raises(KinematicsError, match="missing.urdf: robot model file not found"):
        ArmKinematics.from_file(tmp_path / "missing.urdf", ["a"], "tcp")
    broken = tmp_path / "broken.xml"
    broken.write_text("<mujoco><worldbody><body name='a'>")
    with pytest.raises(KinematicsError, match="broken.xml: cannot read the robot model"):
        ArmKinematics.from_file(broken, ["a"], "tcp")
    ball = tmp_path / "ball.xml"
    ball.write_text("<mujoco><worldbody><body name='a'><joint name='j' type='ball'/><geom size='1'/></body>"
                    "</worldbody></mujoco>")
    with pytest.raises(KinematicsError, match=r"joints \['j'\] are not hinge or slide"):
        ArmKinematics.from_file(ball, ["j"], "a")


@pytest.mark.parametrize("call, reason", [
    (lambda k: k.forward([0.0]), r"joint positions must have shape \(2,\)"),
    (lambda k: k.forward([0.0, float("nan")]), "joint positions must be finite"),
    (lambda k: k.forward("ab"), "joint positions must be 2 numbers"),
    (lambda k: k.solve([0, 0, 0], [0.5, 0, 0.1], [1, 0, 0, 0]), r"q_current must have shape \(2,\)"),
    (lambda k: k.solve([0, 0], [0.5, 0], [1, 0, 0, 0]), r"target position must have shape \(3,\)"),
    (lambda k: k.solve([0, 0], [0.5, 0, float("inf")], [1, 0, 0, 0]), "target position must be finite"),
    (lambda k: k.solve([0, 0], [0.5, 0, 0.1], [0, 0, 0, 0]), "target quaternion .* must be non-zero"),
    (lambda k: k.solve([0, 0], [0.5, 0, 0.1], [1, 0, 0]), r"target quaternion \(wxyz\) must have shape \(4,\)"),
])
def test_wrong_sizes_and_non_finite_values_raise_kinematics_error(planar, call, reason):
    kinematics = ArmKinematics.from_file(planar, ["shoulder", "elbow"], "tool")
    with pytest.raises(KinematicsError, match=reason):
        call(kinematics)


def test_twist_matches_the_sim_tcp_velocity(sim_panda, env):
    """J(q) qdot of the shipped model is the sim's own TCP twist (what the env's proprio state reports)."""
    rng = np.random.default_rng(1)
    velocity = np.empty(6)
    for _ in range(20):
        q = rng.uniform(robot.JOINT_LIMITS[:, 0], robot.JOINT_LIMITS[:, 1])
        qdot = rng.normal(scale=0.5, size=q.shape)
        env.data.qpos[env._arm_qpos_adr] = q
        env.data.qvel[:] = 0.0
        env.data.qvel[env._arm_dof_adr] = qdot
        mujoco.mj_forward(env.model, env.data)
        mujoco.mj_objectVelocity(env.model, env.data, mujoco.mjtObj.mjOBJ_SITE, env._tcp_site_id, velocity, 0)
        linear, angular = sim_panda.twist(q, qdot)
        np.testing.assert_allclose(linear, velocity[3:], atol=1e-9)
        np.testing.assert_allclose(angular, velocity[:3], atol=1e-9)
    with pytest.raises(KinematicsError, match="joint velocities"):
        sim_panda.twist(q, [0.0] * 6)
