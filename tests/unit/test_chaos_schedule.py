"""The chaos schedule (tests/chaos/schedule.py): a seed replays the same faults."""

from __future__ import annotations

import pytest

from tests.chaos.schedule import (
    HELD,
    SEED_VARIABLE,
    choose,
    choose_by_kind,
    plan,
    seed_from_env,
)


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    first = plan(1234, 60)
    assert first == plan(1234, 60)
    assert first != plan(1235, 60)
    assert [f.at_s for f in first] == sorted(f.at_s for f in first)
    assert all(0 < f.at_s < 60 and 0 <= f.pick < 1 for f in first)
    assert {f.kind for f in first} <= {"kill", "pause", "update"}
    assert all((f.hold_s > 0) == (f.kind == "pause") for f in first)  # no extra kinds


def test_the_extra_faults_come_besides_and_leave_the_seeds_kills_pauses_and_updates_alone(
) -> None:
    base, extended = plan(1234, 60), plan(1234, 60, extra=True)
    assert extended == plan(1234, 60, extra=True)
    assert [f for f in extended if f.kind in ("kill", "pause", "update")] == base
    extra = [f for f in extended if f not in base]
    assert extra and {f.kind for f in extra} <= {"cut", "unsubscribe"}
    assert [f.at_s for f in extended] == sorted(f.at_s for f in extended)
    assert all((f.hold_s > 0) == (f.kind in HELD) for f in extended)


def test_a_pick_names_the_same_candidate_whatever_the_order_they_come_in() -> None:
    names = ["/root/b", "/root/a", "/root/c"]
    assert choose(names, 0.0) == "/root/a"
    assert choose(list(reversed(names)), 0.5) == "/root/b"
    assert choose(names, 0.999) == "/root/c"


def test_a_kind_with_one_actor_is_as_likely_a_victim_as_a_kind_with_many() -> None:
    candidates = {f"/d/p{i}": "PartitionActor" for i in range(20)} | {"/g/m": "Member"}
    picks = [i / 100 for i in range(100)]
    hits = [choose_by_kind(candidates, pick) for pick in picks]
    assert hits.count("/g/m") == 50
    assert len(set(hits)) == 21  # every partition actor is hit by some pick


def test_the_seed_comes_from_the_environment_for_a_replay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SEED_VARIABLE, "77")
    assert seed_from_env() == 77
    monkeypatch.delenv(SEED_VARIABLE)
    assert seed_from_env() > 0
