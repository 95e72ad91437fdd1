"""`robot-rl train`: a new or resumed run of the in-process trainer (robot_rl.training.trainer), under the command's
stop handling, with the demo recording's progress on the terminal (or as lines in a log)."""

from __future__ import annotations

from pathlib import Path

from robot_rl.training.config import TrainConfig
from robot_rl.training.pacing import StopSignals
from robot_rl.training.run_folder import start_run


def train(cfg: TrainConfig | None = None, resume: Path | None = None) -> Path:
    """Run, or resume, a training run; returns the run folder.

    `resume`: a run folder to continue from its last checkpoint with its saved config; `cfg` may then change
    RESUME_OPTIONS (e.g. a larger `steps` extends a finished run). Bad input raises a ValueError (RunError for the
    run folder) before anything is written. SIGINT/SIGTERM checkpoint, write the report so far and raise
    TrainingInterrupted.
    """
    from robot_rl.training.trainer import Trainer

    start = start_run(cfg, resume)
    with StopSignals() as stop:
        return Trainer(start, stop, demo_progress=DemoProgress).run()


class DemoProgress:
    """The demo-recording phase's progress: a rich bar on a terminal (like the training bar), otherwise a line
    every few seconds (robot_rl.core.progress). Use as a context manager; call it with (kept, wanted) after every
    episode."""

    def __init__(self, wanted: int):
        from rich.console import Console

        from robot_rl.core.progress import ProgressLines

        self.wanted = wanted
        self.console = Console()
        self._progress = None
        self._lines = ProgressLines("recording demos", wanted, enabled=not self.console.is_terminal, unit="demo")

    def __enter__(self) -> DemoProgress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        if self.console.is_terminal:
            self._progress = Progress(TextColumn("[bold]recording demos"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=self.console, transient=True)
            self._bar = self._progress.add_task("demos", total=self.wanted)
            self._progress.start()
        return self

    def __call__(self, kept: int, wanted: int) -> None:
        if self._progress is not None:
            self._progress.update(self._bar, completed=kept)
        self._lines.update(kept)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
