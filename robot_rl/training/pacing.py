"""Stopping a training run at a safe point (:class:`StopSignals`, :class:`TrainingInterrupted`) and the learner's
update rate between readings (:class:`UpdateRate`), shared by the in-process trainer and the ROS learner node."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path

from robot_rl.core import interrupts


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM stopped `train` after it checkpointed and wrote the report so far."""

    def __init__(self, signum: int, env_step: int, steps: int, run_dir: Path, message: str | None = None):
        self.signum = signum
        self.exit_status = 128 + signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM
        self.env_step = env_step
        self.run_dir = run_dir
        super().__init__(message or f"interrupted at env step {env_step}/{steps}; resume with: robot-rl train "
                                    f"--resume {run_dir}")


class StopSignals:
    """While active, SIGINT and SIGTERM only set a flag that the training loop checks between env steps (a
    KeyboardInterrupt raised inside JAX, zarr or rich could leave state half-written). Calling it says whether a
    signal came; the first signal's number is kept. Under the `robot-rl` command's handling (robot_rl.core.interrupts)
    it defers that handling, and a stop request that came before is seen too; otherwise it installs its own
    handlers, and the previous ones come back on exit. Only the main thread can install handlers; elsewhere it never
    fires."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._flag = interrupts.StopFlag()
        self._restore: Callable[[], None] | None = None
        self._deferred = None

    @property
    def signum(self) -> int | None:
        return interrupts.requested() if self._deferred is not None else self._flag.signal_number

    def __enter__(self) -> StopSignals:
        if interrupts.active():
            self._deferred = interrupts.deferred()
            self._deferred.__enter__()
        elif threading.current_thread() is threading.main_thread():
            self._restore = interrupts.install_stop_signals(self._flag, self.SIGNALS)
        return self

    def __exit__(self, *exc) -> None:
        if self._deferred is not None:
            self._deferred.__exit__(None, None, None)
        if self._restore is not None:
            self._restore()
            self._restore = None

    def __call__(self) -> bool:
        return self.signum is not None

    def interrupt(self) -> KeyboardInterrupt:
        """The interrupt to raise for the stop request (KeyboardInterrupt, or Terminated for SIGTERM)."""
        return interrupts.interrupt_for(self.signum or signal.SIGINT)


class UpdateRate:
    """Gradient updates per second since the previous reading, without the time the loop spent elsewhere
    (evaluations, checkpoints): the learner's speed now, as the ROS learner node reports it per episode."""

    def __init__(self, updates: int, now: float):
        self._updates, self._time, self._excluded = updates, now, 0.0

    def exclude(self, seconds: float) -> None:
        self._excluded += seconds

    def read(self, updates: int, now: float) -> float:
        rate = (updates - self._updates) / max(now - self._time - self._excluded, 1e-9)
        self._updates, self._time, self._excluded = updates, now, 0.0
        return rate
