"""CommitBook: the instance member's commit rounds (issue 32, items 1 and 9).

Pure logic. Cursors ask for commits (`note`); the member takes one round at a time
(`take`: every seat that moved, grouped per `group.id`), sends it from a task, and hands
the outcome back (`settle`). The book decides what a refusal means:

- a position belongs to one cursor epoch: it is sent only while that epoch is the seat's
  current one (`current`), and a refused one goes back only if no newer position came
  meanwhile and the epoch is still current; a revoke, a leave or a restart in between
  drops it, never commits an older cursor's position over a newer one's;
- a partition that is gone (`UnknownTopicOrPartition`: deleted, maybe about to be created
  again under the same name) takes no commit until it is assigned again: its refused
  positions are dropped, never sent to the new topic's partitions;
- any other refusal or failure (a group with live members, a broker cut) keeps the
  position for the next round: nothing is lost, and the round never raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
from aiokafka import TopicPartition

from actors.shared.messages import CommitRequest, FlowControl, Rewind

Seat = tuple[str, TopicPartition]
"""A cursor: (subscription key, topic-partition)."""


def seat_of(message: CommitRequest | FlowControl | Rewind) -> Seat:
    """The cursor a message of a partition actor comes from."""
    return message.subscription, TopicPartition(message.topic, message.partition)


class Position(msgspec.Struct, frozen=True, gc=False):
    """A cursor's position to commit: the next offset it needs, under its group. A Struct
    made in C, not tracked by the collector (it holds no container): one per cursor and
    burst at fan-out (issue 37; a frozen dataclass sets each field in Python)."""

    group: str
    offset: int
    epoch: int
    final: bool = False
    """A retired cursor's last position (after its drain): sent once, whether or not its
    epoch is still current, and not sent again if refused (the retirement goes on)."""


@dataclass(slots=True)
class Round:
    """One commit round: what it sends (per group) and whose positions those are."""

    number: int
    seats: dict[Seat, Position]

    def by_group(self) -> dict[str, dict[TopicPartition, int]]:
        groups: dict[str, dict[TopicPartition, int]] = {}
        for (_key, tp), position in self.seats.items():
            groups.setdefault(position.group, {})[tp] = position.offset
        return groups


@dataclass(frozen=True, slots=True)
class Outcome:
    """What came back for a round: groups that refused (with why), partitions that are
    gone, and whether the whole round failed (nothing known to be written)."""

    refused: dict[str, str] = field(default_factory=dict)
    gone: frozenset[TopicPartition] = frozenset()
    failed: str | None = None


Current = Callable[[Seat, int], bool]
"""Whether an epoch is still its seat's current one (the member's seats say)."""


@dataclass(slots=True)
class CommitBook:
    pending: dict[Seat, Position] = field(default_factory=dict)
    in_flight: Round | None = None
    gone: set[TopicPartition] = field(default_factory=set)
    rounds: int = 0

    def note(self, seat: Seat, position: Position) -> None:
        """A cursor's new position (its newest replaces an older one of the same seat)."""
        if seat[1] in self.gone:
            return
        self.pending[seat] = position

    def forget(self, seats: list[Seat]) -> None:
        """These cursors are gone (revoked, left): nothing of theirs is sent any more."""
        for seat in seats:
            self.pending.pop(seat, None)

    def assigned(self, tp: TopicPartition) -> None:
        """`tp` is ours again (a new incarnation, maybe of a new topic of that name)."""
        self.gone.discard(tp)

    def take(self, current: Current) -> Round | None:
        """The next round: every pending position whose epoch is current (None: a round
        is in flight, or nothing to send). Retired cursors' final positions go first, in
        a round of their own: an unsubscribe waits for them, and at 10,000 subscribers a
        round of everyone's positions takes seconds."""
        if self.in_flight is not None or not self.pending:
            return None
        finals = {seat: p for seat, p in self.pending.items() if p.final}
        if finals:
            self.pending = {s: p for s, p in self.pending.items() if not p.final}
            seats = finals
        else:
            seats = {seat: p for seat, p in self.pending.items() if current(seat, p.epoch)}
            self.pending = {}
        if not seats:
            return None
        self.rounds += 1
        self.in_flight = Round(self.rounds, seats)
        return self.in_flight

    def settle(self, outcome: Outcome, current: Current) -> dict[Seat, Position]:
        """The round's outcome: the positions written (to journal); refused ones that
        still count go back for the next round."""
        done, self.in_flight = self.in_flight, None
        if done is None:
            return {}
        self.gone |= outcome.gone
        if outcome.gone:  # noted while the round was out: never sent now
            self.pending = {s: p for s, p in self.pending.items() if s[1] not in self.gone}
        written: dict[Seat, Position] = {}
        for seat, position in done.seats.items():
            if seat[1] in self.gone:
                continue
            if outcome.failed is None and position.group not in outcome.refused:
                written[seat] = position
            elif not position.final and seat not in self.pending \
                    and current(seat, position.epoch):
                self.pending[seat] = position
        return written

    def holds(self, seat: Seat) -> bool:
        """Whether a position of `seat` waits to be sent or is being sent."""
        flight = self.in_flight
        return seat in self.pending or (flight is not None and seat in flight.seats)

    def __repr__(self) -> str:
        flight = self.in_flight.number if self.in_flight else None
        return (f"<CommitBook pending={len(self.pending)} in_flight={flight} "
                f"gone={len(self.gone)}>")
