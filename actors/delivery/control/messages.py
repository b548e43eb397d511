"""What the control actor (actors/delivery/control/actor.py) is told and asked. Every
change to the subscriptions is one of these, handled one at a time by its mailbox."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, TypeVar

from actors.delivery.control.trees import Starting
from actors.delivery.document.replay import ReplayRequest
from actors.delivery.document.subscription import Consumer
from actors.delivery.egress.handler import HandlerDestination
from actors.delivery.errors import DeliveryError
from runtime.kernel.actor import Actor, Ref

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Subscribe:
    """Start a subscription here (and with `persist`, keep it in the files). `handler`:
    an in-process subscription (its records go to a Python function), never persisted."""

    consumer: Consumer
    persist: bool = True
    handler: HandlerDestination | None = None


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    key: str


@dataclass(frozen=True, slots=True)
class Update:
    key: str
    consumer: Consumer


@dataclass(frozen=True, slots=True)
class PauseSubscription:
    key: str


@dataclass(frozen=True, slots=True)
class ResumeSubscription:
    key: str


@dataclass(frozen=True, slots=True)
class Gone:
    """An endpoint answered 410 Gone: disable the subscription until it is resumed."""

    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class TreeExited:
    """A subscription's tree ended by itself (crashed past its own restart budget)."""

    key: str
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class TreesLost:
    """The `delivery` supervisor ended (and is restarted empty): every tree went."""

    error: BaseException | None


@dataclass(frozen=True, slots=True)
class MembersLost:
    """The `groups` supervisor ended (and is restarted empty): the instance members went
    while the trees that ride them run on; they are started again (issue 32, found by the
    seeded chaos run)."""

    error: BaseException | None


@dataclass(frozen=True, slots=True)
class Record:
    """A record of the cluster's subscriptions topic, read by the follower."""

    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Publish:
    """Write records to the source; the reply is a future done once they are applied."""

    records: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Check:
    """Refuse now what would fail later (cluster mode, before writing to the topic);
    `update`: the key of the subscription the document replaces. The reply is the
    document to write (an update's with the stored secrets where it says `***`)."""

    consumer: Consumer
    update: str | None = None


@dataclass(frozen=True, slots=True)
class Listed:
    """Whether `key` is listed here (reply: bool)."""

    key: str


@dataclass(frozen=True, slots=True)
class Marks:
    """The subscription and whether it is paused or marked disabled (also the reply)."""

    key: str
    consumer: Consumer | None = None
    paused: bool = False
    disabled: bool = False


@dataclass(frozen=True, slots=True)
class Replay:
    key: str
    request: ReplayRequest


@dataclass(frozen=True, slots=True)
class TreesStopped:
    """These unsubscribes' trees stopped (actors/delivery/control/leaving.py)."""

    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TreesStarted:
    """A batch of subscribes' trees started, or not (actors/delivery/control/joining.py)."""

    starting: Starting


@dataclass(frozen=True, slots=True)
class Unsaved:
    """A subscribe's file could not be written: the subscription stops and goes."""

    key: str


@dataclass(frozen=True, slots=True)
class Pending:
    """The answer of a change the mailbox does not finish in one turn: its outcome comes
    in `answer` (a refusal as its exception)."""

    answer: asyncio.Future[Any]


@dataclass(frozen=True, slots=True)
class Refused:
    """The answer when the control actor refuses a change: the error for the asker."""

    error: DeliveryError


def asked_again(control: Actor, after: asyncio.Future[T], message: object) -> Pending:
    """`message`, asked of `control` again once `after` is done (either way): a change
    queued behind a subscribe's start or an unsubscribe's leave (joining.py, leaving.py)."""

    async def again() -> object:
        with contextlib.suppress(Exception):
            await after
        return await ask(control, message)

    return Pending(control.spawn_answer(again(), name=f"{control.path}:after"))


async def ask(control: Ref, message: object) -> Any:
    """Ask the control actor; a refusal is raised here, in the asker."""
    answer = await control.ask(message)
    if isinstance(answer, Pending):
        answer = await answer.answer
    if isinstance(answer, Refused):
        raise answer.error
    return answer
