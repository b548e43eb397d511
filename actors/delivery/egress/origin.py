"""What every subscription that pushes to one origin (scheme, host, port) shares: a
circuit breaker, a rate limit, a connection limit and the origin's own "slow down"
(429/503 with `Retry-After`). Pure decisions on `now`; the egress actors consult them.

One owner (issue 23, item 4). An `Origin` is the only code that changes its state: the
egress actors of its subscriptions call its methods (`hold`, `answered`, `throttle`,
`take_transitions`; the control actor `configure`) and never write its attributes. It
is not an actor on purpose: every push asks it whether it may go and tells it the
answer, and a message hop there would make each delivery wait for another actor's turn.
Its callers share one event loop and no method awaits, so each call runs whole and the
invariants (window counts, the single half-open probe, the history) stay inside it. The
connection limit is the one wait: `origin.slots`, the origin's own `Slots` (its
subscriptions take turns, each one's requests in arrival order). The alternative, an
owner actor that egress actors tell of transitions, would add a task and a mailbox per
origin to report what `take_transitions` already hands out exactly once.

Circuit breaker (on by default). Closed: requests go; every answer is recorded in a
sliding window of `window_ms`. When at least `min_requests` answers are in the window and
the failure ratio reaches `failure_ratio`, it opens for `open_ms`: nothing goes. Then one
probe request goes (half-open); its success closes the breaker, its failure opens it again.
While it is open (or its probe is out) the egress, per subscription:

- with bounded retries (`retryBeforeCommit` > 0, or `retryTopics`): answers each attempt
  at once with a failure that sends nothing (`circuit breaker open`) and counts as an
  attempt. The time spent open thus counts toward the retry schedule: a dead endpoint's
  records reach the retry or dead-letter topic after the same schedule as with the
  breaker off (the sum of their backoff delays), and it gets one probe per `open_ms`.
- retrying forever (`retryBeforeCommit` 0): holds the record without spending an attempt
  until the probe may go; its window fills and the partition's fetching pauses.

Every transition is handed out once (`Origin.take_transitions`, which also keeps the
last ten in `history`): the egress actor that takes it logs, journals (with its
subscription: the one that saw the change) and counts it, so each is reported once.

Settings: `subscriptionMethod.circuitBreaker` (`failureRatio`, `minRequests`, `openMs`)
and `rateLimitPerSecond`; among the subscriptions of an origin the strictest apply (lowest
ratio, fewest requests, longest open period, lowest rate; a subscription without the
setting counts with the defaults, or no rate limit). `Origin.configure` recomputes them
whenever a subscription of the origin starts.

Rate limit: a token bucket of `rate` requests per second (burst: one second's worth).
Connection limit: at most `max_connections` requests in flight to the origin across all
its subscriptions (`[egress] origin_max_connections`, 512 by default: runtime/host/
config.py says why). A request holds a connection, so that many connections at most are
open to the origin (https: per TLS context); a burst takes idle ones from the origin's
shelf first and opens a new one only when none is idle (tests/integration/
test_push_callbacks.py counts them).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Final
from urllib.parse import urlsplit

from actors.delivery.egress.status import BreakerChange, BreakerState, OriginStatus
from actors.delivery.egress.transport import Shelf
from runtime.host.config import DEFAULT_ORIGIN_MAX_CONNECTIONS

DEFAULT_FAILURE_RATIO = 0.5
DEFAULT_MIN_REQUESTS = 20
DEFAULT_OPEN_MS = 10_000
DEFAULT_WINDOW_MS = 30_000
DEFAULT_MAX_CONNECTIONS: Final = DEFAULT_ORIGIN_MAX_CONNECTIONS
HALF_OPEN_POLL_MS: Final = 100
"""How often a held request looks again while the probe is out (its answer may take up
to the subscription's `timeoutMs`)."""
HISTORY: Final = 10
TURN: Final = 16
"""Slots an origin hands to one subscription's waiters before the next one's turn."""
STATE_VALUES: Final[dict[str, int]] = {"closed": 0, "half_open": 1, "open": 2}


@dataclass(frozen=True, slots=True)
class Transition:
    """One breaker state change, at `at_ms` (monotonic: shown as epoch ms in `history`),
    with what caused it."""

    before: BreakerState
    after: BreakerState
    at_ms: int
    why: str


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    failure_ratio: float = DEFAULT_FAILURE_RATIO
    min_requests: int = DEFAULT_MIN_REQUESTS
    open_ms: int = DEFAULT_OPEN_MS


def strictest(settings: Iterable[BreakerSettings]) -> BreakerSettings:
    """The strictest of several subscriptions' settings (defaults when none)."""
    found = list(settings) or [BreakerSettings()]
    return BreakerSettings(min(s.failure_ratio for s in found),
                           min(s.min_requests for s in found),
                           max(s.open_ms for s in found))


@functools.lru_cache(maxsize=4096)
def origin_of(uri: str) -> str:
    """`scheme://host:port`; a URL that cannot be parsed is its own origin (its requests
    fail on their own, like any failure). Cached: every subscribe looks up the origin of
    every subscription (`DeliveryService._configure_origin`)."""
    try:
        parts = urlsplit(uri)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return uri
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


@dataclass(slots=True)
class CircuitBreaker:
    failure_ratio: float = DEFAULT_FAILURE_RATIO
    min_requests: int = DEFAULT_MIN_REQUESTS
    open_ms: int = DEFAULT_OPEN_MS
    window_ms: int = DEFAULT_WINDOW_MS
    enabled: bool = True
    state: BreakerState = "closed"
    opened_at: int | None = None
    # The window's answers as runs: [ms, ok, count] for answers of one millisecond and
    # one outcome (issue 37: a tuple per answer kept every answer of the last 30 s, 600,000
    # of them at 20,000 pushes a second, for the collector to walk).
    _answers: deque[list[int]] = field(default_factory=deque)
    _count: int = 0  # answers in the window
    _failures: int = 0
    _probing: bool = False
    transitions: list[Transition] = field(default_factory=list)

    def apply(self, settings: BreakerSettings) -> None:
        """New thresholds; the state and the window stay."""
        self.failure_ratio = settings.failure_ratio
        self.min_requests = settings.min_requests
        self.open_ms = settings.open_ms

    def take_transitions(self) -> list[Transition]:
        """The transitions since the last call (`Origin.take_transitions` hands them out)."""
        taken, self.transitions = self.transitions, []
        return taken

    def allow(self, now_ms: int) -> bool:
        """May a request go now? In half-open state exactly one (the probe) may."""
        if not self.enabled:
            return True
        if self.state == "open":
            assert self.opened_at is not None
            if now_ms < self.opened_at + self.open_ms:
                return False
            self.state, self._probing = "half_open", False
            self.transitions.append(Transition("open", "half_open", now_ms,
                                               f"{self.open_ms} ms passed: one probe"))
        if self.state == "half_open":
            if self._probing:
                return False
            self._probing = True
        return True

    def abandon_probe(self) -> None:
        """The probe's request ended without an answer (its worker was cancelled: a
        pause, update or unsubscribe stopped its tree): nothing was learned, so the next
        request may probe. Without this the breaker stayed half-open for good (#34)."""
        if self.state == "half_open":
            self._probing = False

    @property
    def probing(self) -> bool:
        """The half-open probe is out."""
        return self.state == "half_open" and self._probing

    def retry_at(self) -> int | None:
        """When an open breaker lets its probe go (None when it is not open)."""
        return self.opened_at + self.open_ms if self.opened_at is not None and \
            self.state == "open" else None

    def record(self, ok: bool, now_ms: int) -> BreakerState | None:
        """Record an answer; returns the new state when it changed."""
        if not self.enabled:
            return None
        if self.state == "half_open":
            self._probing = False
            return self._move("closed" if ok else "open", now_ms,
                              "the probe succeeded" if ok else "the probe failed")
        answers = self._answers
        if answers:
            if answers[0][0] <= now_ms - self.window_ms:
                self._slide(now_ms)
            last = answers[-1] if answers else None
            if last is not None and last[0] == now_ms and last[1] == ok:
                last[2] += 1
            else:
                answers.append([now_ms, ok, 1])
        else:
            answers.append([now_ms, ok, 1])
        self._failures += not ok
        count = self._count = self._count + 1
        if (self.state == "closed" and count >= self.min_requests
                and self._failures / count >= self.failure_ratio):
            return self._move("open", now_ms, f"{self._failures} of the last {count} "
                              f"answers failed")
        return None

    def _slide(self, now_ms: int) -> None:
        answers = self._answers
        while answers and answers[0][0] <= now_ms - self.window_ms:
            _, ok, count = answers.popleft()
            self._count -= count
            if not ok:
                self._failures -= count

    def _move(self, state: BreakerState, now_ms: int, why: str) -> BreakerState:
        self.transitions.append(Transition(self.state, state, now_ms, why))
        self.state = state
        self.opened_at = now_ms if state == "open" else None
        if state == "closed":
            self._answers.clear()
            self._count = self._failures = 0
        return state


@dataclass(slots=True)
class TokenBucket:
    rate: float  # tokens per second
    tokens: float = 0.0
    at_ms: int | None = None

    def take(self, now_ms: int) -> int:
        """Take a token: 0 when one is there, else how many ms until one is."""
        burst = max(self.rate, 1.0)
        if self.at_ms is None:
            self.tokens, self.at_ms = burst, now_ms
        self.tokens = min(burst, self.tokens + (now_ms - self.at_ms) * self.rate / 1000)
        self.at_ms = now_ms
        if self.tokens >= 1:
            self.tokens -= 1
            return 0
        return int((1 - self.tokens) * 1000 / self.rate) + 1


@dataclass(frozen=True, slots=True)
class Hold:
    """A request may not go now: wait `ms`; `breaker` when the circuit breaker says no."""

    ms: int
    breaker: bool = False


class Ticket:
    """A place in `Slots`' queue (`Slots.take`). When a slot is handed to it, `run` is
    called soon (a loop turn later, so a chain of hand-overs never nests); `cancel` takes
    it out (or passes on a slot handed to it that it did not use yet). A push is its own
    ticket (actors/delivery/egress/push.py: at fan-out most pushes wait for a slot, and a
    ticket and a bound method each were two young objects per push for the collector,
    issue 37); `Call` is one that runs a callback."""

    __slots__ = ("_slots", "granted", "queued")

    def __init__(self) -> None:
        self.queued = False  # waiting or handed a slot, and neither run nor cancelled
        self.granted = False
        self._slots: Slots | None = None

    def run(self) -> None:
        """The slot handed over is this ticket's holder's now (it gives it back)."""
        raise NotImplementedError

    def cancel(self) -> None:
        if not self.queued:
            return  # ran already (its holder gives the slot back) or cancelled
        self.queued = False
        slots = self._slots
        assert slots is not None  # queued by `Slots.take`
        if self.granted:
            slots.give()  # handed over, not used: pass it on
        else:
            slots.forget()


class Call(Ticket):
    """A ticket that runs `callback` when a slot is handed to it."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[], object]) -> None:
        super().__init__()
        self.callback = callback

    def run(self) -> None:
        self.callback()


class Slots:
    """A counting limit with O(1) take and give, fair between its users. An
    `asyncio.Semaphore` scans its waiters on every release and removes each woken one from
    the middle of a deque: with a thousand subscriptions of one origin waiting, that was
    the largest cost of a fan-out push (bench/RESULTS.md, "Fan-out").

    Waiters queue per user (`who`: a subscription) and the users take turns of up to
    `TURN` slots, one user's waiters in arrival order (issue 37: a subscription with a
    big pool that came first no longer holds every slot of a burst while the others
    wait). A turn of one slot cost a third more CPU per delivery at 1,000 subscribers
    than arrival order: each cursor then got its outcomes one at a time, a turn of its
    own for each; sixteen keep most of a burst's outcomes of a cursor together."""

    __slots__ = ("_free", "_granted", "_loop", "_queues", "_served", "_turns", "_waiting")

    def __init__(self, limit: int) -> None:
        self._free = limit
        # tickets handed a slot in this turn of the loop, run together in the next (issue
        # 37: a loop callback each was a handle per push at fan-out, where most pushes wait)
        self._granted: list[Ticket] = []
        # where hand-overs run, read once: `asyncio.get_running_loop()` makes a getpid()
        # system call on Python 3.11, and at fan-out most pushes are handed a slot (#37)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queues: dict[object, deque[Ticket]] = {}
        self._turns: deque[object] = deque()  # users with waiters, the current turn first
        self._served = 0  # slots handed to the current turn's user
        self._waiting = 0

    def take(self, who: object, ticket: Ticket) -> Ticket | None:
        """None: a slot is taken now. Else `ticket`, queued: its `run` is called when one
        is handed over (the holder gives it back with `give`)."""
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return None
        ticket._slots, ticket.granted, ticket.queued = self, False, True
        queue = self._queues.get(who)
        if queue is None:
            queue = self._queues[who] = deque()
            self._turns.append(who)
        queue.append(ticket)
        self._waiting += 1
        return ticket

    async def acquire(self, who: object = None) -> None:
        """Wait for a slot (give it back with `give`)."""
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        taken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ticket = self.take(who, Call(partial(_resolve, taken)))
        assert ticket is not None  # none free: it waits
        try:
            await taken
        except BaseException:
            if taken.done() and not taken.cancelled():
                self.give()  # handed over, then cancelled: pass it on
            else:
                ticket.cancel()
            raise

    def give(self) -> None:
        """A holder is done: the slot goes to the next user's turn, else back free."""
        ticket = self._next() if self._turns else None  # no call when nobody waits
        if ticket is None:
            self._free += 1
            return
        ticket.granted = True
        self._waiting -= 1
        granted = self._granted
        granted.append(ticket)
        if len(granted) > 1:
            return  # a callback to run them is on its way
        loop = self._loop
        if loop is None or not loop.is_running():  # first, or a later loop (tests)
            loop = self._loop = asyncio.get_running_loop()
        loop.call_soon(self._run_granted)

    def _run_granted(self) -> None:
        """The tickets handed a slot since the last call, in the order they were handed
        one: each one's callback, none nested inside `give` (a callback that gives a slot
        back hands it to a ticket that runs in the next call)."""
        granted, self._granted = self._granted, []
        for ticket in granted:
            if not ticket.queued:
                continue  # cancelled after the hand-over: it passed the slot on
            ticket.queued = False
            try:
                ticket.run()
            except Exception as exc:  # as the loop does for a callback of its own
                (self._loop or asyncio.get_running_loop()).call_exception_handler(
                    {"message": "origin slot hand-over failed", "exception": exc})

    def _next(self) -> Ticket | None:
        turns, queues = self._turns, self._queues
        while turns:
            who = turns[0]
            queue = queues[who]
            ticket = queue.popleft()
            while not ticket.queued and queue:  # cancelled ones are skipped
                ticket = queue.popleft()
            self._served += 1
            if not queue:
                del queues[who]
                turns.popleft()
                self._served = 0
            elif self._served >= TURN:
                turns.rotate(-1)  # the next user's turn
                self._served = 0
            if ticket.queued:
                return ticket
        return None

    def forget(self) -> None:
        """A waiting ticket was cancelled (it is skipped when its turn comes)."""
        self._waiting -= 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.give()

    @property
    def waiting(self) -> int:
        return self._waiting


def _resolve(taken: asyncio.Future[None]) -> None:
    if not taken.done():
        taken.set_result(None)


@dataclass(slots=True)
class Origin:
    """One origin's shared state, changed only by its own methods (read its attributes,
    never write them: see the module docstring)."""

    name: str
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    bucket: TokenBucket | None = None
    throttled_until: int = 0
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    _slots: Slots | None = None
    history: deque[Transition] = field(default_factory=lambda: deque(maxlen=HISTORY))
    """The latest breaker transitions handed out, newest first."""
    shelf: Shelf = field(default_factory=Shelf)
    """Idle connections every subscription of this origin reuses (egress/transport.py)."""

    @property
    def slots(self) -> Slots:
        """The origin's connection limit, shared by its subscriptions' egress actors."""
        if self._slots is None:
            self._slots = Slots(self.max_connections)
        return self._slots

    def hold(self, now_ms: int) -> Hold | None:
        """None: a request may go now (a token was taken). Else how long to hold off:
        the origin asked us to slow down, its breaker is open, or its rate is used up."""
        if now_ms < self.throttled_until:
            return Hold(self.throttled_until - now_ms)
        breaker = self.breaker
        if breaker.state == "closed" and self.bucket is None:
            return None  # what `allow` answers closed, without the call (issue 37)
        if not breaker.allow(now_ms):
            retry = self.breaker.retry_at()
            return Hold(max(retry - now_ms, 1) if retry is not None else HALF_OPEN_POLL_MS,
                        breaker=True)
        wait = self.bucket.take(now_ms) if self.bucket is not None else 0
        return Hold(wait) if wait else None

    def wait_ms(self, now_ms: int) -> int | None:
        """`hold(now)` in ms (None: go now)."""
        held = self.hold(now_ms)
        return None if held is None else held.ms

    def answered(self, ok: bool, now_ms: int) -> None:
        """A request to the origin was answered (`ok`: it counts as a success)."""
        self.breaker.record(ok, now_ms)

    def unanswered(self, probe: bool) -> None:
        """A request that `hold` let go ended without an answer (cancelled); `probe`:
        it was the half-open probe (the caller saw `probing` right after `hold`)."""
        if probe:
            self.breaker.abandon_probe()

    def take_transitions(self) -> tuple[Transition, ...]:
        """The breaker's changes since the last call, each handed out once (for its
        taker to log, journal and count) and kept in `history`. Called around every
        push: nothing changed costs no allocation."""
        if not self.breaker.transitions:
            return ()
        taken = tuple(self.breaker.take_transitions())
        self.history.extendleft(taken)
        return taken

    @property
    def state(self) -> BreakerState:
        return self.breaker.state

    def throttle(self, until_ms: int) -> None:
        """The origin asked us to slow down (429/503 with `Retry-After`) until then."""
        self.throttled_until = max(self.throttled_until, until_ms)

    def limit_rate(self, per_second: float | None) -> None:
        """The strictest rate among the subscriptions of this origin applies."""
        if per_second and (self.bucket is None or per_second < self.bucket.rate):
            self.bucket = TokenBucket(per_second)

    def configure(self, rates: Iterable[float | None],
                  breakers: Iterable[BreakerSettings]) -> None:
        """The settings of every subscription of this origin: the strictest apply."""
        limits = [rate for rate in rates if rate]
        rate = min(limits) if limits else None
        if rate is None:
            self.bucket = None
        elif self.bucket is None or self.bucket.rate != rate:
            self.bucket = TokenBucket(rate)
        self.breaker.apply(strictest(breakers))

    def status(self, now_mono_ms: int, now_wall_ms: int) -> OriginStatus:
        """What the status API shows. The decisions above run on the monotonic clock;
        every time shown is epoch ms, as `transitions[].at` is (one clock for all a user
        reads, #25): a monotonic time `t` is shown as `t + (now_wall - now_mono)`."""
        breaker, shift = self.breaker, now_wall_ms - now_mono_ms

        def wall(mono_ms: int | None) -> int | None:
            return None if mono_ms is None else mono_ms + shift

        throttled = self.throttled_until if self.throttled_until > now_mono_ms else None
        return OriginStatus(
            origin=self.name, breaker=breaker.state, breaker_enabled=breaker.enabled,
            opened_at=wall(breaker.opened_at), probe_at=wall(breaker.retry_at()),
            failure_ratio=breaker.failure_ratio, min_requests=breaker.min_requests,
            open_ms=breaker.open_ms, throttled_until=wall(throttled),
            rate_limit=self.bucket.rate if self.bucket else None,
            max_connections=self.max_connections,
            transitions=[BreakerChange(at=t.at_ms + shift, before=t.before, after=t.after,
                                       why=t.why) for t in self.history])


class Origins:
    """The registry the delivery service keeps: one `Origin` per scheme, host and port."""

    def __init__(self, breaker: bool = True,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        self.breaker = breaker
        self.max_connections = max_connections
        self._origins: dict[str, Origin] = {}

    def get(self, uri: str) -> Origin:
        name = origin_of(uri)
        found = self._origins.get(name)
        if found is None:
            found = self._origins[name] = Origin(name, CircuitBreaker(enabled=self.breaker),
                                                 max_connections=self.max_connections)
        return found

    def __iter__(self) -> Iterator[Origin]:
        return iter(self._origins.values())
