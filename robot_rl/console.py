"""The `robot-rl` console script. Importing the commands takes a couple of seconds (JAX, MuJoCo): a Ctrl-C in that
time ends the program with status 130 and one line, like a Ctrl-C later on, not with an import traceback."""

from __future__ import annotations

import sys


def main() -> None:
    """Entry point of the `robot-rl` console script (robot_rl.cli.main once it is imported)."""
    try:
        from robot_rl.cli import main as cli_main
    except KeyboardInterrupt:
        print("interrupted while starting", file=sys.stderr)
        raise SystemExit(130) from None
    cli_main()
