"""MuJoCo mirror of the robot: MJCF arm + scene, operational-space controller, tasks and scripted experts.

Importing this package registers ``robot_rl/PickCube-v0`` and ``robot_rl/PegInsert-v0`` with gymnasium.
"""

import gymnasium as _gym

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
