"""A loopback TCP proxy whose connections can be cut: the broker's network going away.

`CutProxy` stands in front of a broker that advertises the proxy's address, so every
connection a client makes passes through it. `cut()` closes every open connection and
refuses new ones (accepted, then closed at once, as a lost route looks to a client) until
`heal()`; `reset()` cuts too, but resets the open connections (RST) instead of closing
them; `stall()` holds every byte, connections open, until `flow()`. Nothing of the
protocol is imitated: bytes pass through unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from types import TracebackType

from runtime.kafka.broker import free_port


class CutProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = free_port()
        self.target_port = target_port
        self.cuts = 0
        self.refused = 0
        """Connections refused while cut (the clients trying again)."""
        self._down = False
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def __aenter__(self) -> CutProxy:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        if self._server is not None:
            self._server.close()
        self._close_all()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def cut(self) -> None:
        self._down = True
        self.cuts += 1
        self._close_all()

    def reset(self) -> None:
        """`cut()`, the open connections reset rather than closed (SO_LINGER 0: a RST, as
        from a broker's host that went away): the client's next read or write fails with
        `ConnectionResetError` instead of reading an end of stream."""
        linger = struct.pack("ii", 1, 0)
        for writer in self._writers:
            sock = writer.get_extra_info("socket")
            if sock is not None:  # None: closed already
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        self.cut()

    def heal(self) -> None:
        self._down = False

    def stall(self) -> None:
        """Stop passing bytes, connections kept open: a broker that does not answer."""
        self._flowing.clear()

    def flow(self) -> None:
        """Pass bytes again (what came meanwhile goes on)."""
        self._flowing.set()

    def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._down:
            self.refused += 1
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(_pipe(source, sink, self._flowing))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter,
                flowing: asyncio.Event) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while data := await source.read(65536):
            await flowing.wait()
            sink.write(data)
            await sink.drain()
    sink.close()
