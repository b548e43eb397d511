"""What the service knows of each subscription's life: its state, why, since when, and
when the next start attempt is due. Pure: the service moves it, the status API reads it.

States: `starting`; `running`; `paused` (on purpose: no consumer, position committed);
`disabled` (the endpoint answered 410 Gone: stopped like `paused` until the operator
resumes it; the record that got the 410 is delivered again then);
`waiting_for_broker` (its broker is unreachable: retried); `failed` (could not start or
crashed past its restart budget: retried with capped backoff); `stopping`.
A subscription leaves this table only by unsubscribe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

State = Literal["starting", "running", "paused", "disabled", "waiting_for_broker", "failed",
                "stopping"]
RETRY_BASE_MS = 500
RETRY_CAP_MS = 5_000


@dataclass(slots=True)
class SubscriptionStatus:
    state: State
    since_ms: int
    reason: str = ""
    failures: int = 0  # failed starts in a row
    retry_at_ms: int | None = None
    in_process: bool = False

    def move(self, state: State, now_ms: int, reason: str = "") -> bool:
        """Change state; True when it changed (worth a log line)."""
        if state == self.state and reason == self.reason:
            return False
        changed = state != self.state
        self.state, self.reason = state, reason
        if changed:
            self.since_ms = now_ms
        if state == "running":
            self.failures, self.retry_at_ms = 0, None
        return changed

    def failed(self, now_ms: int, reason: str, broker_down: bool) -> int:
        """A start failed or the tree died: schedule the next attempt, capped backoff.
        Returns the delay."""
        delay: int = min(RETRY_BASE_MS << min(self.failures, 16), RETRY_CAP_MS)
        self.failures += 1
        self.move("waiting_for_broker" if broker_down else "failed", now_ms, reason)
        self.retry_at_ms = now_ms + delay
        return delay

    def due(self, now_ms: int) -> bool:
        return (self.state in ("failed", "waiting_for_broker") and self.retry_at_ms is not None
                and now_ms >= self.retry_at_ms)

    def as_dict(self) -> dict[str, object]:
        return {"state": self.state, "reason": self.reason, "since": self.since_ms,
                "in_process": self.in_process,
                "next_attempt_at": self.retry_at_ms if self.state != "running" else None}
