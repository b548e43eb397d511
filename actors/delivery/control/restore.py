"""How the control actor restores stored subscriptions: in batches started together, and
one summary line for the lot."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator

from actors.delivery.control.registry import SubscriptionRegistry
from actors.delivery.control.trees import rides
from actors.delivery.document.subscription import Consumer

log = logging.getLogger(__name__)

RESTORE_BATCH = 16
"""Subscriptions with a Kafka client of their own started at once: each client's start is
mostly waiting for the broker (500 separate groups took 18-25 s one by one)."""
RIDER_BATCH = 500
"""Subscriptions riding the instance member started at once: a tree and a seat each, no
client (10,000 riders 16 at a time took minutes to restore; issue 32, item 12)."""
NAMES_SHOWN = 3
"""Subscriptions named per outcome in the restore summary; the rest are DEBUG lines."""


async def restore(consumers: list[Consumer], registry: SubscriptionRegistry,
                  refusal: Callable[[Consumer], str],
                  start: Callable[[list[Consumer], str], Awaitable[set[str]]]) -> None:
    """Every stored subscription is listed again, whether or not it can start now, and
    those that may start are started a batch at a time (`start` answers the keys that
    failed). One INFO line says how it went (`restore_summary`); each subscription's own
    line is DEBUG (10,000 restored made 10,000 INFO lines)."""
    startable: list[Consumer] = []
    outcome: dict[str, list[str]] = {}
    for consumer in consumers:
        if registry.add(consumer, refused=refusal(consumer)):
            startable.append(consumer)
        else:
            state = registry.state(consumer.key)
            outcome.setdefault(state, []).append(consumer.key)
            log.debug("subscription %s restored %s", consumer.key, state)
    for batch in restore_batches(startable):
        failed = await start(batch, "restored")
        for consumer in batch:
            outcome.setdefault("failed to start" if consumer.key in failed
                               else "started", []).append(consumer.key)
    if consumers:
        log.info("%s", restore_summary(outcome))


def restore_batches(consumers: list[Consumer]) -> Iterator[list[Consumer]]:
    """`consumers` in the batches a restore starts together: riders first."""
    riders = [c for c in consumers if rides(c)]
    others = [c for c in consumers if not rides(c)]
    for group, size in ((riders, RIDER_BATCH), (others, RESTORE_BATCH)):
        for first in range(0, len(group), size):
            yield group[first:first + size]


def restore_summary(outcome: dict[str, list[str]], shown: int = NAMES_SHOWN) -> str:
    """One line for a restore: how many subscriptions ended how (`started`, `paused`,
    `failed to start`, ...), each with its first `shown` names."""
    total = sum(len(keys) for keys in outcome.values())
    parts = []
    for what in sorted(outcome, key=lambda w: (w != "started", w)):
        keys = sorted(outcome[what])
        names = ", ".join(keys[:shown]) + (f" and {len(keys) - shown} more"
                                            if len(keys) > shown else "")
        parts.append(f"{len(keys)} {what} ({names})")
    return f"restore: {total} subscription(s): " + "; ".join(parts)
