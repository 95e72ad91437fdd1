"""Workspace clipping, extreme and non-finite actions: the TCP stays in the box and physics never diverges."""

import logging

import gymnasium as gym
import numpy as np
import pytest

import robot_rl.sim  # noqa: F401

TOLERANCE = 0.02  # m: the TCP may lag/overshoot the clipped target a little


def _assert_inside(env):
    position = env.tcp_pose()[0]
    assert np.all(position >= env.workspace_low - TOLERANCE), position
    assert np.all(position <= env.workspace_high + TOLERANCE), position
    assert np.isfinite(env.data.qpos).all()
    assert np.all(env.target_pose()[0] >= env.workspace_low - 1e-12)
    assert np.all(env.target_pose()[0] <= env.workspace_high + 1e-12)


@pytest.mark.parametrize("task", ["robot_rl/PickCube-v0", "robot_rl/PegInsert-v0"])
def test_random_and_extreme_actions_stay_in_workspace(task):
    env = gym.make(task, control_rotation=True).unwrapped
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    corners = [np.array([sx, sy, sz, rx, ry, rz, g]) for sx, sy, sz, rx, ry, rz, g in rng.choice([-1, 1], (12, 7))]
    actions = [rng.uniform(-1, 1, 7) for _ in range(20)]
    actions += [np.full(7, 5.0), np.full(7, -5.0)] * 3  # out of range: clipped
    for corner in corners:  # saturate towards each corner, then alternate extremes
        actions += [corner] * 8 + [corner, -corner] * 3
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action.astype(np.float32))
        _assert_inside(env)
        assert not info["physics_unstable"]
        if terminated:
            env.reset()
    env.close()


def test_non_finite_action_holds_target_and_warns_once(caplog):
    env = gym.make("robot_rl/PickCube-v0").unwrapped
    env.reset(seed=0)
    env.step(np.array([0.5, 0.0, 0.0, 1.0], dtype=np.float32))
    target_before, gripper_before = env.target_pose()[0], env.gripper_command
    with caplog.at_level(logging.WARNING, logger="robot_rl.sim.env"):
        for bad in (np.nan, np.inf, -np.inf):
            action = np.array([1.0, bad, 0.0, -1.0], dtype=np.float32)
            obs, reward, terminated, truncated, info = env.step(action)
            assert info["action_rejected"] is True
            np.testing.assert_array_equal(env.target_pose()[0], target_before)
            assert env.gripper_command == gripper_before
            assert np.isfinite(env.data.qpos).all() and np.isfinite(obs["state"]).all()
    assert sum("non-finite action" in record.message for record in caplog.records) == 1
    obs, reward, terminated, truncated, info = env.step(np.zeros(4, dtype=np.float32))
    assert info["action_rejected"] is False
    env.close()
