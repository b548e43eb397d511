"""The member's waves of cursor starts (actors/delivery/path/member/waves.py): claims
become starts a bounded number per turn, one wave at a time, with a rest between waves in
proportion to how long the last one took."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.delivery.path.member.waves import JOINING_MS, Waves


def _build(claim: int) -> list[int]:
    """Odd claims need no cursor (their rider left, say); even ones start one."""
    return [] if claim % 2 else [claim]


def test_a_burst_of_claims_starts_in_bounded_waves_one_at_a_time() -> None:
    waves: Waves[int] = Waves(per_wave=4, examined=32, rest=1.0)
    waves.claim(range(0, 20, 2))
    assert waves.take(0, _build) == [0, 2, 4, 6]
    assert waves.take(1, _build) is None  # one wave at a time
    assert waves.ended(10, rested=False) == 20  # it took 10 ms: a rest as long (rest=1)
    assert waves.take(15, _build) is None  # resting
    assert waves.ended(20, rested=True) is None
    assert waves.take(20, _build) == [8, 10, 12, 14]


def test_claims_that_need_no_cursor_are_passed_over_a_bounded_number_per_turn() -> None:
    waves: Waves[int] = Waves(per_wave=4, examined=8)
    waves.claim([1, 3, 5, 7, 9, 11, 13, 15, 16])
    assert waves.take(0, _build) == []  # eight passed over, and the turn ends
    assert waves.ended(0, rested=True) is None
    assert waves.take(0, _build) == [16]
    assert waves.ended(5, rested=False) is None  # nothing claimed: no rest


def test_waves_are_small_while_subscriptions_join_and_grow_back_after() -> None:
    waves: Waves[int] = Waves(per_wave=8, examined=64, rest=0.0, per_wave_joining=2)
    waves.claim(range(0, 40, 2))
    assert len(waves.take(0, _build) or []) == 8  # nobody joined yet
    waves.ended(0, rested=True)
    waves.joined(100)
    assert waves.take(100, _build) == [16, 18]
    waves.ended(100, rested=True)
    assert waves.size(100 + JOINING_MS - 1) == 2
    assert len(waves.take(100 + JOINING_MS, _build) or []) == 8  # none joined for a while


class WavesMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.waves: Waves[int] = Waves(per_wave=3, examined=7, rest=0.5, per_wave_joining=2)
        self.now = 0
        self.claimed: list[int] = []
        self.started: list[int] = []
        self.under_way = False  # a wave or its rest, as the member sees it
        self.rest_until: int | None = None
        self.began = 0

    @rule(count=st.integers(0, 10))
    def claim(self, count: int) -> None:
        first = len(self.claimed)
        new = list(range(first, first + count))
        self.claimed += new
        self.waves.claim(new)

    @rule()
    def a_subscription_joins(self) -> None:
        self.waves.joined(self.now)

    @rule(ms=st.integers(0, 600))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    @rule()
    def take(self) -> None:
        size = self.waves.size(self.now)
        joined = self.waves.joined_ms
        assert size == (2 if joined is not None and self.now - joined < JOINING_MS else 3)
        starts = self.waves.take(self.now, _build)
        if self.under_way:
            assert starts is None  # never two waves at once, never during a rest
            return
        if starts is None:
            assert not self.waves.claims
            return
        assert len(starts) <= size
        self.started += starts
        self.under_way, self.began, self.rest_until = True, self.now, None

    @precondition(lambda self: self.under_way and self.rest_until is None)
    @rule()
    def wave_ends(self) -> None:
        rest_until = self.waves.ended(self.now, rested=False)
        if rest_until is None:
            self.under_way = False
        else:  # the rest is half as long as the wave took (at least 1 ms)
            assert rest_until - self.now == max(1, round((self.now - self.began) * 0.5))
            assert self.now > self.began
            self.rest_until = rest_until

    @precondition(lambda self: self.rest_until is not None)
    @rule()
    def rest_ends(self) -> None:
        assert self.rest_until is not None
        self.now = max(self.now, self.rest_until)
        assert self.waves.ended(self.now, rested=True) is None
        self.under_way, self.rest_until = False, None

    @invariant()
    def every_claim_is_started_once_passed_over_or_waiting(self) -> None:
        waiting = list(self.waves.claims)
        assert len(set(self.started)) == len(self.started)
        assert sorted(self.started + [c for c in self.claimed if c % 2 and c not in waiting]
                      + waiting) == sorted(set(self.claimed))
        assert all(c % 2 == 0 for c in self.started)


WavesMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                          deadline=None)
test_waves_state_machine = WavesMachine.TestCase
