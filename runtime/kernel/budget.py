"""A supervisor's restart budget, as in OTP: at most `intensity` restarts per `period_ms`.

Pure: the supervisor passes its clock's `monotonic_ms()` and, when `record` says the
budget is exceeded, gives up on its children and escalates to its parent
(`RestartBudgetExceeded`).
"""

from __future__ import annotations

from collections import deque


class RestartBudget:
    """Restarts within the last `period_ms`, and whether they fit in `intensity`.

    As in OTP's supervisor.erl, a restart exactly `period_ms` ago still counts, and
    intensity 0 means no restart is allowed.
    """

    __slots__ = ("_intensity", "_period_ms", "_restarts")

    def __init__(self, intensity: int, period_ms: int) -> None:
        if intensity < 0:
            raise ValueError(f"intensity must be >= 0, got {intensity}")
        if period_ms <= 0:
            raise ValueError(f"period_ms must be > 0, got {period_ms}")
        self._intensity = intensity
        self._period_ms = period_ms
        # Only the newest intensity + 1 restarts can decide, so memory stays bounded; the
        # deque (760 bytes) is made at the first restart: most supervisors never restart
        self._restarts: deque[int] | None = None

    def record(self, now_ms: int) -> bool:
        """Note a restart at `now_ms`; False if it exceeds the budget."""
        restarts = self._restarts
        if restarts is None:
            restarts = self._restarts = deque(maxlen=self._intensity + 1)
        if restarts and now_ms < restarts[-1]:
            raise ValueError(f"time went backwards: {now_ms} < {restarts[-1]}")
        restarts.append(now_ms)
        threshold_ms = now_ms - self._period_ms
        while restarts and restarts[0] < threshold_ms:
            restarts.popleft()
        return len(restarts) <= self._intensity

    def __repr__(self) -> str:
        return (
            f"<RestartBudget recent={len(self._restarts or ())} "
            f"intensity={self._intensity} period={self._period_ms}ms>"
        )
