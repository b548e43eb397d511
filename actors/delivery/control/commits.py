"""A subscription's positions as Kafka took them (#34 item 16): while the instance
member's commits to the subscription's group are refused (a live consumer in that group:
`commitError` in the member's status), each partition actor's `committed` is the position
it asked for, not one Kafka holds. The status answer then shows the position Kafka last
accepted as `committed` (read back with OffsetFetch) and the refused one apart
(`refused_commits`).

What is refused is the runtime's own knowledge: the member's refusal series (actors/
delivery/path/member/refusals.py, read by `overview.refusals` as the summary's rows do),
so the refused positions are shown whether or not Kafka can be asked now. Only what Kafka
holds comes from Kafka; when it cannot be read in time the answer says why
(`positions_unavailable`) and shows the last position Kafka accepted from this instance
instead. `with_accepted` and `without_accepted` are pure; `AcceptedReader` asks Kafka,
through one long-lived client per broker: a client made per request had to bootstrap,
find the coordinator and fetch against a 2 s deadline every time, which a loaded machine
missed (a browser test's details then showed no refused commit at all while its row
did: tests/browser/test_status_page.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence

import msgspec
from aiokafka import TopicPartition

from actors.delivery.control.status import Live, RefusedCommit
from runtime.errors import UsageError
from runtime.kafka.group_offsets import GroupOffsets
from runtime.kernel.clock import Clock, within
from runtime.kernel.tasks import OwnedTasks

Positions = Mapping[tuple[str, int], int | None]
FETCH_TIMEOUT_MS = 2000
"""For each of the reader's steps: its client's start (shared: one that runs late goes on
for the next answer), then the offset fetch."""


def with_accepted(shown: Live, accepted: Positions, reason: str,
                  known: Sequence[RefusedCommit] = ()) -> Live:
    """`shown` with each partition's `committed` the accepted position, and each position
    asked for that differs from it in `refused_commits`; with the member's `known`
    refusals of partitions no partition actor answered for (their `accepted` Kafka's)."""
    partitions, refused = [], []
    for p in shown.partitions:
        taken = accepted.get((p.topic, p.partition))
        if taken != p.committed:
            refused.append(RefusedCommit(topic=p.topic, partition=p.partition,
                                         position=p.committed, accepted=taken,
                                         reason=reason))
        partitions.append(msgspec.structs.replace(p, committed=taken))
    answered = {(p.topic, p.partition) for p in shown.partitions}
    refused += [msgspec.structs.replace(c, accepted=accepted.get((c.topic, c.partition)),
                                        reason=reason)
                for c in known if (c.topic, c.partition) not in answered]
    return msgspec.structs.replace(shown, partitions=partitions,
                                   refused_commits=_sorted(refused))


def without_accepted(shown: Live, known: Sequence[RefusedCommit], reason: str,
                     unavailable: str) -> Live:
    """`shown` when Kafka could not say what it holds (`unavailable`: why): the member's
    `known` refusals, each with the last position Kafka accepted from this instance, which
    a refused partition's `committed` shows too (never the refused one)."""
    held = {(c.topic, c.partition): c.accepted for c in known}
    partitions = [msgspec.structs.replace(p, committed=held[(p.topic, p.partition)])
                  if (p.topic, p.partition) in held else p for p in shown.partitions]
    refused = [msgspec.structs.replace(c, reason=reason) for c in known]
    return msgspec.structs.replace(shown, partitions=partitions,
                                   refused_commits=_sorted(refused),
                                   positions_unavailable=unavailable)


def asked_of(shown: Live, known: Iterable[RefusedCommit]) -> list[tuple[str, int]]:
    """The partitions whose accepted positions the answer needs."""
    return sorted({(p.topic, p.partition) for p in shown.partitions}
                  | {(c.topic, c.partition) for c in known})


def why_unavailable(error: BaseException) -> str:
    """What the answer says when Kafka's positions could not be read."""
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _sorted(refused: list[RefusedCommit]) -> list[RefusedCommit]:
    return sorted(refused, key=lambda c: (c.topic, c.partition))


class AcceptedReader:
    """The positions subscription groups hold in Kafka, for the status answers: one
    `GroupOffsets` per broker (runtime/kafka/group_offsets.py), on a client of its own
    started at the first read and kept until `aclose` (the control service's). Not the
    instance member's: the member answers no such question, and its reads and commits
    should not wait behind the status page's.

    A start that fails is tried again by the next read; one that takes longer than a
    read's deadline goes on (shielded), and the next read finds it done. Its callers are
    the status answers' tasks: `_client` checks and sets without an await between, so
    two reads never start two clients for one broker."""

    def __init__(self, clock: Clock, timeout_ms: int = FETCH_TIMEOUT_MS) -> None:
        self._clock, self._timeout_ms = clock, timeout_ms
        self._clients: dict[str, asyncio.Task[GroupOffsets | Exception]] = {}
        self._starts = OwnedTasks()
        self._closed = False

    async def read(self, bootstrap: str, group: str, partitions: Sequence[tuple[str, int]],
                   ) -> dict[tuple[str, int], int | None]:
        """The positions `group` holds for `partitions` (None: none committed). Raises
        `TimeoutError` past a deadline, or what the client raised."""
        offsets = await within(self._clock, asyncio.shield(self._client(bootstrap)),
                               self._timeout_ms)
        if isinstance(offsets, Exception):
            raise offsets
        found = await within(self._clock, offsets.fetch(
            group, [TopicPartition(t, p) for t, p in partitions]), self._timeout_ms)
        return {(tp.topic, tp.partition): offset for tp, offset in found.items()}

    def _client(self, bootstrap: str) -> asyncio.Task[GroupOffsets | Exception]:
        if self._closed:
            raise UsageError("the accepted positions reader is closed")
        started = self._clients.get(bootstrap)
        if started is None or (started.done() and (started.cancelled() or isinstance(
                started.result(), Exception))):
            started = self._clients[bootstrap] = self._starts.spawn(
                _start(bootstrap), name=f"accepted-positions:{bootstrap}")
        return started

    async def aclose(self) -> None:
        """Close every client (one still starting is cancelled first). Idempotent."""
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        await self._starts.aclose()  # cancels a start still under way
        for started in clients:
            outcome = None if started.cancelled() else started.result()
            if isinstance(outcome, GroupOffsets):
                await outcome.close()

    def __repr__(self) -> str:
        ready = sum(1 for s in self._clients.values()
                    if s.done() and not s.cancelled() and isinstance(s.result(), GroupOffsets))
        return f"<AcceptedReader clients={ready}/{len(self._clients)} closed={self._closed}>"


async def _start(bootstrap: str) -> GroupOffsets | Exception:
    """A client for `bootstrap`, or why it could not start (the read that waits for it
    raises that; the next read starts another)."""
    try:
        return await GroupOffsets.started(bootstrap)
    except Exception as exc:
        return exc
