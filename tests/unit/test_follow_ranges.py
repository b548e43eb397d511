"""The follow job's audit on ranges (runtime/report/follow_batch.py `cursor_changes`, then
runtime/report/follow_state.py): after every micro-batch of a random journal, its counts
(records fetched, delivered, dead-lettered, lost, in flight, duplicates) equal those of
one tally per record, as the batch report keeps them. Plain Python: pandas rows stand for
what Spark collects (`follow_batch.record_rows`)."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pandas as pd
import pytest

from runtime.report.follow_batch import NO_HASH_HIGH, NO_HASH_LOW, cursor_changes
from runtime.report.follow_state import FollowState

SUBS, TOPIC, PARTITIONS, OFFSETS = ("a_g", "b_g"), "orders", (0, 1), 60
GRACE_MS = 5_000
Record = tuple[str, str, int, int]


def row(type_: str, sub: str, partition: int, offset: int | None, ts: int, *,
        ranges: str | None = None, eh: int | None = None,
        e2e: float | None = None) -> dict[str, Any]:
    return {"type": type_, "subscription": sub, "topic": TOPIC, "partition": partition,
            "cursor_id": hash((sub, TOPIC, partition)), "offset": offset, "ranges": ranges,
            "ts_ms": ts,
            "eh_low": NO_HASH_LOW if eh is None else eh,
            "eh_high": NO_HASH_HIGH if eh is None else eh, "e2e_ms": e2e}


def tick(last_ms: int) -> dict[str, Any]:
    """The batch's newest event, as the small facts carry it."""
    fact = dict.fromkeys(("s2", "s3", "n2", "v", "max_offset", "count_sum"))
    return {**fact, "kind": "tick", "s1": "committed", "n1": 0, "n": 1, "first_ms": last_ms,
            "last_ms": last_ms, **dict.fromkeys(
                ("fetches", "deliveries", "failures", "retries", "dead_letters", "started",
                 "crashed", "restarted", "stopped", "assigned", "revoked"), 0)}


class Oracle:
    """One tally per record, as `transforms.record_outcomes` keeps it."""

    def __init__(self) -> None:
        self.records: dict[Record, list[int]] = defaultdict(lambda: [0, 0, 0, -1])
        self.filtered: dict[tuple[str, str, int], set[int]] = defaultdict(set)
        self.latest = 0

    def add(self, event: dict[str, Any]) -> None:
        cursor = (event["subscription"], TOPIC, event["partition"])
        self.latest = max(self.latest, event["ts_ms"])
        offsets = ([o for part in event["ranges"].split(",")
                    for o in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)]
                   if event["ranges"] else [event["offset"]])
        if event["type"] == "filtered":
            self.filtered[cursor].update(offsets)
            return
        for offset in offsets:
            tally = self.records[(*cursor, offset)]
            if event["type"] == "fetched":
                tally[0] += 1
                tally[3] = max(tally[3], event["ts_ms"])
            tally[1] += event["type"] == "delivered"
            tally[2] += event["type"] == "dead_lettered"

    def figures(self) -> dict[str, Any]:
        lost, in_flight = set(), 0
        for key, (f, d, x, fetched_ms) in self.records.items():
            if f and not d and not x and key[3] not in self.filtered[key[:3]]:
                if self.latest - fetched_ms >= GRACE_MS:
                    lost.add(key)
                else:
                    in_flight += 1
        tallies = self.records.values()
        return {
            "records_fetched": sum(1 for t in tallies if t[0]),
            "delivered": sum(1 for t in tallies if t[1]),
            "dead_lettered": sum(1 for t in tallies if t[2]),
            "lost": sorted(lost), "in_flight": in_flight,
            "duplicates": sorted((k, t[1]) for k, t in self.records.items() if t[1] > 1),
        }


def figures(state: FollowState) -> dict[str, Any]:
    lost, in_flight = state.lost_and_in_flight(GRACE_MS)
    groups = [g for g in state.aggregates(GRACE_MS, 1_000).groups if g["view"] == "partition"]
    return {
        **{name: sum(g[name] for g in groups)
           for name in ("records_fetched", "delivered", "dead_lettered")},
        "lost": sorted(key for run in lost for key in run.records()),
        "in_flight": sum(run.size for run in in_flight),
        "duplicates": sorted((key, tally.deliveries) for key, tally in state.duplicates()),
    }


def random_batch(rng: random.Random, ts: int) -> list[dict[str, Any]]:
    events = []
    for _ in range(rng.randrange(1, 12)):
        sub, partition = rng.choice(SUBS), rng.choice(PARTITIONS)
        first = rng.randrange(0, OFFSETS)
        last = min(OFFSETS, first + rng.choice([0, 4, 20]))
        at = ts + rng.randrange(0, 1_000)
        kind = rng.choices(["fetched", "delivered", "dead_lettered", "failed", "filtered",
                            "fetched-one"], [5, 6, 1, 1, 1, 1])[0]
        if kind in ("fetched", "filtered"):
            ranges = f"{first}-{last}" if rng.random() < 0.7 else f"{first},{last}"
            events.append(row(kind, sub, partition, first, at, ranges=ranges))
        elif kind == "fetched-one":
            events.append(row("fetched", sub, partition, first, at))
        else:
            eh = rng.choice([11, 11, 11, 22, None]) if kind != "dead_lettered" else None
            for offset in range(first, last + 1):
                e2e = float(rng.randrange(5, 5_000)) if kind == "delivered" else None
                events.append(row(kind, sub, partition, offset, at, eh=eh, e2e=e2e))
    return events


@pytest.mark.parametrize("seed", range(4))
def test_every_micro_batch_counts_as_one_tally_per_record(seed: int) -> None:
    rng = random.Random(seed)
    state, oracle = FollowState(), Oracle()
    for batch_id in range(25):
        events = random_batch(rng, 1_000 * batch_id)
        changes = cursor_changes(pd.DataFrame(events))
        changes.facts = [tick(max(e["ts_ms"] for e in events))]
        previous = state.encode()
        state.apply(changes, batch_id)
        for event in events:
            oracle.add(event)
        assert figures(state) == oracle.figures(), f"batch {batch_id}"
        replayed = FollowState.decode(previous)  # Spark runs the batch again after a crash
        replayed.apply(cursor_changes(pd.DataFrame(events)), batch_id)
        replayed.facts = state.facts
        assert replayed.encode() == state.encode()


def test_a_clean_cursor_is_one_run_and_its_latencies_count_once() -> None:
    state = FollowState()
    fetched = [row("fetched", "a_g", 0, 0, 1_000, ranges="0-999")]
    delivered = [row("delivered", "a_g", 0, o, 1_100, eh=11, e2e=float(100 + o % 3))
                 for o in range(1_000)]
    state.apply(cursor_changes(pd.DataFrame(fetched + delivered)), 0)
    again = [row("delivered", "a_g", 0, 5, 1_200, eh=11, e2e=900.0)]  # a duplicate
    state.apply(cursor_changes(pd.DataFrame(again)), 1)
    assert [len(runs) for runs in state.cursors.values()] == [3]
    assert state.e2e == {("a_g", 11): {100.0: 334, 101.0: 333, 102.0: 333}}
    assert [(key[3], tally.deliveries) for key, tally in state.duplicates()] == [(5, 2)]
    assert state.open_records() == 0


def test_an_unreadable_range_names_its_first_offset_only() -> None:
    changes = cursor_changes(pd.DataFrame([row("fetched", "a_g", 0, 7, 1_000, ranges="7-x")]))
    (cursor,) = changes.cursors.values()
    assert [(r.first, r.last) for r in cursor.runs] == [(7, 7)]
