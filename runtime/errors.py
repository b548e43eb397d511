"""Errors of the runtime: the kernel's, plus those of configuration and the broker.

Hierarchy::

    RuntimeKernelError          (runtime/kernel/errors.py: actors, supervisors, usage)
    ├── ActorError, SupervisorError, UsageError, ...
    ├── ConfigError             a config file or value is invalid (names the key path)
    ├── BrokerError             the embedded broker could not start or stopped
    └── StartupError            the process cannot start here (port in use, unwritable dir)

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


__all__ = [
    "ActorDeadError", "ActorError", "ActorKilled", "ActorStartError", "BrokerError",
    "ConfigError", "MailboxFullError", "RestartBudgetExceeded", "RuntimeKernelError",
    "StartupError", "SupervisorError", "UsageError",
]
