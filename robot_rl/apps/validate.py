"""`robot-rl validate`: validate a policy in the sim mirror (robot_rl.sim.validation) with a progress bar, then print
the table, the verdict, where the report and the record are, and whether the robot file's gate asks for another suite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from robot_rl.sim.validation import ValidateConfig, format_table, required_suite, validate


def run_validate(cfg: ValidateConfig) -> dict[str, Any]:
    """The `robot-rl validate` job: a progress bar, the table, the verdict and where the report and record are."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # The bar appears once episodes run: a bad input is one error line, not a bar and then the error.
    progress = Progress(TextColumn("[bold]validating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    bar = None

    def on_block(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            progress.start()
            bar = progress.add_task("validate", total=total)
        progress.update(bar, completed=done, total=total)

    try:
        summary = validate(cfg, on_block=on_block)
    finally:
        if bar is not None:
            progress.stop()
    print(format_table(summary))
    print(f"verdict: {summary['verdict'].upper()}" + (f" ({'; '.join(summary['verdict_reasons'])})"
                                                       if summary["verdict_reasons"] else ""))
    print(f"report: {summary['report']}; record: {summary['record']} ({summary['seconds']:.0f} s, "
          f"{summary['workers']} workers)")
    note = _gate_note(cfg.robot, summary["suite_sha256"])
    if note:
        print(note)
    return summary


def _gate_note(robot_name: str, suite_sha256: str) -> str | None:
    """A line when a real robot's file asks the gate for another suite than the one just run (None otherwise)."""
    from robot_rl.actor.robot_config import load_robot_config

    robot = load_robot_config(robot_name)
    required = required_suite(robot.validation, robot.suite_location())
    if robot.sim or required.sha256 == suite_sha256:
        return None
    return (f"note: robot file {Path(robot.path).name} requires {required.label}: this record does not let the policy "
            "run on it (robot-rl validate without --suite runs that suite)")

