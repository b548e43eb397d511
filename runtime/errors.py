"""Errors of the runtime: the kernel's, plus those of configuration and the broker.

Hierarchy::

    RuntimeKernelError          (runtime/kernel/errors.py: actors, supervisors, usage)
    ├── ActorError, SupervisorError, UsageError, ...
    ├── ConfigError             a config file or value is invalid (names the key path)
    ├── BrokerError             the embedded broker could not start or stopped
    └── StartupError            the process cannot start here (port in use, unwritable dir)

    Skip, DeadLetter            not errors: what an in-process handler raises to decide a
                                record's fate (`Runtime.consume`)

Retry decisions read the `retriable` attribute, never the message text.
"""

from __future__ import annotations

from runtime.kernel.errors import (
    ActorDeadError,
    ActorError,
    ActorKilled,
    ActorStartError,
    MailboxFullError,
    RestartBudgetExceeded,
    RuntimeKernelError,
    SupervisorError,
    UsageError,
)


class ConfigError(RuntimeKernelError):
    def __init__(self, message: str, path: str = "") -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class BrokerError(RuntimeKernelError):
    pass


class StartupError(RuntimeKernelError):
    """The environment, not the config's syntax: the CLI prints it in one line, exit 2."""


class Skip(Exception):
    """Raised by an in-process handler: this record is done, do not retry it."""


class DeadLetter(Exception):
    """Raised by an in-process handler: give this record up now, to the dead-letter topic
    (or, without one, journal and skip it), with `reason`."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


__all__ = [
    "ActorDeadError", "ActorError", "ActorKilled", "ActorStartError", "BrokerError",
    "ConfigError", "DeadLetter", "MailboxFullError", "RestartBudgetExceeded",
    "RuntimeKernelError", "Skip", "StartupError", "SupervisorError", "UsageError",
]
