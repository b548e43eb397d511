"""A commit round's plain deliveries as one columnar `delivered` event (issue 35): one
list per column, read back record by record exactly, whatever the rows' order."""

from __future__ import annotations

import msgspec

from runtime.host.journal import (
    ROW_WIDTH,
    Delivery,
    DeliveryRow,
    Event,
    as_ms,
    columnar,
    columnar_ledger,
    expand,
    expand_columnar,
    first_sight,
    micros,
    row_event,
    rows_of,
)

T0 = 1_700_000_000_000
SHIFT = 5_000


def row(sub: str, offset: int, *, partition: int = 0, topic: str = "t", status: int | None = 200,
        endpoint: str | None = "http://h/a", after_ms: int = 0) -> DeliveryRow:
    return Delivery(sub, endpoint, topic, partition, offset, status, T0 + after_ms,
                    1000 + 7 * offset, T0 - 300 + offset, T0 - 40 - SHIFT + after_ms).row()


def through_json(event: Event) -> Event:
    return msgspec.json.decode(msgspec.json.encode(event), type=Event)


def test_a_round_is_one_event_with_a_table_of_subscriptions_and_a_column_per_field() -> None:
    rows = [row("a_g", 4, partition=1), row("b_g", 9, after_ms=3), row("a_g", 2),
            row("b_g", 9, after_ms=5)]  # b_g's 9 twice: a duplicate stays one
    (event,) = columnar(rows, SHIFT)
    assert (event.type, event.count, event.subscriptions, event.keys) == (
        "delivered", 4, ["a_g", "b_g"], [0, 1, 0, 1])
    assert (event.topic, event.endpoint, event.status) == ("t", "http://h/a", 200)
    assert (event.partitions, event.record_offsets) == ([1, 0, 0, 0], [4, 9, 2, 9])
    assert (event.ts_ms, event.ts_deltas_ms) == (T0, [0, 3, 0, 5])
    assert event.latencies_us == [1028, 1063, 1014, 1063]
    assert expand(through_json(event)) == [row_event(r, SHIFT) for r in rows]
    assert expand_columnar(event, "b_g") == [row_event(r, SHIFT) for r in rows[1::2]]


def test_topics_endpoints_and_statuses_that_differ_are_listed_per_table_entry() -> None:
    rows = [row("a_g", 1, topic="u"), row("a_g", 1, topic="t", status=204),
            row("b_g", 3, endpoint="http://h/b"), row("a_g", 2, topic="u")]
    (event,) = columnar(rows, SHIFT)
    assert event.subscriptions == ["a_g", "a_g", "b_g"] and event.keys == [0, 1, 2, 0]
    assert (event.topics, event.statuses) == (["u", "t", "t"], [200, 204, 200])
    assert event.endpoints == ["http://h/a", "http://h/a", "http://h/b"]
    assert expand(through_json(event)) == [row_event(r, SHIFT) for r in rows]


def test_a_row_without_status_or_endpoint_and_a_single_row_go_per_record() -> None:
    odd = row("a_g", 5, status=None)
    rows = [row("a_g", 1), odd, row("b_g", 2)]
    columnar_event, alone = columnar(rows, SHIFT)
    assert alone == row_event(odd, SHIFT) and columnar_event.count == 2
    assert columnar([odd], SHIFT) == [row_event(odd, SHIFT)]


def test_a_flat_ledger_is_read_as_the_rows_it_was_handed() -> None:
    rows = [row("a_g", 4, partition=1), row("b_g", 9, after_ms=3), row("a_g", 2)]
    ledger: list[object] = []
    for one in rows:
        ledger.extend(one)  # the egress's sink in a runtime
    assert len(ledger) == ROW_WIDTH * 3 and rows_of(ledger) == rows
    assert columnar_ledger(ledger, SHIFT) == columnar(rows, SHIFT)


def test_first_sight_numbers_values_densely_in_the_order_they_first_come() -> None:
    order, ids = first_sight(["b", "a", "b", "c", "a", "a"])
    assert (list(order), ids) == (["b", "a", "c"], [0, 1, 0, 2, 1, 1])
    assert first_sight([]) == ({}, [])


def test_a_latency_is_written_in_whole_microseconds_cut_and_a_delivery_keeps_its_own() -> None:
    assert micros([1.2349, 0.0009, 12.5]) == [1234, 0, 12500]
    assert micros([as_ms(us) for us in range(0, 3_000_000, 7)]) == list(
        range(0, 3_000_000, 7))  # Delivery.row() and back: the same integers


def test_deltas_are_from_the_first_row_and_may_be_negative() -> None:
    late, early = (Delivery("a_g", "http://h/a", "t", 0, offset, 200, T0 + offset, 1000,
                            T0 - 300 - 50 * offset, T0 - 40 - SHIFT).row() for offset in (1, 2))
    (event,) = columnar([late, early], SHIFT)
    assert (event.record_ts_ms, event.record_ts_deltas_ms) == (T0 - 350, [0, -50])
    assert event.fetched_ts_deltas_ms is None  # one fetch time: left out
    assert expand(through_json(event)) == [row_event(r, SHIFT) for r in (late, early)]


def test_a_subscription_whose_endpoint_changes_within_a_round_keeps_each_rows_own() -> None:
    rows = [row("a_g", 1), row("a_g", 2, endpoint="http://h/b"), row("a_g", 3),
            row("b_g", 1, endpoint="http://h/b")]
    (event,) = columnar(rows, SHIFT)
    assert event.subscriptions == ["a_g", "a_g", "b_g"] and event.keys == [0, 1, 0, 2]
    assert expand(through_json(event)) == [row_event(r, SHIFT) for r in rows]
