"""The ROS benchmarks re-run themselves inside a private network namespace (only ``lo``) with the project's ROS
environment, and refuse to run where none can be made (never on the host's network)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def rerun_in_private_network(script: str, argv: Sequence[str], *, bench: str, domain_id: int, inner_flag: str,
                             timeout_s: float, extra_env: dict[str, str] | None = None) -> int:
    """Run `python script *argv` in a private network namespace with `inner_flag` (and `extra_env`) set in its
    environment; returns its exit status (124 after `timeout_s`, 130 on Ctrl-C; 2 with one JSON error line where no
    namespace can be made). At the end its whole process group gets SIGINT, then SIGKILL."""
    from robot_rl.ros.env import RosEnvironmentError, private_network_command, ros_environment

    env = ros_environment(domain_id=domain_id)
    env[inner_flag] = "1"
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    inner = [sys.executable, str(Path(script).resolve()), *argv]
    try:
        command = private_network_command(inner)
    except RosEnvironmentError as error:
        print(json.dumps({"bench": bench, "error": str(error)}), flush=True)
        return 2
    proc = subprocess.Popen(command, env=env, cwd=REPO_ROOT, start_new_session=True)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"[{bench}] timed out after {timeout_s:.0f}s", file=sys.stderr, flush=True)
        return 124
    except KeyboardInterrupt:
        return 130
    finally:
        for sig in (signal.SIGINT, signal.SIGKILL):  # the inner bench and every child it started
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=5.0)
                break
            except subprocess.TimeoutExpired:
                pass
