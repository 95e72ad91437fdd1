"""Quaternion / rotation-vector maths (robot_rl.core.rotations): known values, MuJoCo's functions, scalar == batch."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robot_rl.core.rotations import ArrayOps, ScalarOps, quat_conjugate, quat_from_rotvec, quat_multiply, rotvec_from_quat

S = math.sqrt(0.5)


@pytest.mark.parametrize("a, b, product", [
    ((1, 0, 0, 0), (0, 1, 0, 0), (0, 1, 0, 0)),
    ((0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1)),  # i j = k
    ((0, 0, 1, 0), (0, 1, 0, 0), (0, 0, 0, -1)),  # j i = -k
    ((S, 0, 0, S), (S, 0, 0, S), (0, 0, 0, 1)),  # two quarter turns about z: a half turn
    ((S, S, 0, 0), (S, -S, 0, 0), (1, 0, 0, 0)),  # a turn and its inverse
])
def test_quat_multiply_known_products(a, b, product):
    np.testing.assert_allclose(quat_multiply(a, b), product, atol=1e-15)


@pytest.mark.parametrize("quat, rotvec", [
    ((1.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
    ((S, 0.0, 0.0, S), (0.0, 0.0, math.pi / 2)),
    ((-S, 0.0, 0.0, -S), (0.0, 0.0, math.pi / 2)),  # the same rotation, other sign
    ((S, 0.0, 0.0, -S), (0.0, 0.0, -math.pi / 2)),
    ((0.0, 1.0, 0.0, 0.0), (math.pi, 0.0, 0.0)),  # half turn about x
    ((math.cos(0.6), 0.0, math.sin(0.6), 0.0), (0.0, 1.2, 0.0)),
    ((math.cos(2.0), math.sin(2.0), 0.0, 0.0), (4.0 - 2 * math.pi, 0.0, 0.0)),  # 4 rad about x: 2 pi - 4 the other way
    ((math.cos(1e-10), 0.0, 0.0, math.sin(1e-10)), (0.0, 0.0, 2e-10)),  # tiny angle
])
def test_rotvec_from_quat_known_values_and_back(quat, rotvec):
    np.testing.assert_allclose(rotvec_from_quat(ScalarOps, quat), rotvec, atol=1e-12)
    back = quat_from_rotvec(ScalarOps, rotvec)
    sign = 1.0 if np.dot(back, quat) >= 0 else -1.0
    np.testing.assert_allclose(np.multiply(back, sign), quat, atol=1e-12)


def test_conjugate_inverts_a_unit_quaternion():
    q = quat_from_rotvec(ScalarOps, (0.3, -0.2, 0.9))
    assert quat_conjugate(q) == (q[0], -q[1], -q[2], -q[3])
    np.testing.assert_allclose(quat_multiply(q, quat_conjugate(q)), (1, 0, 0, 0), atol=1e-15)


def test_the_formulas_agree_with_mujocos_on_random_quaternions():
    mujoco = pytest.importorskip("mujoco")
    rng = np.random.default_rng(0)
    for _ in range(2000):
        a, b = rng.normal(size=(2, 4))
        a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
        expected = np.empty(4)
        mujoco.mju_mulQuat(expected, a, b)
        np.testing.assert_allclose(quat_multiply(a, b), expected, atol=1e-15)
        mujoco.mju_negQuat(expected, a)
        np.testing.assert_array_equal(quat_conjugate(a), expected)
        rotvec = np.empty(3)
        mujoco.mju_quat2Vel(rotvec, a, 1.0)
        np.testing.assert_allclose(rotvec_from_quat(ScalarOps, a), rotvec, atol=1e-14)
        r = rng.normal(size=3) * rng.uniform(1e-6, 3.0)
        angle = float(np.linalg.norm(r))
        mujoco.mju_axisAngle2Quat(expected, r / angle, angle)
        np.testing.assert_allclose(quat_from_rotvec(ScalarOps, r), expected, atol=1e-15)


def test_the_batch_path_runs_the_same_formulas_as_the_scalar_path():
    rng = np.random.default_rng(1)
    quats = rng.normal(size=(500, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    quats[:5] = [1, 0, 0, 0]  # zero rotations take the small-angle branch
    batch = np.stack(rotvec_from_quat(ArrayOps, tuple(quats.T)), axis=1)
    scalar = np.array([rotvec_from_quat(ScalarOps, tuple(map(float, q))) for q in quats])
    np.testing.assert_allclose(batch, scalar, rtol=1e-12, atol=1e-15)
    back = np.stack(quat_from_rotvec(ArrayOps, tuple(batch.T)), axis=1)
    np.testing.assert_allclose(back, [quat_from_rotvec(ScalarOps, tuple(r)) for r in scalar], rtol=1e-12, atol=1e-15)
