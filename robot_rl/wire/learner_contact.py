"""How an actor hears its learner: whether the learner is away (`LearnerWatch`), and which learner run it serves
(`RunBinding`): weights and acknowledgements of any other run never reach its policy or its outbox, and weights
versions are compared only within one (run, learner incarnation).
"""

from __future__ import annotations

import collections
import enum
import math
from collections.abc import Callable
from typing import Any

from robot_rl.wire.protocol import run_id_problem


class LearnerWatch:
    """When the actor last heard from its learner (an acknowledgement or weights), and whether the learner is away:
    nothing of it for `after_s` after it was heard once. Counts the outages and their seconds."""

    def __init__(self, after_s: float = 5.0):
        if not (math.isfinite(after_s) and after_s > 0):
            raise ValueError(f"invalid LearnerWatch: after_s={after_s!r} must be > 0")
        self.after_s = float(after_s)
        self.heard_at: float | None = None
        self.outages = 0  # times the learner went away
        self.away_s = 0.0  # seconds away, over the ended outages
        self._away_since: float | None = None

    def heard(self, now: float) -> float | None:
        """The learner spoke at `now`; returns how long it had been away [s] if this ends an outage, else None."""
        self.heard_at = now
        if self._away_since is None:
            return None
        away, self._away_since = now - self._away_since, None
        self.away_s += away
        return away

    def away(self, now: float) -> bool:
        """True while the learner, once heard, has been silent for `after_s` (the first call after that counts an
        outage, starting when it was last heard)."""
        if self._away_since is not None:
            return True
        if self.heard_at is None or now - self.heard_at < self.after_s:
            return False
        self._away_since = self.heard_at
        self.outages += 1
        return True

    @property
    def is_away(self) -> bool:
        """In an outage (as the last `away` call found)."""
        return self._away_since is not None

    def silent_s(self, now: float) -> float | None:
        """Seconds since the learner was last heard (None: never)."""
        return None if self.heard_at is None else now - self.heard_at

    def to_json(self, now: float) -> dict[str, Any]:
        silent = self.silent_s(now)
        return {"away": self.is_away, "silent_s": None if silent is None else round(silent, 2),
                "outages": self.outages, "away_s": round(self.away_s, 1)}


class Heard(enum.Enum):
    """What a `RunBinding` made of the run and learner incarnation of a learner's weights or acknowledgements."""

    UNMARKED = "unmarked"  # no run id (a learner from before run ids) while no run is served: used as before
    BOUND = "bound"  # the first incarnation heard of the run now served
    CURRENT = "current"  # the served run's newest incarnation
    RESTARTED = "restarted"  # a higher incarnation of the served run: its learner restarted
    SWITCHED = "switched"  # a new run, now served (follow_new_run)
    FOREIGN = "foreign"  # another run: ignored
    STALE = "stale"  # an older incarnation of the served run: ignored

    @property
    def admitted(self) -> bool:
        """Whether the message belongs to the run served (its weights may be used, its acks release the outbox)."""
        return self not in (Heard.FOREIGN, Heard.STALE)


class RunBinding:
    """The learner run an actor serves: the first run heard, or the one named (`run_id`); weights and acks of any
    other run, or of an older learner incarnation of the served run, are ignored (each foreign run logged once).
    With `follow_new_run` a run not served before takes over instead (said in one line)."""

    def __init__(self, run_id: str = "", *, follow_new_run: bool = False,
                 log: Callable[[str], None] = lambda line: None, warn: Callable[[str], None] | None = None):
        problem = run_id_problem(run_id) if run_id else None
        if problem:
            raise ValueError(problem)
        if run_id and follow_new_run:
            raise ValueError(f"run_id={run_id!r} serves that run only: follow_new_run would leave it")
        self.run: str | None = run_id or None
        self.incarnation: int | None = None  # the newest learner incarnation heard of the served run
        self.named = bool(run_id)
        self.follow_new_run = bool(follow_new_run)
        self.ignored: collections.Counter[str] = collections.Counter()  # messages ignored, by run ("" for none)
        self.switches = 0
        self._left: set[str | None] = set()  # runs served before a switch: never taken back (no flapping)
        self._logged: set[str | None] = set()  # foreign runs already logged
        self._log = log
        self._warn = warn or log  # a learner of another run on the graph

    def hear(self, run: str | None, incarnation: int | None) -> Heard:
        """Judge a learner message of `run`, learner `incarnation` (None: 0), binding or switching on the way."""
        incarnation = int(incarnation or 0)
        if run is None and self.run is None:
            return Heard.UNMARKED
        if run is not None and run == self.run:
            if self.incarnation is None:
                self.incarnation = incarnation
                self._log(f"serving run {run} (named by run_id; learner incarnation {incarnation})")
                return Heard.BOUND
            if incarnation > self.incarnation:
                self.incarnation = incarnation
                self._log(f"the learner of run {run} restarted (incarnation {incarnation}): using its weights and "
                          "acknowledgements")
                return Heard.RESTARTED
            if incarnation == self.incarnation:
                return Heard.CURRENT
            self.ignored[run] += 1  # its messages were late, or overtaken by the restart's
            return Heard.STALE
        if run is not None and self.run is None:
            self.run, self.incarnation = run, incarnation
            self._log(f"serving run {run} (learner incarnation {incarnation}), the first run heard")
            return Heard.BOUND
        if run is not None and self.follow_new_run and run not in self._left:
            self._log(f"a learner of a new run (run {run}, incarnation {incarnation}) is on the graph: switching to "
                      f"it from run {self.run} (follow_new_run); unacknowledged transitions go to it")
            self._left.add(self.run)
            self.run, self.incarnation = run, incarnation
            self.switches += 1
            return Heard.SWITCHED
        if run not in self._logged:
            self._logged.add(run)
            learner = (f"a learner of another run (run {run}, incarnation {incarnation})" if run is not None
                       else "a learner without a run id (from before run ids)")
            hint = ("" if self.follow_new_run else " (named by run_id)" if self.named
                    else " (set follow_new_run:=true to switch to a new run)")
            self._warn(f"{learner} is on the graph: ignoring its weights and acknowledgements; this actor serves "
                       f"run {self.run}{hint}")
        self.ignored[run or ""] += 1
        return Heard.FOREIGN

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "incarnation": self.incarnation, "follow_new_run": self.follow_new_run,
                "ignored": dict(self.ignored), "switches": self.switches}
