"""robot_rl: ROS 2-native real-world robot reinforcement learning."""

import os as _os

# Headless rendering by default: MuJoCo needs a GL backend chosen before it is imported.
_os.environ.setdefault("MUJOCO_GL", "egl")
_os.environ.setdefault("HF_HUB_OFFLINE", "1")

__version__ = "0.1.0"
