"""Per-origin decisions on plain `now` integers: the circuit breaker, the token bucket,
throttling by Retry-After."""

from __future__ import annotations

from collections import deque

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from actors.delivery.egress.origin import (
    DEFAULT_OPEN_MS,
    BreakerSettings,
    CircuitBreaker,
    Origin,
    Origins,
    TokenBucket,
    origin_of,
)


def test_origins_are_scheme_host_and_port() -> None:
    assert origin_of("http://Example.com/a?b") == "http://example.com:80"
    assert origin_of("https://example.com:8443/x") == "https://example.com:8443"
    origins = Origins()
    assert origins.get("http://h:1/a") is origins.get("http://h:1/b")
    assert origins.get("http://h:1/a") is not origins.get("http://h:2/a")


def test_an_origin_without_settings_takes_the_configs_default_connection_limit() -> None:
    assert Origins().get("http://h:1/").max_connections == 512  # issue 37: 1000 before
    assert Origin("h").max_connections == 512


def test_the_breaker_opens_at_the_failure_ratio_probes_once_then_closes() -> None:
    breaker = CircuitBreaker(failure_ratio=0.5, min_requests=4, open_ms=1000)
    for ok in (True, False, True):
        assert breaker.record(ok, 0) is None  # 3 answers: below min_requests
    assert breaker.record(False, 1) == "open"  # 2 of 4 failed
    assert not breaker.allow(500) and breaker.retry_at() == 1001
    assert breaker.allow(1001)  # the probe
    assert not breaker.allow(1002)  # only one while half-open
    assert breaker.record(True, 1100) == "closed"
    assert breaker.allow(1101)


def test_a_failed_probe_opens_it_again() -> None:
    breaker = CircuitBreaker(failure_ratio=0.5, min_requests=2, open_ms=100)
    breaker.record(False, 0)
    assert breaker.record(False, 0) == "open"
    assert breaker.allow(100)
    assert breaker.record(False, 150) == "open" and not breaker.allow(200)


def test_old_answers_leave_the_window() -> None:
    breaker = CircuitBreaker(failure_ratio=0.5, min_requests=2, window_ms=1000)
    breaker.record(False, 0)
    breaker.record(True, 2000)  # the failure at 0 is out of the window
    assert breaker.record(True, 2001) is None and breaker.state == "closed"


def test_the_bucket_allows_a_burst_then_the_rate() -> None:
    bucket = TokenBucket(rate=2)
    assert [bucket.take(0) for _ in range(3)] == [0, 0, 501]
    assert bucket.take(500) == 0


def test_an_origin_holds_off_while_throttled_or_open() -> None:
    origin = Origin("http://h:1")
    assert origin.wait_ms(0) is None
    origin.throttle(5000)
    assert origin.wait_ms(1000) == 4000
    assert origin.wait_ms(5000) is None
    origin.limit_rate(10)
    origin.limit_rate(50)  # the strictest applies
    assert origin.bucket is not None and origin.bucket.rate == 10


def test_a_url_that_cannot_be_parsed_is_its_own_origin() -> None:
    assert origin_of("http://h:99999/x") == "http://h:99999/x"


def test_a_disabled_breaker_lets_everything_through() -> None:
    breaker = CircuitBreaker(enabled=False, min_requests=1)
    assert breaker.record(False, 0) is None and breaker.allow(1)


def test_every_breaker_transition_is_kept_once_for_the_egress_to_report() -> None:
    breaker = CircuitBreaker(failure_ratio=0.5, min_requests=2, open_ms=100)
    breaker.record(False, 0)
    breaker.record(False, 10)
    assert breaker.allow(110) and breaker.record(True, 120) == "closed"
    moves = [(t.before, t.after, t.at_ms) for t in breaker.take_transitions()]
    assert moves == [("closed", "open", 10), ("open", "half_open", 110),
                     ("half_open", "closed", 120)]
    assert breaker.take_transitions() == []


def test_an_origin_hands_each_transition_out_once_and_keeps_the_latest_newest_first(
        ) -> None:
    origin = Origin("http://h:1", CircuitBreaker(min_requests=2, open_ms=100))
    assert origin.take_transitions() == ()
    origin.answered(False, 0)
    origin.answered(False, 10)
    assert [t.after for t in origin.take_transitions()] == ["open"]
    assert origin.take_transitions() == () and origin.state == "open"
    assert origin.hold(110) is None  # the probe goes
    origin.answered(True, 120)
    assert [t.after for t in origin.take_transitions()] == ["half_open", "closed"]
    shown = msgspec.to_builtins(origin.status(now_mono_ms=200, now_wall_ms=1_000_200)
                                )["transitions"]
    assert shown == [
        {"at": 1_000_120, "from": "half_open", "to": "closed", "why": "the probe succeeded"},
        {"at": 1_000_110, "from": "open", "to": "half_open", "why": "100 ms passed: one probe"},
        {"at": 1_000_010, "from": "closed", "to": "open",
         "why": "2 of the last 2 answers failed"}]


def test_an_origin_says_when_its_breaker_is_what_holds_a_request() -> None:
    origin = Origin("http://h:1", CircuitBreaker(min_requests=1, open_ms=1000))
    origin.answered(False, 0)
    held = origin.hold(10)
    assert held is not None and held.breaker and held.ms == 990
    origin.throttle(50)
    held = origin.hold(20)
    assert held is not None and not held.breaker and held.ms == 30


def test_the_strictest_settings_of_an_origins_subscriptions_apply() -> None:
    origin = Origin("http://h:1")
    origin.configure([None, 50.0, 10.0], [BreakerSettings(0.9, 50, 1000),
                                          BreakerSettings(0.2, 100, 5000)])
    assert origin.bucket is not None and origin.bucket.rate == 10.0
    breaker = origin.breaker
    assert (breaker.failure_ratio, breaker.min_requests, breaker.open_ms) == (0.2, 50, 5000)
    origin.configure([None], [])
    assert origin.bucket is None and breaker.open_ms == DEFAULT_OPEN_MS


def test_the_breaker_is_on_by_default() -> None:
    assert Origins().get("http://h:1").breaker.enabled


async def test_slots_bound_the_holders_and_serve_waiters_in_arrival_order() -> None:
    import asyncio

    from actors.delivery.egress.origin import Slots

    slots, order, holding, most = Slots(2), [], [0], [0]
    gate = asyncio.Event()

    async def use(n: int) -> None:
        async with slots:
            order.append(n)
            holding[0] += 1
            most[0] = max(most[0], holding[0])
            await gate.wait()
            holding[0] -= 1

    tasks = [asyncio.create_task(use(n)) for n in range(6)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert order == [0, 1] and slots.waiting == 4
    gate.set()
    await asyncio.gather(*tasks)
    assert order == list(range(6)) and most[0] == 2 and slots.waiting == 0


async def test_a_cancelled_waiter_gives_its_turn_to_the_next() -> None:
    import asyncio

    from actors.delivery.egress.origin import Slots

    slots = Slots(1)
    await slots.__aenter__()
    cancelled = asyncio.create_task(slots.__aenter__())
    second = asyncio.create_task(slots.__aenter__())
    await asyncio.sleep(0)
    cancelled.cancel()
    await slots.__aexit__()
    await asyncio.wait_for(second, 1)  # the slot went past the cancelled waiter
    assert cancelled.cancelled() and slots.waiting == 0


def test_a_probe_that_ends_unanswered_lets_the_next_request_probe() -> None:
    origin = Origin("http://h:1", CircuitBreaker(min_requests=1, open_ms=100))
    origin.answered(False, 0)
    assert origin.hold(100) is None  # the probe went
    held = origin.hold(101)
    assert held is not None and held.breaker
    origin.unanswered(probe=False)  # another request's cancellation: the probe stays out
    assert origin.hold(101) is not None
    origin.unanswered(probe=True)  # its worker was cancelled
    assert origin.state == "half_open"
    assert origin.hold(102) is None  # a new probe
    assert origin.hold(102) is not None  # and only one
    origin.answered(True, 103)
    assert origin.state == "closed"


class _Window:
    """The breaker's window as it was before issue 37: a tuple per answer."""

    def __init__(self, window_ms: int, min_requests: int, ratio: float) -> None:
        self.window_ms, self.min_requests, self.ratio = window_ms, min_requests, ratio
        self.answers: deque[tuple[int, bool]] = deque()

    def opens(self, ok: bool, now_ms: int) -> bool:
        while self.answers and self.answers[0][0] <= now_ms - self.window_ms:
            self.answers.popleft()
        self.answers.append((now_ms, ok))
        failures = sum(not answer for _, answer in self.answers)
        if len(self.answers) >= self.min_requests and \
                failures / len(self.answers) >= self.ratio:
            self.answers.clear()  # opened: the probe decides; a closed breaker starts afresh
            return True
        return False


@given(st.lists(st.tuples(st.integers(0, 2).map(bool), st.sampled_from([0, 0, 1, 2, 9])),
                min_size=20, max_size=400))
def test_the_window_kept_as_runs_decides_as_one_answer_each(
        answers: list[tuple[bool, int]]) -> None:
    breaker = CircuitBreaker(failure_ratio=0.5, min_requests=10, window_ms=20)
    model = _Window(20, 10, 0.5)
    now = 0
    for ok, step in answers:
        now += step  # many answers share a millisecond: runs of more than one
        opened = breaker.record(ok, now) == "open"
        assert opened == model.opens(ok, now)
        if opened:  # back to closed through a good probe, as the origin would
            breaker.allow(now + breaker.open_ms)
            assert breaker.record(True, now) == "closed"
