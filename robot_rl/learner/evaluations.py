"""What the ROS learner node needs to be watched, without ROS: the worker thread its evaluations in the sim mirror
run in (so the node keeps acknowledging, broadcasting and training), their schedule, the size of its final
validation, and its progress line and rates.

The worker runs the jobs it is handed: the learner node hands it robot_rl.sim.evaluate.evaluation_job, what in-process
`robot-rl train` runs for its own evaluations, giving the same report rows (`Evaluation.report_row`).
"""

from __future__ import annotations

import collections
import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from robot_rl.core.report import percent, success_text

AUTO = -1
"""`eval_every` / `validation_episodes` value: sized to the run."""
EVAL_EVERY_FRACTION = 5
"""Automatic `eval_every`: this many evaluations over the budget (the in-process default: 5000 steps, every 1000)."""
RECENT_EPISODES = 20


def resolve_eval_every(eval_every: int, budget: int) -> int:
    """Transitions between evaluations: `eval_every` as given (0: off), or for AUTO a fifth of the budget (off for a
    run without a budget)."""
    if eval_every == AUTO:
        return max(1, budget // EVAL_EVERY_FRACTION) if budget > 0 else 0
    return max(0, int(eval_every))


def eval_due(trained_on: int, last_eval_step: int | None, every: int, budget: int) -> bool:
    """Whether a periodic evaluation is owed at `trained_on` transitions: the first one (at once), then each time
    `trained_on` crosses a multiple of `every`, as in-process training evaluates; never at the budget, where the
    final evaluation is."""
    if every <= 0 or (budget and trained_on >= budget):
        return False
    return last_eval_step is None or trained_on // every > last_eval_step // every


def validation_episodes(requested: int, budget: int, conditions: int, episode_steps: int, min_episodes: int) -> int:
    """Episodes per condition of a run's final validation: `requested` if > 0; else sized to the run (at most as
    many env steps as it trained on, at least 1 per condition, and no more than `min_episodes`, the fewest a verdict
    may rest on: a longer run gets a verdict that can pass, a short one a quick look)."""
    if requested > 0:
        return int(requested)
    affordable = int(budget) // max(1, int(conditions) * int(episode_steps))
    return max(1, min(int(min_episodes), affordable))


@dataclasses.dataclass(frozen=True)
class Finished:
    """A job the worker ended: its result, or the exception it raised."""

    name: str
    result: Any
    error: BaseException | None
    seconds: float


class EvalWorker:
    """Runs jobs one at a time in a worker thread that owns one sim env (made on first use, closed when the worker
    ends; a renderer stays in the thread that made it). A job is `job(worker) -> result`; it may call
    `worker.env()`, should check `worker.should_stop()` and may report `worker.progress`. The caller polls
    `collect()`."""

    def __init__(self, make_env: Callable[[], Any], name: str = "learner-eval"):
        self._make_env = make_env
        self._env = None
        self._jobs: queue.Queue = queue.Queue()
        self._finished: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self.pending = 0  # submitted and not collected yet
        self.current: str | None = None  # the job running now
        self.progress: tuple[int, int] | None = None  # (done, total) of the job running now, if it says
        self.started_at = 0.0  # monotonic start of the job running now
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, name: str, job: Callable[[EvalWorker], Any]) -> None:
        self.pending += 1
        self._jobs.put((name, job))

    @property
    def busy(self) -> bool:
        """Whether a submitted job has not been collected yet."""
        return self.pending > 0

    def env(self):
        if self._env is None:
            self._env = self._make_env()
        return self._env

    def should_stop(self) -> bool:
        return self._stop.is_set()

    def collect(self) -> list[Finished]:
        """The jobs that ended since the last call, in order."""
        done = []
        while True:
            try:
                done.append(self._finished.get_nowait())
            except queue.Empty:
                break
        self.pending -= len(done)
        return done

    def close(self, timeout: float = 30.0) -> bool:
        """Ask the running job to stop, drop the queued ones, and wait for the thread; returns whether it ended."""
        self._stop.set()
        self._jobs.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            while True:
                item = self._jobs.get()
                if item is None:
                    return
                name, job = item
                if self._stop.is_set():
                    self._finished.put(Finished(name, None, None, 0.0))
                    continue
                self.current, self.progress, self.started_at = name, None, time.monotonic()
                try:
                    result, error = job(self), None
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    result, error = None, exc
                self._finished.put(Finished(name, result, error, time.monotonic() - self.started_at))
                self.current, self.progress = None, None
        finally:
            if self._env is not None:
                self._env.close()


def eval_line(row: Mapping[str, Any], seconds: float | None = None) -> str:
    """One evaluation, as in-process training prints it."""
    took = f" ({seconds:.1f} s)" if seconds is not None else ""
    return (f"env step {row['env_step']}: eval success {success_text(row['successes'], row['episodes'])}, "
            f"return {row['mean_return']:.2f}, length {row['mean_length']:.1f}{took}")


def short_eval(row: Mapping[str, Any] | None) -> str:
    """E.g. "40 % (2/5) at env step 120"."""
    if not row:
        return "none yet"
    return f"{percent(row['success_rate'])} ({row['successes']}/{row['episodes']}) at env step {row['env_step']}"


def progress_line(*, trained_on: int, received: int, budget: int, updates: int, updates_per_s: float,
                  weights_version: int, episodes: int, successes: int, last_eval: Mapping[str, Any] | None,
                  evaluating: str | None = None) -> str:
    """The learner's periodic progress line."""
    if budget:
        done = f"{trained_on}/{budget} transitions ({trained_on / budget:.0%})"
    else:
        done = f"{trained_on} transitions"
    extra = f", {received - trained_on} more received" if received > trained_on else ""
    rate = f" ({updates_per_s:.1f}/s)" if updates_per_s == updates_per_s else ""  # NaN: no reading yet
    success = f" (success {successes / episodes:.0%})" if episodes else ""
    line = (f"progress: {done}{extra}, {updates} updates{rate}, weights v{weights_version}, {episodes} episodes"
            f"{success}; last eval {short_eval(last_eval)}")
    return line + (f"; {evaluating}" if evaluating else "")


class RateWindow:
    """Rates of growing counters over the last `window_s` seconds (fed about once a second)."""

    def __init__(self, window_s: float = 10.0):
        self.window_s = float(window_s)
        self._samples: collections.deque[tuple[float, dict[str, float]]] = collections.deque()

    def add(self, now: float, **counts: float) -> dict[str, float]:
        """Record the counters at `now`; returns each one's rate per second (None-free: 0.0 before two samples)."""
        self._samples.append((now, dict(counts)))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        first_time, first = self._samples[0]
        span = now - first_time
        return {key: round((value - first.get(key, value)) / span, 3) if span > 0 else 0.0
                for key, value in counts.items()}


def robot_summary(episode_log: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per robot (actor id), from the learner's episode rows: episodes, successes, success and intervention rate so
    far, and the success rate of the last RECENT_EPISODES episodes."""
    rows: dict[str, list[Mapping[str, Any]]] = {}
    for row in episode_log:
        rows.setdefault(str(row.get("source", "?")), []).append(row)
    summary = {}
    for robot, episodes in sorted(rows.items()):
        steps = sum(int(e["length"]) for e in episodes)
        interventions = sum(float(e["intervention_rate"]) * int(e["length"]) for e in episodes)
        successes = sum(bool(e["success"]) for e in episodes)
        recent = episodes[-RECENT_EPISODES:]
        summary[robot] = {
            "episodes": len(episodes), "successes": successes, "success_rate": successes / len(episodes),
            "steps": steps, "intervention_rate": interventions / steps if steps else 0.0,
            "recent_success_rate": sum(bool(e["success"]) for e in recent) / len(recent)}
    return summary
