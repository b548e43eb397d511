"""A malformed request to the admin API (#25 item 16): a JSON 4xx naming the problem and
at most one WARNING line, never an ERROR nor a traceback in the log (real runtime, raw
sockets: what a scanner or a broken client sends)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from tests.integration.delivery_harness import make_runtime

pytestmark = pytest.mark.integration

PATH = b"/broker/subscription"


def post(body: bytes, *headers: bytes, path: bytes = PATH, method: bytes = b"POST") -> bytes:
    head = [method + b" " + path + b" HTTP/1.1", b"Host: 127.0.0.1", *headers]
    if not any(h.lower().startswith((b"content-length", b"transfer-encoding"))
               for h in headers):
        head.append(b"Content-Length: %d" % len(body))
    if not any(h.lower().startswith(b"content-type") for h in headers):
        head.append(b"Content-Type: application/json")
    return b"\r\n".join([*head, b"Connection: close", b"", body])


def get(path: bytes, *headers: bytes, host: bytes = b"127.0.0.1", line: bytes = b"") -> bytes:
    head = [line or b"GET " + path + b" HTTP/1.1", b"Host: " + host, b"Connection: close",
            *headers]
    return b"\r\n".join([*head, b"", b""])


MALFORMED: list[tuple[str, bytes]] = [
    ("not JSON", post(b"{not json")),
    ("JSON but not an object", post(b"[1, 2]")),
    ("truncated JSON", post(b'{"id": "a", "group"')),
    ("invalid UTF-8", post(b'{"id": "\xff"}')),
    ("an empty body", post(b"")),
    ("a bad content type", post(b"{}", b"Content-Type: text/plain")),
    ("a bad charset", post(b"{}", b"Content-Type: application/json; charset=latin-1")),
    ("a garbage content type", post(b"{}", b"Content-Type: ;;;==")),
    ("bad chunked encoding", post(b"zz\r\n{}\r\n0\r\n\r\n", b"Transfer-Encoding: chunked")),
    ("a bad content length", post(b"{}", b"Content-Length: abc")),
    ("a negative content length", post(b"{}", b"Content-Length: -1")),
    ("both lengths", post(b"{}", b"Content-Length: 2", b"Transfer-Encoding: chunked")),
    ("a bad request line", b"POST\r\n\r\n"),
    ("a bad method", get(b"/", line=b"P\x00ST / HTTP/1.1")),
    ("a bad version", get(b"/", line=b"GET / HTTP/9.9")),
    ("a header without a colon", get(b"/healthz", b"Bad")),
    ("a header with NUL", get(b"/healthz", b"X: a\x00b")),
    ("a huge header", get(b"/healthz", b"X: " + b"a" * 20000)),
    ("a bad percent escape", get(b"/broker/subscription/%zz/%ff")),
    ("a path with NUL", get(b"/broker/subscription/a%00/b")),
    ("an absolute URI", get(b"http://[::1/")),
    ("a bad Host", get(b"/healthz", host=b"[zz")),
    ("TLS to a plain port", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 40),
    ("a PUT of garbage", post(b"\x00\x01", path=b"/broker/subscription/a/b", method=b"PUT")),
    ("a replay of garbage", post(b"[", path=b"/broker/subscription/a/b/replay")),
    ("an unsubscribe of garbage", post(b"{", path=b"/broker/unsubscribe")),
]


async def exchange(port: int, raw: bytes, *, eof: bool = False) -> bytes:
    """What the server answers to `raw` (`eof`: the client then closes its side)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        if eof:
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), 15)
    finally:
        writer.close()


async def test_malformed_requests_get_a_json_4xx_and_no_error_or_traceback_in_the_log(
        kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        port = runtime.admin.port
        for what, raw in MALFORMED:
            status, body = answer(await exchange(port, raw))
            assert 400 <= status < 500, (what, status, body)
            assert body["success"] is False and body["reason"], (what, body)
        truncated = post(b'{"id": "a"', b"Content-Length: 2000")
        await exchange(port, truncated, eof=True)  # no one left to answer
        assert (await exchange(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               b"Connection: close\r\n\r\n")).startswith(b"HTTP/1.1 200")
    bad = [(r.name, r.getMessage()) for r in caplog.records
           if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, bad
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) <= len(MALFORMED) + 1 and all("\n" not in m for m in warned), warned


def answer(raw: bytes) -> tuple[int, dict[str, object]]:
    """The status and JSON body of a raw HTTP answer."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert any(line.lower().startswith("content-type: application/json")
               for line in lines), raw[:400]
    return int(lines[0].split()[1]), json.loads(body)
