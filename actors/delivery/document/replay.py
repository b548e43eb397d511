"""The replay request of the admin API (`POST /broker/subscription/{id}/{groupId}/replay`):
decoded and checked whole (`ReplayRequest`), then turned once into what the replay actor
takes (`ReplayRange`: snake_case, times as epoch ms; actors/delivery/path/replay.py)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Annotated, Final, Literal

import msgspec
from msgspec import Meta

MAX_OFFSET: Final = 2**63 - 1  # Kafka offsets are int64
MAX_PARTITION: Final = 2**31 - 1
MAX_TIME_MS: Final = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
Offset = Annotated[int, Meta(ge=0, le=MAX_OFFSET)]
TimeMs = Annotated[int, Meta(ge=0, le=MAX_TIME_MS)]
TimeText = Annotated[str, Meta(min_length=1, max_length=64)]


class ReplayRequest(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The `POST .../replay` body, checked whole when decoded: an offset or a time out of
    range, or a range that ends before it starts, is a 400 (never a fetcher crash: #25)."""

    source: Literal["deadLetter", "topic"]
    topic: Annotated[str, Meta(min_length=1, max_length=249)] | None = None
    partition: Annotated[int, Meta(ge=0, le=MAX_PARTITION)] | None = None
    fromOffset: Offset | None = None
    toOffset: Offset | None = None
    from_: TimeMs | TimeText | None = msgspec.field(default=None, name="from")
    to: TimeMs | TimeText | None = None
    limit: Annotated[int, Meta(ge=1, le=MAX_OFFSET)] | None = None
    applyFilter: bool = True
    """Push only the records the subscription's current filter matches."""

    def __post_init__(self) -> None:
        start, stop = time_ms(self.from_), time_ms(self.to)  # ValueError: not a time
        if self.fromOffset is not None and self.toOffset is not None and \
                self.fromOffset > self.toOffset:
            raise ValueError(f"fromOffset {self.fromOffset} is after toOffset {self.toOffset}")
        if start is not None and stop is not None and start > stop:
            raise ValueError(f"'from' ({self.from_}) is after 'to' ({self.to})")


@dataclass(frozen=True, slots=True)
class ReplayRange:
    """What a replay reads and pushes: its `ReplayRequest` decoded once (`replay_range`),
    times as epoch ms."""

    source: Literal["deadLetter", "topic"]
    topic: str | None = None
    partition: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    from_ms: int | None = None
    to_ms: int | None = None
    limit: int | None = None
    apply_filter: bool = True


def replay_range(request: ReplayRequest) -> ReplayRange:
    return ReplayRange(request.source, request.topic, request.partition, request.fromOffset,
                       request.toOffset, time_ms(request.from_), time_ms(request.to),
                       request.limit, request.applyFilter)


def time_ms(value: int | str | None) -> int | None:
    """Epoch ms, or an ISO 8601 time (UTC when it has no zone); ValueError names a text
    that is no time or one before 1970."""
    if value is None or isinstance(value, int):
        return value
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{value!r} is neither epoch ms nor an ISO 8601 time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    ms = int(parsed.timestamp() * 1000)
    if ms < 0:
        raise ValueError(f"{value!r} is before 1970")
    return ms
