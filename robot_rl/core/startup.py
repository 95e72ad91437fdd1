"""What a robot_rl program sets for its own process before it loads the heavy libraries: headless MuJoCo rendering,
no Hugging Face hub access, JAX sharing a GPU with torch, and a Ctrl-C that ends a program still importing.

Importing robot_rl changes nothing in the process. The ``robot-rl`` console script and every node's
``python -m`` entry call :func:`program_start` first; code that embeds robot_rl (a notebook, a lab's own script)
calls :func:`set_process_defaults` if it wants the same defaults, or sets the variables itself.
"""

from __future__ import annotations

import os
import signal

PROCESS_DEFAULTS = {
    "MUJOCO_GL": "egl",  # headless rendering; MuJoCo reads it once, when it is first imported
    "HF_HUB_OFFLINE": "1",  # nothing is ever fetched at run time
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",  # JAX must not take 75 % of a GPU torch shares at start-up
}


def set_process_defaults() -> None:
    """Set each of :data:`PROCESS_DEFAULTS` the environment does not set already (a user's value wins)."""
    for name, value in PROCESS_DEFAULTS.items():
        os.environ.setdefault(name, value)


def program_start() -> None:
    """The first call of a robot_rl program: :func:`set_process_defaults`, and until the program takes over SIGINT
    (once it has imported what it needs) a Ctrl-C or the launcher's SIGINT ends it at once by the signal, as SIGTERM
    does, instead of raising KeyboardInterrupt in the middle of an import (a traceback wall)."""
    set_process_defaults()
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
    except ValueError:  # not the main thread: the caller is not a program's start
        pass
