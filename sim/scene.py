"""Scene composition: table, arm, cameras and physics options; tasks add their objects."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from dm_control import mjcf

from robot_rl.sim.robot import ArmConfig, build_arm

ARM_PREFIX = "panda/"  # dm_control namespaces everything in the attached arm model
FRONT_CAMERA_NAME = "front"
TABLE_TOP_Z = 0.0  # the robot base stands on the table top at the world origin


@dataclass(frozen=True)
class PhysicsConfig:
    """Solver settings; chosen for stable grasps and millimetre-clearance insertion at 500 Hz."""

    timestep: float = 0.002
    cone: str = "elliptic"
    impratio: float = 10.0
    iterations: int = 50
    ls_iterations: int = 20
    noslip_iterations: int = 0
    integrator: str = "implicitfast"


def build_scene(physics: PhysicsConfig = PhysicsConfig(), arm: ArmConfig = ArmConfig()) -> mjcf.RootElement:
    """Table, lights, front camera and the attached arm; returns the root for tasks to add objects to."""
    root = mjcf.RootElement(model="robot_rl_scene")
    root.option.timestep = physics.timestep
    root.option.cone = physics.cone
    root.option.impratio = physics.impratio
    root.option.iterations = physics.iterations
    root.option.ls_iterations = physics.ls_iterations
    root.option.noslip_iterations = physics.noslip_iterations
    root.option.integrator = physics.integrator
    root.compiler.autolimits = True
    root.compiler.angle = "radian"
    root.visual.headlight.ambient = [0.45, 0.45, 0.45]
    root.visual.headlight.diffuse = [0.5, 0.5, 0.5]
    root.visual.headlight.specular = [0.0, 0.0, 0.0]
    getattr(root.visual, "global").offwidth = 640
    getattr(root.visual, "global").offheight = 640
    root.visual.quality.shadowsize = 0
    # No multisampling: MSAA triples the software (llvmpipe) render time of small policy images.
    root.visual.quality.offsamples = 0

    root.worldbody.add("light", name="top_light", pos=[0.5, 0, 1.5], dir=[0, 0, -1], directional=True,
                       diffuse=[0.4, 0.4, 0.4], castshadow=False)
    root.worldbody.add("geom", name="floor", type="plane", size=[2, 2, 0.05], pos=[0, 0, -0.75],
                       rgba=[0.35, 0.37, 0.4, 1], contype=0, conaffinity=0)
    root.worldbody.add("geom", name="table", type="box", size=[0.6, 0.5, 0.375], pos=[0.4, 0, TABLE_TOP_Z - 0.375],
                       rgba=[0.62, 0.5, 0.38, 1], friction=[1.0, 0.005, 0.0001], contype=1, conaffinity=1)

    # Fixed camera in front of the robot, looking back at the workspace.
    eye = np.array([1.05, 0.0, 0.42])
    look_at = np.array([0.48, 0.0, 0.06])
    forward = look_at - eye
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    root.worldbody.add("camera", name=FRONT_CAMERA_NAME, pos=eye.tolist(), fovy=45,
                       xyaxes=[*right.tolist(), *up.tolist()])

    attachment = root.worldbody.attach(build_arm(arm))
    attachment.pos = [0, 0, TABLE_TOP_Z]
    return root


def compile_model(root: mjcf.RootElement):
    """Compile an mjcf root into a raw mujoco.MjModel (no files touched)."""
    import mujoco

    return mujoco.MjModel.from_xml_string(root.to_xml_string(), assets=root.get_assets())
