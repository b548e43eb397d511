"""The idle pace of group consumers (actors/shared/idle_pace.py)."""

from __future__ import annotations

import gc

from actors.shared.idle_pace import IdlePace


class Consumer:
    """Stands for a running group consumer: only its identity is counted."""


def test_a_few_consumers_keep_their_configured_wait() -> None:
    pace = IdlePace(per_consumer_ms=3, ceiling_ms=1_500)
    consumers = [Consumer() for _ in range(3)]
    for consumer in consumers:
        pace.joined(consumer)
    assert pace.idle_ms(10) == 10
    assert pace.idle_ms(500) == 500


def test_the_idle_wait_grows_with_the_consumers_up_to_the_ceiling() -> None:
    pace = IdlePace(per_consumer_ms=3, ceiling_ms=1_500)
    consumers = [Consumer() for _ in range(100)]
    for consumer in consumers:
        pace.joined(consumer)
    assert pace.idle_ms(10) == 300
    more = [Consumer() for _ in range(900)]
    for consumer in more:
        pace.joined(consumer)
    assert pace.idle_ms(10) == 1_500


def test_a_consumer_that_left_or_died_is_not_counted() -> None:
    pace = IdlePace(per_consumer_ms=3, ceiling_ms=1_500)
    kept, gone = Consumer(), Consumer()
    pace.joined(kept)
    pace.joined(gone)
    pace.joined(Consumer())  # dies without leaving
    pace.joined(kept)  # a second join counts once
    pace.left(gone)
    pace.left(gone)  # and a second leave does nothing
    gc.collect()
    assert len(pace.consumers) == 1
    assert pace.idle_ms(1) == 3
