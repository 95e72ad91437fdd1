"""Executing action chunks in time: action i of a chunk computed from the observation stamped t is due at t + i*dt.

The control loop ticks every `dt`. A tick at time `now` executes the action due in its slot (slot = round(time / dt),
so an action due within half a period of the tick is its action). When a chunk arrives, the actions whose slot has
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
        self._next_chunk = 0
        self.counters: collections.Counter[str] = collections.Counter()
        """added (chunks), stale (actions already past when their chunk arrived), replaced, expired (scheduled but
        never executed: their tick passed without asking), executed, empty (ticks with nothing due)."""

    def slot(self, time_s: float) -> int:
        return int(math.floor(time_s / self.dt + 0.5))

    def clear(self) -> None:
        """Forget every scheduled action (episode end, human takeover)."""
        self._slots.clear()

    def add(self, chunk: ActionChunk, observation_stamp: float, now: float) -> int:
        """Schedule `chunk` computed from the observation stamped `observation_stamp`; returns how many of its
        actions are still to come (the others were due in slots that have passed, and are dropped)."""
        number = self._next_chunk
        self._next_chunk += 1
        self.counters["added"] += 1
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
