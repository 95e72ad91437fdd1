"""The `robot-rl` console script. Its first act is to take over SIGINT and SIGTERM (robot_rl.core.interrupts): importing
the commands takes a couple of seconds (JAX, MuJoCo), and a Ctrl-C or SIGTERM at any moment from then on ends the
program with status 130 / 143 and one line, `interrupted` / `terminated`, not with a traceback or, worse, not at
all."""

from __future__ import annotations

import sys

from robot_rl.core import interrupts
from robot_rl.core.startup import set_process_defaults


def main() -> None:
    """Entry point of the `robot-rl` console script (robot_rl.apps.cli.main once it is imported)."""
    set_process_defaults()
    interrupts.install_for_process()
    try:
        try:
            from robot_rl.apps.cli import main as cli_main

            cli_main()
        except SystemExit:
            raise
        except BaseException as exc:  # an interrupt (one that landed before the command's own handling took over, as
            # in its first lines), or what an import turned it into
            if isinstance(exc, KeyboardInterrupt) or interrupts.requested() is not None:
                interrupts.exit_stopped(exc)
            raise
    finally:
        interrupts.record_only()  # the command is done: a late signal only sets the exit status (at exit)


if __name__ == "__main__":
    sys.exit(main())
