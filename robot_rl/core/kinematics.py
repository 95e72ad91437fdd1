"""Forward and differential inverse kinematics of an arm from its MJCF or URDF, computed with MuJoCo.

The model's world frame is the robot base frame (the frame of TCP poses and commands). Only kinematics is used:
mesh, height-field and texture files are dropped before compiling (a URDF's ``package://`` meshes need not resolve),
and a URDF's fixed links are kept (MuJoCo would otherwise fuse them away, TCP links included).

Not thread-safe: each :class:`ArmKinematics` owns one private ``MjData``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import mujoco
import numpy as np

_HINGE_OR_SLIDE = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
_FILE_GEOMS = (mujoco.mjtGeom.mjGEOM_MESH, mujoco.mjtGeom.mjGEOM_HFIELD, mujoco.mjtGeom.mjGEOM_SDF)


class KinematicsError(ValueError):
    """A model cannot be loaded or used (unknown joint or TCP, wrong sizes, non-finite values); names the problem."""


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return "; ".join(lines[:2]) if lines else type(error).__name__


def _kinematic_spec(path: Path) -> mujoco.MjSpec:
    """The model at `path` without the files kinematics does not need (meshes, height fields, textures, skins)."""
    try:
        spec = mujoco.MjSpec.from_file(str(path))
    except Exception as error:  # MuJoCo raises ValueError for parse errors, others for odd files
        raise KinematicsError(f"{path}: cannot read the robot model: {_first_line(error)}") from None
    spec.compiler.fusestatic = False
    spec.compiler.boundmass = 1e-6  # bodies left without geometry still compile
    spec.compiler.boundinertia = 1e-9
    for geom in list(spec.geoms):
        if geom.type in _FILE_GEOMS:
            spec.delete(geom)
    for element in (*spec.pairs, *spec.sensors, *spec.skins, *spec.meshes, *spec.hfields):
        spec.delete(element)
    for element in (*spec.geoms, *spec.sites, *spec.tendons):
        element.material = ""
    for element in (*spec.materials, *spec.textures):
        spec.delete(element)
    return spec


class ArmKinematics:
    """TCP pose of an arm's joint configuration, and joint targets for a TCP target (damped least squares)."""

    def __init__(self, model: mujoco.MjModel, joint_names: Sequence[str], tcp: str, source: str = "model"):
        self.model = model
        self.source = source
        self._data = mujoco.MjData(model)
        if isinstance(joint_names, str) or not len(joint_names):
            raise KinematicsError(f"{source}: joint_names must be a non-empty list of joint names, got {joint_names!r}")
        self.joint_names = tuple(str(n) for n in joint_names)
        if len(set(self.joint_names)) != len(self.joint_names):
            raise KinematicsError(f"{source}: joint_names has duplicates: {list(self.joint_names)}")
        ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in self.joint_names]
        unknown = [n for n, i in zip(self.joint_names, ids) if i < 0]
        if unknown:
            known = [model.joint(i).name for i in range(model.njnt) if model.jnt_type[i] in _HINGE_OR_SLIDE]
            raise KinematicsError(f"{source}: unknown joints {unknown}; the model's hinge/slide joints: {known}")
        not_1dof = [n for n, i in zip(self.joint_names, ids) if model.jnt_type[i] not in _HINGE_OR_SLIDE]
        if not_1dof:
            raise KinematicsError(f"{source}: joints {not_1dof} are not hinge or slide (revolute/prismatic) joints")
        ids = np.array(ids)
        self._qpos_adr = model.jnt_qposadr[ids].copy()
        self._dof_adr = model.jnt_dofadr[ids].copy()
        limited = model.jnt_limited[ids].astype(bool)
        self.lower = np.where(limited, model.jnt_range[ids, 0], -np.inf)
        self.upper = np.where(limited, model.jnt_range[ids, 1], np.inf)
        """Joint limits (-inf / inf where a joint has none)."""

        self.tcp = str(tcp)
        self._site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, self.tcp)
        self._body = -1 if self._site >= 0 else mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, self.tcp)
        if self._site < 0 and self._body < 0:
            sites = [model.site(i).name for i in range(model.nsite)]
            bodies = [model.body(i).name for i in range(1, model.nbody)]
            raise KinematicsError(f"{source}: no site or body named {self.tcp!r} for the TCP; sites: {sites}, "
                                  f"bodies: {bodies}")
        self._jac = np.zeros((6, model.nv))
        self._quat = np.empty(4)
        self._error_quat = np.empty(4)
        self._conj = np.empty(4)

    @classmethod
    def from_file(cls, model_path: str | Path, joint_names: Sequence[str], tcp: str) -> ArmKinematics:
        """Load an MJCF or URDF; `joint_names` are the arm joints base to tip, `tcp` a site or body name."""
        path = Path(model_path)
        if not path.is_file():
            raise KinematicsError(f"{path}: robot model file not found")
        spec = _kinematic_spec(path)
        try:
            model = spec.compile()
        except Exception as error:
            raise KinematicsError(f"{path}: cannot compile the robot model: {_first_line(error)}") from None
        return cls(model, joint_names, tcp, source=str(path))

    # ----- helpers ------------------------------------------------------------------------------------------------
    def _vector(self, values, size: int, what: str) -> np.ndarray:
        try:
            vector = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError):
            raise KinematicsError(f"{what} must be {size} numbers, got {values!r}") from None
        if vector.shape != (size,):
            raise KinematicsError(f"{what} must have shape ({size},), got {vector.shape}")
        if not np.all(np.isfinite(vector)):
            raise KinematicsError(f"{what} must be finite, got {vector.tolist()}")
        return vector

    def _set(self, q: np.ndarray) -> None:
        self._data.qpos[self._qpos_adr] = q
        mujoco.mj_kinematics(self.model, self._data)

    def _pose(self) -> tuple[np.ndarray, np.ndarray]:
        if self._site >= 0:
            mujoco.mju_mat2Quat(self._quat, self._data.site_xmat[self._site])
            return self._data.site_xpos[self._site].copy(), self._quat.copy()
        return self._data.xpos[self._body].copy(), self._data.xquat[self._body].copy()

    # ----- public -------------------------------------------------------------------------------------------------
    def forward(self, q) -> tuple[np.ndarray, np.ndarray]:
        """TCP (position (3,), unit quaternion wxyz (4,)) in the base frame; q and -q are the same rotation."""
        self._set(self._vector(q, len(self.joint_names), "joint positions"))
        return self._pose()

    def solve(self, q_current, target_position, target_quat, iterations: int = 20, damping: float = 1e-2,
              tolerance: float = 1e-7) -> np.ndarray:
        """Joint positions that bring the TCP to the target pose, starting from (and staying close to) `q_current`.

        Damped least squares on the position [m] and world-frame rotation-vector [rad] error, each step clipped to the
        joint limits, until the error norm is below `tolerance` or after `iterations` steps. An unreachable target
        gives the closest configuration found; check it with :meth:`forward`.
        """
        n = len(self.joint_names)
        q = np.clip(self._vector(q_current, n, "q_current"), self.lower, self.upper)
        position = self._vector(target_position, 3, "target position")
        quat = self._vector(target_quat, 4, "target quaternion (wxyz)")
        norm = float(np.linalg.norm(quat))
        if norm < 1e-6:
            raise KinematicsError(f"target quaternion (wxyz) must be non-zero, got {quat.tolist()}")
        quat = quat / norm
        model, data, jac = self.model, self._data, self._jac
        error = np.empty(6)
        regulariser = damping**2 * np.eye(6)
        for _ in range(iterations):
            self._set(q)
            current_position, current_quat = self._pose()
            error[:3] = position - current_position
            mujoco.mju_negQuat(self._conj, current_quat)
            mujoco.mju_mulQuat(self._error_quat, quat, self._conj)
            mujoco.mju_quat2Vel(error[3:], self._error_quat, 1.0)
            if float(error @ error) < tolerance**2:
                break
            mujoco.mj_comPos(model, data)
            if self._site >= 0:
                mujoco.mj_jacSite(model, data, jac[:3], jac[3:], self._site)
            else:
                mujoco.mj_jacBody(model, data, jac[:3], jac[3:], self._body)
            j = jac[:, self._dof_adr]
            q = np.clip(q + j.T @ np.linalg.solve(j @ j.T + regulariser, error), self.lower, self.upper)
        return q

    def twist(self, q, qdot) -> tuple[np.ndarray, np.ndarray]:
        """TCP twist (linear [m/s], angular [rad/s], both in the base frame) of joint velocities `qdot` at `q`:
        J(q) qdot, the instantaneous velocity a joint_states message implies."""
        n = len(self.joint_names)
        self._set(self._vector(q, n, "joint positions"))
        qdot = self._vector(qdot, n, "joint velocities")
        mujoco.mj_comPos(self.model, self._data)
        if self._site >= 0:
            mujoco.mj_jacSite(self.model, self._data, self._jac[:3], self._jac[3:], self._site)
        else:
            mujoco.mj_jacBody(self.model, self._data, self._jac[:3], self._jac[3:], self._body)
        velocity = self._jac[:, self._dof_adr] @ qdot
        return velocity[:3].copy(), velocity[3:].copy()
