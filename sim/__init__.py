"""MuJoCo mirror of the robot: MJCF arm + scene, operational-space controller, tasks and scripted experts.

Importing this package registers ``robot_rl/PickCube-v0`` and ``robot_rl/PegInsert-v0`` with gymnasium and, if
MuJoCo is not loaded yet and ``MUJOCO_GL`` is unset, picks EGL so that cameras render on a machine without a display
(MuJoCo reads the variable once, when it loads).
"""

import os as _os
import sys as _sys

if "mujoco" not in _sys.modules:
    _os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as _gym  # noqa: E402

from robot_rl.sim.tasks import PEG_INSERT_MAX_EPISODE_STEPS, PICK_CUBE_MAX_EPISODE_STEPS

_REGISTRATIONS = {
    "robot_rl/PickCube-v0": ("robot_rl.sim.tasks:PickCubeEnv", PICK_CUBE_MAX_EPISODE_STEPS),
    "robot_rl/PegInsert-v0": ("robot_rl.sim.tasks:PegInsertEnv", PEG_INSERT_MAX_EPISODE_STEPS),
}
for _env_id, (_entry_point, _max_steps) in _REGISTRATIONS.items():
    if _env_id not in _gym.registry:
        _gym.register(id=_env_id, entry_point=_entry_point, max_episode_steps=_max_steps)

TASK_IDS = tuple(_REGISTRATIONS)
__all__ = ["TASK_IDS"]
