"""The commands that run or check a ROS 2 graph: `robot-rl launch` (a YAML launch file, with the project's launcher)
and `robot-rl doctor` (the running drivers against a robot file)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from robot_rl.apps.cli import Doctor, Launch


def run_doctor(cfg: Doctor) -> None:
    from robot_rl.ros.doctor import run_doctor as doctor

    # bad input: ValueError
    status = doctor(cfg.robot, cfg.duration, cfg.json, cfg.namespace, cfg.domain_id, cfg.wait, timing=cfg.timing)
    if status:
        raise SystemExit(status)


def run_launch(cfg: Launch) -> None:
    from robot_rl.ros.launch import launch
    from robot_rl.ros.launch_file import LaunchError

    try:
        status = launch(cfg.file, cfg.arguments, domain_id=cfg.domain_id, grace_s=cfg.grace_s, dry_run=cfg.dry_run)
    except LaunchError as exc:  # a usage error: one line, exit status 2
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if status:
        raise SystemExit(status)
