"""hookstream's runtime: the actor kernel and the process that hosts the domain actors.

    from runtime import Runtime, Actor, Supervisor, ChildSpec, FakeClock

Packages: `runtime.kernel` (actors, supervisors, clocks, timers: self-contained),
`runtime.kafka` (clients, compat, embedded broker), `runtime.host` (Runtime, config,
admin API, metrics, journal, services), `runtime.report` (the PySpark jobs).
`runtime/` never imports `actors/`; docs/ARCHITECTURE.md has the map.
"""

from runtime.dependencies import require as _require_dependencies

_require_dependencies()

from runtime.errors import ConfigError, DeadLetter, Skip, UsageError  # noqa: E402
from runtime.host.app import Runtime  # noqa: E402
from runtime.host.config import Config, load_config, parse_config  # noqa: E402
from runtime.host.journal import EVENT_TYPES, Event, EventType  # noqa: E402
from runtime.host.service import DelayQueue, Service, ServiceFactory  # noqa: E402
from runtime.kernel import (  # noqa: E402
    Actor,
    ActorSystem,
    ChildRef,
    ChildSpec,
    Clock,
    FakeClock,
    RealClock,
    Ref,
    Supervisor,
    TimerWheel,
)

__all__ = [
    "EVENT_TYPES", "Actor", "ActorSystem", "ChildRef", "ChildSpec", "Clock", "Config",
    "ConfigError", "DeadLetter", "DelayQueue", "Event", "EventType", "FakeClock", "RealClock",
    "Ref", "Runtime", "Service", "ServiceFactory", "Skip", "Supervisor", "TimerWheel", "UsageError",
    "load_config", "parse_config",
]
