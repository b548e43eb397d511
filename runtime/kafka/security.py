"""How to connect to a Kafka: TLS and SASL settings, kept per bootstrap address.

Every Kafka client the runtime opens is built in `runtime.kafka.client` (`make_consumer`,
`make_producer`, `make_admin`, `create_topics`, `wait_for_topic`), and each of those is
given only a bootstrap string. They look the address up here and pass what they find to
aiokafka: `register(bootstrap, security)` once, and every client built for that address
afterwards connects with TLS and SASL as `security` says. The `Runtime` registers each
configured broker as it starts (runtime/host/app.py, `_start_brokers`).

Why a table and not a parameter (a deliberate choice): clients are built in many places
(delivery and delay consumers, dead-letter and delay producers, topic creation, the
cluster topics, replays, benchmarks), each handed a bootstrap string by the runtime. A
parameter would have to be threaded through all of them, and the next client that forgot
it would quietly connect in plaintext, or not at all. Keyed by address, the settings reach
every client with no plumbing. An address nobody registered gets `PLAINTEXT`: what the
address alone gives. The table is process-wide, as the address is: one process sees one
Kafka at one address. Registering an address again replaces its settings (a new broker on
a port an old one used).

`Security` is validated by `check()`, which names the offending field the way the config
does (`[[brokers]] sasl_username`); `runtime.host.config` calls it for each broker.
"""

from __future__ import annotations

import shlex
import shutil
import ssl
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Literal, get_args

from aiokafka.abc import AbstractTokenProvider
from aiokafka.helpers import create_ssl_context

from runtime.errors import ConfigError
from runtime.kafka.oauth import CommandTokenProvider, FileTokenProvider

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
"""What aiokafka 0.14 supports, but GSSAPI (Kerberos), which needs a system library."""

PROTOCOLS: tuple[str, ...] = get_args(SecurityProtocol)
MECHANISMS: tuple[str, ...] = get_args(SaslMechanism)


@dataclass(frozen=True)
class Security:
    """TLS and SASL settings of one Kafka; the defaults are plaintext, no authentication.

    Field names are the `[[brokers]]` config keys. `sasl_password` stays out of `repr`.
    """

    security_protocol: SecurityProtocol = "PLAINTEXT"
    ssl_cafile: str = ""
    """PEM CA bundle the broker's certificate must chain to; empty: the system's."""
    ssl_certfile: str = ""
    """Client certificate (PEM) for brokers that demand one (mutual TLS)."""
    ssl_keyfile: str = ""
    """Its private key; empty when `ssl_certfile` holds the key too."""
    ssl_check_hostname: bool = True
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)
    sasl_oauthbearer_token_file: str = ""
    sasl_oauthbearer_token_command: str = ""
    """Split like a shell would (`shlex`), run without one."""

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def check(self) -> None:
        """Raise `ConfigError` whose path is the offending field; loads the TLS files."""
        if self.security_protocol not in PROTOCOLS:
            raise ConfigError(f"expected one of {', '.join(PROTOCOLS)}", "security_protocol")
        self._check_tls()
        self._check_sasl()

    def client_kwargs(self) -> dict[str, object]:
        """Keyword arguments for aiokafka's consumer, producer and admin client."""
        kwargs: dict[str, object] = {"security_protocol": self.security_protocol}
        if self.tls:
            kwargs["ssl_context"] = self.ssl_context
        if self.sasl:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            if self.sasl_mechanism == "OAUTHBEARER":
                kwargs["sasl_oauth_token_provider"] = self.token_provider
            else:
                kwargs["sasl_plain_username"] = self.sasl_username
                kwargs["sasl_plain_password"] = self.sasl_password
        return kwargs

    @cached_property
    def ssl_context(self) -> ssl.SSLContext:
        """One context shared by every client of this Kafka (it is built once)."""
        context: ssl.SSLContext = create_ssl_context(
            cafile=self.ssl_cafile or None, certfile=self.ssl_certfile or None,
            keyfile=self.ssl_keyfile or None)
        context.check_hostname = self.ssl_check_hostname
        return context

    @cached_property
    def token_provider(self) -> AbstractTokenProvider:
        if self.sasl_oauthbearer_token_file:
            return FileTokenProvider(self.sasl_oauthbearer_token_file)
        return CommandTokenProvider(shlex.split(self.sasl_oauthbearer_token_command))

    # -- checks --------------------------------------------------------------------------

    def _refuse_set(self, keys: tuple[str, ...], used_with: str) -> None:
        for key in keys:
            if getattr(self, key):
                raise ConfigError(f"only used with security_protocol {used_with} "
                                  f"(it is {self.security_protocol})", key)

    def _check_tls(self) -> None:
        if not self.tls:
            self._refuse_set(_TLS_FILES, "SSL or SASL_SSL")
            return
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ConfigError("a key without a certificate: set ssl_certfile too",
                              "ssl_keyfile")
        for key in _TLS_FILES:
            value = getattr(self, key)
            if value and not Path(value).is_file():
                raise ConfigError(f"no such file: {value}", key)
        try:
            self.ssl_context  # noqa: B018  # loads the files now, not at the first connect
        except (OSError, ssl.SSLError) as exc:
            key = "ssl_certfile" if self.ssl_certfile else "ssl_cafile"
            raise ConfigError(f"cannot use it: {exc.strerror or exc}", key) from None

    def _check_sasl(self) -> None:
        if not self.sasl:
            self._refuse_set(_PASSWORD + _TOKEN, "SASL_PLAINTEXT or SASL_SSL")
            return
        if self.sasl_mechanism not in MECHANISMS:
            raise ConfigError(f"expected one of {', '.join(MECHANISMS)}", "sasl_mechanism")
        if self.sasl_mechanism == "OAUTHBEARER":
            self._check_oauthbearer()
            return
        for key in _PASSWORD:
            if not getattr(self, key):
                raise ConfigError(f"required with sasl_mechanism {self.sasl_mechanism}", key)
        for key in _TOKEN:
            if getattr(self, key):
                raise ConfigError("only used with sasl_mechanism OAUTHBEARER", key)

    def _check_oauthbearer(self) -> None:
        file, command = self.sasl_oauthbearer_token_file, self.sasl_oauthbearer_token_command
        for key in _PASSWORD:
            if getattr(self, key):
                raise ConfigError("not used with sasl_mechanism OAUTHBEARER (the token "
                                  "identifies the client)", key)
        if bool(file) == bool(command):
            raise ConfigError("OAUTHBEARER needs exactly one of sasl_oauthbearer_token_file "
                              "and sasl_oauthbearer_token_command", "sasl_mechanism")
        if file and not Path(file).is_file():
            raise ConfigError(f"no such file: {file}", "sasl_oauthbearer_token_file")
        if command:
            try:
                argv = shlex.split(command)
            except ValueError as exc:
                raise ConfigError(f"cannot split it into words: {exc}",
                                  "sasl_oauthbearer_token_command") from None
            if not argv or shutil.which(argv[0]) is None:
                raise ConfigError(f"no such program: {argv[0] if argv else '(empty)'}",
                                  "sasl_oauthbearer_token_command")


_TLS_FILES = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
_PASSWORD = ("sasl_username", "sasl_password")
_TOKEN = ("sasl_oauthbearer_token_file", "sasl_oauthbearer_token_command")
FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Security))
"""The `Security` settings: also the `[[brokers]]` config keys that hold them."""

PLAINTEXT = Security()

_table: dict[str, Security] = {}


def normalize(bootstrap: str) -> str:
    """The table's key: `host:port[,host:port]` without spaces."""
    return ",".join(part.strip() for part in bootstrap.split(",") if part.strip())


def register(bootstrap: str, security: Security) -> None:
    """Clients built for `bootstrap` from now on connect as `security` says."""
    _table[normalize(bootstrap)] = security


def unregister(bootstrap: str) -> None:
    """Forget `bootstrap`: its clients connect in plaintext again. Idempotent."""
    _table.pop(normalize(bootstrap), None)


def lookup(bootstrap: str) -> Security:
    """The settings registered for `bootstrap`; `PLAINTEXT` when none were."""
    return _table.get(normalize(bootstrap), PLAINTEXT)


def client_kwargs(bootstrap: str) -> dict[str, object]:
    """aiokafka keyword arguments for a client of `bootstrap` (see `Security`)."""
    return lookup(bootstrap).client_kwargs()
