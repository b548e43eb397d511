"""FetchTuning: the instance member's fetch size and fetch wait, from its riders. Pure.

A fetch serves every rider, so it brings about the largest prefetch buffer any of them
has (`fetch_size`) and waits the shortest `fetch.max.wait.ms` any of them asks for (on
the embedded broker every fetch waits that long, runtime/kafka/compat.py quirk 4), else
the client's. Joins only raise the bounds, so a burst of thousands of joins looks at each
new rider once; a leave makes the next change look at all of them again.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

from actors.delivery.path.consumer import fetch_size
from actors.delivery.path.roster import Rider


@dataclass(slots=True)
class FetchTuning:
    records: int = 0
    """The most records one fetch brings (0: the wiring's default)."""
    rider_wait_ms: int | None = None
    """The shortest fetch wait a rider asks for (None: none asks)."""
    joins: int = 0
    """The roster's joins already looked at."""
    stale: bool = False
    """A rider left: the next change looks at every rider again."""

    def left(self) -> None:
        self.stale = True

    def note(self, riders: dict[str, Rider], joins: int) -> None:
        """The riders now, `joins` the roster's count of joins: only those that joined
        since the last call count (the last of `riders`, which keeps joining order),
        unless one left."""
        fresh = min(joins - self.joins, len(riders))
        if self.stale:
            self.records, self.rider_wait_ms, self.stale = 0, None, False
            fresh = len(riders)
        self.joins = joins
        for rider in islice(reversed(riders.values()), fresh):
            settings = rider.settings
            self.records = max(self.records, fetch_size(settings.largest_buffer))
            asked = settings.fetch_wait_ms
            if asked is not None:
                self.rider_wait_ms = (asked if self.rider_wait_ms is None
                                      else min(asked, self.rider_wait_ms))

    def wait_ms(self, client_ms: int) -> int:
        return client_ms if self.rider_wait_ms is None else self.rider_wait_ms
