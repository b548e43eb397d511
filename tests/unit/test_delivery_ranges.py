"""First-attempt deliveries journaled in bulk (issue 35): since columnar deliveries, the
ledger's rows as one columnar `delivered` event ahead of the commit that passes them
(until then a cursor's as one ranged event, still read), and read back record by
record."""

from __future__ import annotations

from pathlib import Path

import msgspec

from runtime.host.app import Runtime
from runtime.host.config import parse_config
from runtime.host.journal import (
    RANGE_MAX_AGE_MS,
    RANGE_MAX_RECORDS,
    Delivery,
    DeliveryRanges,
    Event,
    Journal,
    closed_segments,
    commit_round,
    committed_positions,
    expand,
    ranged,
)
from runtime.kernel.actor import Lifecycle
from runtime.kernel.clock import FakeClock

T0 = 1_700_000_000_000
URL = "http://127.0.0.1:9/hook"
SHIFT = FakeClock().wall_ms() - FakeClock().monotonic_ms()
decoder = msgspec.json.Decoder(Event)


def delivered(offset: int, *, sub: str = "s_g", partition: int = 0, status: int = 200,
              after_ms: int = 0) -> Delivery:
    """As the egress emits a plain first-attempt delivery (`fetched_ms` monotonic)."""
    return Delivery(sub, URL, "t", partition, offset, status, T0 + after_ms,
                    1250 + 10 * offset, T0 - 500 + offset, T0 - 40 - SHIFT)


def retried(offset: int) -> Event:
    return Event(type="delivered", ts_ms=T0, subscription="s_g", endpoint=URL, topic="t",
                 partition=0, offset=offset, attempt=2, status=200, latency_ms=1.0)


def committed(offset: int, *, sub: str = "s_g", partition: int = 0) -> Event:
    return Event(type="committed", ts_ms=T0 + 100, subscription=sub, topic="t",
                 partition=partition, offset=offset)


def lines(directory: Path) -> list[Event]:
    return [decoder.decode(line) for path in closed_segments(directory)
            for line in path.read_bytes().splitlines()]

def runtime_with_journal(tmp_path: Path, *, enabled: bool) -> Runtime:
    """A runtime not started, its journal (on or off) under `tmp_path`."""
    return Runtime(parse_config({
        "brokers": [{"name": "Kafka", "bootstrap_servers": "127.0.0.1:9"}],
        "journal": {"dir": str(tmp_path / "journal"), "enabled": enabled},
    }), clock=FakeClock())



async def test_a_commit_writes_the_deliveries_so_far_as_one_columnar_event_ahead_of_it(
        tmp_path: Path) -> None:
    journal = Journal(tmp_path, clock=FakeClock())
    await journal.open()
    events = [delivered(offset, after_ms=offset) for offset in (2, 0, 1, 5, 3)]
    events.append(delivered(0, sub="other_g"))  # another cursor: in the same event
    for event in events:  # answers come back out of order
        journal.emit(event)
    journal.emit(committed(6))
    assert journal.buffered == 2
    await journal.stop()

    deliveries, commit = lines(tmp_path)
    assert commit.type == "committed"
    assert (deliveries.count, deliveries.subscriptions, deliveries.record_offsets) == (
        6, ["s_g", "other_g"], [2, 0, 1, 5, 3, 0])
    assert deliveries.fetched_ts_deltas_ms is None  # one fetch
    assert expand(deliveries) == [event.event(SHIFT) for event in events]


def test_a_ranged_delivery_expands_to_the_per_record_events_it_stands_for() -> None:
    events = [delivered(offset, after_ms=7 * offset) for offset in (10, 11, 11, 14)]
    (one,) = ranged([e.row() for e in events], SHIFT)  # as journals wrote it until now
    assert one.offsets == "10-11,11,14"
    assert expand(one) == [event.event(SHIFT) for event in events]


async def test_events_other_than_a_delivery_are_written_as_they_came(
        tmp_path: Path) -> None:
    journal = Journal(tmp_path, clock=FakeClock())
    await journal.open()
    kept = [retried(1), Event(type="delivered", ts_ms=T0, subscription="s_g", topic="t",
                              partition=0, offset=2, attempt=1, reason="skipped: dup"),
            Event(type="failed", ts_ms=T0, subscription="s_g", topic="t", partition=0,
                  offset=3, attempt=1, status=500, latency_ms=2.0, fetched_ts_ms=T0 - 40)]
    for event in kept:
        journal.emit(event)
    assert journal.buffered == 3
    await journal.stop()

    assert lines(tmp_path) == kept


async def test_deliveries_go_out_at_a_commit_and_at_stop(tmp_path: Path) -> None:
    journal = Journal(tmp_path, clock=FakeClock())
    await journal.open()
    for offset in range(RANGE_MAX_RECORDS):
        journal.emit(delivered(offset))
    journal.emit(delivered(0, partition=1))
    assert journal.buffered == 0  # in the ledger until a commit (or late flush) files it
    journal.emit(committed(0, sub="other_g"))
    assert journal.buffered == 2  # the thousand and one, as one event; the commit

    journal.emit(delivered(0, partition=2))
    await journal.stop()
    assert journal.written == 3
    assert sum(len(expand(e)) for e in lines(tmp_path)) == RANGE_MAX_RECORDS + 3


def test_the_book_keeps_cursors_and_statuses_apart_and_releases_the_oldest_first() -> None:
    ranges = DeliveryRanges()
    assert ranges.file([delivered(0, partition=0).row()], SHIFT) == []
    assert ranges.release_older(ticks=2, shift_ms=SHIFT) == []  # one tick old
    assert ranges.file([delivered(1, partition=1, status=204).row(),
                        delivered(0, partition=1).row()], SHIFT) == []
    assert len(ranges) == 3

    assert [e.partition for e in ranges.release_older(ticks=2, shift_ms=SHIFT)] == [0]
    assert ranges.release(("s_g", "t", 0), SHIFT) == []
    assert [e.status for e in ranges.release_all(SHIFT)] == [200, 204]
    assert len(ranges) == 0


def test_a_delivered_listener_hears_the_event_a_delivery_stands_for(tmp_path: Path) -> None:
    runtime = runtime_with_journal(tmp_path, enabled=False)
    heard: list[Event] = []
    runtime.listen("delivered", heard.append)

    runtime._emit(delivered(4))  # what the actors' emit sink is

    assert heard == [delivered(4).event(SHIFT)]


async def test_a_commit_round_is_one_event_ahead_of_which_its_cursors_deliveries_go(
        tmp_path: Path) -> None:
    journal = Journal(tmp_path, clock=FakeClock())
    await journal.open()
    for one in (delivered(0), delivered(0, partition=1), delivered(1),
                delivered(0, sub="idle_g")):
        journal.ledger.extend(one.row())  # as the egress hands a row over in a runtime
    journal.emit(commit_round(T0 + 100, [("s_g", "t", 0, 2), ("s_g", "t", 1, 1),
                                         ("x_g", "u", 3, 9)]))
    assert (journal.buffered, journal.ledger) == (2, [])  # idle_g's goes out too
    await journal.stop()

    deliveries, round_ = lines(tmp_path)
    assert [(e.subscription, e.partition, e.offset) for e in expand(deliveries)] == [
        ("s_g", 0, 0), ("s_g", 1, 0), ("s_g", 0, 1), ("idle_g", 0, 0)]
    assert (round_.subscriptions, round_.topics, round_.partitions, round_.positions) == (
        ["s_g", "s_g", "x_g"], ["t", "t", "u"], [0, 1, 3], [2, 1, 9])
    assert [(e.subscription, e.topic, e.partition, e.offset) for e in expand(round_)] == [
        ("s_g", "t", 0, 2), ("s_g", "t", 1, 1), ("x_g", "u", 3, 9)]


def test_a_round_of_one_topic_names_it_once_and_a_round_of_one_is_the_old_event() -> None:
    round_ = commit_round(T0, [("s_g", "t", 0, 2), ("r_g", "t", 1, 5)])
    assert (round_.topic, round_.topics, round_.subscription) == ("t", None, None)
    assert committed_positions(round_) == [("s_g", "t", 0, 2), ("r_g", "t", 1, 5)]
    assert commit_round(T0, [("s_g", "t", 0, 2)]) == Event(
        type="committed", ts_ms=T0, subscription="s_g", topic="t", partition=0, offset=2)


async def test_in_a_runtime_the_egress_sink_is_the_journals_ledger_extend(
        tmp_path: Path) -> None:
    runtime = runtime_with_journal(tmp_path, enabled=True)
    heard: list[Event] = []
    runtime.listen("delivered", heard.append)
    sink = runtime.system.root.context.delivered
    assert type(sink) is type([].append)  # a C method: no Python frame per delivery

    journal = await runtime._open_journal()
    assert journal is not None
    sink(delivered(4).row())
    assert journal.ledger == list(delivered(4).row()) and heard == []  # flat
    await journal.stop()
    assert heard == [delivered(4).event(SHIFT)]  # heard as the journal filed it
    assert [(e.offset, e.count) for e in lines(tmp_path / "journal")] == [(4, None)]


def test_a_committed_listener_hears_a_round_position_by_position(tmp_path: Path) -> None:
    runtime = runtime_with_journal(tmp_path, enabled=False)
    heard: list[Event] = []
    runtime.listen("committed", heard.append)

    runtime._emit(commit_round(T0, [("s_g", "t", 0, 2), ("r_g", "t", 1, 5)]))

    assert [(e.subscription, e.partition, e.offset) for e in heard] == [
        ("s_g", 0, 2), ("r_g", 1, 5)]


async def test_without_a_commit_the_ledger_is_filed_by_the_flushes_of_half_the_max_age(
        tmp_path: Path) -> None:
    journal = Journal(tmp_path, clock=FakeClock())
    await journal.open()
    journal.ledger.extend(delivered(3).row())
    half = RANGE_MAX_AGE_MS // journal.flush_interval_ms // 2
    for _ in range(half - 1):
        await journal.flush()
    assert journal.ledger != []  # left for a commit: a cursor's rows side by side
    await journal.flush()
    assert journal.ledger == [] and journal.written == 1  # filed and written
    await journal.stop()
    assert [(e.offset, e.latency_ms) for e in lines(tmp_path)] == [(3, 1.28)]


async def test_a_ledger_that_is_not_whole_rows_is_dropped_and_said_not_misread(
        tmp_path: Path) -> None:
    journal = Journal(tmp_path, clock=FakeClock())
    await journal.open()
    journal.ledger.extend(delivered(0).row())
    journal.ledger.append(delivered(1).row())  # a sink fed a row whole: the ledger is flat
    journal.emit(committed(2))
    await journal.stop()

    assert journal.dropped == 1
    assert [(e.type, e.reason) for e in lines(tmp_path)] == [
        ("committed", None), ("journal_dropped", "malformed")]


def test_an_actor_crashed_listener_hears_the_supervisors_report(tmp_path: Path) -> None:
    """Lifecycle events reach the listeners of their type as every other event does (they
    were journaled only: a listener of `actor_crashed` heard nothing)."""
    runtime = runtime_with_journal(tmp_path, enabled=False)
    heard: list[Event] = []
    runtime.listen("actor_crashed", heard.append)

    runtime._lifecycle(Lifecycle("actor_crashed", "/hookstream/groups/x", T0, "boom"))
    runtime._lifecycle(Lifecycle("actor_started", "/hookstream/groups/x", T0 + 1))

    assert [(e.type, e.actor, e.reason) for e in heard] == [
        ("actor_crashed", "/hookstream/groups/x", "boom")]
