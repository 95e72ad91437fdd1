"""Validation conditions for the sim mirror: named, composable, seeded perturbations of what a real robot differs in.

A condition is a list of perturbations (data, from a suite YAML file: `robot_rl.sim.validation`). `PerturbedEnv` wraps a
sim env and, at every reset, restores the nominal model, draws each perturbation's values for the episode from a
generator seeded by (suite seed, condition, episode) and applies them: MuJoCo model edits (camera poses, lights,
colours, object size / mass / friction) and per-step effects (action latency, sensor delay, dropped camera frames,
control-rate jitter, proprioception noise). The task code and the scene are not copied or rebuilt.

Perturbation types and their parameters (ranges are [low, high], drawn uniformly per episode):

- `camera_pose`: `cameras` (names, default all), `position_m` (max offset per axis), `rotation_deg` (max angle of a
  random-axis rotation).
- `lighting`: `brightness` (scale of the headlight and every light's diffuse and ambient colour).
- `colour`: `geoms` (names; `objects` = the geoms of every free body, the manipulated objects), `shift` (max change
  of each RGB channel, 0-1).
- `object`: `bodies` (names; `objects` = every free body), `size_scale`, `mass_scale`, `friction_scale`.
- `action_latency`: `steps` (control steps each command arrives late: the target executed at step t is the one
  commanded at t - steps, each command's step taken from the previous command; the first ones hold).
- `sensor_delay`: `steps` (control steps every observation is old: the one of t - steps, stamped when captured).
- `frame_drops`: `probability` (per step and camera: the camera repeats its previous frame, with that frame's
  stamp, as a driver that missed a frame leaves its last one).
- `control_rate_jitter`: `fraction` (each control period lasts (1 + u) x nominal, u in [-fraction, fraction]; the
  commands and targets are the nominal ones, the frames' stamps follow the sim's clock).
- `proprio_noise`: `position_m`, `quaternion`, `velocity`, `gripper_m` (per-step Gaussian std on `state`).
"""

from __future__ import annotations

import collections
import dataclasses
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from robot_rl.sim.env import PHYSICS_STEPS_PER_ENV_STEP

OBJECTS = "objects"
"""In a perturbation's `geoms` / `bodies`: the task's manipulated objects (every body with a free joint)."""


class ConditionError(ValueError):
    """A suite condition or perturbation that cannot be applied (unknown type or key, bad range, missing name)."""


@dataclasses.dataclass(frozen=True)
class Perturbation:
    """One perturbation of a condition: its type and parameters, as the suite file gives them."""

    type: str
    params: Mapping[str, Any]

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Perturbation:
        if not isinstance(data, Mapping) or "type" not in data:
            raise ConditionError(f"{where}: a perturbation is a mapping with a `type` (one of {', '.join(TYPES)})")
        kind = data["type"]
        if kind not in TYPES:
            raise ConditionError(f"{where}: unknown perturbation type {kind!r} (one of {', '.join(TYPES)})")
        params = {k: v for k, v in data.items() if k != "type"}
        allowed = TYPES[kind]
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise ConditionError(f"{where}: {kind} takes {', '.join(allowed)}; not {', '.join(unknown)}")
        for key, value in params.items():
            _check_value(kind, key, value, where)
        return cls(kind, dict(params))


# type -> the parameters it takes
TYPES: dict[str, tuple[str, ...]] = {
    "camera_pose": ("cameras", "position_m", "rotation_deg"),
    "lighting": ("brightness",),
    "colour": ("geoms", "shift"),
    "object": ("bodies", "size_scale", "mass_scale", "friction_scale"),
    "action_latency": ("steps",),
    "sensor_delay": ("steps",),
    "frame_drops": ("probability",),
    "control_rate_jitter": ("fraction",),
    "proprio_noise": ("position_m", "quaternion", "velocity", "gripper_m"),
}
_NAMES = ("cameras", "geoms", "bodies")
_SINGULAR = {"cameras": "camera", "geoms": "geom", "bodies": "body"}
_RANGES = ("brightness", "size_scale", "mass_scale", "friction_scale")
_STEPS = ("steps",)


def _check_value(kind: str, key: str, value: Any, where: str) -> None:
    label = f"{where}: {kind}.{key}"
    if key in _NAMES:
        if value != OBJECTS and not (isinstance(value, Sequence) and not isinstance(value, str)
                                     and all(isinstance(v, str) for v in value)):
            raise ConditionError(f"{label}={value!r} must be a list of names or {OBJECTS!r}")
    elif key in _RANGES:
        if not (isinstance(value, Sequence) and len(value) == 2 and all(_number(v) for v in value)
                and 0 < value[0] <= value[1]):
            raise ConditionError(f"{label}={value!r} must be [low, high] with 0 < low <= high")
    elif key in _STEPS:
        if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 20):
            raise ConditionError(f"{label}={value!r} must be an integer in [0, 20]")
    elif key in ("probability", "fraction"):
        if not (_number(value) and 0 <= value < 1):
            raise ConditionError(f"{label}={value!r} must be in [0, 1)")
    elif not (_number(value) and value >= 0):
        raise ConditionError(f"{label}={value!r} must be a number >= 0")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)


@dataclasses.dataclass(frozen=True)
class Condition:
    """A named composition of perturbations (none: nominal), with an optional success floor of its own."""

    name: str
    perturbations: tuple[Perturbation, ...] = ()
    description: str = ""
    min_success: float | None = None

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Condition:
        if not isinstance(data, Mapping) or not isinstance(data.get("name"), str) or not data["name"]:
            raise ConditionError(f"{where}: a condition is a mapping with a `name` and a list of `perturbations`")
        unknown = sorted(set(data) - {"name", "perturbations", "description", "min_success"})
        if unknown:
            raise ConditionError(f"{where} ({data['name']}): unknown keys {', '.join(unknown)}")
        items = data.get("perturbations") or []
        if not isinstance(items, Sequence) or isinstance(items, str):
            raise ConditionError(f"{where} ({data['name']}): perturbations must be a list")
        minimum = data.get("min_success")
        if minimum is not None and not (_number(minimum) and 0 <= minimum <= 1):
            raise ConditionError(f"{where} ({data['name']}): min_success={minimum!r} must be in [0, 1]")
        return cls(data["name"], tuple(Perturbation.from_dict(p, f"{where} ({data['name']})") for p in items),
                   str(data.get("description", "")), minimum)

    def seed_for(self, suite_seed: int, episode: int) -> np.random.SeedSequence:
        """The seed of this condition's draws in `episode` (the same for any worker and any order of runs)."""
        return np.random.SeedSequence([int(suite_seed), zlib.crc32(self.name.encode()), int(episode)])


def free_bodies(model: mujoco.MjModel) -> list[int]:
    """Ids of the bodies with a free joint: a task's manipulated objects."""
    return sorted({int(model.jnt_bodyid[j]) for j in range(model.njnt)
                   if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE})


class PerturbedEnv(gym.Wrapper):
    """A sim env under one condition: `reset(seed=s, options={"episode": k})` draws and applies the episode's
    perturbations (episode k of the suite seed), `step` applies the per-step ones."""

    def __init__(self, env: gym.Env, condition: Condition, suite_seed: int = 0):
        super().__init__(env)
        self.condition = condition
        self.suite_seed = int(suite_seed)
        base = env.unwrapped
        self._model = base.model
        # The model as built, kept on the env itself: another wrapper of the same env may have left it perturbed.
        if not hasattr(base, "_nominal_model"):
            base._nominal_model = ({name: getattr(self._model, name).copy() for name in _MODEL_FIELDS},
                                   (self._model.vis.headlight.ambient.copy(), self._model.vis.headlight.diffuse.copy()))
        self._nominal, self._nominal_headlight = base._nominal_model
        self._resolved = [(p, self._resolve(p)) for p in condition.perturbations]
        # the per-step effects' parameters, looked up once (the first perturbation of a type counts)
        self._step_params: dict[str, Mapping[str, Any]] = {}
        for p in reversed(condition.perturbations):
            self._step_params[p.type] = p.params
        self._latency = int(self._step_params.get("action_latency", {}).get("steps", 0))
        self._jitter = float(self._step_params.get("control_rate_jitter", {}).get("fraction", 0.0))
        self._drops = float(self._step_params.get("frame_drops", {}).get("probability", 0.0))
        self._delay = int(self._step_params.get("sensor_delay", {}).get("steps", 0))
        self._noise = self._step_params.get("proprio_noise")
        self.drawn: dict[str, Any] = {}
        """What the last reset drew, per perturbation (for the record and for tests)."""
        self._rng = np.random.default_rng(0)
        self._pending_actions: collections.deque = collections.deque()  # commanded (position, quat, gripper)
        self._commanded: tuple[np.ndarray, np.ndarray] | None = None
        self._observations: collections.deque = collections.deque()
        self._last_frames: dict[str, tuple[np.ndarray, float]] = {}  # camera key -> (frame, sim time of capture)
        self._captured: dict[str, float] = {}  # the last observation's keys -> sim time of capture

    # ----- names -> model ids, checked once -------------------------------------------------------------------------
    def _resolve(self, p: Perturbation) -> dict[str, np.ndarray]:
        model = self._model
        objects = free_bodies(model)

        def ids(kind: str, names: Any, obj: mujoco.mjtObj, count: int) -> np.ndarray:
            if names == OBJECTS:
                if kind == "bodies":
                    return np.array(objects, int)
                return np.array([g for g in range(model.ngeom) if int(model.geom_bodyid[g]) in objects], int)
            found = []
            for name in names:
                index = mujoco.mj_name2id(model, obj, name)
                if index < 0:
                    known = [mujoco.mj_id2name(model, obj, i) for i in range(count)]
                    raise ConditionError(f"condition {self.condition.name!r}: {p.type} names {_SINGULAR[kind]} {name!r}, "
                                         f"which this task's model lacks (it has: {', '.join(filter(None, known))})")
                found.append(index)
            return np.array(found, int)

        if p.type == "camera_pose":
            names = p.params.get("cameras")
            return {"cameras": np.arange(model.ncam) if names is None
                    else ids("cameras", names, mujoco.mjtObj.mjOBJ_CAMERA, model.ncam)}
        if p.type == "colour":
            return {"geoms": ids("geoms", p.params.get("geoms", OBJECTS), mujoco.mjtObj.mjOBJ_GEOM, model.ngeom)}
        if p.type == "object":
            bodies = ids("bodies", p.params.get("bodies", OBJECTS), mujoco.mjtObj.mjOBJ_BODY, model.nbody)
            return {"bodies": bodies, "geoms": np.array([g for g in range(model.ngeom)
                                                         if int(model.geom_bodyid[g]) in set(bodies.tolist())], int)}
        return {}

    # ----- gym API -------------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        episode = (options or {}).get("episode", 0 if seed is None else seed)
        self._rng = np.random.default_rng(self.condition.seed_for(self.suite_seed, episode))
        self._restore_nominal()
        self.drawn = {}
        for index, (p, resolved) in enumerate(self._resolved):
            drawn = _APPLY[p.type](self, p.params, resolved, self._rng)
            if drawn:
                self.drawn[f"{index}:{p.type}"] = drawn
        self.env.unwrapped.physics_steps_per_env_step = PHYSICS_STEPS_PER_ENV_STEP
        mujoco.mj_setConst(self._model, self.env.unwrapped.data)
        obs, info = self.env.reset(seed=seed, options=options)
        self._pending_actions.clear()
        self._commanded = self.env.unwrapped.target_pose() if self._latency else None
        self._observations.clear()
        self._last_frames = {}
        return self._observe(obs), info

    def step(self, action):
        action = np.asarray(action, np.float32)
        if self._latency:
            action = self._delayed(action)
        if self._jitter:
            scale = 1.0 + self._rng.uniform(-self._jitter, self._jitter)
            self.env.unwrapped.physics_steps_per_env_step = max(1, round(PHYSICS_STEPS_PER_ENV_STEP * scale))
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._observe(obs), reward, terminated, truncated, info

    def commanded_target_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """The controller target the actions so far lead to (position [m], quaternion wxyz): the env's own target, or
        with action latency the target of the newest command still on its way. An action's step is taken from it,
        as a real arm's driver takes each absolute target whenever it arrives."""
        if self._commanded is None:
            return self.env.unwrapped.target_pose()
        return self._commanded[0].copy(), self._commanded[1].copy()

    # ----- helpers -------------------------------------------------------------------------------------------------
    def _delayed(self, action: np.ndarray) -> np.ndarray:
        """The action to execute now under action latency: the absolute target (and gripper) commanded `steps`
        control steps ago, or a hold of the target and the gripper while nothing has arrived yet."""
        base = self.env.unwrapped
        if np.isfinite(action).all():
            self._commanded = base.action_target(action, *self._commanded)
            self._pending_actions.append((*self._commanded, float(np.clip(action[-1], -1.0, 1.0))))
        else:  # the env rejects it when it arrives, as it would have at once
            self._pending_actions.append(action)
        hold = np.zeros_like(action)
        if len(self._pending_actions) <= self._latency:
            hold[-1] = base.gripper_command
            return hold
        arrived = self._pending_actions.popleft()
        if not isinstance(arrived, tuple):
            return arrived
        position, quat, gripper = arrived
        base.set_target_pose(position, quat)  # the step below keeps it: no motion, only the gripper
        hold[-1] = gripper
        return hold

    def _restore_nominal(self) -> None:
        for name, value in self._nominal.items():
            getattr(self._model, name)[:] = value
        self._model.vis.headlight.ambient[:] = self._nominal_headlight[0]
        self._model.vis.headlight.diffuse[:] = self._nominal_headlight[1]

    def sensor_ages(self) -> dict[str, float]:
        """How old each key of the last observation is [s of sim time]: 0 when fresh, a control period per step of
        sensor delay, and a repeated (dropped) camera frame as old as the frame it repeats."""
        now = self.env.unwrapped.data.time
        return {key: now - captured for key, captured in self._captured.items()}

    def _observe(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        obs = dict(obs)
        now = self.env.unwrapped.data.time
        captured = dict.fromkeys(obs, now)
        for key in [k for k in obs if k.startswith("images/")]:
            if self._drops and key in self._last_frames and self._rng.random() < self._drops:
                obs[key], captured[key] = self._last_frames[key]
            self._last_frames[key] = obs[key], captured[key]
        if self._noise is not None and "state" in obs:
            obs["state"] = _noisy_state(obs["state"], self._noise, self._rng)
        if self._delay:
            self._observations.append((obs, captured))
            while len(self._observations) > self._delay + 1:
                self._observations.popleft()
            obs, captured = self._observations[0]
        self._captured = captured
        return obs


_MODEL_FIELDS = ("cam_pos", "cam_quat", "light_diffuse", "light_ambient", "geom_rgba", "geom_size", "geom_pos",
                 "geom_rbound", "geom_aabb", "geom_friction", "body_mass", "body_inertia")


def _uniform(rng: np.random.Generator, bounds, default=(1.0, 1.0)) -> float:
    low, high = bounds if bounds is not None else default
    return float(rng.uniform(low, high))


def _random_rotation(rng: np.random.Generator, max_degrees: float) -> np.ndarray:
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    quat = np.empty(4)
    mujoco.mju_axisAngle2Quat(quat, axis, np.deg2rad(rng.uniform(-max_degrees, max_degrees)))
    return quat


def _camera_pose(env: PerturbedEnv, params, resolved, rng) -> dict:
    model, drawn = env._model, {}
    for cam in resolved["cameras"]:
        offset = rng.uniform(-1, 1, 3) * params.get("position_m", 0.0)
        rotation = _random_rotation(rng, params.get("rotation_deg", 0.0))
        model.cam_pos[cam] += offset
        quat = np.empty(4)
        mujoco.mju_mulQuat(quat, model.cam_quat[cam], rotation)  # about the camera's own axes
        model.cam_quat[cam] = quat
        drawn[mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, int(cam))] = {
            "offset_m": offset.round(4).tolist(),
            "angle_deg": round(float(np.rad2deg(2 * np.arccos(min(1.0, abs(rotation[0]))))), 2)}
    return drawn


def _lighting(env: PerturbedEnv, params, resolved, rng) -> dict:
    model = env._model
    scale = _uniform(rng, params.get("brightness"))
    model.light_diffuse[:] = np.clip(model.light_diffuse * scale, 0, 1)
    model.light_ambient[:] = np.clip(model.light_ambient * scale, 0, 1)
    model.vis.headlight.ambient[:] = np.clip(model.vis.headlight.ambient * scale, 0, 1)
    model.vis.headlight.diffuse[:] = np.clip(model.vis.headlight.diffuse * scale, 0, 1)
    return {"brightness": round(scale, 4)}


def _colour(env: PerturbedEnv, params, resolved, rng) -> dict:
    model, shift = env._model, params.get("shift", 0.0)
    for geom in resolved["geoms"]:
        model.geom_rgba[geom, :3] = np.clip(model.geom_rgba[geom, :3] + rng.uniform(-shift, shift, 3), 0, 1)
    return {"geoms": len(resolved["geoms"])}


def _object(env: PerturbedEnv, params, resolved, rng) -> dict:
    model = env._model
    size = _uniform(rng, params.get("size_scale"))
    mass = _uniform(rng, params.get("mass_scale"))
    friction = _uniform(rng, params.get("friction_scale"))
    for geom in resolved["geoms"]:
        model.geom_size[geom] *= size
        model.geom_pos[geom] *= size
        model.geom_rbound[geom] *= size
        model.geom_aabb[geom] *= size
        model.geom_friction[geom, 0] *= friction  # sliding friction
    for body in resolved["bodies"]:
        model.body_mass[body] *= mass
        model.body_inertia[body] *= mass * size ** 2
    return {"size_scale": round(size, 4), "mass_scale": round(mass, 4), "friction_scale": round(friction, 4)}


def _per_step(env: PerturbedEnv, params, resolved, rng) -> dict:
    return {}


_APPLY = {"camera_pose": _camera_pose, "lighting": _lighting, "colour": _colour, "object": _object,
          "action_latency": _per_step, "sensor_delay": _per_step, "frame_drops": _per_step,
          "control_rate_jitter": _per_step, "proprio_noise": _per_step}


def _noisy_state(state: np.ndarray, noise: Mapping[str, float], rng: np.random.Generator) -> np.ndarray:
    """`state` (STATE_LAYOUT of sim/env.py) with Gaussian noise; the quaternion stays a unit quaternion."""
    state = np.array(state, np.float32, copy=True)
    for part, std in ((slice(0, 3), noise.get("position_m", 0.0)), (slice(3, 7), noise.get("quaternion", 0.0)),
                      (slice(7, 13), noise.get("velocity", 0.0)), (slice(13, 14), noise.get("gripper_m", 0.0))):
        if std:
            state[part] += rng.normal(0.0, std, state[part].shape).astype(np.float32)
    if noise.get("quaternion", 0.0):
        state[3:7] /= max(float(np.linalg.norm(state[3:7])), 1e-9)
    return state


class RandomizedEnv(gym.Wrapper):
    """Domain randomisation for training: each episode runs under one condition of a suite (nominal included), drawn
    with its values from the episode's seed, so a run and its resume see the same episodes."""

    def __init__(self, env: gym.Env, conditions: Sequence[Condition], suite_seed: int = 0):
        super().__init__(env)
        if not conditions:
            raise ConditionError("randomisation needs at least one condition")
        self.conditions = tuple(conditions)
        self.suite_seed = int(suite_seed)
        self._envs = [PerturbedEnv(env, condition, suite_seed) for condition in self.conditions]
        self.active = self._envs[0]
        """The condition's env of the episode under way."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        draw = np.random.default_rng(np.random.SeedSequence([self.suite_seed, 0 if seed is None else int(seed)]))
        self.active = self._envs[int(draw.integers(len(self._envs)))]
        obs, info = self.active.reset(seed=seed, options=options)
        return obs, {**info, "condition": self.active.condition.name}

    def step(self, action):
        return self.active.step(action)

    def commanded_target_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """The active condition's commanded target (see PerturbedEnv.commanded_target_pose)."""
        return self.active.commanded_target_pose()

    def sensor_ages(self) -> dict[str, float]:
        """The active condition's sensor ages (see PerturbedEnv.sensor_ages)."""
        return self.active.sensor_ages()
