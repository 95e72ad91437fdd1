"""Progress of a long job as plain lines, for output that is not a terminal (a log file, `tee`, `nohup`), where a
progress bar is not drawn: one line every few seconds with the step, the total, the job's own figures and the time
elapsed, e.g. ``train-bc: step 1200/3000 (40 %)  loss 0.0412  validation 0.0398  elapsed 1 min 05 s``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

EVERY_S = 5.0
"""Seconds between two progress lines."""


class ProgressLines:
    """Prints `label: step k/N (p %)  text  elapsed t` to stderr at most every `every_s` seconds, when `enabled`
    (callers pass ``not console.is_terminal``: on a terminal their progress bar shows the same)."""

    def __init__(self, label: str, total: int, *, enabled: bool, every_s: float | None = None, unit: str = "step",
                 clock: Callable[[], float] = time.monotonic, stream=None):
        self.label, self.total, self.enabled, self.unit = label, int(total), enabled, unit
        self.every_s = EVERY_S if every_s is None else every_s
        self._clock = clock
        self._stream = stream  # None: sys.stderr when a line is printed (as replaced by a test or a redirection)
        self._started = self._last = clock()
        self.lines = 0

    def update(self, done: int, text: str = "") -> bool:
        """Print a line if one is due; returns whether it printed."""
        if not self.enabled:
            return False
        now = self._clock()
        if now - self._last < self.every_s:
            return False
        from robot_rl.core.report import format_duration

        self._last = now
        share = f" ({done / self.total:.0%})".replace("%", " %") if self.total > 0 else ""
        print(f"{self.label}: {self.unit} {done}/{self.total}{share}" + (f"  {text}" if text else "")
              + f"  elapsed {format_duration(now - self._started)}", file=self._stream or sys.stderr, flush=True)
        self.lines += 1
        return True
