"""A 7-DoF Panda-like arm with a parallel-jaw gripper, authored with dm_control.mjcf.

Kinematics follow the public Franka Panda modified-DH parameters and joint limits; geometry is simple capsules and
boxes. Only the hand and finger pads collide (the links are visual only), which keeps contacts cheap and the arm
free of self-collision issues; the workspace box keeps the links away from the table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from dm_control import mjcf

# Modified DH (Craig): (a_{i-1}, d_i, alpha_{i-1}) for joints 1..7, then the flange (d=0.107).
PANDA_MDH = (
    (0.0, 0.333, 0.0),
    (0.0, 0.0, -np.pi / 2),
    (0.0, 0.316, np.pi / 2),
    (0.0825, 0.0, np.pi / 2),
    (-0.0825, 0.384, -np.pi / 2),
    (0.0, 0.0, np.pi / 2),
    (0.088, 0.0, np.pi / 2),
)
FLANGE_OFFSET = 0.107
JOINT_LIMITS = np.array(
    [
        [-2.8973, 2.8973],
        [-1.7628, 1.7628],
        [-2.8973, 2.8973],
        [-3.0718, -0.0698],
        [-2.8973, 2.8973],
        [-0.0175, 3.7525],
        [-2.8973, 2.8973],
    ]
)
TORQUE_LIMITS = np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0])
# Approximate public link masses [kg].
LINK_MASSES = (4.97, 0.65, 3.23, 3.59, 1.23, 1.67, 0.74)
HOME_QPOS = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 1.9, np.pi / 4])

FINGER_TRAVEL = 0.04  # per finger [m]; full opening 0.08 m
FINGER_ORIGIN_Z = 0.0584  # finger base below the hand frame [m]
PAD_CENTER_Z = 0.045  # pad centre below the finger base [m]
TCP_OFFSET = FINGER_ORIGIN_Z + PAD_CENTER_Z  # 0.1034 m below the flange, between the pads

JOINT_NAMES = tuple(f"joint{i}" for i in range(1, 8))
FINGER_JOINT_NAMES = ("finger_joint1", "finger_joint2")
ACTUATOR_NAMES = tuple(f"torque{i}" for i in range(1, 8))
GRIPPER_ACTUATOR_NAME = "gripper"
TCP_SITE_NAME = "tcp"
HAND_BODY_NAME = "hand"
WRIST_CAMERA_NAME = "wrist"
PAD_GEOM_NAMES = ("left_pad", "right_pad")


@dataclass(frozen=True)
class ArmConfig:
    """Physical parameters of the arm and gripper."""

    joint_damping: float = 2.0
    joint_armature: float = 0.1
    finger_mass: float = 0.05
    finger_damping: float = 5.0
    gripper_kp: float = 2000.0  # N per metre of tendon (mean finger) error
    gripper_force_limit: float = 120.0  # N on the tendon; ~60 N squeeze per finger at most
    pad_friction: tuple[float, float, float] = (1.5, 0.02, 0.0002)


def _rot_x_quat(angle: float) -> list[float]:
    return [float(np.cos(angle / 2)), float(np.sin(angle / 2)), 0.0, 0.0]


def _rot_z_quat(angle: float) -> list[float]:
    return [float(np.cos(angle / 2)), 0.0, 0.0, float(np.sin(angle / 2))]


def _child_offset(a: float, d: float, alpha: float) -> np.ndarray:
    """Position of a modified-DH child frame in its parent frame."""
    return np.array([a, -np.sin(alpha) * d, np.cos(alpha) * d])


def build_arm(config: ArmConfig = ArmConfig()) -> mjcf.RootElement:
    """Build the arm + gripper MJCF model (to be attached to a scene)."""
    root = mjcf.RootElement(model="panda")
    root.compiler.angle = "radian"
    arm_rgba = [0.92, 0.92, 0.95, 1.0]
    dark_rgba = [0.25, 0.25, 0.28, 1.0]
    visual_only = dict(contype=0, conaffinity=0, group=1)

    base = root.worldbody.add("body", name="link0")
    base.add("geom", name="link0_geom", type="cylinder", size=[0.07, 0.07], pos=[0, 0, 0.07], rgba=dark_rgba,
             mass=3.0, **visual_only)

    offsets = [_child_offset(*p) for p in PANDA_MDH[1:]] + [np.array([0.0, 0.0, FLANGE_OFFSET])]
    parent = base
    for index, ((a, d, alpha), child_offset, mass) in enumerate(zip(PANDA_MDH, offsets, LINK_MASSES), start=1):
        link = parent.add("body", name=f"link{index}", pos=_child_offset(a, d, alpha).tolist(),
                          quat=_rot_x_quat(alpha))
        low, high = JOINT_LIMITS[index - 1]
        link.add("joint", name=JOINT_NAMES[index - 1], type="hinge", axis=[0, 0, 1], range=[low, high],
                 limited=True, damping=config.joint_damping, armature=config.joint_armature)
        radius = 0.06 if index <= 4 else 0.045
        if np.linalg.norm(child_offset) < 1e-6:
            fromto = [0, 0, -0.06, 0, 0, 0.06]
        else:
            fromto = [0, 0, 0, *child_offset.tolist()]
        link.add("geom", name=f"link{index}_geom", type="capsule", fromto=fromto, size=[radius], rgba=arm_rgba,
                 mass=mass, **visual_only)
        # A joint housing along the joint axis so the arm reads as an arm in images.
        link.add("geom", name=f"link{index}_housing", type="cylinder", size=[radius * 1.05, 0.05],
                 rgba=dark_rgba, mass=0.0, **visual_only)
        parent = link

    flange = parent.add("body", name="flange", pos=[0, 0, FLANGE_OFFSET])
    hand = flange.add("body", name=HAND_BODY_NAME, quat=_rot_z_quat(-np.pi / 4))
    hand.add("geom", name="hand_geom", type="box", size=[0.02, 0.09, 0.028], pos=[0, 0, 0.03], rgba=arm_rgba,
             mass=0.73, contype=1, conaffinity=1)
    hand.add("site", name=TCP_SITE_NAME, pos=[0, 0, TCP_OFFSET], size=[0.005], rgba=[1, 0, 0, 0.0], group=3)
    # Looks along the hand +z (down at the fingers) from the side of the hand, tilted towards the fingertips.
    tilt = 0.35
    camera_rotation = np.array([[1, 0, 0], [0, -1, 0], [0, 0, -1]], dtype=float)
    tilt_about_y = np.array([[np.cos(tilt), 0, np.sin(tilt)], [0, 1, 0], [-np.sin(tilt), 0, np.cos(tilt)]])
    camera_matrix = tilt_about_y @ camera_rotation
    hand.add("camera", name=WRIST_CAMERA_NAME, pos=[-0.075, 0, 0.02], fovy=75,
             xyaxes=[*camera_matrix[:, 0].tolist(), *camera_matrix[:, 1].tolist()])

    for side, (finger_joint, pad_name) in enumerate(zip(FINGER_JOINT_NAMES, PAD_GEOM_NAMES)):
        sign = 1.0 if side == 0 else -1.0
        finger = hand.add("body", name=f"finger{side + 1}", pos=[0, 0, FINGER_ORIGIN_Z])
        finger.add("joint", name=finger_joint, type="slide", axis=[0, sign, 0], range=[0, FINGER_TRAVEL],
                   limited=True, damping=config.finger_damping, armature=0.01)
        finger.add("geom", name=f"finger{side + 1}_geom", type="box", size=[0.01, 0.008, 0.02],
                   pos=[0, sign * 0.01, 0.02], rgba=dark_rgba, mass=config.finger_mass, **visual_only)
        finger.add("geom", name=pad_name, type="box", size=[0.011, 0.005, 0.012],
                   pos=[0, sign * 0.005, PAD_CENTER_Z], rgba=[0.15, 0.15, 0.15, 1], mass=0.01,
                   friction=list(config.pad_friction), condim=4, contype=1, conaffinity=1, priority=1)

    root.contact.add("exclude", body1="finger1", body2="finger2")
    # Keep the two fingers symmetric; one position actuator on their mean drives both.
    root.equality.add("joint", joint1=FINGER_JOINT_NAMES[0], joint2=FINGER_JOINT_NAMES[1],
                      solref=[0.005, 1], solimp=[0.95, 0.99, 0.001])
    tendon = root.tendon.add("fixed", name="split")
    tendon.add("joint", joint=FINGER_JOINT_NAMES[0], coef=0.5)
    tendon.add("joint", joint=FINGER_JOINT_NAMES[1], coef=0.5)

    for joint_name, actuator_name, limit in zip(JOINT_NAMES, ACTUATOR_NAMES, TORQUE_LIMITS):
        root.actuator.add("motor", name=actuator_name, joint=joint_name, ctrllimited=True,
                          ctrlrange=[-limit, limit])
    root.actuator.add("position", name=GRIPPER_ACTUATOR_NAME, tendon="split", kp=config.gripper_kp,
                      ctrllimited=True, ctrlrange=[0, FINGER_TRAVEL], forcelimited=True,
                      forcerange=[-config.gripper_force_limit, config.gripper_force_limit])
    return root
