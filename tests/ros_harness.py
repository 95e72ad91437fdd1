"""Runs a ROS 2 test script in a private network namespace with its own domain id and collects its RESULT line;
skips (with the reason) where no private network namespace can be made."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def private_network_or_skip(argv: list[str]) -> list[str]:
    """`argv` wrapped to run in a private network namespace (only ``lo``); the test is skipped, with the reason,
    where no namespace can be made: ROS tests never run on the host's network."""
    from robot_rl.ros.env import RosEnvironmentError, private_network_command

    try:
        return private_network_command(argv)
    except RosEnvironmentError as error:
        pytest.skip(str(error))


def run_ros_script(script: str, mode: str, domain_id: int, timeout: float, args: Sequence[str] = ()
                   ) -> tuple[dict, str, int]:
    """Run `python script mode *args` on loopback only; returns (the last `RESULT {json}` line, stderr, return code).

    The script and every process it starts share one session, killed as a whole on a time-out.
    """
    from robot_rl.ros.env import ros_environment

    env = ros_environment(domain_id=domain_id)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH", "")) if p)
    command = private_network_or_skip([sys.executable, os.path.abspath(script), mode, *args])
    process = subprocess.Popen(command, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{os.path.basename(script)} {mode} timed out; stdout={stdout!r} stderr={stderr[-3000:]!r}")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    results = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert results, f"no result; rc={process.returncode} stdout={stdout!r} stderr={stderr[-3000:]!r}"
    return json.loads(results[-1][len("RESULT "):]), stderr, process.returncode
