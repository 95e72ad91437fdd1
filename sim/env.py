"""Gymnasium environment shared by the MuJoCo tasks: Cartesian delta actions at 10 Hz over an OSC at 500 Hz."""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces

from robot_rl.sim import robot
from robot_rl.sim.controller import OperationalSpaceController, OSCGains
from robot_rl.sim.scene import ARM_PREFIX, FRONT_CAMERA_NAME, PhysicsConfig, build_scene, compile_model

logger = logging.getLogger(__name__)

OBS_MODES = ("state", "pixels", "state+pixels")
CAMERA_NAMES = ("front", "wrist")

# Proprioception vector `obs["state"]` (float32, 14 values), robot base frame (= world frame: the base is at the
# origin). The quaternion is wxyz, sign chosen on the hemisphere of the nominal (pointing-down) orientation.
STATE_LAYOUT = (
    ("tcp_position", 3),  # m
    ("tcp_quaternion_wxyz", 4),
    ("tcp_linear_velocity", 3),  # m/s
    ("tcp_angular_velocity", 3),  # rad/s, world frame
    ("gripper_width", 1),  # m, distance between the finger pads (0 closed .. 0.08 open)
)
STATE_SIZE = sum(size for _, size in STATE_LAYOUT)

# Wrist force/torque reading `obs["wrench"]` (float32, 6 values, with wrench=True): what the surroundings exert on the
# hand and whatever it holds, robot base frame.
WRENCH_LAYOUT = (
    ("force", 3),  # N
    ("torque", 3),  # N m, about the TCP
)
WRENCH_SIZE = sum(size for _, size in WRENCH_LAYOUT)
WRENCH_SITE_NAME = "wrist_ft"

PHYSICS_STEPS_PER_ENV_STEP = 50
# TCP pointing down (TCP z = world -z), fingers closing along world y.
NOMINAL_TCP_QUAT = np.array([0.0, 1.0, 0.0, 0.0])


IMAGE_SIZES = (16, 640)
"""The observation and render image sides [px] an env takes (smallest, largest)."""


def image_size_problem(name: str, value: Any) -> str | None:
    """What is wrong with an image side `value` given as `name` (None: nothing); the env's rule, which the sim node
    also applies to its parameters before it starts."""
    if not isinstance(value, (int, np.integer)) or not IMAGE_SIZES[0] <= value <= IMAGE_SIZES[1]:
        return f"{name}={value!r} must be an int in [{IMAGE_SIZES[0]}, {IMAGE_SIZES[1]}]"
    return None


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty(4)
    mujoco.mju_mulQuat(out, a, b)
    return out


def _quat_conj(q: np.ndarray) -> np.ndarray:
    out = np.empty(4)
    mujoco.mju_negQuat(out, q)
    return out


def _quat_from_rotvec(rotvec: np.ndarray) -> np.ndarray:
    out = np.empty(4)
    angle = float(np.linalg.norm(rotvec))
    if angle < 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0])
    mujoco.mju_axisAngle2Quat(out, rotvec / angle, angle)
    return out


def _rotvec_from_quat(quat: np.ndarray) -> np.ndarray:
    out = np.empty(3)
    mujoco.mju_quat2Vel(out, quat, 1.0)
    return out


class RobotEnv(gym.Env):
    """Base MuJoCo env: a Panda-like arm with a parallel gripper on a table, 10 Hz Cartesian control.

    Action (Box[-1, 1], float32): ``(dx, dy, dz, gripper)`` or, with ``control_rotation=True``,
    ``(dx, dy, dz, drx, dry, drz, gripper)``. Translations are scaled by ``max_translation`` [m/step] and rotations
    (world-frame rotation vector) by ``max_rotation`` [rad/step], and added to the *target* pose of the
    operational-space controller; the target position is clipped to ``workspace_low/high`` (a box in the robot base
    frame) and the target orientation to ``rotation_low/high`` (rotation vector relative to the nominal
    pointing-down orientation). ``gripper`` is absolute: -1 fully open ... +1 fully closed. Out-of-range actions are
    clipped; a NaN/inf action holds the current target (gripper unchanged) and sets ``info["action_rejected"]``.

    Observation (``spaces.Dict`` with flat keys), by ``obs_mode``:
      - ``"state"``: ``state`` (14,) float32 (see ``STATE_LAYOUT``) and ``object_state`` (task-defined privileged
        simulator state, see the task's ``OBJECT_STATE_LAYOUT``);
      - ``"pixels"``: ``state``, ``images/front`` and ``images/wrist`` (image_size, image_size, 3) uint8 -- what a real
        robot has;
      - ``"state+pixels"``: all four keys.

    ``wrench=True`` adds ``wrench`` (6,) float32 in any mode (see ``WRENCH_LAYOUT``): a wrist force/torque sensor
    between the flange and the hand, reporting the force and torque the surroundings exert on the hand and what it
    holds (a table pushed on reads +z force), averaged over the control step, and zeroed at reset as a real sensor is
    tared before a task (so the held object's weight reads 0; a changed load or a fast move reads as a wrench).

    ``info`` always has ``success`` (bool) and ``action_rejected`` (bool). ``render()`` (``render_mode="rgb_array"``)
    returns the front camera at ``render_size``. Reward is sparse (1.0 on success, which terminates the episode).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    OBJECT_STATE_LAYOUT: tuple[tuple[str, int], ...] = ()
    # Target-position workspace [m], robot base frame.
    workspace_low = np.array([0.35, -0.22, 0.015])
    workspace_high = np.array([0.65, 0.22, 0.30])
    # Target-orientation limits: rotation vector [rad] from the nominal orientation, world frame.
    rotation_low = np.array([-0.3, -0.3, -np.pi / 4])
    rotation_high = np.array([0.3, 0.3, np.pi / 4])
    # Start TCP position: nominal +- uniform range.
    start_position = np.array([0.45, 0.0, 0.25])
    start_position_range = np.array([0.04, 0.08, 0.03])
    settle_physics_steps = 0
    # Vertical field of view of the wrist camera [deg]; None keeps the robot model's wide lens.
    wrist_camera_fovy: float | None = None

    def __init__(self, obs_mode: str = "state", image_size: int = 128, render_mode: str | None = None,
                 control_rotation: bool = False, max_translation: float = 0.03, max_rotation: float = 0.15,
                 render_size: int = 256, gains: OSCGains = OSCGains(), physics: PhysicsConfig = PhysicsConfig(),
                 wrench: bool = False):
        if obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode={obs_mode!r} is not supported; expected one of {OBS_MODES}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode={render_mode!r} is not supported; expected None or 'rgb_array'")
        for name, value in (("image_size", image_size), ("render_size", render_size)):
            problem = image_size_problem(name, value)
            if problem:
                raise ValueError(problem)
        if not (np.isfinite(max_translation) and 0 < max_translation <= 0.2):
            raise ValueError(f"max_translation={max_translation!r} must be in (0, 0.2] m per step")
        if not (np.isfinite(max_rotation) and 0 < max_rotation <= 1.0):
            raise ValueError(f"max_rotation={max_rotation!r} must be in (0, 1] rad per step")
        self.obs_mode = obs_mode
        self.image_size = int(image_size)
        self.render_size = int(render_size)
        self.render_mode = render_mode
        self.control_rotation = bool(control_rotation)
        self.max_translation = float(max_translation)
        self.max_rotation = float(max_rotation)
        self.workspace_low = np.array(self.workspace_low, dtype=np.float64)
        self.workspace_high = np.array(self.workspace_high, dtype=np.float64)

        self.wrench = bool(wrench)
        root = build_scene(physics)
        self._add_task_objects(root)
        if self.wrench:  # force/torque sensors make every physics step compute the joint forces: only when asked
            hand = root.find("body", ARM_PREFIX + robot.HAND_BODY_NAME)
            site = hand.add("site", name=WRENCH_SITE_NAME, pos=[0, 0, 0], size=[0.005], group=3)
            root.sensor.add("force", name="wrist_force", site=site)
            root.sensor.add("torque", name="wrist_torque", site=site)
        self.model = compile_model(root)
        self.data = mujoco.MjData(self.model)
        self._ik_data = mujoco.MjData(self.model)
        self.control_dt = self.model.opt.timestep * PHYSICS_STEPS_PER_ENV_STEP
        self.physics_steps_per_env_step = PHYSICS_STEPS_PER_ENV_STEP
        """Physics steps the next env step runs (a validation condition may vary it: control-rate jitter)."""

        def joint_id(name: str) -> int:
            return mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, ARM_PREFIX + name)

        self._arm_joint_ids = np.array([joint_id(n) for n in robot.JOINT_NAMES])
        self._arm_qpos_adr = self.model.jnt_qposadr[self._arm_joint_ids]
        self._arm_dof_adr = self.model.jnt_dofadr[self._arm_joint_ids]
        self._finger_qpos_adr = self.model.jnt_qposadr[[joint_id(n) for n in robot.FINGER_JOINT_NAMES]]
        self._finger_dof_adr = self.model.jnt_dofadr[[joint_id(n) for n in robot.FINGER_JOINT_NAMES]]
        self._arm_actuator_ids = np.array(
            [mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_ACTUATOR, ARM_PREFIX + n) for n in robot.ACTUATOR_NAMES])
        self._gripper_actuator_id = mujoco.mj_name2id(
            self.model, mujoco.mjtObj.mjOBJ_ACTUATOR, ARM_PREFIX + robot.GRIPPER_ACTUATOR_NAME)
        self._tcp_site_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, ARM_PREFIX + robot.TCP_SITE_NAME)
        self._camera_ids = {
            "front": mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, FRONT_CAMERA_NAME),
            "wrist": mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, ARM_PREFIX + robot.WRIST_CAMERA_NAME),
        }
        if self.wrist_camera_fovy is not None:
            self.model.cam_fovy[self._camera_ids["wrist"]] = self.wrist_camera_fovy
        self.controller = OperationalSpaceController(
            self.model, ARM_PREFIX + robot.TCP_SITE_NAME, self._arm_dof_adr, robot.TORQUE_LIMITS,
            posture=robot.HOME_QPOS, gains=gains, joint_limits=robot.JOINT_LIMITS)
        ids = self._arm_actuator_ids
        contiguous = np.array_equal(ids, np.arange(ids[0], ids[0] + len(ids)))
        self._ctrl_arm_slice = slice(int(ids[0]), int(ids[-1]) + 1) if contiguous else ids
        self._start_qpos = self._solve_ik(self.start_position, NOMINAL_TCP_QUAT, robot.HOME_QPOS)

        action_dim = 7 if self.control_rotation else 4
        self.action_space = spaces.Box(-1.0, 1.0, shape=(action_dim,), dtype=np.float32)
        self._use_state = obs_mode in ("state", "state+pixels")
        self._use_pixels = obs_mode in ("pixels", "state+pixels")
        obs_spaces: dict[str, spaces.Space] = {
            "state": spaces.Box(-np.inf, np.inf, shape=(STATE_SIZE,), dtype=np.float32)}
        if self._use_state:
            size = sum(s for _, s in self.OBJECT_STATE_LAYOUT)
            obs_spaces["object_state"] = spaces.Box(-np.inf, np.inf, shape=(size,), dtype=np.float32)
        if self.wrench:
            obs_spaces["wrench"] = spaces.Box(-np.inf, np.inf, shape=(WRENCH_SIZE,), dtype=np.float32)
        if self._use_pixels:
            for camera in CAMERA_NAMES:
                obs_spaces[f"images/{camera}"] = spaces.Box(
                    0, 255, shape=(self.image_size, self.image_size, 3), dtype=np.uint8)
        self.observation_space = spaces.Dict(obs_spaces)

        self._renderers: dict[int, mujoco.Renderer] = {}
        self._target_position = np.zeros(3)
        self._target_quat = NOMINAL_TCP_QUAT.copy()
        self._gripper_command = -1.0
        self._warned_bad_action = False
        self._site_velocity = np.zeros(6)
        if self.wrench:
            self._wrench_site_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE,
                                                     ARM_PREFIX + WRENCH_SITE_NAME)
            first = self.model.sensor_adr[mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SENSOR, "wrist_force")]
            self._wrench_sensors = slice(int(first), int(first) + WRENCH_SIZE)  # force, then torque
        self._sensor_sum = np.zeros(WRENCH_SIZE)  # the flange's force and torque on the hand, summed over a step
        self._sensor_mean = np.zeros(WRENCH_SIZE)  # ... averaged over the last step (site frame)
        self._sensor_tare = np.zeros(WRENCH_SIZE)  # ... at the last reset

    # ----- task hooks -------------------------------------------------------------------------------------------
    def _add_task_objects(self, root) -> None:
        """Add the task's bodies/geoms to the scene MJCF."""

    def _reset_task(self) -> None:
        """Place task objects (arm already at its start configuration); may set the gripper command."""

    def object_state(self) -> np.ndarray:
        """Privileged task state (see OBJECT_STATE_LAYOUT)."""
        return np.zeros(0)

    def is_success(self) -> bool:
        return False

    def task_measures(self) -> dict[str, float]:
        """Named measurements of the task's scene now (millimetres, degrees), kept with each evaluation episode's
        end for a failure census; empty where the task names none."""
        return {}

    def failure_mode(self) -> str | None:
        """What keeps the task from success now, as a short category (evaluations and validation count them);
        None on success or where the task names none."""
        return None

    def imminent_failure(self, target_position) -> str | None:
        """The failure that sending the TCP target to `target_position` (3,) [m] is about to cause and the task cannot
        undo, as a watching person would see it coming (the simulated human's hazard watch); None where nothing is,
        or the task names none."""
        return None

    def action_target(self, action, position: np.ndarray, quat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The controller target (position [m], quaternion wxyz) a finite `action` (in [-1, 1]) sends the hand to from
        the target (`position`, `quat`), within the workspace and rotation limits (what a step with it sets)."""
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(-1), -1.0, 1.0)
        position = np.clip(np.asarray(position, dtype=np.float64) + action[:3] * self.max_translation,
                           self.workspace_low, self.workspace_high)
        quat = np.array(quat, dtype=np.float64)
        if self.control_rotation and action[3:6].any():
            turned = _quat_mul(_quat_from_rotvec(action[3:6] * self.max_rotation), quat)
            relative = _rotvec_from_quat(_quat_mul(turned, _quat_conj(NOMINAL_TCP_QUAT)))
            quat = _quat_mul(_quat_from_rotvec(np.clip(relative, self.rotation_low, self.rotation_high)),
                             NOMINAL_TCP_QUAT)
        return position, quat

    def target_of(self, action) -> np.ndarray:
        """The TCP target position (3,) [m] that `action` (in [-1, 1]) sends the hand to from the current target."""
        step = np.clip(np.nan_to_num(np.asarray(action, dtype=np.float64).reshape(-1)[:3]), -1.0, 1.0)
        return np.clip(self._target_position + step * self.max_translation, self.workspace_low, self.workspace_high)

    # ----- accessors for experts and later code ---------------------------------------------------------------
    def tcp_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Current TCP (position [m], quaternion wxyz) in the robot base frame."""
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self._tcp_site_id])
        if np.dot(quat, NOMINAL_TCP_QUAT) < 0:
            quat = -quat
        return self.data.site_xpos[self._tcp_site_id].copy(), quat

    def target_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Controller target (position [m], quaternion wxyz)."""
        return self._target_position.copy(), self._target_quat.copy()

    def object_pose(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """World (position, quaternion wxyz) of a body by name."""
        body_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, name)
        if body_id < 0:
            raise KeyError(f"no body named {name!r} in the model")
        return self.data.xpos[body_id].copy(), self.data.xquat[body_id].copy()

    def wrist_wrench(self) -> np.ndarray:
        """The wrist sensor's reading (see WRENCH_LAYOUT; needs wrench=True): (force [N], torque [N m] about the
        TCP) the surroundings exert on the hand, base frame, averaged over the last control step, zero at reset."""
        if not self.wrench:
            raise RuntimeError("this env has no wrist force/torque sensor: make it with wrench=True")
        rotation = self.data.site_xmat[self._wrench_site_id].reshape(3, 3)
        # The sensors give the flange's force and torque on the hand (site frame); the surroundings' wrench is what
        # changed since the tare, with the opposite sign.
        change = self._sensor_mean - self._sensor_tare
        force, torque_at_site = -rotation @ change[:3], -rotation @ change[3:]
        lever = self.data.site_xpos[self._wrench_site_id] - self.data.site_xpos[self._tcp_site_id]
        return np.concatenate([force, torque_at_site + np.cross(lever, force)])

    def gripper_width(self) -> float:
        """Distance between the finger pads [m]."""
        return float(self.data.qpos[self._finger_qpos_adr].sum())

    def set_target_pose(self, position: np.ndarray, quat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Set the controller target (base frame, quaternion wxyz), clipped into the workspace and rotation limits."""
        self._target_position = np.clip(np.asarray(position, dtype=np.float64), self.workspace_low, self.workspace_high)
        relative = _rotvec_from_quat(_quat_mul(np.asarray(quat, dtype=np.float64), _quat_conj(NOMINAL_TCP_QUAT)))
        relative = np.clip(relative, self.rotation_low, self.rotation_high)
        self._target_quat = _quat_mul(_quat_from_rotvec(relative), NOMINAL_TCP_QUAT)
        return self.target_pose()

    @property
    def gripper_command(self) -> float:
        """Last gripper command (-1 open .. +1 closed)."""
        return self._gripper_command

    # ----- gym API ----------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        offset = self.np_random.uniform(-1.0, 1.0, size=3) * self.start_position_range
        start = np.clip(self.start_position + offset, self.workspace_low, self.workspace_high)
        self.data.qpos[self._arm_qpos_adr] = self._solve_ik(start, NOMINAL_TCP_QUAT, self._start_qpos)
        self.data.qpos[self._finger_qpos_adr] = robot.FINGER_TRAVEL
        self._set_gripper(-1.0)
        mujoco.mj_forward(self.model, self.data)
        self._reset_task()
        mujoco.mj_forward(self.model, self.data)
        position, quat = self.tcp_pose()
        self._target_position[:] = position
        self._target_quat[:] = quat
        self._physics_steps(self.settle_physics_steps)
        mujoco.mj_forward(self.model, self.data)
        if self.wrench:  # tared holding still: with the arm's torques for the start pose (the last step's are stale)
            self.controller.set_target(self._target_position, self._target_quat)
            self.data.ctrl[self._ctrl_arm_slice] = self.controller.compute(self.data)
            mujoco.mj_forward(self.model, self.data)
            self._sensor_tare = self._sensor_mean = self.data.sensordata[self._wrench_sensors].copy()
        return self._observation(), self._info(action_rejected=False)

    def step(self, action):
        action_rejected = not self._apply_action(action)
        saved_qpos = self.data.qpos.copy()
        self._physics_steps(self.physics_steps_per_env_step)
        mujoco.mj_forward(self.model, self.data)
        unstable = not (np.isfinite(self.data.qpos).all() and np.abs(self.data.qvel).max() < 1e3)
        if unstable:
            logger.error("physics became unstable; restoring the previous configuration and truncating the episode")
            self.data.qpos[:] = saved_qpos
            self.data.qvel[:] = 0.0
            self.data.qacc_warmstart[:] = 0.0
            mujoco.mj_forward(self.model, self.data)
        success = self.is_success()
        info = self._info(action_rejected=action_rejected, success=success)
        info["physics_unstable"] = unstable
        return self._observation(), float(success), success, unstable, info

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        return self._render_camera("front", self.render_size)

    def camera_frames(self, size: int | None = None) -> dict[str, np.ndarray]:
        """Every camera's current RGB uint8 image at `size` pixels (default render_size), whatever the obs_mode
        (for videos; the observation's images stay at image_size)."""
        size = self.render_size if size is None else size
        return {camera: self._render_camera(camera, size) for camera in CAMERA_NAMES}

    def camera_image(self, camera: str, width: int, height: int) -> np.ndarray:
        """One camera's current RGB uint8 image, (height, width, 3), any aspect ratio (as a real camera driver sends;
        the vertical field of view is the camera's, the horizontal one follows from the aspect)."""
        if camera not in self._camera_ids:
            raise KeyError(f"no camera {camera!r}; cameras: {', '.join(CAMERA_NAMES)}")
        for name, value in (("width", width), ("height", height)):
            if not isinstance(value, (int, np.integer)) or not 16 <= value <= 4096:
                raise ValueError(f"camera {name}={value!r} must be an int in [16, 4096]")
        return self._render_camera(camera, int(width), int(height))

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the GL context may already be gone
            pass

    def close(self):
        for renderer in getattr(self, "_renderers", {}).values():
            renderer.close()
        getattr(self, "_renderers", {}).clear()

    # ----- internals --------------------------------------------------------------------------------------------
    def _apply_action(self, action) -> bool:
        """Update the controller target from an action; False (target held) if the action is not finite."""
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if action.shape != self.action_space.shape:
            raise ValueError(f"action has shape {action.shape}; expected {self.action_space.shape}")
        if not np.isfinite(action).all():
            if not self._warned_bad_action:
                logger.warning("non-finite action %s rejected; holding the current target", action)
                self._warned_bad_action = True
            return False
        self._target_position, self._target_quat = self.action_target(action, self._target_position,
                                                                       self._target_quat)
        self._set_gripper(float(np.clip(action[-1], -1.0, 1.0)))
        return True

    def _set_gripper(self, command: float) -> None:
        self._gripper_command = command
        self.data.ctrl[self._gripper_actuator_id] = robot.FINGER_TRAVEL * (1.0 - command) / 2.0

    def _physics_steps(self, count: int) -> None:
        model, data, controller = self.model, self.data, self.controller
        controller.set_target(self._target_position, self._target_quat)
        arm_actuators = self._ctrl_arm_slice
        wrench = self.wrench
        if wrench:
            self._sensor_sum[:] = 0.0
        for _ in range(count):
            mujoco.mj_step1(model, data)
            data.ctrl[arm_actuators] = controller.compute(data)
            mujoco.mj_step2(model, data)
            if wrench:
                self._sensor_sum += data.sensordata[self._wrench_sensors]
        if wrench and count:
            self._sensor_mean = self._sensor_sum / count

    def _solve_ik(self, position: np.ndarray, quat: np.ndarray, initial_qpos: np.ndarray,
                  iterations: int = 100, tolerance: float = 1e-5) -> np.ndarray:
        """Damped least-squares IK for the TCP (used to place the arm at reset)."""
        data = self._ik_data
        data.qpos[:] = self.model.qpos0
        qpos = np.array(initial_qpos, dtype=np.float64)
        jac = np.zeros((6, self.model.nv))
        quat_site = np.empty(4)
        error = np.empty(6)
        low, high = robot.JOINT_LIMITS[:, 0], robot.JOINT_LIMITS[:, 1]
        for _ in range(iterations):
            data.qpos[self._arm_qpos_adr] = qpos
            mujoco.mj_kinematics(self.model, data)
            mujoco.mj_comPos(self.model, data)
            error[:3] = position - data.site_xpos[self._tcp_site_id]
            mujoco.mju_mat2Quat(quat_site, data.site_xmat[self._tcp_site_id])
            error[3:] = _rotvec_from_quat(_quat_mul(quat, _quat_conj(quat_site)))
            if np.linalg.norm(error) < tolerance:
                break
            mujoco.mj_jacSite(self.model, data, jac[:3], jac[3:], self._tcp_site_id)
            j = jac[:, self._arm_dof_adr]
            # Secondary objective: stay near the home posture.
            step = j.T @ np.linalg.solve(j @ j.T + 1e-4 * np.eye(6), error)
            null = np.eye(7) - np.linalg.pinv(j) @ j
            step += null @ (0.1 * (robot.HOME_QPOS - qpos))
            qpos = np.clip(qpos + step, low, high)
        return qpos

    def _observation(self) -> dict[str, np.ndarray]:
        obs = {"state": self._proprioception()}
        if self._use_state:
            obs["object_state"] = self.object_state().astype(np.float32)
        if self.wrench:
            obs["wrench"] = self.wrist_wrench().astype(np.float32)
        if self._use_pixels:
            for camera in CAMERA_NAMES:
                obs[f"images/{camera}"] = self._render_camera(camera, self.image_size)
        return obs

    def _proprioception(self) -> np.ndarray:
        position, quat = self.tcp_pose()
        mujoco.mj_objectVelocity(self.model, self.data, mujoco.mjtObj.mjOBJ_SITE, self._tcp_site_id,
                                 self._site_velocity, 0)
        state = np.empty(STATE_SIZE, dtype=np.float32)
        state[0:3] = position
        state[3:7] = quat
        state[7:10] = self._site_velocity[3:]
        state[10:13] = self._site_velocity[:3]
        state[13] = self.gripper_width()
        return state

    def _renderer(self, width: int, height: int) -> mujoco.Renderer:
        renderer = self._renderers.get((width, height))
        if renderer is None:
            buffer = self.model.vis.global_
            # The offscreen buffer (640 x 640 in the scene) is read when a renderer is made: grow it for a larger one.
            buffer.offwidth, buffer.offheight = max(buffer.offwidth, width), max(buffer.offheight, height)
            renderer = mujoco.Renderer(self.model, height=height, width=width)
            for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION,
                         mujoco.mjtRndFlag.mjRND_SKYBOX):
                renderer.scene.flags[flag] = 0
            self._renderers[(width, height)] = renderer
        return renderer

    def _render_camera(self, camera: str, size: int, height: int | None = None) -> np.ndarray:
        """`camera` at `size` x `height` pixels (height default: `size`, square)."""
        renderer = self._renderer(size, size if height is None else height)
        renderer.update_scene(self.data, camera=self._camera_ids[camera])
        return renderer.render()

    def _info(self, action_rejected: bool, success: bool | None = None) -> dict[str, Any]:
        return {"success": bool(self.is_success() if success is None else success),
                "action_rejected": bool(action_rejected)}
