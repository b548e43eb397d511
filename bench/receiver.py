"""A minimal HTTP/1.1 responder on uvloop: `200` with an empty body to every request.

    .venv/bin/python bench/receiver.py [--host 127.0.0.1] [--port 0] [--count]

The benchmark's fallback receiver when Debian's nginx is not installed. It prints
`listening <port>` once ready and runs until SIGTERM/SIGINT. It reads a request head up to
the blank line, then `Content-Length` bytes of body (no chunked bodies: neither aiohttp
nor the runtime sends them for a bytes body), answers, and keeps the connection open.
Loopback only: it binds 127.0.0.1 unless told otherwise.

`--count` (bench/cluster.py --kill): every request is also counted under its path and its
`webhook-id` header (the runtime's id of one record, actors/delivery/document/signing.py;
a subscription's URL can carry its id in the path), and `GET /counts` answers the counts
as JSON, `{path: {webhook-id: receipts}}`; `GET /counts/summary` answers `{path:
[distinct ids, receipts]}`. Neither is counted. Without `--count` the responder is the
plain one above: the rate figures are measured with it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import cast

import uvloop

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n"
MAX_HEAD_BYTES = 64 * 1024


def content_length(head: bytes) -> int:
    """The `Content-Length` of a request head (0 when absent)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


class Responder(asyncio.Protocol):
    """Answers each complete request on the connection, pipelined requests included."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.body_left = -1  # -1: reading a head; >= 0: body bytes still to skip

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass, but it is one
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self._step():
            pass

    def _step(self) -> bool:
        """Consume one head or one body from the buffer; False when more data is needed."""
        assert self.transport is not None
        if self.body_left < 0:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD_BYTES:
                    self.transport.close()
                return False
            self.body_left = self._head(bytes(self.buffer[:end]))
            del self.buffer[: end + 4]
        if len(self.buffer) < self.body_left:
            return False
        del self.buffer[: self.body_left]
        self.body_left = -1
        self.transport.write(self._answer())
        return True

    def _head(self, head: bytes) -> int:
        """A request's head arrived: its body's length."""
        return content_length(head)

    def _answer(self) -> bytes:
        """The answer to the request whose body was just read."""
        return RESPONSE


Counts = dict[str, dict[str, int]]  # path -> webhook-id -> receipts


def request_of(head: bytes) -> tuple[bytes, bytes, int, str]:
    """Method, path, `Content-Length` (0 when absent) and `webhook-id` ("" when absent)
    of a request head."""
    lines = head.split(b"\r\n")
    method, _, rest = lines[0].partition(b" ")
    path = rest.partition(b" ")[0]
    length, wid = 0, ""
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"webhook-id":
            wid = value.strip().decode("latin-1")
    return method, path, length, wid


def json_response(value: object) -> bytes:
    body = json.dumps(value, separators=(",", ":")).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\nConnection: keep-alive\r\n\r\n" + body)


class Counter(Responder):
    """`Responder` that counts each request under (path, `webhook-id`) and answers
    `GET /counts` and `GET /counts/summary` with them (`--count`)."""

    def __init__(self, counts: Counts) -> None:
        super().__init__()
        self.counts = counts
        self.method, self.path, self.wid = b"", b"", ""

    def _head(self, head: bytes) -> int:
        self.method, self.path, length, self.wid = request_of(head)
        return length

    def _answer(self) -> bytes:
        """Counts a whole request (a body cut short by a killed sender is not a receipt)."""
        if self.method == b"GET" and self.path == b"/counts":
            return json_response(self.counts)
        if self.method == b"GET" and self.path == b"/counts/summary":
            return json_response({p: [len(ids), sum(ids.values())]
                                  for p, ids in self.counts.items()})
        ids = self.counts.setdefault(self.path.decode("latin-1"), {})
        ids[self.wid] = ids.get(self.wid, 0) + 1
        return RESPONSE


async def serve(host: str, port: int, count: bool = False) -> None:
    loop = asyncio.get_running_loop()
    counts: Counts = {}
    factory = (lambda: Counter(counts)) if count else Responder
    server = await loop.create_server(factory, host, port, backlog=4096)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    bound = server.sockets[0].getsockname()[1]
    print(f"listening {bound}", flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--count", action="store_true",
                        help="count requests per (path, webhook-id); GET /counts answers")
    args = parser.parse_args(argv)
    uvloop.run(serve(args.host, args.port, args.count))


if __name__ == "__main__":
    main(sys.argv[1:])
