"""In-process subscriptions: what `Runtime.consume(...)` builds (issue 18).

    async with Runtime(config, services=[DeliveryService]) as runtime:
        orders = await runtime.consume("billing", handle_order, topics=["orders"],
                                       ordering="key", concurrency=50, retries=5,
                                       dead_letter_topic="orders.dlt")
        ...
        await orders.stop()          # drains in-flight records, commits, leaves the group

The parameters become a Consumer document (the admin API's JSON, as a dict) whose
`subscriptionMethod` names the handler instead of a URL (`{"type": "handler", "handler":
"module.qualname", ...}`: `HandlerMethod`, actors/delivery/document/subscription.py).
`decode_handler_consumer` validates it like a posted one, so an in-process subscription
has exactly the HTTP path's topic and retry settings, defaults and checks; an invalid
value raises `InvalidSubscription` naming the parameter. The document is subscribed with
`persist=False` and a `HandlerDestination` (actors/delivery/egress/handler.py): its outlet
is a `HandlerActor` instead of the HTTP egress, with the same consumer, partition,
dead-letter actors, commits, journal and metrics. The admin API shows the document as it
is (and the subscription with `inProcess: true`); it refuses to take one with a handler.

`id` defaults to the handler's name: a subscription is the pair (`id`, `group_id`), so two
handlers may consume with one group only under different ids.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final, Unpack

from actors.delivery.control.service import DeliveryControl
from actors.delivery.document.settings import pool_size
from actors.delivery.document.subscription import Consumer, decode_handler_consumer
from actors.delivery.egress.handler import (
    ConsumedRecord,
    Handler,
    HandlerDestination,
    handler_name,
)
from actors.delivery.errors import InvalidSubscription, SubscriptionNotFound
from runtime.errors import ActorDeadError, UsageError
from runtime.host.service import ConsumeOptions

if TYPE_CHECKING:
    from runtime.host.app import Runtime

DEFAULT_ID: Final = "in-process"
# parameter -> field of the Consumer JSON (topics[].config, then subscriptionMethod)
TOPIC_FIELDS: Final = {
    "concurrency": "concurrencyFactor", "ordering": "ordering", "lanes": "lanes",
    "auto_commit_period_ms": "autoCommitPeriodMs", "load_factor": "loadFactor",
}
METHOD_FIELDS: Final = {
    "retries": "retryBeforeCommit", "delay_on_error_ms": "delayOnErrorMs",
    "backoff_multiplier": "backoffMultiplier", "max_delay_on_error_ms": "maxDelayOnErrorMs",
    "jitter": "jitter", "timeout_ms": "timeoutMs", "dead_letter_topic": "deadLetterTopic",
}
OTHER_FIELDS: Final = {"group_id": "group.id", "id": "id", "broker": "broker",
                       "topics": "topics", "pattern": "pattern", "properties": "properties"}
OPTIONS: Final = frozenset(ConsumeOptions.__optional_keys__)

__all__ = ["ConsumedRecord", "InProcessSubscription", "consume", "consumer_document"]


class InProcessSubscription:
    """The handle `Runtime.consume` returns. `stop()` is idempotent and returns once the
    subscription drained (in-flight records finish within the drain deadline) and its
    positions are committed; `await status()` is the admin API's status of it (raises
    `SubscriptionNotFound` once stopped). Also an async context manager that stops it."""

    def __init__(self, delivery: DeliveryControl, consumer: Consumer) -> None:
        self.consumer = consumer
        self._delivery = delivery
        self._stopped = False

    @property
    def key(self) -> str:
        """The pair's key (`<id>_<group_id>` when `group_id` has no `_`: actors/delivery/
        document/identity.py): the name in metrics and the journal."""
        return self.consumer.key

    async def status(self) -> dict[str, object]:
        return await self._delivery.status_of(self.key)

    async def stop(self) -> None:
        """A second `stop()` while the first drains queues behind it in the control
        actor's mailbox, finds nothing and returns when the first has finished."""
        if self._stopped:
            return
        # already gone (by a concurrent stop), or with its runtime: nothing left to drain
        with contextlib.suppress(SubscriptionNotFound, ActorDeadError):
            await self._delivery.unsubscribe(self.key)
        self._stopped = True

    async def __aenter__(self) -> InProcessSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __repr__(self) -> str:
        return f"<InProcessSubscription {self.key} {'stopped' if self._stopped else 'running'}>"


async def consume(delivery: DeliveryControl, runtime: Runtime, group_id: str,
                  handler: Handler, **options: Unpack[ConsumeOptions]) -> InProcessSubscription:
    """Subscribe `handler` (see the module docstring); returns once it runs. Raises
    `UsageError` for a handler that is not an async function or an unknown parameter,
    `InvalidSubscription` for an invalid value, and what `DeliveryControl.subscribe`
    raises (`SubscriptionExists`, `UnknownBroker`, `SubscriptionStartFailed`)."""
    default_broker = runtime.config.brokers[0].name
    consumer = decode_in_process(consumer_document(group_id, handler, options, default_broker))
    destination = HandlerDestination(handler, pool_size(consumer),
                                      consumer.subscriptionMethod.timeoutMs)
    await delivery.subscribe(consumer, persist=False, handler=destination)
    return InProcessSubscription(delivery, consumer)


def consumer_document(group_id: str, handler: Handler, options: ConsumeOptions,
                      default_broker: str) -> dict[str, object]:
    """The Consumer JSON (as a dict) of `Runtime.consume`'s parameters; fields not given
    are left out, so the document's own defaults apply."""
    _check_handler(handler)
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise UsageError(f"consume() got unknown parameters {', '.join(unknown)}; "
                         f"known: group_id, handler, {', '.join(sorted(OPTIONS))}")
    config = _fields(options, TOPIC_FIELDS)
    chosen = {} if options.get("filter") is None else {"filter": _filter(options["filter"])}
    topics: list[dict[str, object]] = [{"name": name, "config": config, **chosen}
                                    for name in _topic_names(options.get("topics", ()))]
    if options.get("pattern") is not None:
        topics.append({"name": options["pattern"], "pattern": True, "config": config,
                       **chosen})
    if not topics:
        raise UsageError("consume() needs topics=[...] (names) or pattern=... (a regex)")
    method = {"type": "handler", "handler": handler_name(handler),
              **_fields(options, METHOD_FIELDS)}
    properties = options.get("properties") or {}
    return {
        "id": options.get("id") or default_id(handler),
        "group": {"id": group_id},
        "broker": options.get("broker") or default_broker,
        "topics": topics,
        "subscriptionMethod": method,
        "properties": {str(name): str(value) for name, value in properties.items()},
    }


def decode_in_process(document: dict[str, object]) -> Consumer:
    """`decode_handler_consumer`, with errors naming `consume()`'s parameters, not the
    JSON's."""
    try:
        return decode_handler_consumer(document)
    except InvalidSubscription as exc:
        raise InvalidSubscription(_parameter_of(exc.reason), exc.details) from None


def default_id(handler: Handler) -> str:
    """The handler's name as a subscription id (letters, digits, '.', '_', '-')."""
    name = getattr(handler, "__name__", None) or type(handler).__name__
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("._-")[:100]
    return cleaned or DEFAULT_ID


def _check_handler(handler: Handler) -> None:
    call = getattr(handler, "__call__", None)  # noqa: B004  (a callable object's method)
    if not (inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)):
        raise UsageError(f"handler must be an async function (`async def handler(record)`), "
                         f"got {handler!r}")


def _topic_names(topics: Sequence[str]) -> list[str]:
    if isinstance(topics, str | bytes):
        raise UsageError(f"topics is a list of topic names, got the string {topics!r}: "
                         f"write topics=[{topics!r}]")
    return [str(name) for name in topics]


def _filter(value: object) -> object:
    """The filter as JSON would give it (a Mapping becomes a dict, tuples lists), so it
    is validated as a posted one is."""
    if isinstance(value, Mapping):
        return {str(k): _filter(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_filter(v) for v in value]
    return value


def _fields(options: Mapping[str, object], names: Mapping[str, str]) -> dict[str, object]:
    return {field: options[name] for name, field in names.items()
            if options.get(name) is not None}


def _parameter_of(reason: str) -> str:
    """"invalid topics[0].config.concurrencyFactor" -> "invalid concurrency";
    "invalid topics[0].filter.json.amount" -> "invalid filter.json.amount"."""
    _, found, rest = reason.partition("].filter")
    if found and reason.startswith("invalid topics["):
        return f"invalid filter{rest}"
    for parameter, field in (*TOPIC_FIELDS.items(), *METHOD_FIELDS.items(),
                             *OTHER_FIELDS.items()):
        if reason.endswith(f".{field}") or reason == f"invalid {field}":
            return f"invalid {parameter}"
    return "invalid topics" if reason.startswith("invalid topics[") else reason
