"""BreakerWatch: what an egress actor tells the world when its origin's circuit breaker
changes state (actors/delivery/egress/origin.py): a log line (WARNING when it opens), a
`breaker_changed` journal event and the origin's metrics. The origin hands each change
out once, to whichever of its egress actors asks first."""

from __future__ import annotations

import logging

from actors.delivery.egress.origin import STATE_VALUES, Origin
from runtime.host.journal import Event
from runtime.host.metrics import Registry
from runtime.kernel.actor import ActorContext

log = logging.getLogger("actors.delivery.egress.http")  # where operators read it before


class BreakerWatch:
    __slots__ = ("_state", "_transitions")

    def __init__(self, origin: str, metrics: Registry) -> None:
        self._state = metrics.gauge(
            "hookstream_origin_breaker_state",
            "Circuit breaker per origin: 0 closed, 1 half-open, 2 open").labels(origin=origin)
        self._transitions = metrics.counter(
            "hookstream_origin_breaker_transitions_total",
            "Circuit breaker state changes per origin, by the state entered")

    def report(self, origin: Origin, subscription: str, context: ActorContext) -> None:
        """Log, journal and count the changes of `origin`'s breaker not told yet."""
        changes = origin.take_transitions()
        if not changes:
            return
        name, clock = origin.name, context.clock
        for change in changes:
            level = logging.WARNING if change.after == "open" else logging.INFO
            log.log(level, "%s: circuit breaker for %s %s -> %s: %s", subscription,
                    name, change.before, change.after, change.why)
            context.emit(Event(
                type="breaker_changed", ts_ms=clock.wall_ms(), subscription=subscription,
                endpoint=name, reason=f"{change.before} -> {change.after}: {change.why}"))
            self._transitions.labels(origin=name, state=change.after).inc()
        self._state.set(STATE_VALUES[origin.state])
