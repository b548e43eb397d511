"""How often an idle group consumer asks for records, by how many its runtime runs.

Every group consumer fetches in a loop: a fetch that finds nothing is answered after
`fetch.max.wait.ms`, and the consumer's own poll wakes every `POLL_MS`. Both cost this
process CPU whether records come or not, about half a millisecond each: 500 idle consumers
at the embedded broker's 10 ms fetch wait (runtime/kafka/compat.py, quirk 4) kept a core
busy, and each subscribe took seconds (issue 17, separate groups).

So a consumer whose last poll brought nothing waits longer, by how many consumers this
process runs: `per_consumer_ms` for each, at most `ceiling_ms`, never less than its own
configured wait. A poll that brings records puts it back at its configured wait. With a few
consumers nothing changes; with hundreds, idle ones cost a bounded number of requests per
second together. The price: on the embedded broker, which holds a fetch for its whole wait,
the first record after a quiet spell may wait up to the idle wait; Apache Kafka answers a
held fetch as soon as records arrive, so there it costs nothing.

The count is per runtime (`Wiring.pace`, one `IdlePace` per runtime's delivery service):
two runtimes embedded in one process no longer pace each other (issue 34, item 14).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field


@dataclass(slots=True)
class IdlePace:
    per_consumer_ms: int = 3
    ceiling_ms: int = 1_500
    consumers: weakref.WeakSet[object] = field(default_factory=weakref.WeakSet)
    """Running consumers; weak, so one that died without stopping is not counted for ever."""

    def joined(self, consumer: object) -> None:
        self.consumers.add(consumer)

    def left(self, consumer: object) -> None:
        self.consumers.discard(consumer)

    def idle_ms(self, configured_ms: int) -> int:
        """The fetch wait (and poll timeout) of a consumer whose last poll was empty."""
        scaled = min(len(self.consumers) * self.per_consumer_ms, self.ceiling_ms)
        return max(configured_ms, scaled)
