"""What an outlet answers a `StatusQuery` with (actors/shared/messages.py): typed once
here, built by the outlet in its handler (actors/delivery/egress/outlet.py) and its
origin's part by the `Origin` (actors/delivery/egress/origin.py), encoded as they are
into the status API's `endpoint` (actors/delivery/control/status.py). Field names are
the JSON's: the status API shows them unchanged since they were dicts."""

from __future__ import annotations

from typing import Literal

import msgspec

BreakerState = Literal["closed", "open", "half_open"]


class RecentFailure(msgspec.Struct, frozen=True, kw_only=True):
    at: int  # epoch ms
    status: int | None
    error: str | None


class BreakerChange(msgspec.Struct, frozen=True, kw_only=True):
    """One circuit breaker transition, at epoch ms."""

    at: int
    before: BreakerState = msgspec.field(name="from")
    after: BreakerState = msgspec.field(name="to")
    why: str


class OriginStatus(msgspec.Struct, frozen=True, kw_only=True):
    """The origin an HTTP outlet pushes to: its breaker, throttle and limits (every
    time in epoch ms)."""

    origin: str
    breaker: BreakerState
    breaker_enabled: bool
    opened_at: int | None
    probe_at: int | None
    failure_ratio: float
    min_requests: int
    open_ms: int
    throttled_until: int | None
    rate_limit: float | None
    max_connections: int
    transitions: list[BreakerChange]


class EndpointStatus(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The endpoint's health (`EndpointHealth`); `origin` for an HTTP outlet only (a
    handler outlet has none, and shows no `origin` key)."""

    last_status: int | None
    last_error: str | None
    last_success_at: int | None
    error_rate: float
    recent_failures: list[RecentFailure]
    origin: OriginStatus | None = None


class OutletStatus(msgspec.Struct, frozen=True, kw_only=True):
    """An outlet's answer: its endpoint's health and what it counted since it started."""

    endpoint: EndpointStatus
    delivered: int
    failed_attempts: int
