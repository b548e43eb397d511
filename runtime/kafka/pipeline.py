"""Many requests to one broker in one write (issue 37).

A commit round at fan-out sends one `OffsetCommit` per group that moved, and a read of
new cursors' positions one `OffsetFetch` (and at first one `FindCoordinator`) per group:
Kafka carries one group per request before OffsetFetch v8. Through aiokafka's
`AIOKafkaClient.send` each request was a task, a readiness check, a timeout context and
a socket write of its own: 70 us of CPU per group of a commit round of 10,000 groups on
the embedded broker, more than the deliveries it committed cost. Here the requests of a
turn are encoded, queued on the connection's answer queue and written together in one
write; aiokafka's connection reads the answers as it reads any (in order, by correlation
id) into one `Answers` per write (not a future per request), and one deadline covers them
all. Commits are written and read by runtime/kafka/commit_wire.py, the rest by aiokafka.

This uses aiokafka's connection internals (`_requests`, `_writer`, `_versions`,
`_client_id`, `_next_correlation_id`: aiokafka 0.14's `AIOKafkaConnection.send` does the
same per request); tests/integration/test_group_offsets.py runs it against the broker.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence
from typing import Generic, TypeVar

from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import AIOKafkaConnection, CloseReason
from aiokafka.errors import KafkaConnectionError, NodeNotReadyError, RequestTimedOutError
from aiokafka.protocol.api import Request, RequestStruct, Response

from runtime.kafka import commit_wire
from runtime.kafka.commit_wire import Commit, Refused

_SIZE = struct.Struct(">i")
S = TypeVar("S", bound=RequestStruct)
"""The structs of a kind of request (the requests sent together are of one kind)."""
A = TypeVar("A")
"""What an answer is read into."""


async def connection(client: AIOKafkaClient, node: int) -> AIOKafkaConnection:
    """The client's connection to `node`, connected (`NodeNotReadyError` if it cannot)."""
    conn = await client._get_conn(node, group=ConnectionGroup.DEFAULT)
    if conn is None:
        raise NodeNotReadyError(f"node {node} is not ready")
    return conn


class Answers(Generic[A]):
    """The answers of one write's requests, in order. aiokafka's connection reader resolves
    it in place of a future per request (it calls `done`, `set_result` for each answer, and
    `set_exception` when the connection fails): one future a write, not one a request and
    a wait's callback on each."""

    __slots__ = ("_expected", "_got", "_why", "future")

    def __init__(self, expected: int, future: asyncio.Future[None]) -> None:
        self._got: list[A] = []
        self._expected = expected
        self._why: BaseException | None = None
        self.future = future
        if not expected:
            future.set_result(None)

    def done(self) -> bool:
        return self.future.done()

    def set_result(self, answer: A) -> None:
        self._got.append(answer)
        if len(self._got) == self._expected:
            self.future.set_result(None)

    def set_exception(self, why: BaseException) -> None:
        """The answers not come fail with `why`."""
        if not self.future.done():
            self._why = why
            self.future.set_result(None)

    def results(self) -> list[A | BaseException]:
        """Each request's answer, or why none came (`RequestTimedOutError` if still
        waited for, `CancelledError` if the caller gave up)."""
        why = self._why or (asyncio.CancelledError() if self.future.cancelled()
                            else RequestTimedOutError())
        got: list[A | BaseException] = list(self._got)
        return got + [why] * (self._expected - len(got))


def send_all(conn: AIOKafkaConnection, requests: Sequence[Request[S]]) -> Answers[Response]:
    """Write `requests` (aiokafka's, of one kind) to `conn` in one write; their answers
    come in the connection's reader. Nothing is sent if one cannot be encoded."""
    conn_ok(conn)
    versions, client_id = conn._versions, conn._client_id
    frames: list[tuple[int, object, bytes]] = []
    for request in requests:
        body = request.prepare(versions)
        correlation_id = conn._next_correlation_id()
        frames.append((correlation_id, body, body.build_request_header(
            correlation_id=correlation_id, client_id=client_id).encode() + body.encode()))
    return _write(conn, frames)


def send_commits(conn: AIOKafkaConnection, commits: Sequence[Commit]) -> Answers[Refused]:
    """Write an `OffsetCommit` of each of `commits` to `conn` in one write
    (runtime/kafka/commit_wire.py); each answer is the partitions that refused."""
    conn_ok(conn)
    version = commit_wire.version_of(conn._versions)
    reader, client_id = commit_wire.ANSWERS[version], conn._client_id
    frames: list[tuple[int, object, bytes]] = []
    for commit in commits:
        correlation_id = conn._next_correlation_id()
        frames.append((correlation_id, reader,
                       commit_wire.write(commit, version, correlation_id, client_id)))
    return _write(conn, frames)


def conn_ok(conn: AIOKafkaConnection) -> None:
    if conn._writer is None:
        raise KafkaConnectionError(f"no connection to broker at {conn._host}:{conn._port}")


def _write(conn: AIOKafkaConnection, frames: list[tuple[int, object, bytes]]) -> Answers[A]:
    assert conn._writer is not None
    answers: Answers[A] = Answers(len(frames), asyncio.get_running_loop().create_future())
    requests = conn._requests
    for correlation_id, reader, _message in frames:
        requests.append((correlation_id, reader, answers))
    try:
        conn._writer.write(b"".join(part for *_, message in frames
                                    for part in (_SIZE.pack(len(message)), message)))
    except (OSError, RuntimeError) as exc:  # RuntimeError: the transport closed under it
        conn.close(reason=CloseReason.CONNECTION_BROKEN, exc=exc)  # fails the answers
        raise KafkaConnectionError(f"connection to {conn._host}:{conn._port} broken: "
                                   f"{exc}") from exc
    return answers


async def settle(writes: Sequence[Answers[A]], conn: AIOKafkaConnection,
                 timeout_s: float) -> None:
    """Wait for every answer, at most `timeout_s`: then the connection is closed (as
    aiokafka does on a request's timeout, so it is made again) and the answers not come
    fail with `RequestTimedOutError`. (A caller that is cancelled cancels the writes:
    their answers are dropped when they come.)"""
    futures = [w.future for w in writes if not w.future.done()]
    if not futures:
        return
    try:
        _done, late = await asyncio.wait(futures, timeout=timeout_s)
    except BaseException:
        for future in futures:
            future.cancel()
        raise
    if late:
        for write in writes:
            write.set_exception(RequestTimedOutError())
        conn.close(reason=CloseReason.CONNECTION_TIMEOUT)
