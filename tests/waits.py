"""The one way tests wait for something: `await until(check)`.

`check` is called (and awaited, when it returns an awaitable) until it returns something
truthy, which `until` returns. Between calls it waits for `wake` (an event the awaited
thing sets: a receiver's push, a listener's event) or `poll_s`, whichever comes first, so
a check of state that has no event still works, and one that has is answered at once.
A timeout raises AssertionError with `what` and the last value `check` returned: the
failure says what was awaited and what was there instead.

Timeouts are generous on purpose: they bound a hang, they are never a speed budget
(budgets live in bench/). A loaded machine makes a test slower, never red: every timeout
given here is multiplied by `SLACK` (`HOOKSTREAM_TEST_SLACK`, 3 by default; pytest-timeout
still ends a test that hangs).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 60.0
POLL_S = 0.05
SLACK = float(os.environ.get("HOOKSTREAM_TEST_SLACK", "3"))


@overload
async def until(check: Callable[[], Awaitable[T]], *, timeout_s: float = ...,
                what: str = ..., wake: asyncio.Event | None = ..., poll_s: float = ...) -> T: ...


@overload
async def until(check: Callable[[], T], *, timeout_s: float = ..., what: str = ...,
                wake: asyncio.Event | None = ..., poll_s: float = ...) -> T: ...


async def until(check: Callable[[], Any], *, timeout_s: float = DEFAULT_TIMEOUT_S,
                what: str = "", wake: asyncio.Event | None = None,
                poll_s: float = POLL_S) -> Any:
    timeout_s *= SLACK
    deadline = time.monotonic() + timeout_s
    while True:
        if wake is not None:
            wake.clear()  # before the check: a change during it still wakes the wait
        found = check()
        value = await found if inspect.isawaitable(found) else found
        if value:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            name = what or getattr(check, "__name__", "condition")
            raise AssertionError(f"{name}: not met within {timeout_s:g} s "
                                 f"(last: {value!r})")
        await _pause(min(remaining, poll_s), wake)


async def _pause(seconds: float, wake: asyncio.Event | None) -> None:
    if wake is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wake.wait(), seconds)
