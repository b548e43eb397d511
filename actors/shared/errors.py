"""Errors of the domain actors and their pure pieces.

Hierarchy::

    UsageError                  (runtime.kernel.errors: an API was used the wrong way)
    ├── InvalidArgument         a pure piece (lanes, offset tracker, books) got a value it
    │                           cannot take; also a ValueError, as its callers expect
    └── UnexpectedMessage       an actor was sent a message it does not handle

Both are programming errors, never retriable: the actor that meets one crashes and its
supervisor decides what happens next.
"""

from __future__ import annotations

from runtime.kernel.errors import UsageError


class InvalidArgument(UsageError, ValueError):
    pass


class UnexpectedMessage(UsageError):
    def __init__(self, path: str, message: object) -> None:
        super().__init__(f"{path}: unexpected message {message!r}")
        self.message = message
