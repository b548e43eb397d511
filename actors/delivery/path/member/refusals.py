"""Refused commits, published (#34 item 16): while Kafka refuses the member's commits to a
subscription's group (a live consumer in that group), each partition's refused position
and the last one Kafka accepted from this instance are two gauges,

    hookstream_commit_refused_offset{subscription, topic, partition}
    hookstream_commit_accepted_offset{subscription, topic, partition}

present only while that partition's commits are refused (the second only when Kafka took
one of ours since its cursor started): a series per partition at all times would cost
memory at 10,000 subscriptions. The summary, the list and `/metrics` read them
(actors/delivery/control/overview.py, `refusals`), no actor asked. Written by the member
only, through `RefusalSeries`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final

from aiokafka import TopicPartition

from actors.delivery.path.member.commits import Position, Seat
from runtime.host.metrics import Labels, Registry, label_key

REFUSED: Final = "hookstream_commit_refused_offset"
ACCEPTED: Final = "hookstream_commit_accepted_offset"

Accepted = Callable[[str, TopicPartition], int | None]
"""The last position Kafka accepted from this member for (group, partition)."""


def _key(seat: Seat) -> Labels:
    key, tp = seat
    return label_key(subscription=key, topic=tp.topic, partition=tp.partition)


class RefusalSeries:
    def __init__(self, metrics: Registry) -> None:
        self.refused = metrics.gauge(
            REFUSED, "A commit position Kafka refused (a live consumer in the "
            "subscription's group), while refused")
        self.accepted = metrics.gauge(
            ACCEPTED, "The last position Kafka accepted from this instance, for a "
            "partition whose commits are refused")
        self.shown: set[Seat] = set()

    def settled(self, seats: Mapping[Seat, Position], written: Iterable[Seat],
                gone: Iterable[TopicPartition], accepted: Accepted) -> None:
        """A round came back: `written` were taken, those of partitions `gone` (deleted)
        dropped, the other `seats` refused (or the round failed). A retired cursor's final
        position is not sent again: nothing is shown for it."""
        taken, dropped = set(written), set(gone)
        for seat, position in seats.items():
            if seat in taken or seat[1] in dropped or position.final:
                self.clear([seat])
                continue
            key = _key(seat)
            self.refused.child(key).set(position.offset)
            held = accepted(position.group, seat[1])
            if held is None:
                self.accepted.discard(key)
            else:
                self.accepted.child(key).set(held)
            self.shown.add(seat)

    def clear(self, seats: Iterable[Seat]) -> None:
        """These seats' commits are taken again, or they are gone."""
        for seat in seats:
            if seat in self.shown:
                self.shown.discard(seat)
                key = _key(seat)
                self.refused.discard(key)
                self.accepted.discard(key)

    def __repr__(self) -> str:
        return f"<RefusalSeries refused={len(self.shown)}>"
