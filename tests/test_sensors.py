"""Sensor helpers for real drivers: finger joints -> gripper opening, TCP twist from successive poses."""

import math
import subprocess
import sys

import numpy as np
import pytest

from robot_rl.actor.sensors import NOMINAL_TCP_QUAT, STATE_SIZE, TwistEstimator, finger_opening


def _quat_from_rotvec(rotvec):
    angle = float(np.linalg.norm(rotvec))
    if angle == 0:
        return np.array([1.0, 0, 0, 0])
    axis = np.asarray(rotvec) / angle
    return np.concatenate([[math.cos(angle / 2)], math.sin(angle / 2) * axis])


def _quat_mul(a, b):
    aw, av, bw, bv = a[0], np.asarray(a[1:]), b[0], np.asarray(b[1:])
    return np.concatenate([[aw * bw - av @ bv], aw * bv + bw * av + np.cross(av, bv)])


def test_importing_sensors_does_not_import_the_simulator():
    code = "import sys, robot_rl.actor.sensors; print(sorted(m for m in ('mujoco', 'dm_control') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_state_constants_match_the_sim_env():
    from robot_rl.sim import env

    assert STATE_SIZE == env.STATE_SIZE
    np.testing.assert_array_equal(NOMINAL_TCP_QUAT, env.NOMINAL_TCP_QUAT)


def test_finger_opening_sums_the_finger_joints_of_a_joint_state():
    names = ("joint1", "joint2", "panda_finger_joint1", "panda_finger_joint2")
    positions = np.array([0.1, -0.5, 0.012, 0.013])
    assert finger_opening(names, positions, ("panda_finger_joint1", "panda_finger_joint2"), 1.0) == pytest.approx(0.025)
    # One joint standing for the opening with a scale (e.g. a driver reporting the half opening in another unit).
    assert finger_opening(["finger_joint"], [0.4], ["finger_joint"], 0.05) == pytest.approx(0.02)


@pytest.mark.parametrize("names, positions, fingers, reason", [
    (("joint1", "finger_a"), [0.0, 0.01], ("finger_a", "finger_b"), r"finger joints \['finger_b'\] not in the joint "
                                                                   r"state \(it has \['joint1', 'finger_a'\]\)"),
    (("finger_a", "finger_b"), [0.01, float("nan")], ("finger_a", "finger_b"), "must be finite"),
    (("finger_a", "finger_b"), [0.01], ("finger_a", "finger_b"), "1 positions for 2 names"),
    (("finger_a",), [0.01], (), "no finger joints"),
])
def test_finger_opening_names_what_is_wrong(names, positions, fingers, reason):
    with pytest.raises(ValueError, match=reason):
        finger_opening(names, positions, fingers, 1.0)


def test_twist_of_a_constant_velocity_motion():
    linear = np.array([0.05, -0.02, 0.01])
    angular = np.array([0.3, -0.1, 0.6])  # world-frame rotation vector rate
    start_quat = np.array(NOMINAL_TCP_QUAT)
    start_position = np.array([0.4, 0.0, 0.2])
    estimator = TwistEstimator()
    results = []
    for step in range(6):
        t = 100.0 + 0.1 * step
        quat = _quat_mul(_quat_from_rotvec(angular * (t - 100.0)), start_quat)
        if step % 2:
            quat = -quat  # the sign of a quaternion carries no meaning
        results.append(estimator.update(t, start_position + linear * (t - 100.0), quat))
    assert results[0] is None
    for result in results[1:]:
        np.testing.assert_allclose(result[0], linear, atol=1e-9)
        np.testing.assert_allclose(result[1], angular, atol=1e-9)


def test_twist_ignores_old_stamps_and_restarts_after_a_gap():
    estimator = TwistEstimator(max_gap_s=1.0)
    quat = [1.0, 0, 0, 0]
    assert estimator.update(1.0, [0, 0, 0], quat) is None
    assert estimator.update(1.0, [5, 5, 5], quat) is None  # same stamp as the first: ignored, still no estimate
    np.testing.assert_allclose(estimator.update(1.5, [0.1, 0, 0], quat)[0], [0.2, 0, 0])
    np.testing.assert_allclose(estimator.update(1.5, [5, 5, 5], quat)[0], [0.2, 0, 0])  # same stamp: ignored
    np.testing.assert_allclose(estimator.update(1.2, [5, 5, 5], quat)[0], [0.2, 0, 0])  # older: ignored
    np.testing.assert_allclose(estimator.update(2.0, [0.2, 0, 0], quat)[0], [0.2, 0, 0])  # against the 1.5 pose
    assert estimator.update(3.5, [0.0, 0, 0], quat) is None  # 1.5 s gap: start over
    np.testing.assert_allclose(estimator.update(3.6, [0.0, 0.01, 0], quat)[0], [0, 0.1, 0], atol=1e-12)
    estimator.reset()
    assert estimator.update(3.7, [0.0, 0.02, 0], quat) is None


def test_twist_of_a_half_turn_per_step_takes_the_short_way():
    estimator = TwistEstimator()
    estimator.update(0.0, [0, 0, 0], [1, 0, 0, 0])
    _, angular = estimator.update(1.0, [0, 0, 0], _quat_from_rotvec([0, 0, 3.0]))
    np.testing.assert_allclose(angular, [0, 0, 3.0], atol=1e-9)
    _, angular = estimator.update(2.0, [0, 0, 0], _quat_from_rotvec([0, 0, -3.0]))  # +0.28 rad across +-pi
    np.testing.assert_allclose(angular, [0, 0, 2 * math.pi - 6.0], atol=1e-9)


@pytest.mark.parametrize("stamp, position, quat", [
    (float("nan"), [0, 0, 0], [1, 0, 0, 0]),
    (1.0, [0, float("inf"), 0], [1, 0, 0, 0]),
    (1.0, [0, 0, 0], [0, 0, 0, 0]),
])
def test_twist_rejects_non_finite_poses(stamp, position, quat):
    with pytest.raises(ValueError, match="pose must be finite"):
        TwistEstimator().update(stamp, position, quat)
