"""Errors of the runtime kernel.

Hierarchy::

    RuntimeKernelError
    ├── ConfigError             a config file or value is invalid (names the key path)
    ├── ActorError
    │   ├── ActorDeadError      the actor stopped or crashed; pending asks fail with it
    │   ├── ActorKilled         the crash `Actor.kill()` injects (chaos tests)
    │   ├── MailboxFullError    tell_nowait on a full mailbox
    │   └── ActorStartError     an actor failed before it reported ready
    ├── SupervisorError
    │   └── RestartBudgetExceeded  too many restarts within the period (escalates)
    ├── BrokerError             the embedded broker could not start or stopped
    └── UsageError              an API was used the wrong way; the message says what to write

Retry decisions read the `retriable` attribute, never the message text.
"""

from __future__ import annotations


class RuntimeKernelError(Exception):
    retriable: bool = False


class ConfigError(RuntimeKernelError):
    def __init__(self, message: str, path: str = "") -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


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


class BrokerError(RuntimeKernelError):
    pass


class UsageError(RuntimeKernelError):
    pass
