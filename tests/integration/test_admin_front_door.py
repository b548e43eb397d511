"""The admin server's front door (issue 13), on real servers over loopback: the token in
constant time and never a 500, the status page and public health probes without it,
JSON only (415), no cross-origin changes (403), bodies bounded (413), TLS."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from runtime.host.admin import AdminServer, ok
from runtime.host.config import AdminConfig
from runtime.host.frontdoor import HEALTH_RESERVE
from runtime.host.metrics import Registry
from tests.certs import self_signed
from tests.integration.delivery_harness import Admin, make_runtime
from tests.waits import until

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token"


def _health() -> dict[str, Any]:
    return {"status": "ok", "services": ["delivery"], "brokers": {"Kafka": "10.1.2.3:9092"}}


async def _readyz(request: web.Request) -> web.Response:  # as runtime/host/app.py answers
    return web.json_response({"ready": False, "reasons": ["broker 'Kafka' unreachable"]},
                             status=503)


async def _echo(request: web.Request) -> web.Response:
    return ok(await request.json())


@asynccontextmanager
async def serving(**admin: Any) -> AsyncIterator[AdminServer]:
    server = AdminServer.from_config(AdminConfig(listen="127.0.0.1:0", **admin), Registry(),
                                     _health)
    server.app.router.add_get("/readyz", _readyz)
    server.app.router.add_post("/echo", _echo)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def call(server: AdminServer, method: str, path: str, *, token: str | None = None,
               **kwargs: Any) -> tuple[int, Any, aiohttp.ClientResponse]:
    headers = {**kwargs.pop("headers", {}),
               **({"Authorization": f"Bearer {token}"} if token is not None else {})}
    async with aiohttp.ClientSession() as session, session.request(
            method, server.url + path, headers=headers, **kwargs) as response:
        body = await response.json(content_type=None) if response.content_type.endswith(
            "json") else await response.text()
        return response.status, body, response


async def raw_request(server: AdminServer, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(request)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    return answer


async def test_the_token_is_required_and_a_wrong_one_of_any_shape_is_a_401() -> None:
    async with serving(token=TOKEN) as server:
        assert (await call(server, "GET", "/metrics", token=TOKEN))[0] == 200
        for token in (None, "", "wrong", TOKEN + "x", TOKEN[:-1], "é" * 40):
            status, body, _ = await call(server, "GET", "/metrics", token=token)
            assert (status, body["reason"]) == (401, "unauthorized"), token


async def test_a_non_utf8_authorization_header_is_a_json_401_not_a_500() -> None:
    async with serving(token=TOKEN) as server:
        answer = await raw_request(server, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                           b"Authorization: Bearer \xff\xfe\x80\r\n"
                                           b"Connection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 401")
    assert b'"reason":"unauthorized"' in body


async def test_health_probes_need_the_token_unless_public_and_then_show_only_state() -> None:
    async with serving(token=TOKEN) as server:
        assert (await call(server, "GET", "/healthz"))[0] == 401
        assert (await call(server, "GET", "/readyz"))[0] == 401
    async with serving(token=TOKEN, public_health=True) as server:
        status, body, _ = await call(server, "GET", "/healthz")
        assert (status, body) == (200, {"status": "ok"})
        status, body, _ = await call(server, "GET", "/readyz")
        assert (status, body) == (503, {"ready": False})
        status, body, _ = await call(server, "GET", "/readyz", token=TOKEN)
        assert body["reasons"] == ["broker 'Kafka' unreachable"]
        assert (await call(server, "GET", "/healthz", token=TOKEN))[1] == _health()
        assert (await call(server, "GET", "/metrics"))[0] == 401
        assert (await call(server, "POST", "/healthz"))[0] == 401


async def test_the_status_page_loads_without_the_token_and_nothing_else_does(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    async with make_runtime(kafka_bootstrap, tmp_path, admin={"token": TOKEN}) as runtime:
        admin = Admin(runtime)
        async with aiohttp.ClientSession() as session:
            async with session.get(admin.base + "/") as page:
                assert page.status == 200 and page.content_type == "text/html"
            async with session.post(admin.base + "/") as post:
                assert post.status == 401
            async with session.get(admin.base + "/?x=1") as query:
                assert query.status == 200
            async with session.get(admin.base + "//broker/subscription") as other:
                assert other.status == 401
        assert (await admin.call("GET", "/broker/subscription"))[0] == 401
        assert (await Admin(runtime, token=TOKEN).call("GET", "/broker/subscription"))[0] == 200


@pytest.mark.parametrize(("kwargs", "status"), [
    ({"json": {"a": 1}}, 200),
    ({"data": b'{"a": 1}', "headers": {"Content-Type": "application/json; charset=utf-8"}},
     200),
    ({"data": {"a": "1"}}, 415),  # a form
    ({"data": b'{"a": 1}', "headers": {"Content-Type": "text/plain"}}, 415),
    ({"data": b'{"a": 1}', "headers": {"Content-Type": "application/json; charset=latin-1"}},
     415),
    ({"data": b'{"a": 1}'}, 415),  # aiohttp says application/octet-stream
])
async def test_only_json_bodies_are_taken(kwargs: dict[str, Any], status: int) -> None:
    async with serving() as server:
        assert (await call(server, "POST", "/echo", **kwargs))[0] == status


async def test_a_multipart_body_is_a_415() -> None:
    form = aiohttp.FormData()
    form.add_field("file", b'{"a": 1}', filename="x.json", content_type="application/json")
    async with serving() as server:
        status, body, _ = await call(server, "POST", "/echo", data=form)
    assert (status, body["reason"]) == (415, "unsupported media type")


async def test_a_change_sent_from_another_origin_is_refused() -> None:
    async with serving() as server:
        evil = {"Origin": "http://evil.example"}
        status, body, _ = await call(server, "POST", "/echo", json={}, headers=evil)
        assert (status, body["reason"]) == (403, "cross-origin request refused")
        for odd in ("null", "http://[", "http://127.0.0.1:1"):
            assert (await call(server, "POST", "/echo", json={},
                               headers={"Origin": odd}))[0] == 403, odd
        cross = {"Sec-Fetch-Site": "cross-site"}
        assert (await call(server, "POST", "/echo", json={}, headers=cross))[0] == 403
        same = {"Origin": server.url}
        assert (await call(server, "POST", "/echo", json={}, headers=same))[0] == 200
        assert (await call(server, "GET", "/metrics", headers=evil))[0] == 200


async def test_a_body_over_the_limit_is_a_json_413() -> None:
    async with serving() as server:
        status, body, _ = await call(server, "POST", "/echo",
                                     data=b'"' + b"x" * (1024 * 1024) + b'"',
                                     headers={"Content-Type": "application/json"})
    assert status == 413 and body["success"] is False


async def test_a_wrong_method_is_a_json_405_that_says_which_are_allowed() -> None:
    async with serving() as server:
        status, body, response = await call(server, "DELETE", "/metrics")
    assert (status, body["success"]) == (405, False)
    assert "GET" in response.headers["Allow"]


async def test_the_api_description_lists_the_routes_this_server_has() -> None:
    async with serving(token=TOKEN) as server:
        status, doc, _ = await call(server, "GET", "/openapi.json", token=TOKEN)
    assert status == 200 and doc["openapi"].startswith("3.1")
    assert {"/healthz", "/readyz", "/metrics", "/openapi.json"} <= set(doc["paths"])
    assert "/delay/levels" not in doc["paths"]  # described, but not served here
    assert doc["security"] == [{"bearer": []}]


async def test_tls_serves_https_only(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    trusted = ssl.create_default_context(cafile=str(cert))
    async with serving(token=TOKEN, tls_certfile=str(cert), tls_keyfile=str(key)) as server:
        assert server.url.startswith("https://127.0.0.1:")
        status, _, _ = await call(server, "GET", "/metrics", token=TOKEN, ssl=trusted)
        assert status == 200
        plain = server.url.replace("https://", "http://")
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientError):
                async with session.get(plain + "/metrics") as response:
                    await response.read()
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await call(server, "GET", "/metrics", token=TOKEN)  # the default trust store



async def test_a_dns_rebinding_page_is_refused_by_its_host_name(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    async with make_runtime(kafka_bootstrap, tmp_path,
                            admin={"listen": "127.0.0.1:0",
                                   "allowed_hosts": ["hooks.internal", "*.corp.example"]}
                            ) as runtime:
        admin, port = Admin(runtime), runtime.admin.port
        body = {"id": "x", "group": {"id": "g"}, "broker": "Kafka",
                "topics": [{"name": "t"}], "subscriptionMethod": {"uri": "http://h/"}}
        rebound = {"Host": f"attacker.example:{port}",
                   "Origin": f"http://attacker.example:{port}"}
        status, reply = await admin.call("POST", "/broker/subscription", body,
                                         headers=rebound)
        assert (status, reply["reason"]) == (403, "host not allowed"), reply
        for path in ("/broker/subscription", "/healthz", "/"):
            assert (await admin.call("GET", path, headers=rebound))[0] == 403, path
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}",
                     f"hooks.internal:{port}", "a.corp.example", f"HOOKS.internal.:{port}"):
            status, _ = await admin.call("GET", "/broker/subscription",
                                         headers={"Host": host})
            assert status == 200, host
        for host in ("corp.example", "evilcorp.example", "hooks.internal.evil"):
            status, _ = await admin.call("GET", "/broker/subscription",
                                         headers={"Host": host})
            assert status == 403, host
        assert (await admin.call("GET", "/broker/subscription"))[1]["data"] == []


async def _read_until_closed(reader: asyncio.StreamReader, limit_s: float) -> bytes:
    return await asyncio.wait_for(reader.read(), limit_s)


async def test_slow_or_silent_request_heads_are_cut_off_and_connections_are_bounded(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    async with make_runtime(kafka_bootstrap, tmp_path, admin={
            "listen": "127.0.0.1:0", "header_timeout_ms": 500, "max_connections": 4,
            }) as runtime:
        host, port = runtime.admin.host, runtime.admin.port
        silent = await asyncio.open_connection(host, port)
        assert await _read_until_closed(silent[0], 5) == b""  # closed, nothing said
        silent[1].close()

        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for i in range(3):  # a header line now and then: it never ends its head in time
            await asyncio.sleep(0.2)
            writer.write(f"X-Slow-{i}: 1\r\n".encode())
        answer = await _read_until_closed(reader, 5)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), answer
        assert json.loads(body)["reason"] == "request head too slow"
        writer.close()

        held = [await asyncio.open_connection(host, port) for _ in range(4)]
        reserve = [await asyncio.open_connection(host, port) for _ in range(HEALTH_RESERVE)]
        extra_reader, extra_writer = await asyncio.open_connection(host, port)
        answer = await _read_until_closed(extra_reader, 5)
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["reason"] == \
            "too many connections"
        extra_writer.close()
        for _, reserve_writer in reserve:
            reserve_writer.close()
        for _, held_writer in held:
            held_writer.close()
        await _until(lambda: not runtime.admin.doors.open)  # the server sees them go
        assert (await Admin(runtime).call("GET", "/healthz"))[0] == 200


async def test_the_status_page_and_its_script_need_no_token_and_forbid_framing(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    runtime = make_runtime(kafka_bootstrap, tmp_path,
                           admin={"listen": "127.0.0.1:0", "token": TOKEN})
    async with runtime, aiohttp.ClientSession() as session:
        for path in ("/", "/status.js"):
            async with session.get(runtime.admin.url + path) as answer:
                assert answer.status == 200, path
                assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
                assert answer.headers["X-Frame-Options"] == "DENY"


async def test_a_malformed_request_is_one_warning_line_without_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    async with serving() as server:
        for raw in (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n",
                    b"GET /\x00 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"):
            answer = await raw_request(server, raw)
            assert answer.startswith(b"HTTP/1.0 400") or answer.startswith(b"HTTP/1.1 400")
    logged = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert logged and all(r.levelname == "WARNING" and r.exc_info is None for r in logged), [
        (r.levelname, r.getMessage()) for r in logged]
    assert "malformed request" in logged[0].getMessage()


async def test_slow_bodies_are_cut_off_and_health_probes_pass_a_full_api(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """#34: 255 connections sending full heads, then a body byte every 2 s, held every
    admin connection; `/healthz` got 503 `too many connections`."""
    async with make_runtime(kafka_bootstrap, tmp_path, admin={
            "listen": "127.0.0.1:0", "max_connections": 3, "body_timeout_ms": 300,
            }) as runtime:
        host, port = runtime.admin.host, runtime.admin.port
        slow = []
        for _ in range(3):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"POST /broker/subscription HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            slow.append((reader, writer))
        await _until(lambda: len(runtime.admin.doors.open) == 3)
        for path, status in (("/healthz", 200), ("/readyz", 200), ("/metrics", 503)):
            answer = await raw_request(runtime.admin, f"GET {path} HTTP/1.1\r\n"
                                       "Host: 127.0.0.1\r\n\r\n".encode())
            assert answer.startswith(f"HTTP/1.1 {status}".encode()), (path, answer)
        for reader, writer in slow:  # a byte now and then: never whole within 300 ms
            answer = await _trickling_until_closed(reader, writer, 10)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408"), answer
            assert json.loads(body)["reason"] == "request body too slow"
            writer.close()
        await _until(lambda: not runtime.admin.doors.open)
        assert (await Admin(runtime).call("GET", "/broker/subscription"))[0] == 200


async def _trickling_until_closed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                  limit_s: float) -> bytes:
    """Read the answer while sending a body byte every 100 ms (the slow client's pace)."""
    async def trickle() -> None:
        while not writer.is_closing():
            await asyncio.sleep(0.1)
            writer.write(b" ")

    task = asyncio.create_task(trickle())
    try:
        return await asyncio.wait_for(reader.read(), limit_s)
    finally:
        task.cancel()


async def _until(condition: Callable[[], bool]) -> None:
    # the server's own view of its connections: nothing to await, so polled
    await until(condition, timeout_s=5, what="the server's open connections")
