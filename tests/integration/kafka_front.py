"""A TLS and SASL front for the embedded broker, and certificates made for a test.

Tansu 0.6 can serve neither TLS nor a SASL mechanism a client could pass on memory storage
(runtime/kafka/compat.py, quirks 7 and 8). To test the runtime's secured clients end to end
anyway, `KafkaFront` stands where a secured Kafka's listener would: it accepts TLS with a
certificate from a test CA (and can demand a client certificate), does the broker's side of
the SASL exchange (PLAIN, SCRAM-SHA-256/512 per RFC 5802 and 7677, OAUTHBEARER), and then
passes the bytes through to a real Tansu, which advertises the front's address so that
every connection a client makes comes through the front. Nothing past the handshake is
imitated: produce, fetch, groups and commits are the broker's.

A connection that has not authenticated may send ApiVersions (forwarded) and the SASL
requests; anything else closes it, as Kafka does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import os
import secrets
import ssl
from collections.abc import AsyncIterator, Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import trustme
from aiokafka.protocol.admin import (
    SaslAuthenticateRequest_v0,
    SaslAuthenticateRequest_v1,
    SaslAuthenticateResponse_v0,
    SaslAuthenticateResponse_v1,
    SaslHandShakeRequest_v0,
    SaslHandShakeRequest_v1,
    SaslHandShakeResponse_v0,
    SaslHandShakeResponse_v1,
)

from runtime.kafka.broker import EmbeddedBroker, free_port

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 33, 58
SCRAM_HASHES: dict[str, Callable[..., Any]] = {
    "SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
SCRAM_ITERATIONS = 4096
_HANDSHAKES = {0: (SaslHandShakeRequest_v0, SaslHandShakeResponse_v0),
               1: (SaslHandShakeRequest_v1, SaslHandShakeResponse_v1)}
_AUTHENTICATES = {0: (SaslAuthenticateRequest_v0, SaslAuthenticateResponse_v0),
                  1: (SaslAuthenticateRequest_v1, SaslAuthenticateResponse_v1)}

# -- certificates ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    """PEM files from one test CA: the broker's certificate and a client certificate,
    each with its key, plus a second CA that signed nothing."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path

    @classmethod
    def make(cls, directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
             ) -> TlsFiles:
        """`hosts`: the names the broker's certificate is for."""
        ca, other = trustme.CA(), trustme.CA()
        server = ca.issue_cert(*hosts)
        client = ca.issue_cert("hookstream@test")
        files = cls(*(directory / name for name in (
            "ca.pem", "server.pem", "server.key", "client.pem", "client.key", "other-ca.pem")))
        ca.cert_pem.write_to_path(str(files.ca))
        other.cert_pem.write_to_path(str(files.other_ca))
        for issued, cert, key in ((server, files.server_cert, files.server_key),
                                  (client, files.client_cert, files.client_key)):
            cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
            issued.private_key_pem.write_to_path(str(key))
        return files

    def server_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.server_cert, self.server_key)
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.ca)
        return context


# -- SASL, the broker's side --------------------------------------------------------------------


@dataclass
class SaslUsers:
    """Who may authenticate: users with passwords (PLAIN, SCRAM) and bearer tokens."""

    passwords: dict[str, str] = field(default_factory=dict)
    tokens: set[str] = field(default_factory=set)
    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class AuthFailed(Exception):
    pass


@dataclass(frozen=True)
class Reply:
    token: bytes
    principal: str | None = None
    """Set on the last reply: who authenticated."""


Exchange = Generator[Reply, bytes, None]
"""Primed with `next()`, then sent each client token; yields each reply."""


def exchange(mechanism: str, users: SaslUsers) -> Exchange:
    if mechanism == "PLAIN":
        return _plain(users)
    if mechanism == "OAUTHBEARER":
        return _oauthbearer(users)
    return _scram(mechanism, users)


def _plain(users: SaslUsers) -> Exchange:
    message = yield Reply(b"")
    _authzid, user, password = message.decode().split("\0")
    if users.passwords.get(user) != password:
        raise AuthFailed(f"bad password for {user!r}")
    yield Reply(b"", principal=user)


def _oauthbearer(users: SaslUsers) -> Exchange:
    message = (yield Reply(b"")).decode()
    fields = dict(part.split("=", 1) for part in message.split("\x01") if "=" in part)
    token = fields.get("auth", "").removeprefix("Bearer ")
    if token not in users.tokens:
        raise AuthFailed("unknown bearer token")
    yield Reply(b"", principal=f"token:{token[:8]}")


def _scram(mechanism: str, users: SaslUsers) -> Exchange:
    digest = SCRAM_HASHES[mechanism]
    first = (yield Reply(b"")).decode()
    bare = first.split(",", 2)[2]  # after the gs2 header "n,,"
    attrs = dict(part.split("=", 1) for part in bare.split(","))
    user = attrs["n"].replace("=2C", ",").replace("=3D", "=")
    if user not in users.passwords:
        raise AuthFailed(f"unknown user {user!r}")
    salt, nonce = os.urandom(16), attrs["r"] + secrets.token_hex(12)
    salted = hashlib.pbkdf2_hmac(digest().name, users.passwords[user].encode(), salt,
                                 SCRAM_ITERATIONS)
    server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={SCRAM_ITERATIONS}"
    final = (yield Reply(server_first.encode())).decode()
    without_proof, _, proof = final.rpartition(",p=")
    if dict(p.split("=", 1) for p in without_proof.split(","))["r"] != nonce:
        raise AuthFailed("nonce mismatch")
    auth_message = f"{bare},{server_first},{without_proof}".encode()
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = digest(client_key).digest()
    signature = hmac.new(stored_key, auth_message, digest).digest()
    sent_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature, strict=True))
    if digest(sent_key).digest() != stored_key:
        raise AuthFailed(f"bad password for {user!r}")
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    verifier = hmac.new(server_key, auth_message, digest).digest()
    yield Reply(f"v={base64.b64encode(verifier).decode()}".encode(), principal=user)


# -- the front -----------------------------------------------------------------------------------


class KafkaFront:
    """A listener on 127.0.0.1 in front of `upstream` (`host:port`), with TLS when `tls` is
    given and SASL when `users` is. `address` is known once started."""

    def __init__(self, *, tls: ssl.SSLContext | None = None,
                 users: SaslUsers | None = None) -> None:
        self.tls = tls
        self.users = users
        self.upstream = ""
        self.port = free_port()
        self.accepted = 0
        """Connections that got past TLS (all of them without TLS)."""
        self.authenticated: list[tuple[str, str]] = []
        """(mechanism, principal) of each successful SASL exchange."""
        self.refused: list[str] = []
        """Why each refused SASL exchange was refused."""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, upstream: str) -> None:
        self.upstream = upstream
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port,
                                                  ssl=self.tls)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        host, port = self.upstream.rsplit(":", 1)
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            if self.users is None or await self._authenticate(reader, writer, up_reader,
                                                              up_writer):
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # a client or the broker went away: so does the connection
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    w.close()

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            up_reader: asyncio.StreamReader,
                            up_writer: asyncio.StreamWriter) -> bool:
        assert self.users is not None
        steps: Exchange | None = None
        mechanism = ""
        while True:
            frame = await _read_frame(reader)
            api_key, version = int.from_bytes(frame[:2], "big"), int.from_bytes(frame[2:4], "big")
            correlation, body = frame[4:8], _body(frame)
            if api_key == API_VERSIONS:
                up_writer.write(_framed(frame))
                writer.write(_framed(await _read_frame(up_reader)))
            elif api_key == SASL_HANDSHAKE:
                request, response = _HANDSHAKES[version]
                mechanism = request.decode(body).mechanism
                known = mechanism in self.users.mechanisms
                steps = exchange(mechanism, self.users) if known else None
                if steps is not None:
                    next(steps)
                code = 0 if known else UNSUPPORTED_SASL_MECHANISM
                writer.write(_framed(correlation
                                     + response(code, list(self.users.mechanisms)).encode()))
            elif api_key == SASL_AUTHENTICATE and steps is not None:
                done = self._step(steps, mechanism, version, correlation, body, writer)
                await writer.drain()
                if done is not None:
                    return done
            else:
                return False  # not authenticated: Kafka closes the connection
            await writer.drain()

    def _step(self, steps: Exchange, mechanism: str, version: int, correlation: bytes,
              body: bytes, writer: asyncio.StreamWriter) -> bool | None:
        """Answer one SaslAuthenticate; True/False when the exchange is over."""
        request, response = _AUTHENTICATES[version]
        token = request.decode(body).sasl_auth_bytes
        extra = (0,) if version >= 1 else ()
        try:
            reply = steps.send(token)
        except AuthFailed as exc:
            self.refused.append(f"{mechanism}: {exc}")
            writer.write(_framed(correlation + response(
                SASL_AUTHENTICATION_FAILED, str(exc), b"", *extra).encode()))
            return False
        except StopIteration:  # cannot happen: an exchange ends at a reply with a principal
            raise AssertionError("the SASL exchange ended without a reply") from None
        writer.write(_framed(correlation + response(0, None, reply.token, *extra).encode()))
        if reply.principal is None:
            return None
        self.authenticated.append((mechanism, reply.principal))
        return True

    async def __aenter__(self) -> KafkaFront:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = int.from_bytes(await reader.readexactly(4), "big")
    return await reader.readexactly(size)


def _framed(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def _body(frame: bytes) -> bytes:
    """The request body after a v1 header (api key, version, correlation id, client id)."""
    client_id_length = int.from_bytes(frame[8:10], "big", signed=True)
    return frame[10 + max(client_id_length, 0):]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, ssl.SSLError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    with contextlib.suppress(OSError, ssl.SSLError, RuntimeError):
        writer.write_eof() if writer.can_write_eof() else writer.close()


@contextlib.asynccontextmanager
async def fronted_broker(front: KafkaFront) -> AsyncIterator[EmbeddedBroker]:
    """A new embedded broker that advertises `front`'s address, with `front` started in
    front of it; both stopped on exit (the broker by its PID, as EmbeddedBroker does)."""
    async with EmbeddedBroker(advertised=front.address) as broker, front:
        await front.start(broker.bootstrap)
        yield broker
