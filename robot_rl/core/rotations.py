"""Quaternion (wxyz) and rotation-vector maths, component-wise: one set of formulas for Python floats (`ScalarOps`, a
few microseconds a call) and for (N,) numpy arrays (`ArrayOps`, a batch without a Python loop). Pure Python/numpy,
no MuJoCo, so the robot side (safety layer, sensors, robot files; the actor node) can use it without the simulator.
The sim computes the same quantities with MuJoCo's own functions (mju_mulQuat, mju_quat2Vel, ...)."""

from __future__ import annotations

import math

import numpy as np


class ScalarOps:
    """The component-wise operations on Python floats."""

    sqrt, sin, cos, atan2 = math.sqrt, math.sin, math.cos, math.atan2
    absolute, minimum, maximum = abs, min, max

    @staticmethod
    def where(condition, a, b):
        return a if condition else b

    @staticmethod
    def clip(x, low, high):
        return min(max(x, low), high)

    @staticmethod
    def any(condition) -> bool:
        return bool(condition)


class ArrayOps:
    """The component-wise operations on numpy arrays (one entry per command of a batch)."""

    sqrt, sin, cos, atan2 = np.sqrt, np.sin, np.cos, np.arctan2
    absolute, minimum, maximum, where, clip = np.abs, np.minimum, np.maximum, np.where, np.clip

    @staticmethod
    def any(condition) -> bool:
        return bool(np.any(condition))


def quat_multiply(a, b):
    """Hamilton product a * b of two quaternions (w, x, y, z); a tuple of components."""
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return (aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw)


def quat_conjugate(q):
    """The conjugate (w, -x, -y, -z): the inverse rotation of a unit quaternion; a tuple of components."""
    return (q[0], -q[1], -q[2], -q[3])


def quat_from_rotvec(ops, r):
    """The unit quaternion exp(r) of a rotation vector r (axis * angle [rad]); a tuple of components."""
    rx, ry, rz = r
    angle = ops.sqrt(rx * rx + ry * ry + rz * rz)
    small = angle < 1e-8
    # sin(angle/2)/angle, with its Taylor expansion near zero to avoid 0/0
    scale = ops.where(small, 0.5 - angle * angle / 48.0, ops.sin(0.5 * angle) / ops.where(small, 1.0, angle))
    return (ops.cos(0.5 * angle), rx * scale, ry * scale, rz * scale)


def rotvec_from_quat(ops, q):
    """The rotation vector (axis * angle, angle in [0, pi]: the shorter way) of a unit quaternion; a tuple."""
    w, x, y, z = q
    sign = ops.where(w < 0, -1.0, 1.0)  # the shorter of the two equivalent rotations (angle <= pi)
    w, x, y, z = w * sign, x * sign, y * sign, z * sign
    sine = ops.sqrt(x * x + y * y + z * z)
    small = sine < 1e-8
    scale = ops.where(small, 2.0, 2.0 * ops.atan2(sine, w) / ops.where(small, 1.0, sine))
    return (x * scale, y * scale, z * scale)
