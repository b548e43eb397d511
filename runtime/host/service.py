"""Services: what the domain packages plug into a `Runtime`.

`runtime/` never imports `actors/`. The domain registers its services as entry points in
the `hookstream.services` group (see pyproject.toml); `Runtime` loads them, or takes them
from the caller when embedded (`Runtime(config, services=[DeliveryService, ...])`). A
service starts its actors under the runtime's actor system, may add admin routes and
metrics, and stops in reverse order.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, TypeVar, Unpack

from runtime.kernel.errors import UsageError

if TYPE_CHECKING:
    from aiokafka.structs import RecordMetadata

H = TypeVar("H", contravariant=True)
"""The host a service starts in: `runtime.host.app.Runtime` (a parameter, so that this
module need not import the one that imports it)."""


class Service(Protocol[H]):
    name: str

    async def start(self, runtime: H) -> None: ...

    async def stop(self) -> None: ...


class DelayQueue(Service[H], Protocol[H]):
    """What `Runtime.delay` offers: the delay service's library call."""

    async def send(self, target: str, value: bytes | None, key: bytes | None = None,
                   headers: Sequence[tuple[str, bytes]] | None = None,
                   delay_ms: int | None = None, due_ms: int | None = None
                   ) -> RecordMetadata: ...


class ConsumeOptions(TypedDict, total=False):
    """`Runtime.consume`'s settings besides `group_id` and `handler` (names fixed by issue
    18). An omitted one takes the Consumer JSON's default; README, "Use it as a library"."""

    topics: Sequence[str]
    pattern: str
    ordering: Literal["none", "partition", "key"]
    concurrency: int
    lanes: int
    retries: int
    delay_on_error_ms: int
    backoff_multiplier: float
    max_delay_on_error_ms: int
    jitter: float
    timeout_ms: int
    dead_letter_topic: str
    broker: str
    properties: Mapping[str, str | int]
    id: str
    auto_commit_period_ms: int
    load_factor: float
    filter: Mapping[str, object]
    """The records to handle: a filter as in a subscription's `topics[].filter` (issue 26),
    applied to every topic and the pattern."""


RecordHandler = Callable[[Any], Awaitable[object]]
"""`async def handler(record)`; the record type is the delivery service's (actors/delivery/
handler.py `ConsumedRecord`), which `runtime` does not import."""


class Consumption(Protocol):
    """What `Runtime.consume` returns: a handle on the in-process subscription."""

    @property
    def key(self) -> str: ...

    async def status(self) -> dict[str, object]: ...

    async def stop(self) -> None: ...


class InProcessConsumers(Service[H], Protocol[H]):
    """What `Runtime.consume` needs of the delivery service."""

    async def consume(self, group_id: str, handler: RecordHandler,
                      **options: Unpack[ConsumeOptions]) -> Consumption: ...


ServiceFactory = Callable[[], Service[H]]


def summary_of(service: object) -> str:
    """A service may sum up its run in a few words (`summary() -> str`) for the stop line."""
    summary = getattr(service, "summary", None)
    return str(summary()) if callable(summary) else ""


async def readiness_of(service: object) -> list[str]:
    """A service may say why it is not ready (`readiness() -> list[str]`, or a coroutine
    of it when it asks its actors), for `/readyz`."""
    check = getattr(service, "readiness", None)
    if not callable(check):
        return []
    found = check()
    return list(await found if inspect.isawaitable(found) else found)
GROUP = "hookstream.services"


def discover() -> list[Callable[[], Any]]:
    """The installed services, in a stable order (delivery before delay). Finding none
    is an error: the package is not installed, so nothing would run."""
    found = sorted(entry_points(group=GROUP), key=lambda ep: ep.name != "delivery")
    if not found:
        raise UsageError(
            f"no services found in the {GROUP!r} entry points: install the project "
            "(`pip install -e .`, or `make venv`), or pass them explicitly: "
            "Runtime(config, services=[DeliveryService, DelayService])")
    return [ep.load() for ep in found]
