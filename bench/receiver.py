"""A minimal HTTP/1.1 responder on uvloop: `200` with an empty body to every request.

    .venv/bin/python bench/receiver.py [--host 127.0.0.1] [--port 0]

The benchmark's fallback receiver when Debian's nginx is not installed. It prints
`listening <port>` once ready and runs until SIGTERM/SIGINT. It reads a request head up to
the blank line, then `Content-Length` bytes of body (no chunked bodies: neither aiohttp
nor the runtime sends them for a bytes body), answers, and keeps the connection open.
Loopback only: it binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
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
            self.body_left = content_length(bytes(self.buffer[:end]))
            del self.buffer[: end + 4]
        if len(self.buffer) < self.body_left:
            return False
        del self.buffer[: self.body_left]
        self.body_left = -1
        self.transport.write(RESPONSE)
        return True


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Responder, host, port, backlog=4096)
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
    args = parser.parse_args(argv)
    uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main(sys.argv[1:])
