"""Offsets as runs (runtime/report/runs.py): the follow job's per-cursor books, checked
against a plain dict of one tally per offset."""

from __future__ import annotations

import itertools
import random

import pytest

from runtime.report.runs import Run, Runs, Tally, combine, merge_intervals, subtract

FETCHED = Tally(fetches=1, last_fetched_ms=100)
DELIVERED = Tally(deliveries=1, eh=7, eh_max=7)


def expanded(runs: Runs) -> dict[int, Tally]:
    return {o: r.tally for r in runs for o in range(r.first, r.last + 1)}


def test_a_clean_cursor_is_one_run_however_many_records_it_has() -> None:
    runs = Runs()
    for start in range(0, 10_000, 100):
        runs.add(start, start + 99, FETCHED)
    assert len(runs) == 1
    for start in range(0, 10_000, 100):
        runs.add(start, start + 99, DELIVERED)
    assert list(runs) == [Run(0, 9_999, Tally(1, 1, 0, None, 7, 7))]


def test_add_returns_what_the_offsets_held_before() -> None:
    runs = Runs([Run(10, 19, FETCHED)])
    before = runs.add(5, 12, DELIVERED)
    assert before == [Run(5, 9, Tally()), Run(10, 12, FETCHED)]
    assert [r.first for r in runs] == [5, 10, 13]


def test_a_duplicate_splits_a_run_and_a_second_pass_joins_it_again() -> None:
    runs = Runs([Run(0, 99, combine(FETCHED, DELIVERED))])
    runs.add(40, 40, DELIVERED)
    assert [(r.first, r.last, r.tally.deliveries) for r in runs] == [
        (0, 39, 1), (40, 40, 2), (41, 99, 1)]
    runs.add(0, 39, DELIVERED)
    runs.add(41, 99, DELIVERED)
    assert [(r.first, r.last, r.tally.deliveries) for r in runs] == [(0, 99, 2)]


def test_a_finished_record_forgets_its_fetch_time_and_an_open_one_keeps_the_last() -> None:
    assert combine(FETCHED, Tally(fetches=1, last_fetched_ms=90)).last_fetched_ms == 100
    assert combine(FETCHED, DELIVERED).last_fetched_ms is None
    assert combine(FETCHED, Tally(dead_letters=1)).open is False
    assert combine(Tally(eh=3, eh_max=3), DELIVERED)[4:] == (3, 7)


@pytest.mark.parametrize("seed", range(20))
def test_runs_agree_with_one_tally_per_offset(seed: int) -> None:
    rng = random.Random(seed)
    runs, plain = Runs(), dict[int, Tally]()
    tallies = [FETCHED, DELIVERED, Tally(fetches=1, last_fetched_ms=200), Tally(eh=5, eh_max=5),
               Tally(dead_letters=1)]
    for _ in range(60):
        first = rng.randrange(0, 200)
        last = first + rng.choice([0, 0, 3, 20, 80])
        tally = rng.choice(tallies)
        before = runs.add(first, last, tally)
        held = {o: t for o, t in expanded(Runs(before)).items() if t != Tally()}
        assert held == {o: plain[o] for o in range(first, last + 1) if o in plain}
        assert [(r.first, r.last) for r in before] == sorted((r.first, r.last) for r in before)
        assert sum(r.size for r in before) == last - first + 1
        for offset in range(first, last + 1):
            plain[offset] = combine(plain.get(offset, Tally()), tally)
        assert expanded(runs) == plain
        listed = list(runs)
        assert all(a.last < b.first for a, b in itertools.pairwise(listed))
        assert all(a.tally != b.tally or a.last + 1 < b.first
                   for a, b in itertools.pairwise(listed))


def test_intervals_merge_and_subtract() -> None:
    assert merge_intervals([(5, 7), (1, 3), (4, 4), (10, 12), (11, 11)]) == [(1, 7), (10, 12)]
    assert subtract(0, 20, [(3, 5), (8, 8), (30, 40)]) == [(0, 2), (6, 7), (9, 20)]
    assert subtract(4, 6, [(0, 10)]) == []
    assert subtract(4, 6, []) == [(4, 6)]
    assert subtract(6, 9, [(0, 2), (5, 6)]) == [(7, 9)]
