"""The learner's side of delivery: the `Inbox` drops duplicate transitions by (source, sequence number) and says what
to acknowledge, cumulatively and in selective ranges above a gap (`SequenceTracker` per source)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from robot_rl.wire.transitions import MAX_ACK_RANGES, StampedTransition


class SequenceTracker:
    """Which sequence numbers of one source were accepted: a contiguous prefix plus a sparse set above it."""

    def __init__(self, through: int = -1, above: Sequence[int] = ()):
        self.through = int(through)
        self.above: set[int] = {int(s) for s in above if s > through}
        self._advance()

    def _advance(self) -> None:
        while self.through + 1 in self.above:
            self.through += 1
            self.above.remove(self.through)

    def seen(self, seq: int) -> bool:
        return seq <= self.through or seq in self.above

    def settle_below(self, floor: int) -> None:
        """Nothing below `floor` will come: the prefix reaches floor - 1 (a gap the source dropped, or sequence
        numbers another run acknowledged, no longer holds the cumulative acknowledgement back)."""
        if floor - 1 > self.through:
            self.through = int(floor) - 1
            self.above = {seq for seq in self.above if seq > self.through}
            self._advance()

    def add(self, seq: int) -> bool:
        """Record `seq`; False if it was already seen (a duplicate)."""
        if self.seen(seq):
            return False
        self.above.add(int(seq))
        self._advance()
        return True

    def ranges(self, limit: int = MAX_ACK_RANGES) -> list[tuple[int, int]]:
        """The seqs seen above the contiguous prefix as inclusive ranges, lowest first (at most `limit`)."""
        out: list[tuple[int, int]] = []
        for seq in sorted(self.above):
            if out and seq == out[-1][1] + 1:
                out[-1] = (out[-1][0], seq)
            elif len(out) < limit:
                out.append((seq, seq))
            else:
                break
        return out

    def to_json(self) -> dict[str, Any]:
        return {"through": self.through, "above": sorted(self.above)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SequenceTracker:
        return cls(int(data["through"]), [int(s) for s in data.get("above", ())])


class Inbox:
    """Learner-side de-duplication by (source, sequence number) and the cumulative acks to send back."""

    def __init__(self, trackers: Mapping[str, SequenceTracker] | None = None):
        self.trackers: dict[str, SequenceTracker] = dict(trackers or {})
        self.duplicates = 0

    def accept(self, source: str, items: Sequence[StampedTransition], floor: int | None = None
               ) -> list[StampedTransition]:
        """The items of `items` not seen before (also de-duplicated within the batch), in order; `floor`: the
        source holds nothing below it (`TransitionsMessage.floor`), so the gaps below it are settled."""
        tracker = self.trackers.setdefault(source, SequenceTracker())
        if floor is not None:
            tracker.settle_below(floor)
        fresh = [item for item in items if tracker.add(item.seq)]
        self.duplicates += len(items) - len(fresh)
        return fresh

    def acks(self) -> dict[str, int]:
        return {source: tracker.through for source, tracker in self.trackers.items()}

    def acks_above(self) -> dict[str, list[tuple[int, int]]]:
        """Selective acks: per source, the ranges seen above its contiguous prefix (only sources with a gap)."""
        return {source: tracker.ranges() for source, tracker in self.trackers.items() if tracker.above}

    def to_json(self) -> dict[str, Any]:
        return {source: tracker.to_json() for source, tracker in self.trackers.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Inbox:
        return cls({source: SequenceTracker.from_json(value) for source, value in data.items()})
