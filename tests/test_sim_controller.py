"""The operational-space controller tracks step changes of the target pose."""

import gymnasium as gym
import numpy as np

import robot_rl.sim  # noqa: F401


def _orientation_error(env) -> float:
    return float(np.linalg.norm(env.controller.pose_error(env.data)[3:]))


def test_position_step_is_tracked_to_millimetres():
    env = gym.make("robot_rl/PickCube-v0").unwrapped
    env.reset(seed=0)
    start = env.tcp_pose()[0]
    for delta in ([0.05, 0.0, 0.0], [0.0, -0.08, 0.0], [0.0, 0.0, -0.1]):
        env._target_position = np.clip(env._target_position + delta, env.workspace_low, env.workspace_high)
        for _ in range(6):  # 0.6 s to settle
            env.step(np.array([0, 0, 0, -1], dtype=np.float32))
        error = np.linalg.norm(env.tcp_pose()[0] - env.target_pose()[0])
        assert error < 3e-3, f"position error {error * 1000:.1f} mm after step {delta}"
        assert _orientation_error(env) < 0.02
    assert np.linalg.norm(env.tcp_pose()[0] - start) > 0.1
    env.close()


def test_orientation_step_is_tracked():
    env = gym.make("robot_rl/PegInsert-v0", control_rotation=True).unwrapped
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.array([0, 0, 0, 0.0, 0.0, 1.0, 1.0], dtype=np.float32))  # yaw 0.45 rad in total
    for _ in range(5):
        env.step(np.array([0, 0, 0, 0, 0, 0, 1.0], dtype=np.float32))
    assert _orientation_error(env) < 0.03
    assert np.linalg.norm(env.tcp_pose()[0] - env.target_pose()[0]) < 3e-3
    env.close()


def test_torques_are_within_limits():
    from robot_rl.sim.robot import TORQUE_LIMITS

    env = gym.make("robot_rl/PickCube-v0").unwrapped
    env.reset(seed=0)
    env.step(np.array([1, 1, -1, 1], dtype=np.float32))
    assert np.all(np.abs(env.controller.last_torque) <= TORQUE_LIMITS + 1e-9)
    env.close()
