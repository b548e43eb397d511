"""Admin routes that act on one subscription, addressed as `/broker/subscription/{id}/
{groupId}` (the pair that identifies it):

    GET  .../{id}/{groupId}           the consumer (redacted) and its status
    PUT  .../{id}/{groupId}           a Consumer JSON: change it in place
    POST .../{id}/{groupId}/pause     stop fetching; in-flight pushes finish; committed
    POST .../{id}/{groupId}/resume    start again from the committed positions
    POST .../{id}/{groupId}/replay    deliver again (actors/delivery/path/replay.py): 202
    GET  .../{id}/{groupId}/replay/{replayId}   its progress
    GET  .../{id}/{groupId}/attempts?topic=T&partition=P&offset=O (or ?webhookId=W)
                                      what happened to that record (control/attempts.py)
    GET  .../{id}/{groupId}/attempts?failed=true&limit=N   the latest failed attempts

Answers use the admin API's envelope; errors go through routes.py's one translation.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from actors.delivery.api.subscriptions import (
    answering,
    check_resolvable,
    known_key,
    number,
    refuse_in_process,
    single_values,
)
from actors.delivery.control.attempts import DEFAULT_LIMIT, MAX_LIMIT
from actors.delivery.control.service import DeliveryControl
from actors.delivery.document.replay import MAX_OFFSET, MAX_PARTITION, ReplayRequest
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.errors import InvalidSubscription, SubscriptionNotFound
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
        app.router.add_get(BASE + "/attempts", answering(self.attempts))

    def key_of(self, request: web.Request) -> str:
        """The subscription the path names: the (id, groupId) pair, 404 when unknown."""
        return known_key(self.service.subscriptions, *pair_of(request))

    async def get_one(self, request: web.Request) -> web.Response:
        key = self.key_of(request)
        answer = await self.service.answer(key)
        cluster = await self.service.cluster_view(key)
        if cluster is not None:  # [cluster] status_topic: every instance
            answer = msgspec.structs.replace(answer, cluster=cluster)
        return ok(answer)

    async def put_one(self, request: web.Request) -> web.Response:
        key = self.key_of(request)  # 404 before reading the body
        refuse_in_process(self.service, key)
        consumer = decode_consumer(await request.read())
        if not consumer.same(*pair_of(request)):
            raise InvalidSubscription("id and group.id cannot change",
                                      f"the path names {key}, the body {consumer.key}")
        check_resolvable(consumer, self.service.guard.references)
        await self.service.update(key, consumer)
        return ok(await self.service.answer(key))

    async def pause(self, request: web.Request) -> web.Response:
        key = self.key_of(request)
        refuse_in_process(self.service, key)
        await self.service.pause(key)
        return ok(await self.service.answer(key))

    async def resume(self, request: web.Request) -> web.Response:
        key = self.key_of(request)
        refuse_in_process(self.service, key)
        await self.service.resume(key)
        return ok(await self.service.answer(key))

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

    async def attempts(self, request: web.Request) -> web.Response:
        key, query = self.key_of(request), single_values(request.query, ATTEMPTS_QUERY)
        # every parameter given is checked, also one the query form does not use
        limit = number(query, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT, ATTEMPTS_QUERY)
        partition = number(query, "partition", -1, 0, MAX_PARTITION, ATTEMPTS_QUERY)
        offset = number(query, "offset", -1, 0, MAX_OFFSET, ATTEMPTS_QUERY)
        if query.get("failed", "true") != "true":
            raise InvalidSubscription("invalid failed", f"only failed=true; {ATTEMPTS_QUERY}")
        if "failed" in query:
            return ok(await self.service.failures_of(key, limit))
        if "webhookId" in query:
            return ok(await self.service.attempts_of(key, webhook_id=query["webhookId"]))
        if "topic" in query and min(partition, offset) >= 0:
            coordinates = (query["topic"], partition, offset)
            return ok(await self.service.attempts_of(key, coordinates))
        raise InvalidSubscription("invalid attempts query", ATTEMPTS_QUERY)

    def __repr__(self) -> str:
        return f"<ControlRoutes {BASE}>"


ATTEMPTS_QUERY = "give topic, partition and offset; or webhookId; or failed=true (and limit)"
