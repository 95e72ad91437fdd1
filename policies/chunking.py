"""Executing action chunks in time: action i of a chunk computed from the observation stamped t is due at t + i*dt.

The control loop ticks every `dt`. A tick at time `now` executes the action due in its control period (periods are
centred on the first chunk's observation stamp and every dt after it, so an action due within half a period of the
tick is its action, however the timer's phase lies). When a chunk arrives, the actions whose slot has
already passed are dropped (counted as stale): a chunk that took 250 ms to compute at 10 Hz starts at its third
action. A newer chunk replaces the older one's actions from its first slot on (receding horizon), or, with temporal
ensembling, is averaged with them (weights exp(-decay * i), i = 0 for the oldest prediction of a slot, as ACT does;
a negative decay favours newer chunks). A tick whose slot holds no action gets None: the actor holds and counts it.

All times come from the caller (seconds on one monotonic clock), so tests drive it with a fake clock.
"""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np

from robot_rl.policies.base import ActionChunk, PolicyError


@dataclasses.dataclass(frozen=True)
class ScheduledAction:
    """The action a tick executes, with what the learner needs and where it came from."""

    action: np.ndarray
    learner_action: np.ndarray
    info: dict[str, np.ndarray]
    due: float
    """When it was due (the chunk's observation stamp + index * dt)."""
    chunk: int
    """Sequence number of the chunk it came from (the newest one, when ensembled)."""
    index: int
    """Its index in that chunk."""
    observation_stamp: float
    """Stamp of the observation the chunk was computed from."""


class ChunkSchedule:
    """Timed actions of the chunks a policy produced; `add` a chunk when it arrives, ask `action_at(now)` each tick."""

    def __init__(self, dt: float, *, ensemble_decay: float | None = None):
        if not dt > 0:
            raise PolicyError(f"control period dt={dt} must be > 0")
        if ensemble_decay is not None and not math.isfinite(ensemble_decay):
            raise PolicyError(f"ensemble_decay={ensemble_decay} must be finite (or None: newest chunk wins)")
        self.dt = float(dt)
        self.ensemble_decay = ensemble_decay
        self._slots: dict[int, list[ScheduledAction]] = {}
        self._origin: float | None = None
        self._next_chunk = 0
        self.counters: collections.Counter[str] = collections.Counter()
        """added (chunks), stale (actions already past when their chunk arrived), replaced, expired (scheduled but
        never executed: their tick passed without asking), executed, empty (ticks with nothing due)."""

    def slot(self, time_s: float) -> int:
        """The control period `time_s` falls in: periods are centred on the first chunk's observation stamp and
        every dt after it, so ticks at the observation rate land mid-period however much they jitter (up to dt/2)."""
        origin = self._origin if self._origin is not None else 0.0
        return int(math.floor((time_s - origin) / self.dt + 0.5))

    def clear(self) -> None:
        """Forget every scheduled action (human takeover); the periods stay where they were."""
        self._slots.clear()

    def restart(self) -> None:
        """Forget every scheduled action and the period grid (a new episode)."""
        self._slots.clear()
        self._origin = None

    def add(self, chunk: ActionChunk, observation_stamp: float, now: float) -> int:
        """Schedule `chunk` computed from the observation stamped `observation_stamp`; returns how many of its
        actions are still to come (the others were due in slots that have passed, and are dropped)."""
        number = self._next_chunk
        self._next_chunk += 1
        self.counters["added"] += 1
        if self._origin is None:
            self._origin = float(observation_stamp)
        current = self.slot(now)
        kept = 0
        for index in range(len(chunk)):
            due = observation_stamp + index * self.dt
            slot = self.slot(due)
            if slot < current:
                self.counters["stale"] += 1
                continue
            action, learner_action, info = chunk.step(index)
            entry = ScheduledAction(action, learner_action, info, due, number, index, observation_stamp)
            if self.ensemble_decay is None:
                if slot in self._slots:
                    self.counters["replaced"] += 1
                self._slots[slot] = [entry]
            else:
                self._slots.setdefault(slot, []).append(entry)
            kept += 1
        if self.ensemble_decay is None:  # a newer plan also withdraws an older plan's actions beyond its own end
            last = self.slot(observation_stamp + (len(chunk) - 1) * self.dt)
            for slot in [s for s in self._slots if s > last]:
                del self._slots[slot]
                self.counters["replaced"] += 1
        return kept

    def pending(self, now: float) -> int:
        """Actions scheduled for this tick's slot or later."""
        current = self.slot(now)
        return sum(1 for slot in self._slots if slot >= current)

    def horizon(self, now: float) -> float:
        """Seconds of scheduled actions from `now` on (0 when none is left for this tick): when to plan the next."""
        current = self.slot(now)
        later = [slot for slot in self._slots if slot >= current]
        return 0.0 if not later else (max(later) - current + 1) * self.dt

    def action_at(self, now: float) -> ScheduledAction | None:
        """The action of the tick at `now` (removed from the schedule), or None when nothing is due: hold."""
        current = self.slot(now)
        for slot in [s for s in self._slots if s < current]:
            self.counters["expired"] += len(self._slots.pop(slot)[:1])
        entries = self._slots.pop(current, None)
        if not entries:
            self.counters["empty"] += 1
            return None
        self.counters["executed"] += 1
        newest = entries[-1]
        if len(entries) == 1:
            return newest
        weights = np.exp(-float(self.ensemble_decay) * np.arange(len(entries)))
        weights /= weights.sum()
        action = np.tensordot(weights, np.stack([e.action for e in entries]), axes=1).astype(np.float32)
        return dataclasses.replace(newest, action=action)


class ChunkPlanner:
    """Computes the next chunk in a worker thread while the current one executes, so the control tick never waits
    for the policy: `observe` each tick's observation, then take `action_at(now)` (None: nothing due, hold).

    A new chunk is started from the newest observation history when the plan left covers less than `lead_s` (by
    default the slowest chunk computation seen so far plus one period). A chunk started before `reset` or `interrupt`
    (episode end, human takeover) is discarded when it arrives. `clock` is the caller's monotonic clock.
    """

    def __init__(self, policy, dt: float, *, deterministic: bool = True, ensemble_decay: float | None = None,
                 lead_s: float | None = None, clock=None, name: str = "chunk-planner"):
        import threading
        import time

        from robot_rl.policies.base import ObservationHistory

        self.policy = policy
        self.deterministic = deterministic
        self.schedule = ChunkSchedule(dt, ensemble_decay=ensemble_decay)
        self.history = ObservationHistory(policy.obs_horizon)
        self.lead_s = lead_s
        self.clock = clock or time.monotonic
        self.compute_s: collections.deque[float] = collections.deque(maxlen=50)
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._request: tuple[list, float, int] | None = None
        self._busy = False
        self._generation = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ----- control thread ----------------------------------------------------------------------------------------
    def observe(self, obs, stamp: float) -> None:
        """Add the observation taken at `stamp`; start the next chunk if the plan is running out."""
        with self._lock:
            self.history.append(obs)
            lead = self.lead_s if self.lead_s is not None else (max(self.compute_s, default=0.0)
                                                                + self.schedule.dt)
            if not self._busy and self._request is None and self.schedule.horizon(stamp) <= lead:
                self._request = (self.history.observations(), float(stamp), self._generation)
                self._wake.notify()

    def action_at(self, now: float) -> ScheduledAction | None:
        with self._lock:
            if self.error is not None:
                error, self.error = self.error, None
                raise error
            return self.schedule.action_at(now)

    def interrupt(self, obs=None) -> None:
        """Drop the plan and any chunk being computed (a human took over: the arm is not where the plan assumed);
        `obs`, the observation of the step the human acted on, still joins the history."""
        with self._lock:
            if obs is not None:
                self.history.append(obs)
            self._generation += 1
            self._request = None
            self.schedule.clear()

    def reset(self) -> None:
        """A new episode: no history, no plan."""
        with self._lock:
            self._generation += 1
            self._request = None
            self.schedule.restart()
            self.history.reset()
        self.policy.reset()

    @property
    def counters(self):
        return self.schedule.counters

    def close(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=timeout_s)

    # ----- worker thread ---------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                while self._request is None and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                history, stamp, generation = self._request
                self._request, self._busy = None, True
            started = self.clock()
            try:
                chunk = self.policy.act_chunk(history, deterministic=self.deterministic)
            except Exception as error:  # noqa: BLE001 - handed to the control thread, which reports it
                with self._lock:
                    self._busy, self.error = False, error
                continue
            finished = self.clock()
            with self._lock:
                self._busy = False
                self.compute_s.append(finished - started)
                if generation == self._generation:
                    self.schedule.add(chunk, stamp, finished)
                else:
                    self.schedule.counters["discarded"] += len(chunk)
