"""Which offsets of one partition may be committed.

Records finish out of order (parallel delivery, retries), but Kafka keeps one committed
position per partition: every record below it counts as done. So the position may only
move up to the lowest record that is not finished yet.

The tracker works on the offsets actually received, not on `last + 1` arithmetic: a
partition's offsets have gaps (compaction removes records, transaction markers take an
offset but are never delivered), and a gap must neither block the position nor be
mistaken for a finished record.

Pure and synchronous: the partition actor calls it and performs the commit.
"""

from __future__ import annotations

from collections import deque

from actors.shared.errors import InvalidArgument


class OffsetTracker:
    """Received and finished offsets of one partition, and the commit position they allow.

    `start` is the position the partition was fetched from (its committed offset), or
    None when unknown; it is what `committable()` returns until the first record arrives.
    Offsets must arrive increasing and not below `start`: a fetch position that moves
    backwards (say an offset reset to earliest) needs a new tracker, built from the new
    position.

    Memory holds only the received offsets from the lowest unfinished one on; each `add`
    and `finish` costs O(1) amortised.
    """

    __slots__ = ("_done", "_pending", "_start", "_window", "last")

    def __init__(self, start: int | None = None) -> None:
        if start is not None and start < 0:
            raise InvalidArgument(f"start must be >= 0 or None, got {start}")
        self._start = start
        self.last: int | None = None
        """The highest offset received so far (read it; an attribute, not a property: read
        at every batch, issue 37)."""
        # Received offsets from the lowest unfinished one on, in order; `_done` marks
        # the finished ones among them. The head of `_window` is never finished.
        # made with the first offset: an empty deque is 760 bytes (issue 24)
        self._window: deque[int] | None = None
        self._done: dict[int, bool] = {}
        self._pending = 0

    def add(self, offset: int) -> None:
        """Note a received record. Raises `InvalidArgument` unless offsets increase."""
        if self.last is not None and offset <= self.last:
            raise InvalidArgument(f"offset {offset} received after {self.last}: must increase")
        if self._start is not None and offset < self._start:
            raise InvalidArgument(
                f"offset {offset} is below the start position {self._start}; "
                "if the fetch position moved back, build a new OffsetTracker(start=...)"
            )
        self.last = offset
        if self._window is None:
            self._window = deque()
        self._window.append(offset)
        self._done[offset] = False
        self._pending += 1

    def finish(self, offset: int) -> bool:
        """Mark a received record done; False if it is unknown or already finished.

        Idempotent, so a late or duplicate outcome is harmless.
        """
        done = self._done
        if done.get(offset, True):
            return False
        done[offset] = True
        self._pending -= 1
        window = self._window  # the finished prefix goes (inline: a call per record, #37)
        while window and done[window[0]]:
            del done[window.popleft()]
        if not window:  # all finished: what the burst grew goes (a dict never shrinks)
            self._window, self._done = None, {}
        return True

    def committable(self) -> int | None:
        """The position to commit: every received record below it is finished.

        The lowest unfinished received offset; when all are finished, the last received
        plus one; before anything arrived, `start` (None if that is unknown too). Never
        below `start`, never past an unfinished record, and it never moves back.
        """
        if self._window:
            return self._window[0]
        if self.last is not None:
            return self.last + 1
        return self._start

    def finished_above(self) -> list[int]:
        """Finished offsets above the commit position (done out of order), ascending."""
        return [offset for offset in self._window or () if self._done[offset]]

    def pending(self) -> int:
        """How many received records are not finished."""
        return self._pending

    def is_finished(self, offset: int) -> bool:
        """True if nothing is left to do for `offset`.

        Exact for offsets at or above `committable()`: received and finished. Below it,
        the tracker has forgotten which offsets were gaps, and answers True for all of
        them: nothing there is pending, the position has passed them.
        """
        position = self.committable()
        if position is not None and offset < position:
            return True
        return self._done.get(offset, False)

    def __repr__(self) -> str:
        return (
            f"<OffsetTracker committable={self.committable()} pending={self._pending} "
            f"last={self.last}>"
        )
