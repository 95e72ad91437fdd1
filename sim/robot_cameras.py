"""The robot file's cameras in the sim mirror: validation looks through the robot's cameras, not the sim's own.

A robot file camera renders from the sim camera it maps to (its `sim_camera`, else the sim camera of its name: front,
wrist) at the robot file's width x height (a square at the policy's image size where it gives no size), then becomes
the policy's image by the same `robot_rl.core.vision.ImageTransform` the real actor applies (roi, then crop or resize). A
camera's `sim_mount` moves its sim camera once, when the env is built: before `robot_rl.sim.perturb.PerturbedEnv`
keeps the model as built, so camera_pose perturbations jitter around the mount.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from robot_rl.actor.robot_config import SIM_CAMERAS, RobotConfig, SimMount
from robot_rl.core.types import ObservationSpec
from robot_rl.core.vision import ImageTransform

RENDER_SIDES = (16, 4096)
"""The frame sides [px] the sim renders a robot camera at (RobotEnv.camera_image)."""


@dataclasses.dataclass(frozen=True)
class CameraView:
    """One robot camera as the sim shows it: its sim camera, the frame size rendered, the transform to the policy's
    image and the mount."""

    name: str
    sim_camera: str
    width: int
    height: int
    transform: ImageTransform
    mount: SimMount | None = None

    def describe(self) -> str:
        """What the camera was rendered from, e.g. "front 640x480 crop" (with "roi [...]" and "at sim_mount")."""
        roi = f" roi {list(self.transform.roi)}" if self.transform.roi is not None else ""
        mount = " at sim_mount" if self.mount is not None else ""
        return f"{self.sim_camera}{mount} {self.width}x{self.height}{roi} {self.transform.fit}"


def _robot_label(robot: RobotConfig) -> str:
    return f"robot file {robot.path or robot.name}"


def _unmapped_problem(robot: RobotConfig, names: Sequence[str]) -> str:
    """One line for the robot cameras `names` that have no sim camera: what to add, and where."""
    mirror = ", ".join(SIM_CAMERAS)
    keys = " and ".join(f"cameras.{name}" for name in names)
    if len(names) == 1:
        return (f"{_robot_label(robot)}: camera {names[0]} has no sim camera: add \"sim_camera: {SIM_CAMERAS[0]}\" "
                f"(the mirror has {mirror}) under {keys} to validate through it")
    return (f"{_robot_label(robot)}: cameras {', '.join(names)} have no sim camera: add \"sim_camera: "
            f"{SIM_CAMERAS[0]}\" or another of the mirror's ({mirror}) under {keys} to validate through them")


def camera_view(robot: RobotConfig, name: str, size: int) -> CameraView:
    """Robot camera `name` as the sim shows it to a policy of `size` px images; ValueError (one line) if it has no sim
    camera or its frame cannot be rendered."""
    camera, sim = robot.camera(name), robot.sim_camera(name)
    if sim is None:
        raise ValueError(_unmapped_problem(robot, [name]))
    width, height = (camera.width, camera.height) if camera.width and camera.height else (size, size)
    low, high = RENDER_SIDES
    if not (low <= width <= high and low <= height <= high):
        raise ValueError(f"{_robot_label(robot)}: cameras.{name}: the sim renders {low}..{high} px per side, not "
                         f"{width}x{height}")
    roi = camera.roi
    if roi is not None and (roi[0] + roi[2] > width or roi[1] + roi[3] > height):
        raise ValueError(f"{_robot_label(robot)}: cameras.{name}.roi: {list(roi)} is outside its {width}x{height} "
                         "frame")
    return CameraView(name, sim, width, height, ImageTransform.from_camera(camera, size), camera.sim_mount)


def camera_views(robot: RobotConfig, spec: Any) -> tuple[CameraView, ...]:
    """The views of the robot cameras a policy with observation `spec` reads (its images/<camera> keys); ValueError
    (one line) for a key that is not a camera of the robot file, or cameras with no sim camera."""
    spec = ObservationSpec.coerce(spec)
    names = [key[len("images/"):] for key in spec.image_keys]
    foreign = [name for name in names if name not in robot.camera_names]
    if foreign:
        raise ValueError(f"the policy reads {', '.join(f'images/{n}' for n in foreign)}, but {_robot_label(robot)} "
                         f"has no such camera (its cameras: {', '.join(robot.camera_names) or 'none'})")
    unmapped = [name for name in names if robot.sim_camera(name) is None]
    if unmapped:
        raise ValueError(_unmapped_problem(robot, unmapped))
    return tuple(camera_view(robot, name, spec[f"images/{name}"].shape[0]) for name in names)


def camera_sources(robot: RobotConfig, spec: Any) -> dict[str, str]:
    """What each robot camera a policy with observation `spec` reads is rendered from in the sim (for the record)."""
    return {view.name: view.describe() for view in camera_views(robot, spec)}


def mount_cameras(base, views: Sequence[CameraView]) -> None:
    """Move each view's sim camera to its sim_mount in `base`'s model (a RobotEnv), before PerturbedEnv keeps it."""
    if hasattr(base, "_nominal_model"):
        raise RuntimeError("mount the robot's cameras before PerturbedEnv wraps the env (it keeps the model as built)")
    for view in views:
        if view.mount is None:
            continue
        camera = base._camera_ids[view.sim_camera]
        if view.mount.position is not None:
            base.model.cam_pos[camera] = view.mount.position
        if view.mount.quat is not None:
            base.model.cam_quat[camera] = view.mount.quat


class RobotCameras(gym.ObservationWrapper):
    """A state-mode sim env seen through a robot file's cameras: the images/<camera> a policy with observation
    `spec` reads, each rendered from its sim camera and cut and fitted as on the robot; object_state only if the
    policy reads it."""

    def __init__(self, env: gym.Env, robot: RobotConfig, spec: Any):
        super().__init__(env)
        spec = ObservationSpec.coerce(spec)
        inner: Mapping[str, spaces.Space] = env.observation_space.spaces
        own = [key for key in inner if key.startswith("images/")]
        if own:
            raise ValueError(f"RobotCameras renders the robot's cameras itself: make the env with obs_mode='state' "
                             f"(it renders {', '.join(own)})")
        self.views = camera_views(robot, spec)
        self.keep_object_state = "object_state" in spec
        mount_cameras(env.unwrapped, self.views)
        entries = {key: space for key, space in inner.items() if key != "object_state" or self.keep_object_state}
        for view in self.views:
            size = view.transform.size
            entries[f"images/{view.name}"] = spaces.Box(0, 255, shape=(size, size, 3), dtype=np.uint8)
        self.observation_space = spaces.Dict(entries)

    @property
    def sources(self) -> dict[str, str]:
        """What each camera is rendered from (camera -> e.g. "front 640x480 crop")."""
        return {view.name: view.describe() for view in self.views}

    def observation(self, observation: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The inner observation, object_state dropped unless read, with the robot cameras' images."""
        out = {key: value for key, value in observation.items() if key != "object_state" or self.keep_object_state}
        base, frames = self.env.unwrapped, {}
        for view in self.views:
            shot = (view.sim_camera, view.width, view.height)
            if shot not in frames:  # two robot cameras of one sim camera at one size: one render
                frames[shot] = base.camera_image(*shot)
            out[f"images/{view.name}"] = view.transform(frames[shot])
        return out


def validation_env(task: str, spec: Any, robot: RobotConfig) -> gym.Env:
    """The sim env a policy with observation `spec` is validated in: its images through `robot`'s cameras
    (RobotCameras around a state-mode env), else make_env with the settings the spec needs."""
    from robot_rl.sim.loop import make_env
    from robot_rl.sim.evaluate import env_settings_for

    spec = ObservationSpec.coerce(spec)
    settings = env_settings_for(spec)
    if not spec.image_keys:
        return make_env(task, **settings)
    camera_views(robot, spec)  # a camera the sim cannot render: one line before the env is built
    env = make_env(task, **{**settings, "obs_mode": "state"})
    try:
        return RobotCameras(env, robot, spec)
    except BaseException:
        env.close()
        raise
