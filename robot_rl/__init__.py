"""robot_rl: ROS 2-native real-world robot reinforcement learning."""

import os as _os

# Headless rendering by default: MuJoCo needs a GL backend chosen before it is imported.
_os.environ.setdefault("MUJOCO_GL", "egl")
_os.environ.setdefault("HF_HUB_OFFLINE", "1")
# JAX (the SAC learner and head) and torch (diffusion policies) may share one GPU: JAX must not take 75 % of its
# memory at start-up, as it does by default.
_os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

__version__ = "0.1.0"


def _sigint_ends_a_starting_program() -> None:
    """A program run as ``python -m robot_rl....`` (a node under the launcher, the command line) takes over SIGINT
    once it has imported what it needs; until then a Ctrl-C (or the launcher's SIGINT) ends it at once by the
    signal, as SIGTERM does, instead of raising KeyboardInterrupt in the middle of an import (a traceback wall)."""
    import signal
    import sys

    args = list(getattr(sys, "orig_argv", ()))[1:]
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c", "-"):
        args = args[2:] if args[0] in ("-X", "-W") else args[1:]
    if len(args) < 2 or args[0] != "-m" or not args[1].startswith("robot_rl."):
        return
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
    except ValueError:  # imported by a thread other than the main one
        pass


_sigint_ends_a_starting_program()
