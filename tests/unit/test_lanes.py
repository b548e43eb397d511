"""Dispatcher: ordering modes, window, lanes, and a blocked lane that blocks only itself."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.delivery.path.lanes import Dispatcher, Mode, lane_of


@dataclass(slots=True)
class Rec:
    offset: int
    key: bytes | None = None


def key_of(record: Rec) -> bytes | None:
    return record.key


def dispatcher(mode: Mode, window: int = 10, lanes: int = 4) -> Dispatcher[Rec]:
    return Dispatcher(mode, window, lanes, key_of)


def offer_all(d: Dispatcher[Rec], keys: list[bytes | None]) -> list[Rec]:
    records = [Rec(offset, key) for offset, key in enumerate(keys)]
    for record in records:
        d.offer(record)
    return records


def offsets(records: list[Rec]) -> list[int]:
    return [r.offset for r in records]


# Lanes of these keys with lanes=4, computed once with zlib.crc32 (see the stable-hash test).
A, B, C, D = b"a", b"b", b"d", b"e"  # lanes 3, 1, 0, 2
A_TWIN = b"c"  # also lane 3


def test_keys_map_to_lanes_by_a_stable_hash_not_the_salted_builtin() -> None:
    assert lane_of(b"order-42", 16) == 14
    assert [lane_of(k, 4) for k in (A, B, C, D, A_TWIN)] == [3, 1, 0, 2, 3]


# --- mode none -------------------------------------------------------------------------


def test_none_mode_starts_up_to_the_window_in_arrival_order() -> None:
    d = dispatcher("none", window=3)
    records = offer_all(d, [None] * 5)
    assert offsets(d.ready()) == [0, 1, 2]
    assert d.ready() == []
    assert (d.inflight, d.buffered) == (3, 2)
    d.done(records[1])
    assert offsets(d.ready()) == [3]


def test_none_mode_ignores_keys() -> None:
    d = dispatcher("none", window=3)
    offer_all(d, [A, A, A])
    assert offsets(d.ready()) == [0, 1, 2]


# --- mode partition --------------------------------------------------------------------


def test_partition_mode_starts_one_record_at_a_time_in_order() -> None:
    d = dispatcher("partition", window=50)
    records = offer_all(d, [A, B, None])
    started = []
    while d.buffered or d.inflight:
        batch = d.ready()
        assert len(batch) == 1
        started += batch
        d.done(batch[0])
    assert started == records


def test_partition_mode_a_retried_record_blocks_everything() -> None:
    d = dispatcher("partition")
    offer_all(d, [A, B, None])
    assert offsets(d.ready()) == [0]
    # record 0 is being retried: its owner does not call done()
    assert d.ready() == []
    assert d.ready() == []


# --- mode key --------------------------------------------------------------------------


def test_key_mode_keeps_records_of_one_key_in_order_one_at_a_time() -> None:
    d = dispatcher("key")
    records = offer_all(d, [A, A, A])
    for record in records:
        assert d.ready() == [record]
        assert d.ready() == []
        d.done(record)


def test_key_mode_runs_different_keys_in_parallel() -> None:
    d = dispatcher("key")
    offer_all(d, [A, B, C, D, A, B])
    assert offsets(d.ready()) == [0, 1, 2, 3]


def test_a_blocked_lane_does_not_block_other_keys_behind_it() -> None:
    d = dispatcher("key")
    records = offer_all(d, [A, A, A, B, B, C])
    assert offsets(d.ready()) == [0, 3, 5]
    d.done(records[3])  # B's first record delivered; A's first is still being retried
    d.done(records[5])
    assert offsets(d.ready()) == [4]
    assert (d.inflight, d.buffered) == (2, 2)


def test_keys_that_share_a_lane_wait_for_each_other() -> None:
    d = dispatcher("key")
    records = offer_all(d, [A, A_TWIN])
    assert d.ready() == [records[0]]
    assert d.ready() == []
    d.done(records[0])
    assert d.ready() == [records[1]]


def test_key_mode_respects_the_window_across_lanes() -> None:
    d = dispatcher("key", window=2)
    records = offer_all(d, [A, B, C, D])
    assert offsets(d.ready()) == [0, 1]
    d.done(records[0])
    assert offsets(d.ready()) == [2]


def test_null_keys_have_no_order_and_take_a_slot_but_no_lane() -> None:
    d = dispatcher("key", window=4)
    offer_all(d, [None, None, None, A, A])
    assert offsets(d.ready()) == [0, 1, 2, 3]
    assert repr(d) == "<Dispatcher mode=key inflight=4/4 buffered=1 lanes_busy=1/4>"


def test_an_empty_key_is_a_key_and_keeps_its_order() -> None:
    d = dispatcher("key")
    offer_all(d, [b"", b""])
    assert offsets(d.ready()) == [0]


def test_a_freed_slot_goes_to_the_oldest_record_that_may_start() -> None:
    d = dispatcher("key", window=1)
    records = offer_all(d, [A, None, B, A])
    order = []
    while d.buffered or d.inflight:
        (record,) = d.ready()
        order.append(record.offset)
        d.done(record)
    assert order == offsets(records)


def test_a_lane_freed_behind_younger_records_still_starts_in_arrival_order() -> None:
    d = dispatcher("key", window=2)
    records = offer_all(d, [A, B, A, C, D])
    assert offsets(d.ready()) == [0, 1]
    d.done(records[0])
    d.done(records[1])
    assert offsets(d.ready()) == [2, 3]


# --- misuse and housekeeping -----------------------------------------------------------


def test_done_for_a_record_never_started_is_rejected() -> None:
    d = dispatcher("none")
    (record,) = offer_all(d, [None])
    with pytest.raises(ValueError, match="not in flight"):
        d.done(record)


def test_done_twice_is_rejected_so_a_slot_is_never_freed_twice() -> None:
    d = dispatcher("key")
    (record,) = offer_all(d, [A])
    d.ready()
    d.done(record)
    with pytest.raises(ValueError, match="not in flight"):
        d.done(record)


def test_done_needs_the_started_object_not_an_equal_copy() -> None:
    d = dispatcher("none")
    (record,) = offer_all(d, [None])
    d.ready()
    with pytest.raises(ValueError, match="not in flight"):
        d.done(Rec(record.offset, record.key))
    d.done(record)


def test_drop_buffered_returns_unstarted_records_in_arrival_order() -> None:
    d = dispatcher("key", window=2)
    records = offer_all(d, [A, B, None, A, C])
    started = d.ready()
    assert offsets(d.drop_buffered()) == [2, 3, 4]
    assert (d.inflight, d.buffered) == (2, 0)
    for record in started:
        d.done(record)
    assert d.ready() == []
    d.offer(Rec(9, A))
    assert offsets(d.ready()) == [9]
    assert records[0] in started


@pytest.mark.parametrize(
    ("mode", "window", "lanes", "message"),
    [("fifo", 1, 1, "mode"), ("key", 0, 1, "window"), ("key", 1, 0, "lanes")],
)
def test_invalid_settings_are_rejected(mode: str, window: int, lanes: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Dispatcher(mode, window, lanes, key_of)  # type: ignore[arg-type]


def test_repr_shows_window_and_buffer() -> None:
    d = dispatcher("partition", window=50)
    offer_all(d, [A, B])
    d.ready()
    assert repr(d) == "<Dispatcher mode=partition inflight=1/1 buffered=1>"


# --- scale and properties --------------------------------------------------------------


def test_a_large_window_over_a_deep_buffer_drains_in_linearithmic_work() -> None:
    d = Dispatcher("key", 1000, 256, key_of)
    total = 30_000
    for offset in range(total):
        d.offer(Rec(offset, b"%d" % (offset % 3000)))
    finished = 0
    while d.buffered or d.inflight:
        batch = d.ready()
        assert d.inflight <= 1000
        for record in batch:
            d.done(record)
        finished += len(batch)
    assert finished == total


Op = tuple[str, int]
KEYS: list[bytes | None] = [None, A, B, C, D, A_TWIN, b"f", b"g"]


def ops() -> st.SearchStrategy[list[Op]]:
    offer = st.tuples(st.just("offer"), st.integers(0, len(KEYS) - 1))
    done = st.tuples(st.just("done"), st.integers(0, 1_000))
    ready = st.tuples(st.just("ready"), st.just(0))
    return st.lists(st.one_of(offer, done, ready), max_size=80)


class Model:
    """What the dispatcher promises, checked from the outside."""

    def __init__(self, mode: Mode, window: int, lanes: int) -> None:
        self.mode, self.window, self.lanes = mode, window, lanes
        self.buffered: list[Rec] = []
        self.inflight: list[Rec] = []
        self.started: list[Rec] = []

    def lane(self, record: Rec) -> int | None:
        if self.mode == "partition":
            return 0
        if self.mode == "none" or record.key is None:
            return None
        return lane_of(record.key, self.lanes)

    def check_started(self, batch: list[Rec]) -> None:
        for record in batch:
            assert record is self.first_startable(record)
            self.buffered.remove(record)
            self.inflight.append(record)
            self.started.append(record)
        assert len(self.inflight) <= (1 if self.mode == "partition" else self.window)
        self.check_lanes_single_flight()
        self.check_nothing_startable_left()

    def first_startable(self, record: Rec) -> Rec:
        """The oldest buffered record of the same lane (or itself, if it has none)."""
        lane = self.lane(record)
        if lane is None:
            return record
        return next(r for r in self.buffered if self.lane(r) == lane)

    def check_lanes_single_flight(self) -> None:
        busy = [self.lane(r) for r in self.inflight if self.lane(r) is not None]
        assert len(busy) == len(set(busy))

    def check_nothing_startable_left(self) -> None:
        limit = 1 if self.mode == "partition" else self.window
        if len(self.inflight) >= limit:
            return
        busy = {self.lane(r) for r in self.inflight}
        for record in self.buffered:
            lane = self.lane(record)
            assert lane is not None and lane in busy, f"{record} could have started"


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["none", "partition", "key"]), st.integers(1, 4), st.integers(1, 4), ops())
def test_dispatcher_keeps_its_promises_under_any_interleaving(
    mode: Mode, window: int, lanes: int, operations: list[Op]
) -> None:
    d, model = Dispatcher(mode, window, lanes, key_of), Model(mode, window, lanes)
    next_offset = 0
    for op, arg in operations:
        if op == "offer":
            record = Rec(next_offset, KEYS[arg])
            next_offset += 1
            d.offer(record)
            model.buffered.append(record)
        elif op == "done" and model.inflight:
            record = model.inflight.pop(arg % len(model.inflight))
            d.done(record)
        elif op == "ready":
            model.check_started(d.ready())
        assert (d.buffered, d.inflight) == (len(model.buffered), len(model.inflight))
    while model.buffered or model.inflight:  # everything eventually starts
        model.check_started(d.ready())
        assert model.inflight, "records are buffered but nothing can start"
        d.done(model.inflight.pop(0))
    assert_orders_kept(mode, model)


def assert_orders_kept(mode: Mode, model: Model) -> None:
    if mode == "partition":
        assert offsets(model.started) == sorted(offsets(model.started))
    if mode == "key":
        for key in {r.key for r in model.started if r.key is not None}:
            same = [r.offset for r in model.started if r.key == key]
            assert same == sorted(same)
