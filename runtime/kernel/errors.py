"""Errors of the actor kernel.

Hierarchy::

    RuntimeKernelError
    ├── ActorError
    │   ├── ActorDeadError      the actor stopped or crashed; pending asks fail with it
    │   ├── ActorKilled         the crash `Actor.kill()` injects (chaos tests)
    │   ├── MailboxFullError    tell_nowait on a full mailbox
    │   └── ActorStartError     an actor failed before it reported ready
    ├── SupervisorError
    │   └── RestartBudgetExceeded  too many restarts within the period (escalates)
    └── UsageError              an API was used the wrong way; the message says what to write

Retry decisions read the `retriable` attribute, never the message text. The rest of
`runtime/` adds its own errors under the same root (`runtime/errors.py`).
"""

from __future__ import annotations


class RuntimeKernelError(Exception):
    retriable: bool = False


class ActorError(RuntimeKernelError):
    pass


class ActorDeadError(ActorError):
    pass


class ActorKilled(ActorError):
    pass


class MailboxFullError(ActorError):
    retriable = True


class ActorStartError(ActorError):
    pass


class SupervisorError(RuntimeKernelError):
    pass


class RestartBudgetExceeded(SupervisorError):
    pass


class UsageError(RuntimeKernelError):
    pass
