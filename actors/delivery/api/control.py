"""Admin routes that act on one subscription, addressed as `/broker/subscription/{id}/
{groupId}` (the pair that identifies it):

    GET  .../{id}/{groupId}           the consumer (redacted) and its status
    PUT  .../{id}/{groupId}           a Consumer JSON: change it in place
    POST .../{id}/{groupId}/pause     stop fetching; in-flight pushes finish; committed
    POST .../{id}/{groupId}/resume    start again from the committed positions
    POST .../{id}/{groupId}/replay    deliver again (actors/delivery/path/replay.py): 202
    GET  .../{id}/{groupId}/replay/{replayId}   its progress

Answers use the admin API's envelope; errors go through routes.py's one translation.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from actors.delivery.api.subscriptions import (
    answering,
    check_resolvable,
    known_key,
    refuse_in_process,
)
from actors.delivery.control.service import DeliveryControl
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.errors import InvalidSubscription, SubscriptionNotFound
from actors.delivery.path.replay import ReplayRequest
from runtime.host.admin import ok

BASE = "/broker/subscription/{id}/{groupId}"


def pair_of(request: web.Request) -> tuple[str, str]:
    return request.match_info["id"], request.match_info["groupId"]


class ControlRoutes:
    def __init__(self, service: DeliveryControl) -> None:
        self.service = service

    def add_to(self, app: web.Application) -> None:
        app.router.add_get(BASE, answering(self.get_one))
        app.router.add_put(BASE, answering(self.put_one))
        app.router.add_post(BASE + "/pause", answering(self.pause))
        app.router.add_post(BASE + "/resume", answering(self.resume))
        app.router.add_post(BASE + "/replay", answering(self.replay))
        app.router.add_get(BASE + "/replay/{replayId}", answering(self.replay_progress))

    def key_of(self, request: web.Request) -> str:
        """The subscription the path names: the (id, groupId) pair, 404 when unknown."""
        return known_key(self.service.subscriptions, *pair_of(request))

    async def get_one(self, request: web.Request) -> web.Response:
        key = self.key_of(request)
        answer = self.service.answer(key)
        cluster = await self.service.cluster_view(key)
        if cluster is not None:  # [cluster] status_topic: every instance
            answer = msgspec.structs.replace(answer, cluster=cluster)
        return ok(answer)

    async def put_one(self, request: web.Request) -> web.Response:
        key = self.key_of(request)  # 404 before reading the body
        consumer = decode_consumer(await request.read())
        if not consumer.same(*pair_of(request)):
            raise InvalidSubscription("id and group.id cannot change",
                                      f"the path names {key}, the body {consumer.key}")
        check_resolvable(consumer, self.service.guard.references)
        await self.service.update(key, consumer)
        return ok(self.service.answer(key))

    async def pause(self, request: web.Request) -> web.Response:
        key = self.key_of(request)
        refuse_in_process(self.service, key)
        await self.service.pause(key)
        return ok(self.service.answer(key))

    async def resume(self, request: web.Request) -> web.Response:
        key = self.key_of(request)
        refuse_in_process(self.service, key)
        await self.service.resume(key)
        return ok(self.service.answer(key))

    async def replay(self, request: web.Request) -> web.Response:
        try:
            wanted = msgspec.json.decode(await request.read(), type=ReplayRequest)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise InvalidSubscription("invalid replay request", str(exc)) from None
        progress = await self.service.replay(self.key_of(request), wanted)
        response = ok({"replayId": progress.replay_id})
        response.set_status(202)
        return response

    async def replay_progress(self, request: web.Request) -> web.Response:
        key, rid = self.key_of(request), request.match_info["replayId"]
        progress = self.service.replays.get(rid)
        if progress is None or progress.subscription != key:
            raise SubscriptionNotFound("replay not found", f"{key}: {rid}")
        return ok(progress.as_dict())

    def __repr__(self) -> str:
        return f"<ControlRoutes {BASE}>"
