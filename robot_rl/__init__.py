"""robot_rl: ROS 2-native real-world robot reinforcement learning."""

import os as _os

# Headless rendering by default: MuJoCo needs a GL backend chosen before it is imported.
_os.environ.setdefault("MUJOCO_GL", "egl")
_os.environ.setdefault("HF_HUB_OFFLINE", "1")
# JAX (the SAC learner and head) and torch (diffusion policies) may share one GPU: JAX must not take 75 % of its
# memory at start-up, as it does by default.
_os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

__version__ = "0.1.0"
