"""FetchTuning: the instance member's fetch size and fetch wait, from its riders. Pure.

A fetch serves every rider, so it brings about the largest prefetch buffer any of them
has (`fetch_size`) and waits the shortest `fetch.max.wait.ms` any of them asks for (on
the embedded broker every fetch waits that long, runtime/kafka/compat.py quirk 4), else
the client's. Joins only raise the bounds, so a burst of thousands of joins looks at each
new rider once; a leave makes the next change look at all of them again.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from actors.delivery.path.consumer import fetch_size
from actors.delivery.path.roster import Rider


@dataclass(slots=True)
class FetchTuning:
    records: int = 0
    """The most records one fetch brings (0: the wiring's default)."""
    rider_wait_ms: int | None = None
    """The shortest fetch wait a rider asks for (None: none asks)."""
    tuned: set[str] = field(default_factory=set)
    stale: bool = False
    """A rider left: the next change looks at every rider again."""

    def left(self) -> None:
        self.stale = True

    def note(self, riders: Collection[Rider]) -> None:
        """The riders now (only those not seen yet count, unless one left). Without a
        leave the riders seen are some of these: as many means none is new, and 10,000
        riders are not walked on every change (#34 item 7)."""
        if self.stale:
            self.records, self.rider_wait_ms, self.stale = 0, None, False
            self.tuned.clear()
        if len(self.tuned) == len(riders):
            return
        for rider in riders:
            settings = rider.settings
            if settings.key in self.tuned:
                continue
            self.tuned.add(settings.key)
            self.records = max(self.records, fetch_size(settings.largest_buffer))
            asked = settings.fetch_wait_ms
            if asked is not None:
                self.rider_wait_ms = (asked if self.rider_wait_ms is None
                                      else min(asked, self.rider_wait_ms))

    def wait_ms(self, client_ms: int) -> int:
        return client_ms if self.rider_wait_ms is None else self.rider_wait_ms
