"""`robot-rl train-bc` and `robot-rl distill` as commands: each fits a policy under a progress bar (plain lines when
the output is not a terminal), stops at its next step on Ctrl-C / SIGTERM keeping what it trained (or, stopped
before its first step, removing the output folder it made), and prints its summary as JSON."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from robot_rl.core import interrupts

if TYPE_CHECKING:
    from robot_rl.apps.distill import DistillConfig
    from robot_rl.apps.train_bc import TrainBCConfig


class _StopOnceTraining:
    """`should_stop` of train-bc / distill: until its first call (the first step) a stop request raises at once
    (loading data and building the model stop promptly, and nothing has been made that a stop would leave
    behind); from then on it only sets the flag the optimisation loop checks (robot_rl.training.pacing.StopSignals)."""

    def __init__(self) -> None:
        self.stop = None

    def __call__(self) -> bool:
        if self.stop is None:
            from robot_rl.training.pacing import StopSignals

            self.stop = StopSignals().__enter__()
        return self.stop()

    @property
    def signum(self) -> int | None:
        return self.stop.signum if self.stop is not None else interrupts.requested()

    def close(self) -> None:
        if self.stop is not None:
            self.stop.__exit__(None, None, None)


def _fit_with_progress(label: str, steps: int, validation_label: str, fit, evaluation_fields, what: str,
                       out: Path) -> None:
    """Run `fit(on_progress=..., should_stop=...)` (train_bc or distill) under a progress bar and Ctrl-C / SIGTERM
    handling, then print its summary as JSON (with `evaluation_fields(evaluation)`) and its report and policy
    paths; raise TrainingInterrupted when a stop request ended it after its first step. Stopped before that, the
    run never got going: its `out` folder is removed (it was new or empty) and the interrupt raised."""
    import shutil

    from robot_rl.training.pacing import TrainingInterrupted

    made = interrupts.first_missing(out)
    was_empty = made is None and out.is_dir() and not any(out.iterdir())
    stop = _StopOnceTraining()
    try:
        _fit_and_report(label, steps, validation_label, fit, evaluation_fields, what, stop)
    except TrainingInterrupted:  # stopped after its first step: the policy trained so far and the report are kept
        raise
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt) or interrupts.requested() is not None:
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
            elif was_empty:
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
        raise
    finally:
        stop.close()


def _fit_and_report(label: str, steps: int, validation_label: str, fit, evaluation_fields, what: str,
                    stop: _StopOnceTraining) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from robot_rl.core.progress import ProgressLines
    from robot_rl.core.report import json_safe
    from robot_rl.training.pacing import TrainingInterrupted

    console = Console(stderr=True)
    lines = ProgressLines(label, steps, enabled=not console.is_terminal)  # tee / nohup / a log file: plain lines
    with Progress(
            TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[loss]}"), console=console, transient=True,
            disable=not console.is_terminal) as progress:
        bar = progress.add_task(label, total=steps, loss="")

        def on_progress(step: int, loss: float, validation: float | None) -> None:
            text = f"loss {loss:.4f}" + ("" if validation is None else f"  {validation_label} {validation:.4f}")
            progress.update(bar, completed=step, loss=text)
            lines.update(step, text)

        summary = fit(on_progress=on_progress, should_stop=stop)
    if summary["stopped"] and not summary["steps"]:
        raise interrupts.interrupt_for(stop.signum)  # never got going: _fit_with_progress removes the folder
    evaluation = summary["evaluation"]
    print(json.dumps(json_safe({k: v for k, v in summary.items() if k != "evaluation"}
                               | (evaluation_fields(evaluation) if evaluation else {})), allow_nan=False))
    print(f"report: {Path(summary['out']) / 'report.md'}  policy: {summary['policy']}", file=sys.stderr)
    if summary["stopped"]:
        raise TrainingInterrupted(stop.signum or signal.SIGINT, summary["steps"], steps, Path(summary["out"]),
                                  f"interrupted at step {summary['steps']}/{steps}; the {what} trained so far "
                                  f"is in {summary['policy']}")


def run_train_bc(cfg: TrainBCConfig) -> None:
    from robot_rl.apps.train_bc import train_bc

    _fit_with_progress("train-bc", cfg.steps, "validation", lambda **callbacks: train_bc(cfg, **callbacks),
                       lambda evaluation: {"success_rate": evaluation["success_rate"],
                                           "eval_episodes": evaluation["episodes"]}, "policy", Path(cfg.out))


def run_distill(cfg: DistillConfig) -> None:
    from robot_rl.apps.distill import distill

    _fit_with_progress("distill", cfg.steps, "gap to teacher", lambda **callbacks: distill(cfg, **callbacks),
                       lambda evaluation: {"student_success_rate": evaluation["student"]["success_rate"],
                                           "teacher_success_rate": evaluation["teacher"]["success_rate"],
                                           "eval_episodes": evaluation["student"]["episodes"]}, "student",
                       Path(cfg.out))
