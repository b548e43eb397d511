"""The instance member's fetch size and wait from its riders (actors/delivery/path/member/
tuning.py): a join looks at the riders that joined since the last change only (a burst of
10,000 joins must not rescan the roster each time), and the bounds still cover every
rider; after a leave they are exactly the riders'."""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from actors.delivery.document.settings import RiderSettings
from actors.delivery.path.consumer import fetch_size
from actors.delivery.path.member.tuning import FetchTuning
from actors.delivery.path.roster import Rider, Roster

KEYS = st.sampled_from([f"s{n}" for n in range(6)])
STEPS = st.lists(st.tuples(st.sampled_from(["join", "leave"]), KEYS,
                           st.integers(1, 5000), st.none() | st.integers(1, 500)),
                 max_size=40)


def rider(key: str, buffer: int, wait_ms: int | None) -> Rider:
    settings = RiderSettings(key=key, group_id=f"g-{key}", largest_buffer=buffer,
                             fetch_wait_ms=wait_ms)
    return Rider(settings, cast(Any, None), cast(Any, None))


@given(STEPS)
def test_the_bounds_cover_every_rider_and_are_exact_after_a_leave(
        steps: list[tuple[str, str, int, int | None]]) -> None:
    roster, tuning = Roster("instance"), FetchTuning()
    for action, key, buffer, wait_ms in steps:
        if action == "join":
            roster.join(rider(key, buffer, wait_ms))
        elif roster.leave(key) is not None:
            tuning.left()
        stale = tuning.stale
        tuning.note(roster.riders, roster.joins)
        sizes = [fetch_size(r.settings.largest_buffer) for r in roster.riders.values()]
        waits = [r.settings.fetch_wait_ms for r in roster.riders.values()
                 if r.settings.fetch_wait_ms is not None]
        assert tuning.records >= max(sizes, default=0)
        assert tuning.rider_wait_ms is None or not waits or tuning.rider_wait_ms <= min(waits)
        assert (tuning.rider_wait_ms is None) <= (not waits)
        if stale:
            assert tuning.records == max(sizes, default=0)
            assert tuning.rider_wait_ms == min(waits, default=None)


def test_a_burst_of_joins_looks_at_each_new_rider_once() -> None:
    roster, tuning = Roster("instance"), FetchTuning()
    looked: list[str] = []

    class Counted(dict[str, Rider]):
        def values(self) -> Any:
            values = super().values()
            return type("Seen", (), {"__reversed__": lambda _: (
                looked.append(r.settings.key) or r for r in reversed(values))})()

    for n in range(50):
        roster.join(rider(f"s{n}", n + 1, None))
        tuning.note(Counted(roster.riders), roster.joins)
    assert looked == [f"s{n}" for n in range(50)]
    assert tuning.records == fetch_size(50)
