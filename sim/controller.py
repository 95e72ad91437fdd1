"""Operational-space (Cartesian impedance) controller tracking an end-effector target pose."""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np


@dataclass(frozen=True)
class OSCGains:
    """Task-space stiffness/damping (damping ratio 1 by default) and null-space posture gains."""

    position_stiffness: float = 900.0  # 1/s^2 (acceleration per metre; scaled by the task-space inertia)
    orientation_stiffness: float = 1200.0  # 1/s^2 per radian
    damping_ratio: float = 1.0
    null_stiffness: float = 60.0
    null_damping_ratio: float = 1.0
    limit_margin: float = 0.2  # rad: inside this margin of a joint limit a repulsive torque pushes back
    limit_stiffness: float = 100.0  # N m / rad
    singular_damping: float = 1e-4  # regularises the task-space inertia inverse near singularities


class OperationalSpaceController:
    """tau = J^T Λ (Kp e − Kd v) + N^T (posture torque) + qfrc_bias, clipped to the torque limits.

    Call `compute(data)` after `mj_step1` (or `mj_forward`) so Jacobians, the mass matrix and the bias forces are
    those of the current state. All the per-step work is a handful of MuJoCo C calls and small dense matrix products.
    """

    def __init__(self, model: mujoco.MjModel, site_name: str, arm_dof_indices: np.ndarray,
                 torque_limits: np.ndarray, posture: np.ndarray, gains: OSCGains = OSCGains(),
                 joint_limits: np.ndarray | None = None):
        self.model = model
        self.site_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site_name)
        if self.site_id < 0:
            raise ValueError(f"site {site_name!r} not found in the model")
        dofs = np.asarray(arm_dof_indices, dtype=np.int64)
        contiguous = len(dofs) > 0 and np.array_equal(dofs, np.arange(dofs[0], dofs[0] + len(dofs)))
        # A slice gives views instead of fancy-index copies on the hot path.
        self.dofs = slice(int(dofs[0]), int(dofs[-1]) + 1) if contiguous else dofs
        self.torque_limits = np.asarray(torque_limits, dtype=np.float64)
        self.posture = np.asarray(posture, dtype=np.float64)
        self.gains = gains
        limits = np.full((len(dofs), 2), [-np.inf, np.inf]) if joint_limits is None else np.asarray(joint_limits)
        self._soft_low = limits[:, 0] + gains.limit_margin
        self._soft_high = limits[:, 1] - gains.limit_margin
        self.kp = np.array([gains.position_stiffness] * 3 + [gains.orientation_stiffness] * 3)
        self.kd = 2.0 * gains.damping_ratio * np.sqrt(self.kp)
        self.null_kp = gains.null_stiffness
        self.null_kd = 2.0 * gains.null_damping_ratio * np.sqrt(gains.null_stiffness)
        self.target_position = np.zeros(3)
        self.target_quat = np.array([1.0, 0.0, 0.0, 0.0])
        nv = model.nv
        self._jac = np.zeros((6, nv))
        self._minv_jt = np.zeros((6, nv))
        self._site_quat = np.zeros(4)
        self._quat_conj = np.zeros(4)
        self._quat_err = np.zeros(4)
        self._rot_err = np.zeros(3)
        self._eye6 = np.eye(6) * gains.singular_damping
        self._lambda_inv = np.zeros((6, 6))
        self._wrench = np.zeros(6)
        self._torque_low = -self.torque_limits
        self.last_torque = np.zeros(len(dofs))

    def set_target(self, position: np.ndarray, quat_wxyz: np.ndarray) -> None:
        """Set the target TCP position [m] and orientation (unit quaternion, wxyz)."""
        self.target_position[:] = position
        quat = np.asarray(quat_wxyz, dtype=np.float64)
        self.target_quat[:] = quat / np.linalg.norm(quat)

    def pose_error(self, data: mujoco.MjData) -> np.ndarray:
        """6-vector (position error, rotation-vector error) from the current TCP pose to the target, world frame."""
        error = np.empty(6)
        error[:3] = self.target_position - data.site_xpos[self.site_id]
        mujoco.mju_mat2Quat(self._site_quat, data.site_xmat[self.site_id])
        mujoco.mju_negQuat(self._quat_conj, self._site_quat)
        mujoco.mju_mulQuat(self._quat_err, self.target_quat, self._quat_conj)
        mujoco.mju_quat2Vel(self._rot_err, self._quat_err, 1.0)
        error[3:] = self._rot_err
        return error

    def compute(self, data: mujoco.MjData) -> np.ndarray:
        """Joint torques for the arm DoFs (clipped to the limits)."""
        model, dofs, jac, minv_jt = self.model, self.dofs, self._jac, self._minv_jt
        mujoco.mj_jacSite(model, data, jac[:3], jac[3:], self.site_id)
        # J M^-1 over all DoFs (keeps the finger/arm inertial coupling), from the factorised mass matrix.
        mujoco.mj_solveM(model, data, minv_jt, jac)
        jac_arm = jac[:, dofs]
        minv_jt_arm = minv_jt[:, dofs]
        # Λ^-1 = J M^-1 J^T; J is zero outside the arm DoFs (the TCP is on the hand).
        lambda_inv = self._lambda_inv
        np.matmul(jac_arm, minv_jt_arm.T, out=lambda_inv)
        lambda_inv += self._eye6
        qvel_arm = data.qvel[dofs]
        posture_torque = self.null_kp * (self.posture - data.qpos[dofs]) - self.null_kd * qvel_arm
        # tau = J^T Λ (Kp e - Kd v) + N^T tau0 with N^T = I - J^T Λ J M^-1, folded into a single solve:
        # tau = J^T Λ (Kp e - Kd v - J M^-1 tau0) + tau0.
        rhs = self.kp * self.pose_error(data) - self.kd * (jac_arm @ qvel_arm) - minv_jt_arm @ posture_torque
        mujoco.mju_cholFactor(lambda_inv, 0.0)
        mujoco.mju_cholSolve(self._wrench, lambda_inv, rhs)
        torque = jac_arm.T @ self._wrench
        torque += posture_torque
        # Joint-limit repulsion (outside the task hierarchy: safety first, as real impedance controllers do).
        qpos_arm = data.qpos[dofs]
        torque += self.gains.limit_stiffness * (np.maximum(self._soft_low - qpos_arm, 0.0)
                                                - np.maximum(qpos_arm - self._soft_high, 0.0))
        torque += data.qfrc_bias[dofs]
        np.clip(torque, self._torque_low, self.torque_limits, out=torque)
        self.last_torque = torque
        return torque
