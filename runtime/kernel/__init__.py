"""The actor kernel: actors and mailboxes, supervisors, the actor system, injected clocks,
the timer wheel, the restart budget and backoff. It imports nothing else of the project,
so it can be read, tested and reused on its own."""

from runtime.kernel.actor import Actor, ActorContext, Lifecycle, Mailbox, Ref
from runtime.kernel.backoff import RESTART_BACKOFF, Backoff, RestartBackoff, parse_retry_after
from runtime.kernel.budget import RestartBudget
from runtime.kernel.clock import (
    Clock,
    FakeClock,
    RealClock,
    finished_within,
    settle_within,
    within,
)
from runtime.kernel.gate import Gate
from runtime.kernel.supervisor import ChildRef, ChildSpec, Restart, Strategy, Supervisor
from runtime.kernel.system import ActorSystem
from runtime.kernel.timer_wheel import TimerHandle, TimerWheel

__all__ = [
    "RESTART_BACKOFF",
    "Actor",
    "ActorContext",
    "ActorSystem",
    "Backoff",
    "ChildRef",
    "ChildSpec",
    "Clock",
    "FakeClock",
    "Gate",
    "Lifecycle",
    "Mailbox",
    "RealClock",
    "Ref",
    "Restart",
    "RestartBackoff",
    "RestartBudget",
    "Strategy",
    "Supervisor",
    "TimerHandle",
    "TimerWheel",
    "finished_within",
    "parse_retry_after",
    "settle_within",
    "within",
]
