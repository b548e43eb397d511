"""What the endpoint TLS and signing choices cost, each against its bare alternative.

    .venv/bin/python bench/endpoint_tls.py [--lookups 2000] [--pushes 400] [--concurrency 10]

- `context`: `client_context` (actors/delivery/document/tls.py: each file checked and stat'ed, then
  a cache hit; called once per egress start) against building the `SSLContext` (system
  store, extra CA, client certificate), as a design without the cache would at every
  start, or a per-request design at every request.
- `signature`: `sign_all` with one and with two secrets (rotation) against one bare
  `hmac` call, on a 1 KiB body.
- `https`: POSTs of 1 KiB over loopback to an aiohttp https server (trustme certificates,
  in this process), `--concurrency` at a time, through one session whose connector holds
  the cached context (what the egress does), against a context built per request (each
  one a new connection and TLS handshake, since aiohttp pools connections per context).

Best of three runs for the timed loops (the machine is shared). Needs `trustme` (a dev
extra).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import ssl
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import msgspec
import trustme
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from actors.delivery.document.signing import sign_all, signing_keys
from actors.delivery.document.subscription import SubscriptionMethod
from actors.delivery.document.tls import client_context

BODY = b"x" * 1024


def best_us(fn: Callable[[], object], count: int) -> float:
    """Microseconds per call, best of three runs of `count` calls."""
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(count):
            fn()
        runs.append((time.perf_counter() - start) / count * 1e6)
    return min(runs)


def files(directory: Path) -> tuple[trustme.CA, dict[str, str]]:
    ca = trustme.CA()
    client = ca.issue_cert("client.example")
    paths = {"caFile": directory / "ca.pem", "certFile": directory / "cert.pem",
             "keyFile": directory / "key.pem"}
    ca.cert_pem.write_to_path(str(paths["caFile"]))
    client.cert_chain_pems[0].write_to_path(str(paths["certFile"]))
    client.private_key_pem.write_to_path(str(paths["keyFile"]))
    return ca, {k: str(v) for k, v in paths.items()}


def build(tls: dict[str, str]) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=tls["caFile"])
    context.load_cert_chain(tls["certFile"], tls["keyFile"])
    return context


def bench_context(tls: dict[str, str], count: int) -> None:
    method = msgspec.convert({"uri": "https://127.0.0.1/", "tls": tls}, SubscriptionMethod)
    client_context(method)  # the first call builds it
    cached = best_us(lambda: client_context(method), count)
    built = best_us(lambda: build(tls), max(count // 20, 10))
    print(f"context   build per call (bare) {built:9.1f} us   client_context (cached) "
          f"{cached:7.1f} us   ratio {built / cached:,.0f}x")


def bench_signature(count: int) -> None:
    one = signing_keys("whsec_" + base64.b64encode(b"k" * 24).decode())
    two = signing_keys("whsec_" + base64.b64encode(b"k" * 24).decode() + " "
                       + "whsec_" + base64.b64encode(b"o" * 24).decode())

    def bare() -> str:
        mac = hmac.new(one[0], b"msg_1.1700000000." + BODY, hashlib.sha256)
        return base64.b64encode(mac.digest()).decode()

    b = best_us(bare, count)
    s1 = best_us(lambda: sign_all(one, "msg_1", 1_700_000_000, BODY), count)
    s2 = best_us(lambda: sign_all(two, "msg_1", 1_700_000_000, BODY), count)
    print(f"signature bare hmac {b:6.2f} us   sign_all 1 secret {s1:6.2f} us ({s1 / b:.2f}x)"
          f"   2 secrets {s2:6.2f} us ({s2 / b:.2f}x)")


async def bench_https(ca: trustme.CA, tls: dict[str, str], pushes: int,
                      concurrency: int) -> None:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        return web.Response()

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context).start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}/hook"
    method = msgspec.convert({"uri": url, "tls": tls}, SubscriptionMethod)
    try:
        cached = client_context(method)  # once, as the egress does when it starts
        shared = await _rate(url, pushes, concurrency, lambda: cached)
        fresh = await _rate(url, max(pushes // 4, 20), concurrency, lambda: build(tls))
    finally:
        await runner.cleanup()
    print(f"https     context per request (bare) {fresh:7.0f} pushes/s   cached context "
          f"{shared:7.0f} pushes/s   ratio {shared / fresh:.1f}x")


async def _rate(url: str, pushes: int, concurrency: int,
                context: Callable[[], ssl.SSLContext | bool]) -> float:
    """Pushes per second, best of three runs."""
    return max([await _run(url, pushes, concurrency, context) for _ in range(3)])


async def _run(url: str, pushes: int, concurrency: int,
               context: Callable[[], ssl.SSLContext | bool]) -> float:
    connector = aiohttp.TCPConnector(limit=concurrency)
    todo = iter(range(pushes))
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            for _ in todo:
                async with session.post(url, data=BODY, ssl=context()) as response:
                    await response.read()
                    assert response.status == 200

        start = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), 120)
        return pushes / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--pushes", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ca, tls = files(Path(tmp))
        bench_context(tls, args.lookups)
        bench_signature(args.lookups * 10)
        asyncio.run(bench_https(ca, tls, args.pushes, args.concurrency))


if __name__ == "__main__":
    main()
