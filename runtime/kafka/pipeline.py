"""Many requests to one broker in one write (issue 37).

A commit round at fan-out sends one `OffsetCommit` per group that moved, and a read of
new cursors' positions one `OffsetFetch` (and at first one `FindCoordinator`) per group:
Kafka carries one group per request before OffsetFetch v8. Through aiokafka's
`AIOKafkaClient.send` each request was a task, a readiness check, a timeout context and
a socket write of its own: 70 us of CPU per group of a commit round of 10,000 groups on
the embedded broker, more than the deliveries it committed cost. Here the requests of a
turn are encoded, queued on the connection's answer queue and written together in one
write; aiokafka's connection reads the answers as it reads any (in order, by correlation
id) and resolves their futures, and one deadline covers them all.

This uses aiokafka's connection internals (`_requests`, `_writer`, `_versions`,
`_client_id`, `_next_correlation_id`: aiokafka 0.14's `AIOKafkaConnection.send` does the
same per request); tests/integration/test_group_offsets.py runs it against the broker.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence
from typing import TypeVar

from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import AIOKafkaConnection, CloseReason
from aiokafka.errors import KafkaConnectionError, NodeNotReadyError, RequestTimedOutError
from aiokafka.protocol.api import Request, RequestStruct, Response

_SIZE = struct.Struct(">i")
S = TypeVar("S", bound=RequestStruct)
"""The structs of a kind of request (the requests sent together are of one kind)."""


async def connection(client: AIOKafkaClient, node: int) -> AIOKafkaConnection:
    """The client's connection to `node`, connected (`NodeNotReadyError` if it cannot)."""
    conn = await client._get_conn(node, group=ConnectionGroup.DEFAULT)
    if conn is None:
        raise NodeNotReadyError(f"node {node} is not ready")
    return conn


def send_all(conn: AIOKafkaConnection, requests: Sequence[Request[S]],
             ) -> list[asyncio.Future[Response]]:
    """Write `requests` to `conn` in one write; the futures of their answers (resolved by
    the connection's reader, failed when it closes). Nothing is sent if one cannot be
    encoded."""
    if conn._writer is None:
        raise KafkaConnectionError(f"no connection to broker at {conn._host}:{conn._port}")
    versions, client_id = conn._versions, conn._client_id
    encoded = []
    for request in requests:
        body = request.prepare(versions)
        correlation_id = conn._next_correlation_id()
        message = body.build_request_header(correlation_id=correlation_id,
                                            client_id=client_id).encode() + body.encode()
        encoded.append((correlation_id, body, message))
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[Response]] = []
    for correlation_id, body, _message in encoded:
        future: asyncio.Future[Response] = loop.create_future()
        conn._requests.append((correlation_id, body, future))
        futures.append(future)
    try:
        conn._writer.write(b"".join(part for *_, message in encoded
                                    for part in (_SIZE.pack(len(message)), message)))
    except (OSError, RuntimeError) as exc:  # RuntimeError: the transport closed under it
        conn.close(reason=CloseReason.CONNECTION_BROKEN, exc=exc)  # fails the futures
        raise KafkaConnectionError(f"connection to {conn._host}:{conn._port} broken: "
                                   f"{exc}") from exc
    return futures


async def settle(futures: Sequence[asyncio.Future[Response]], conn: AIOKafkaConnection,
                 timeout_s: float) -> None:
    """Wait for every answer, at most `timeout_s`: then the connection is closed (as
    aiokafka does on a request's timeout, so it is made again) and the answers not come
    fail with `RequestTimedOutError`. (A caller that is cancelled cancels the futures:
    their answers are dropped when they come.)"""
    if not futures:
        return
    _done, late = await asyncio.wait(futures, timeout=timeout_s)
    if late:
        for future in late:
            future.set_exception(RequestTimedOutError())
        conn.close(reason=CloseReason.CONNECTION_TIMEOUT)


def answer(future: asyncio.Future[Response]) -> Response | BaseException:
    """A settled future's answer, or why there is none."""
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception() or future.result()
