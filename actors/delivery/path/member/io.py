"""The instance member's I/O: each function runs in a task the member owns, reads or
writes Kafka (or asks cursors and their supervisors), and tells the member what came back.
None of them touches the member's state (issue 32, item 10); none raises for a broker that
does not answer: that is an answer too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.delivery.path.member.commits import Outcome, Round, Seat
from actors.delivery.path.member.messages import (
    CommitsSettled,
    CursorFailed,
    Drained,
    HighwatersRead,
    PositionsRead,
    Retired,
    StartNext,
    TopicsListed,
    WritersRead,
)
from actors.delivery.path.member.positions import Bounds
from actors.shared.group_consumer import DRAIN_GRACE_MS
from actors.shared.messages import Drain
from runtime.errors import ActorDeadError, ActorStartError
from runtime.kafka import compat
from runtime.kafka.group_offsets import GroupOffsets
from runtime.kafka.highwater import read_highwaters
from runtime.kernel import Actor, ChildSpec, Clock, Ref, Supervisor, within
from runtime.kernel.clock import settle_within

log = logging.getLogger(__name__)
READ_TIMEOUT_MS = 10_000
"""How long a read of positions or topics may take before it counts as failed."""
PART_GROUPS = 512
"""Groups whose positions one part of a read asks for (`read_positions`)."""
FAILURES = (Exception,)
"""What a cut, a closed transport or a broker error raise here: never `CancelledError`."""


async def commit_round(offsets: GroupOffsets, round_: Round, mark: str, member: Ref) -> None:
    try:
        refusals = await offsets.commit(round_.by_group(), mark)
        outcome = Outcome(refused={r.group: r.reason for r in refusals},
                          gone=frozenset(tp for r in refusals for tp in r.gone))
    except FAILURES as exc:  # a client that is closing: the whole round failed
        outcome = Outcome(failed=repr(exc))
    member.tell_system(CommitsSettled(round_, outcome))


async def read_positions(kafka: AIOKafkaConsumer, offsets: GroupOffsets,
                         asked: dict[Seat, int], groups: dict[Seat, str],
                         known_ends: dict[TopicPartition, int], clock: Clock,
                         member: Ref) -> None:
    """The committed offsets of the seats' groups (one request per group) and the bounds
    of their partitions' logs, told a part at a time (`PART_GROUPS` groups, each part
    with its own deadline): 10,000 groups read as one, in waves, ran past the deadline
    and were read again and again; in parts the first cursors start at once."""
    parts = _parts(asked, groups)
    for n, part in enumerate(parts):
        last = n == len(parts) - 1
        try:
            found, bounds = await within(
                clock, _positions(kafka, offsets, list(part), groups, known_ends),
                READ_TIMEOUT_MS)
            read = PositionsRead(part, {s: o for s, (o, _m) in found.items()},
                                 {s: m for s, (_o, m) in found.items()}, bounds, last=last)
        except FAILURES as exc:
            read = PositionsRead(part, failed=repr(exc), last=last)
        member.tell_system(read)


def _parts(asked: dict[Seat, int], groups: dict[Seat, str]) -> list[dict[Seat, int]]:
    """`asked` in parts of at most `PART_GROUPS` groups (a group's seats stay together)."""
    by_group: dict[str, dict[Seat, int]] = defaultdict(dict)
    for seat, epoch in asked.items():
        by_group[groups[seat]][seat] = epoch
    chunks = list(by_group.values())
    parts = [{s: e for chunk in chunks[first:first + PART_GROUPS] for s, e in chunk.items()}
             for first in range(0, len(chunks), PART_GROUPS)]
    return parts or [{}]


async def _positions(kafka: AIOKafkaConsumer, offsets: GroupOffsets, seats: list[Seat],
                     groups: dict[Seat, str], known_ends: dict[TopicPartition, int],
                     ) -> tuple[dict[Seat, tuple[int | None, str]],
                                dict[TopicPartition, Bounds]]:
    by_group: dict[str, list[Seat]] = defaultdict(list)
    for seat in seats:
        by_group[groups[seat]].append(seat)
    tps = sorted({tp for _key, tp in seats})
    found, bounds = await asyncio.gather(
        offsets.fetch_many({g: sorted({tp for _k, tp in s}) for g, s in by_group.items()}),
        _bounds(kafka, tps, known_ends))
    committed: dict[Seat, tuple[int | None, str]] = {}
    for group_seats, positions in zip(by_group.values(), found, strict=True):
        for seat in group_seats:
            committed[seat] = positions[seat[1]]
    return committed, bounds


async def _bounds(kafka: AIOKafkaConsumer, tps: list[TopicPartition],
                  known_ends: dict[TopicPartition, int]) -> dict[TopicPartition, Bounds]:
    """Each log's first offset (ListOffsets) and end (a fetch's high watermark: right on
    the embedded broker too, runtime/kafka/highwater.py). A bound that cannot be read is
    left unknown (not checked), never guessed."""
    starts: dict[TopicPartition, int] = {}
    with contextlib.suppress(*FAILURES):
        starts = {tp: int(o) for tp, o in (await kafka.beginning_offsets(tps)).items()}
    probes = {tp: known_ends.get(tp, starts.get(tp, 0)) for tp in tps}
    ends: dict[TopicPartition, int] = {}
    with contextlib.suppress(*FAILURES):
        ends = await read_highwaters(compat.client_of(kafka), probes)
    return {tp: Bounds(starts.get(tp), ends.get(tp)) for tp in tps}


async def read_marks(offsets: GroupOffsets, groups: dict[str, list[TopicPartition]],
                     clock: Clock, member: Ref) -> None:
    """Each group's commits of its partitions: offset and metadata (its writer)."""
    marks: dict[str, dict[TopicPartition, tuple[int | None, str]]] = {}
    with contextlib.suppress(*FAILURES):
        found = await within(clock, offsets.fetch_many(groups), READ_TIMEOUT_MS)
        marks = dict(zip(groups, found, strict=True))
    member.tell_system(WritersRead(marks))


async def read_ends(kafka: AIOKafkaConsumer, starts: dict[TopicPartition, int],
                    clock: Clock, timeout_ms: int, member: Ref) -> None:
    found: dict[TopicPartition, int] = {}
    with contextlib.suppress(*FAILURES):
        found = await within(clock, read_highwaters(compat.client_of(kafka), starts),
                             timeout_ms)
    member.tell_system(HighwatersRead(found))


async def list_topics(kafka: AIOKafkaConsumer, clock: Clock, member: Ref) -> None:
    topics: frozenset[str] | None = None
    try:
        topics = frozenset(await within(clock, kafka.topics(), READ_TIMEOUT_MS))
    except FAILURES as exc:
        log.warning("listing the cluster's topics failed (%r); trying again", exc)
    member.tell_system(TopicsListed(topics))


async def drain_positions(cursors: dict[Seat, Actor | None], clock: Clock,
                          drain_ms: int, *, keep: bool = False) -> dict[Seat, int | None]:
    """Tell each cursor to drain, then wait for their answers under one deadline: their
    final positions (None: the cursor did not answer in time; its last commit stands).
    No task or timer per cursor: the 40,000 cursors of a member's stop took seconds so."""
    deadline = clock.monotonic_ms() + drain_ms
    loop = asyncio.get_running_loop()
    answers: dict[Seat, asyncio.Future[int | None]] = {}
    for seat, cursor in cursors.items():
        if cursor is None:
            continue
        done: asyncio.Future[int | None] = loop.create_future()
        with contextlib.suppress(ActorDeadError):
            await cursor.tell(Drain(deadline, done, keep))
            answers[seat] = done
    await settle_within(clock, list(answers.values()), drain_ms + DRAIN_GRACE_MS)
    return {seat: _position(answers.get(seat)) for seat in cursors}


def _position(answer: asyncio.Future[int | None] | None) -> int | None:
    """A cursor's answer to a drain (None: none, in time)."""
    if answer is None or not answer.done() or answer.cancelled() or answer.exception():
        return None
    return answer.result()


async def drain(number: int, cursors: dict[Seat, Actor | None], clock: Clock, drain_ms: int,
                member: Ref, *, keep: bool = False) -> None:
    positions = await drain_positions(cursors, clock, drain_ms, keep=keep)
    member.tell_system(Drained(number, positions))


async def stop_all(cursors: Iterable[tuple[Supervisor, str]]) -> None:
    by_supervisor: dict[Supervisor, list[str]] = defaultdict(list)
    for supervisor, name in cursors:
        by_supervisor[supervisor].append(name)
    async def stop(supervisor: Supervisor, names: list[str]) -> None:
        with contextlib.suppress(ActorDeadError):
            if supervisor.alive:
                await supervisor.stop_children([n for n in names if supervisor.has_child(n)])

    await asyncio.gather(*(stop(sup, names) for sup, names in by_supervisor.items()))


async def stop(number: int, cursors: list[tuple[Supervisor, str]], member: Ref) -> None:
    await stop_all(cursors)
    member.tell_system(Retired(number))


START_TREES_AT_ONCE = 64
"""How many subscriptions' partition supervisors start their cursors at the same time:
one after another, a restart's 40,000 cursors took a round trip each."""


async def start_cursors(specs: list[tuple[Seat, Supervisor, ChildSpec]], member: Ref,
                        long_lived: Callable[[], None]) -> None:
    """Start cursors (each says itself that it runs: `Rewind`), each supervisor's
    together and `START_TREES_AT_ONCE` supervisors at a time; tell the member of those
    that could not start, and then that these are done (`StartNext`). Then `long_lived`:
    the cursors built live long (out of the collector's full passes, runtime/host/app.py
    `keep_long_lived`)."""
    by_supervisor: dict[Supervisor, list[tuple[Seat, ChildSpec]]] = defaultdict(list)
    for seat, supervisor, spec in specs:
        by_supervisor[supervisor].append((seat, spec))
    groups = list(by_supervisor.items())
    try:
        for at in range(0, len(groups), START_TREES_AT_ONCE):
            await asyncio.gather(*(_start_under(supervisor, seats, member)
                                   for supervisor, seats in groups[at:at + START_TREES_AT_ONCE]))
    finally:
        member.tell_system(StartNext())
    long_lived()


async def _start_under(supervisor: Supervisor, seats: list[tuple[Seat, ChildSpec]],
                       member: Ref) -> None:
    try:
        errors: list[ActorStartError | None] = await supervisor.start_children(
            [spec for _seat, spec in seats])
    except ActorDeadError:
        errors = [ActorStartError("its supervisor stopped")] * len(seats)
    for (seat, _spec), error in zip(seats, errors, strict=True):
        if error is not None:
            member.tell_system(CursorFailed(seat))
