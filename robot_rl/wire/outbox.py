"""The actor's side of delivery: the `Outbox` keeps its transitions, bounded, until the learner acknowledges them and
re-sends what stays unacknowledged; `AckGaps` records the gaps between those acknowledgements."""

from __future__ import annotations

import bisect
import collections
import math
from collections.abc import Sequence
from typing import Any

from robot_rl.wire.transitions import AckMessage, StampedTransition, decode_ack_message, encode_transitions


class Outbox:
    """Bounded FIFO of transitions the learner has not acknowledged yet; re-sends what stays unacknowledged.

    When full, the oldest transition is dropped (the robot keeps acting) and counted in `dropped`.

    Flow control: at most `max_in_flight` transitions are out (sent less than `resend_after_s` ago and not
    acknowledged) at once. Acknowledgements are cumulative, so after a loss everything above the gap stays
    unacknowledged; re-sending all of it in one burst would overflow the learner's bounded reader queue, which drops
    the oldest messages, the gap itself among them, at every round. A window keeps each round small enough to arrive,
    oldest first, so the gap is filled and the cumulative acknowledgement jumps over what arrived above it.

    Re-send timeout: `resend_after_s` until acknowledgements are timed, then the smoothed round trip plus four times
    its deviation (RFC 6298's estimator, sampled only from transitions sent once), never below `resend_after_s` nor
    above MAX_RESEND_S. A learner that acknowledges late (pixel batches on a busy CPU: 2-4 s) would otherwise get every
    transition again and again, its duplicates filling the link.
    """

    MAX_RESEND_S = 30.0

    def __init__(self, capacity: int = 3000, resend_after_s: float = 2.0, max_in_flight: int = 256):
        problems = [f"{name}={value!r} must be {rule}" for name, value, rule, ok in (
            ("capacity", capacity, ">= 1", capacity >= 1), ("max_in_flight", max_in_flight, ">= 1", max_in_flight >= 1),
            ("resend_after_s", resend_after_s, "> 0", math.isfinite(resend_after_s) and resend_after_s > 0)) if not ok]
        if problems:
            raise ValueError(f"invalid Outbox: {'; '.join(problems)}")
        self.capacity = int(capacity)
        self.resend_after_s = float(resend_after_s)
        self.max_in_flight = int(max_in_flight)
        self._items: collections.OrderedDict[int, StampedTransition] = collections.OrderedDict()
        self._sent_at: dict[int, float] = {}
        self.dropped = 0
        self.acknowledged_through = -1
        self.resent = 0
        self.round_trip_s: float | None = None  # smoothed send -> acknowledgement time
        self.round_trip_deviation_s = 0.0
        self._resent_seqs: set[int] = set()  # sent more than once: their round trip is ambiguous (Karn)

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: StampedTransition) -> None:
        if item.seq <= self.acknowledged_through or item.seq in self._items:
            raise ValueError(f"sequence number {item.seq} was already used")
        self._items[item.seq] = item
        while len(self._items) > self.capacity:
            seq, _ = self._items.popitem(last=False)
            self._sent_at.pop(seq, None)
            self.dropped += 1

    def resend_timeout(self) -> float:
        """Seconds an unacknowledged transition waits before it is sent again (see the class doc)."""
        if self.round_trip_s is None:
            return self.resend_after_s
        return min(self.MAX_RESEND_S,
                   max(self.resend_after_s, self.round_trip_s + 4.0 * self.round_trip_deviation_s))

    def in_flight(self, now: float) -> int:
        """Transitions sent less than the re-send timeout ago and not acknowledged yet."""
        timeout = self.resend_timeout()
        return sum(1 for sent in self._sent_at.values() if now - sent < timeout)

    def due(self, now: float, max_items: int = 64) -> list[StampedTransition]:
        """Oldest first: transitions never sent, or sent more than `resend_after_s` ago without an ack, as many as
        the in-flight window allows (at most `max_items`)."""
        budget = min(int(max_items), self.max_in_flight - self.in_flight(now))
        out = []
        if budget <= 0:
            return out
        timeout = self.resend_timeout()
        for seq, item in self._items.items():
            sent = self._sent_at.get(seq)
            if sent is None or now - sent >= timeout:
                out.append(item)
                if len(out) >= budget:
                    break
        return out

    def due_messages(self, source: str, now: float, max_items: int = 64, max_messages: int = 8,
                     run: str | None = None) -> list[bytes]:
        """What is due now as transitions messages of `source` addressed to `run` (`encode_transitions`, at most
        `max_items` each), each marked sent."""
        messages = []
        for _ in range(max_messages):
            due = self.due(now, max_items)
            if not due:
                break
            first_sends = {item.seq for item in due if item.seq not in self._sent_at}
            messages.append(encode_transitions(source, due, run, floor=next(iter(self._items)),
                                               first_sends=first_sends))
            self.mark_sent(due, now)
        return messages

    def take_ack(self, payload: bytes | bytearray | memoryview, source: str, now: float) -> None:
        """Apply a learner's acknowledgement payload for `source` (see `apply_ack`); TransportError if malformed."""
        self.apply_ack(decode_ack_message(payload), source, now)

    def apply_ack(self, message: AckMessage, source: str, now: float) -> None:
        """Apply a learner's acknowledgements for `source`: its cumulative ack, and the ranges it holds above a gap
        (only the gap is re-sent). Whether they come from the run this actor serves is `RunBinding`'s to say."""
        if source in message.acks:
            self.acknowledge(message.acks[source], now)
        if source in message.above:
            self.acknowledge_ranges(message.above[source], now)

    def mark_sent(self, items: Sequence[StampedTransition], now: float) -> None:
        for item in items:
            if item.seq in self._sent_at:
                self.resent += 1
                self._resent_seqs.add(item.seq)
            self._sent_at[item.seq] = now

    def resend_all(self) -> int:
        """Make every unacknowledged transition due now (a learner appeared that may lack them); returns how many."""
        for seq in self._items:
            self._sent_at[seq] = -float("inf")
            self._resent_seqs.add(seq)
        return len(self._items)

    def _time_round_trip(self, seq: int, now: float | None) -> None:
        """One round-trip sample from the newest transition an acknowledgement covered (if it was sent once)."""
        sent = self._sent_at.get(seq)
        if now is None or sent is None or seq in self._resent_seqs or not math.isfinite(sent):
            return
        sample = max(0.0, now - sent)
        if self.round_trip_s is None:
            self.round_trip_s, self.round_trip_deviation_s = sample, sample / 2
        else:
            self.round_trip_deviation_s = 0.75 * self.round_trip_deviation_s + 0.25 * abs(self.round_trip_s - sample)
            self.round_trip_s = 0.875 * self.round_trip_s + 0.125 * sample

    def _forget(self, seq: int) -> None:
        del self._items[seq]
        self._sent_at.pop(seq, None)
        self._resent_seqs.discard(seq)

    def acknowledge_ranges(self, ranges: Sequence[tuple[int, int]], now: float | None = None) -> int:
        """Forget the transitions whose seq lies in one of the inclusive `ranges` (selective acknowledgements: the
        learner has them above a gap); returns how many were removed (`now`: time the round trip)."""
        if not ranges:
            return 0
        starts = sorted(ranges)
        firsts = [a for a, _ in starts]
        covered = []
        for seq in [s for s in self._items if s > self.acknowledged_through]:
            i = bisect.bisect_right(firsts, seq) - 1
            if i >= 0 and seq <= starts[i][1]:
                covered.append(seq)
        if covered:
            self._time_round_trip(covered[-1], now)
        for seq in covered:
            self._forget(seq)
        return len(covered)

    def acknowledge(self, through: int, now: float | None = None) -> int:
        """Forget every transition with seq <= `through`; returns how many were removed (`now`: time the round
        trip)."""
        if through <= self.acknowledged_through:
            return 0
        if through in self._items:
            self._time_round_trip(through, now)
        self.acknowledged_through = int(through)
        removed = 0
        while self._items:
            seq = next(iter(self._items))
            if seq > through:
                break
            self._forget(seq)
            removed += 1
        return removed


class AckGaps:
    """The gaps between a learner's acknowledgements at an actor: the longest, and the last `keep` of at least
    `record_s` with the unix time each began (a bench tells those of its own faults from the others by time)."""

    def __init__(self, record_s: float = 1.0, keep: int = 100):
        self.record_s = float(record_s)
        self.longest_s = 0.0
        self.gaps: collections.deque[tuple[float, float]] = collections.deque(maxlen=int(keep))
        self._last: tuple[float, float] | None = None  # (monotonic, unix) of the last acknowledgement

    def heard(self, monotonic: float, unix: float) -> None:
        if self._last is not None:
            gap = monotonic - self._last[0]
            self.longest_s = max(self.longest_s, gap)
            if gap >= self.record_s:
                self.gaps.append((round(self._last[1], 3), round(gap, 3)))
        self._last = (monotonic, unix)

    def to_json(self) -> dict[str, Any]:
        return {"longest_s": round(self.longest_s, 3), "gaps": [list(gap) for gap in self.gaps]}
