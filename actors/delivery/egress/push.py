"""One record's HTTP push as callbacks, without a task of its own (issue 37).

A worker task per push in flight, parked between records, woken by a future per record,
was most of what a delivery cost beyond the request itself at fan-out: a thousand
subscriptions each woke a worker for every two or three records (bench/RESULTS.md,
"Fan-out, third session"). A `Push` is a small object instead, moved on by whatever its
step waits for (a batch's `Push` may first linger on an alarm for more records):

    begin -> the origin says go            (else a clock alarm tries again, or the
          |                                 breaker fails it at once: bounded retries)
          -> an origin slot is ours         (else the push waits as its own ticket
          |                                 for one: `run` when it is handed one)
          -> the transport's `start`        (the lean one writes on a shelved connection;
          |                                 its total timeout is a loop timer)
          -> `_answered` by the transport   (the lean one from its parser callbacks; the
          |                                 push is its own `Done`: `__call__`)
          -> the egress records the outcome and tells the cursor, and starts the next
             record it holds

The egress (`EgressActor`) owns its pushes: it counts them against its `pool` (the
subscription's concurrency is that count, not parked tasks), and when it stops it gives
up every push still under way (`abandon`): nothing is told, the origin's slot and a
half-open probe are handed back, the request's connection is closed. A step that raises
crashes the egress (it tells itself the error), as an error in an owned task does.
"""

from __future__ import annotations

import time
from typing import Protocol

from actors.delivery.egress.batching import Queued
from actors.delivery.egress.origin import Origin, Slots, Ticket
from actors.delivery.egress.outlet import Answer
from actors.delivery.egress.transport import Done, Exchange, Reply
from actors.shared.messages import Deliver
from runtime.kernel.actor import ActorContext
from runtime.kernel.clock import Alarm

Job = Deliver | list[Queued]
"""What one request carries: a record, or a batch of one partition's records."""


class Owner(Protocol):
    """What a push needs of its egress (`EgressActor`, actors/delivery/egress/http.py)."""

    context: ActorContext
    origin: Origin
    slots: Slots
    """`origin.slots`, read once (issue 37: a property call twice a push)."""

    subscription: str

    def may_go(self, job: Job) -> int | Answer | None: ...

    def top_up(self, batch: list[Queued]) -> None: ...

    def start_request(self, job: Job, done: Done) -> Exchange: ...

    def answer_of(self, reply: Reply) -> Answer: ...

    def error_answer(self, exc: BaseException) -> Answer: ...

    def pushed(self, push: Push, answer: Answer) -> None: ...

    def push_crashed(self, error: Exception) -> None: ...


class Push(Ticket):
    """See the module docstring. `started` is when it began (perf_counter seconds): its
    latency is measured from there, as a worker's `_timed` did (the origin's hold and
    slot wait included, the wait for the subscription's own pool not). It is its own
    slot ticket (`run`) and its own answer callback (`__call__`): neither a ticket nor a
    bound method per push (issue 37: young objects for the collector at fan-out)."""

    __slots__ = ("_alarm", "_exchange", "_holding", "_owner", "_probe", "job", "started")

    def __init__(self, owner: Owner, job: Job) -> None:
        self._owner = owner
        self.job = job
        self.started = time.perf_counter()
        self._alarm: Alarm | None = None
        self.queued = False  # waiting for an origin slot (`Ticket`)
        self._exchange: Exchange | None = None
        self._holding = False  # an origin slot is ours
        self._probe = False  # the origin's half-open probe is ours

    def begin(self, linger_ms: int = 0) -> None:
        """Go now, or first wait `linger_ms` for more records of a short batch."""
        if linger_ms:
            clock = self._owner.context.clock
            self._alarm = clock.call_at(clock.monotonic_ms() + linger_ms, self._lingered)
        else:
            self.go()

    def _lingered(self) -> None:
        assert isinstance(self.job, list)  # only batches linger
        try:
            self._owner.top_up(self.job)
        except Exception as exc:
            self._owner.push_crashed(exc)
            return
        self.started = time.perf_counter()  # the linger is not the request's time
        self.go()

    def go(self) -> None:
        """Ask the origin: go now, wait for it on an alarm, or fail at once."""
        self._alarm = None
        owner = self._owner
        try:
            verdict = owner.may_go(self.job)
            if isinstance(verdict, Answer):
                owner.pushed(self, verdict)
            elif verdict is not None:
                clock = owner.context.clock
                self._alarm = clock.call_at(clock.monotonic_ms() + verdict, self.go)
            else:
                breaker = owner.origin.breaker  # `hold` may have made this the probe
                self._probe = breaker.state != "closed" and breaker.probing
                if owner.slots.take(owner.subscription, self) is None:
                    self.run()  # a slot was free
        except Exception as exc:
            owner.push_crashed(exc)

    def run(self) -> None:
        """An origin slot is ours (free, or handed over): build the request and start it."""
        self._holding = True
        owner = self._owner
        try:
            try:
                self._exchange = owner.start_request(self.job, self)
            except Exception as exc:  # no session, a request that cannot be built
                self._answered(None, exc)
        except Exception as exc:
            owner.push_crashed(exc)

    def _answered(self, reply: Reply | None, exc: BaseException | None) -> None:
        owner = self._owner
        self._exchange = None
        if self._holding:
            self._holding = False
            owner.slots.give()
        try:
            answer = owner.answer_of(reply) if reply is not None else \
                owner.error_answer(exc or RuntimeError("no reply"))
            owner.pushed(self, answer)
        except Exception as error:
            owner.push_crashed(error)

    __call__ = _answered  # the transport's `Done`: the push itself, no bound method

    def abandon(self) -> None:
        """The egress stops: give the push up, telling nobody."""
        if self._alarm is not None:
            self._alarm.cancel()
            self._alarm = None
        self.cancel()  # its wait for a slot, if it waits
        exchange, self._exchange = self._exchange, None
        if exchange is not None:
            exchange.cancel()
        if self._holding:
            self._holding = False
            self._owner.slots.give()
        self._owner.origin.unanswered(self._probe)  # no answer: the next may probe (#34)

    def __repr__(self) -> str:
        job = self.job
        record = job.record if isinstance(job, Deliver) else job[0][0]
        size = "" if isinstance(job, Deliver) else f" +{len(job) - 1}"
        step = ("held" if self._alarm else "waiting for a slot" if self.queued else
                "sent" if self._holding else "starting")
        return f"<Push {record.topic}-{record.partition}@{record.offset}{size} {step}>"
