"""Services: what the domain packages plug into a `Runtime`.

`runtime/` never imports `actors/`. The domain registers its services as entry points in
the `hookstream.services` group (see pyproject.toml); `Runtime` loads them by name, or
takes them from the caller when embedded. A service starts its actors under the
runtime's actor system, may add admin routes and metrics, and stops in reverse order.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from runtime.app import Runtime


class Service(Protocol):
    name: str

    async def start(self, runtime: Runtime) -> None: ...

    async def stop(self) -> None: ...


ServiceFactory = type[Service]
GROUP = "hookstream.services"


def discover() -> list[ServiceFactory]:
    """The installed services, in a stable order (delivery before delay)."""
    found = sorted(entry_points(group=GROUP), key=lambda ep: ep.name != "delivery")
    return [ep.load() for ep in found]
