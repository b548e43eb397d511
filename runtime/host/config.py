"""Process configuration: TOML decoded once into frozen msgspec Structs.

Unknown keys are rejected and every error names its key path
(`brokers[0].bootstrap_servers`). The keys named in DESIGN.md are the contract; the
rest are additions with defaults. Units live in the names (`_ms`, `_bytes`).
"""

from __future__ import annotations

import ipaddress
import re
import ssl
import tomllib
from pathlib import Path
from typing import Annotated, Final, Literal

import msgspec
from msgspec import Meta

from runtime.errors import ConfigError
from runtime.host.references import is_reference, resolve
from runtime.host.sealing import parse_keys
from runtime.host.tls import server_context
from runtime.kafka import valid_topic
from runtime.kafka.security import FIELDS as SECURITY_KEYS
from runtime.kafka.security import SaslMechanism, Security, SecurityProtocol, normalize

Name = Annotated[str, Meta(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._\-]+$")]
PositiveMs = Annotated[int, Meta(ge=0)]


class _Frozen(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of every config section. Subclasses repeat the options: msgspec inherits
    them, but mypy's dataclass view does not and rejects a "non-frozen" subclass."""


class BrokerConfig(_Frozen, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: Name
    bootstrap_servers: Annotated[str, Meta(min_length=1)]
    """`embedded` starts the bundled broker; otherwise `host:port[,host:port...]`."""
    embedded_port: Annotated[int, Meta(ge=0, le=65535)] = 0
    """Port for the embedded broker; 0 picks a free one."""
    embedded_quirks: bool = False
    """The broker at `bootstrap_servers` is an embedded one another process started: work
    around its quirks as for one this runtime starts (runtime/kafka/compat.py)."""
    client_id: str = "hookstream"
    # Connection security for every client of this broker (runtime/kafka/security.py).
    security_protocol: SecurityProtocol = "PLAINTEXT"
    ssl_cafile: str = ""
    """PEM CA bundle for the broker's certificate; empty: the system's trust store."""
    ssl_certfile: str = ""
    """Client certificate (PEM), for a broker that requires mutual TLS."""
    ssl_keyfile: str = ""
    ssl_check_hostname: bool = True
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_username: str = ""
    """May be a reference: `${env:NAME}` or `${file:/path}` (resolved at load)."""
    sasl_password: str = ""
    """May be a reference: `${env:NAME}` or `${file:/path}` (resolved at load)."""
    sasl_oauthbearer_token_file: str = ""
    """OAUTHBEARER: the token is this file's content, re-read at each connection."""
    sasl_oauthbearer_token_command: str = ""
    """OAUTHBEARER: the token is what this command prints (run without a shell)."""

    def security(self) -> Security:
        """The settings `runtime.kafka.security` keeps for this broker's address."""
        return Security(**{key: getattr(self, key) for key in SECURITY_KEYS})

    def __repr__(self) -> str:  # the resolved password must not reach a log
        return (f"BrokerConfig(name={self.name!r}, bootstrap_servers={self.bootstrap_servers!r}"
                f", security={self.security()!r})")


HOST_PATTERN: Final = re.compile(r"(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9-]{1,63})*")


DEFAULT_HEADER_TIMEOUT_MS: Final = 10_000
DEFAULT_MAX_CONNECTIONS: Final = 256
DEFAULT_BODY_TIMEOUT_MS: Final = 10_000
DEFAULT_MAX_SUBSCRIPTIONS: Final = 10_000
DEFAULT_MAX_TOPICS: Final = 10_000
DEFAULT_MAX_PATTERNS: Final = 1_000
DEFAULT_ORIGIN_MAX_CONNECTIONS: Final = 512
"""Connections (requests in flight) to one origin across its subscriptions (issue 37; 1000
before). The limit trades a cold burst's new connections against a warm one's batching:

- a new connection costs 100-200 us of CPU here (connect and close: 330,000-450,000
  instructions under callgrind, three or four pushes' worth). A cold burst of 10 records
  to 1,000 subscriptions of one origin opened 920 of them at 1000 and 176 at 256 (the
  runtime, bench/fanout.py); the egress alone (bench/egress.py --phases fanout) spent
  157,000 instructions per delivery cold at 1000 against 121,000 at 256;
- a warm burst (connections kept from the last one, 30 s) is cheaper with more requests
  in flight, each turn of the loop answering more of them: 115,000 instructions per
  delivery at 1000 against 119,000 at 256, and in the runtime 53 us of CPU per delivery
  against 62 (same machine, runs alternated, load 1-2);
- at a receiver's latency the limit caps the origin's rate per instance: 5,120 pushes/s at
  100 ms with 512, about the rate of a fan-out's deliveries on one core (2,560 with 256
  would hold a fan-out to a far origin below what the CPU does).

512 halves a cold burst's connections and keeps a far origin's rate near the CPU's; it is
also below Debian nginx's 768 connections per worker for one instance. Measured at 512:
the egress alone 141,000 instructions per delivery cold, 110,000 warm; the runtime 67-68
us cold (72-80 at 1000) and 60-61 warm (53-55 at 1000; busy machine, runs alternated).
Why the runtime's warm burst is cheaper at 1000 when the egress's is not is not known yet
(the cursors' and the member's side of a wave: commit rounds?). A subscription's
pool above it waits for the origin's turns: raise it for busy subscriptions of a far
origin, lower it for a receiver that takes fewer connections."""


class AdminConfig(_Frozen, frozen=True, forbid_unknown_fields=True, kw_only=True):
    listen: str = "127.0.0.1:8080"
    """`host:port`, `[v6 address]:port`; port 0 picks a free one."""
    token: str = ""
    """If set, every request needs `Authorization: Bearer <token>` (but `GET /`)."""
    public_health: bool = False
    """`GET /healthz` and `/readyz` answer without the token (their state only)."""
    tls_certfile: str = ""
    """PEM certificate chain: with `tls_keyfile`, the admin API speaks HTTPS only."""
    tls_keyfile: str = ""
    header_timeout_ms: Annotated[int, Meta(ge=100, le=600_000)] = DEFAULT_HEADER_TIMEOUT_MS
    """How long a connection may take to send a request head (runtime/host/frontdoor.py)."""
    max_connections: Annotated[int, Meta(ge=1, le=100_000)] = DEFAULT_MAX_CONNECTIONS
    """Open admin connections at most; more are answered 503 and closed (but a few kept
    for health probes: runtime/host/frontdoor.py)."""
    body_timeout_ms: Annotated[int, Meta(ge=100, le=600_000)] = DEFAULT_BODY_TIMEOUT_MS
    """How long a request body may take to arrive after its head (runtime/host/frontdoor.py)."""
    allowed_hosts: list[str] = []
    """Names the `Host` header may carry besides the listen address, loopback names and
    IP addresses (DNS rebinding: a page's own name resolved to us); `*.example.com`
    allows its subdomains, `*` any name."""

    @property
    def host_port(self) -> tuple[str, int]:
        parsed = parse_listen(self.listen)
        if parsed is None:
            raise ConfigError(f"expected host:port, got {self.listen!r}", "admin.listen")
        return parsed


class PersistenceConfig(_Frozen, frozen=True, forbid_unknown_fields=True, kw_only=True):
    dir: str = "persist"


class JournalConfig(_Frozen, frozen=True, forbid_unknown_fields=True, kw_only=True):
    dir: str = "journal"
    enabled: bool = True
    max_segment_bytes: Annotated[int, Meta(ge=1024)] = 64 * 1024 * 1024
    max_segment_age_ms: Annotated[int, Meta(ge=10)] = 60_000
    flush_interval_ms: Annotated[int, Meta(ge=1)] = 200
    max_buffered_events: Annotated[int, Meta(ge=100)] = 100_000


class DelayLevel(_Frozen, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: Name
    delay_ms: PositiveMs
    topics: Annotated[list[Name], Meta(min_length=1)]
    exactly_once: bool = False


class DelayConfig(_Frozen, frozen=True, forbid_unknown_fields=True, kw_only=True):
    levels: list[DelayLevel] = []
    broker: str = ""
    """Broker name the level topics live on; empty means the first broker."""
    group_id: str = "hookstream-delay"
    partitions: Annotated[int, Meta(ge=1)] = 3
    """Partitions for level topics created by the runtime (existing topics are kept)."""
    dead_letter_topic: str = "delay.dead-letter"
    max_waiting_records: Annotated[int, Meta(ge=1)] = 200_000
    """Per level-topic partition: above this the partition is paused (bounded memory)."""
    session_timeout_ms: Annotated[int, Meta(ge=1000)] = 6_000
    """How soon a dead instance's level partitions move to the others."""
    drain_ms: Annotated[int, Meta(ge=0)] = 2_000
    """On revoke and shutdown: how long to keep forwarding what falls due."""


class ClusterConfig(_Frozen, frozen=True, forbid_unknown_fields=True, kw_only=True):
    subscriptions_topic: str = ""
    """A compacted topic that holds every subscription (key `<id>_<group.id>`): all
    instances with the same value share their subscriptions. Empty: the local
    `[persistence] dir`."""
    broker: str = ""
    """The broker that holds it; empty means the first broker."""
    replication_factor: Annotated[int, Meta(ge=1)] = 1
    """For the topic when the runtime creates it (aiokafka's CreateTopics cannot ask for
    the broker's default): set 3 on a production cluster, or create the topic yourself."""
    status_topic: str = ""
    """A compacted topic every instance publishes its status to (instance, admin address,
    partitions owned, lag) and follows: `GET /cluster`, the status page and each
    subscription's `GET` then show the whole cluster. Empty: each instance shows itself."""
    status_interval_ms: Annotated[int, Meta(ge=100)] = 3_000
    """How often each instance publishes its status."""
    gone_after_intervals: Annotated[int, Meta(ge=2)] = 3
    """An instance whose last status is older than this many of its intervals is shown
    gone (killed, hung or cut off from the broker)."""
    secrets_key: str = ""
    """A reference (`${file:/path}` or `${env:NAME}`) to 32 random bytes in base64 or hex
    (runtime/host/sealing.py), resolved at load: the secret fields of a subscription are
    sealed with it in the subscriptions topic. Several keys separated by whitespace: the
    first seals, every one opens (rotation). Empty: a subscription with a secret written
    as it is (not a reference) is refused in cluster mode."""

    def sealing_keys(self) -> tuple[bytes, ...]:
        """The keys `secrets_key` holds (none when it is empty); checked at load."""
        return parse_keys(self.secrets_key) if self.secrets_key else ()

    def __repr__(self) -> str:  # the resolved key must not reach a log
        shown = {f: getattr(self, f) for f in self.__struct_fields__ if f != "secrets_key"}
        return f"ClusterConfig({shown}, secrets_key={'***' if self.secrets_key else ''!r})"


class DeliveryConfig(_Frozen, frozen=True, forbid_unknown_fields=True, kw_only=True):
    stall_after_ms: Annotated[int, Meta(ge=100)] = 60_000
    """A partition whose commit position has not moved this long while records wait is
    reported stalled (journal, log, status, /readyz)."""
    instance_group: str = ""
    """The consumer group this deployment's instances share to split the partitions they
    read (issue 24); empty: `hookstream-instances-` and a digest of the cluster's
    subscriptions topic, else of the persistence folder's absolute path."""
    session_timeout_ms: Annotated[int, Meta(ge=1000, le=300_000)] = 6_000
    """The session timeout of each instance's member of `instance_group`: an instance
    that stops heartbeating this long loses its partitions to the others. Apache Kafka
    refuses values below its `group.min.session.timeout.ms` (6 s by default); the embedded
    broker answers a join after about half of it, so each rebalance there takes that."""
    settle_ms: Annotated[int, Meta(ge=0, le=60_000)] = 300
    """How long the subscriptions must stop changing before the instance member subscribes
    to new topics (at most ten times this, or 3 s, after the first change): a burst of
    subscriptions to new topics costs one rebalance. 0: at once (tests)."""
    max_subscriptions: Annotated[int, Meta(ge=1, le=1_000_000)] = DEFAULT_MAX_SUBSCRIPTIONS
    """Subscriptions on this instance at most; a subscribe past it is refused (429)."""
    max_topics: Annotated[int, Meta(ge=1, le=1_000_000)] = DEFAULT_MAX_TOPICS
    """Distinct topic names the subscriptions name, at most (429 past it)."""
    max_patterns: Annotated[int, Meta(ge=0, le=100_000)] = DEFAULT_MAX_PATTERNS
    """Distinct topic patterns the subscriptions give, at most (429 past it): each is
    matched against every topic of the cluster."""


class EgressConfig(_Frozen, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The destination guard (actors/delivery/egress/guard.py): checked on the resolved address
    at connect time."""

    allow_networks: list[str] = []
    """CIDRs; when not empty, only these may be connected to."""
    circuit_breaker: bool = True
    """Per-origin circuit breaker (actors/delivery/egress/origin.py); its thresholds come from the
    subscriptions' `circuitBreaker` settings (defaults: 50% of at least 20 answers in 30 s
    opens it for 10 s)."""
    origin_max_connections: Annotated[int, Meta(ge=1, le=100_000)] = \
        DEFAULT_ORIGIN_MAX_CONNECTIONS
    """Requests in flight, and so connections, to one origin (scheme, host, port) across
    all subscriptions (`DEFAULT_ORIGIN_MAX_CONNECTIONS` says why this many)."""
    deny_networks: list[str] | None = None
    """CIDRs never connected to; None means the defaults (link-local and cloud metadata)."""
    allow_references: list[str] | None = None
    """Glob patterns over `env:NAME` and `file:/path` naming the secret references a
    subscription may use (actors/delivery/document/secrets.py); None allows every one, [] none."""
    transport: Literal["lean", "aiohttp"] | None = None
    """The HTTP client of this runtime's pushes (actors/delivery/egress/transport.py); None:
    the library's default (`lean` for http://, aiohttp for https://). Per runtime: two
    runtimes in one process may differ (#34)."""


class RuntimeConfig(_Frozen, frozen=True, forbid_unknown_fields=True, kw_only=True):
    shutdown_deadline_ms: PositiveMs = 4000
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = "text"
    workers: Annotated[int, Meta(ge=1, le=64)] = 1
    """Worker processes `python -m runtime` starts (each a full instance; needs [cluster])."""
    uvloop: bool = True
    gc_freeze: bool = True
    """Move start-up objects, and each subscription's actors once running, out of the
    garbage collector's reach, and collect young objects less often (shorter GC pauses,
    less GC work per delivery with many subscriptions)."""
    switch_interval_ms: Annotated[float, Meta(gt=0, le=100)] = 1.0
    """How long the event loop's thread may keep the interpreter lock while a worker
    thread waits for it (`sys.setswitchinterval`; Python's default is 5 ms). Subscription
    files and the journal are written by worker threads, and each of their system calls
    takes the lock again: while the loop was busy, a subscribe's save of 30-odd calls
    waited 50-100 ms for the lock alone (process-wide: the last runtime started sets it)."""


class Config(_Frozen, frozen=True, forbid_unknown_fields=True, kw_only=True):
    brokers: Annotated[list[BrokerConfig], Meta(min_length=1)]
    admin: AdminConfig = AdminConfig()
    persistence: PersistenceConfig = PersistenceConfig()
    journal: JournalConfig = JournalConfig()
    delay: DelayConfig = DelayConfig()
    delivery: DeliveryConfig = DeliveryConfig()
    cluster: ClusterConfig = ClusterConfig()
    egress: EgressConfig = EgressConfig()
    runtime: RuntimeConfig = RuntimeConfig()

    def broker(self, name: str) -> BrokerConfig:
        for broker in self.brokers:
            if broker.name == name:
                return broker
        known = ", ".join(b.name for b in self.brokers)
        raise ConfigError(f"unknown broker {name!r} (configured: {known})", "broker")


def _path_of(message: str) -> tuple[str, str]:
    """Split msgspec's `... - at `$.a[0].b`` into (path, message)."""
    match = re.search(r" - at `\$\.?(.*)`$", message)
    path, text = ("", message) if match is None else (match.group(1), message[: match.start()])
    field = re.search(r"(unknown|missing required) field `([^`]+)`", text)
    if field is not None:
        path = f"{path}.{field.group(2)}" if path else field.group(2)
        hint = " (check the spelling)" if field.group(1) == "unknown" else ""
        text = f"{field.group(1)} key{hint}"
    return path, text


_LISTEN = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+):(\d{1,5})$")


def parse_listen(listen: str) -> tuple[str, int] | None:
    """`host:port` or `[v6]:port` -> (host, port); None when it is neither."""
    match = _LISTEN.match(listen.strip())
    if match is None or int(match.group(2)) > 65535:
        return None
    return match.group(1).strip("[]"), int(match.group(2))


def _check(config: Config) -> Config:
    _check_admin(config.admin)
    names = [b.name for b in config.brokers]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"duplicate broker name {name!r}", f"brokers[{i}].name")
    config = msgspec.structs.replace(
        config, brokers=[_check_broker(i, b) for i, b in enumerate(config.brokers)])
    _check_shared_addresses(config.brokers)
    if not valid_topic(config.delay.dead_letter_topic):
        raise ConfigError(f"{config.delay.dead_letter_topic!r} is not a Kafka topic name",
                          "delay.dead_letter_topic")
    if config.delay.broker:
        try:
            config.broker(config.delay.broker)
        except ConfigError as exc:
            raise ConfigError(str(exc).removeprefix("broker: "), "delay.broker") from None
    _check_levels(config.delay.levels)
    _check_networks(config.egress)
    _check_references(config.egress)
    _check_cluster(config)
    return msgspec.structs.replace(config, cluster=_sealing_key(config.cluster))


def _check_broker(i: int, broker: BrokerConfig) -> BrokerConfig:
    """`broker` with its secret references resolved; raises ConfigError naming the key."""
    if broker.bootstrap_servers != "embedded" and not _valid_servers(broker.bootstrap_servers):
        raise ConfigError(
            f"expected 'embedded' or host:port[,host:port], got {broker.bootstrap_servers!r}",
            f"brokers[{i}].bootstrap_servers",
        )
    if broker.bootstrap_servers == "embedded" and broker.security_protocol != "PLAINTEXT":
        raise ConfigError("the embedded broker speaks PLAINTEXT only (Tansu 0.6 serves no "
                          "TLS, and no SASL on memory storage: runtime/kafka/compat.py)",
                          f"brokers[{i}].security_protocol")
    broker = msgspec.structs.replace(
        broker, sasl_username=resolve(broker.sasl_username, f"brokers[{i}].sasl_username"),
        sasl_password=resolve(broker.sasl_password, f"brokers[{i}].sasl_password"))
    try:
        broker.security().check()
    except ConfigError as exc:
        raise ConfigError(str(exc).removeprefix(f"{exc.path}: "),
                          f"brokers[{i}].{exc.path}") from None
    return broker


def _check_shared_addresses(brokers: list[BrokerConfig]) -> None:
    # Security is kept per address (runtime/kafka/security.py): one address, one setting.
    seen: dict[str, Security] = {}
    for i, broker in enumerate(brokers):
        if broker.bootstrap_servers == "embedded":
            continue
        address, security = normalize(broker.bootstrap_servers), broker.security()
        if seen.setdefault(address, security) != security:
            raise ConfigError("another broker has the same bootstrap_servers with other "
                              "security settings; an address has one", f"brokers[{i}]")


def _check_cluster(config: Config) -> None:
    cluster = config.cluster
    if config.runtime.workers > 1 and not cluster.subscriptions_topic:
        raise ConfigError("workers > 1 needs [cluster] subscriptions_topic: the workers "
                          "share their subscriptions through it", "runtime.workers")
    if cluster.subscriptions_topic and not valid_topic(cluster.subscriptions_topic):
        raise ConfigError(f"{cluster.subscriptions_topic!r} is not a Kafka topic name",
                          "cluster.subscriptions_topic")
    if cluster.status_topic and (not valid_topic(cluster.status_topic)
                                 or cluster.status_topic == cluster.subscriptions_topic):
        raise ConfigError(f"{cluster.status_topic!r} is not a Kafka topic name distinct "
                          "from subscriptions_topic", "cluster.status_topic")
    if cluster.broker:
        try:
            config.broker(cluster.broker)
        except ConfigError as exc:
            raise ConfigError(str(exc).removeprefix("broker: "), "cluster.broker") from None


def _sealing_key(cluster: ClusterConfig) -> ClusterConfig:
    """`cluster` with `secrets_key` resolved; raises ConfigError naming the key."""
    key = "cluster.secrets_key"
    if not cluster.secrets_key:
        return cluster
    if not is_reference(cluster.secrets_key):
        raise ConfigError("give the key by reference, ${file:/path} or ${env:NAME}, not "
                          "in the config file", key)
    text = resolve(cluster.secrets_key, key)
    try:
        parse_keys(text)
    except ValueError as exc:
        raise ConfigError(f"{cluster.secrets_key}: {exc}", key) from None
    return msgspec.structs.replace(cluster, secrets_key=text)


def _check_admin(admin: AdminConfig) -> None:
    admin.host_port  # raises ConfigError naming admin.listen  # noqa: B018
    for i, name in enumerate(admin.allowed_hosts):
        if name != "*" and not HOST_PATTERN.fullmatch(name):
            raise ConfigError(f"{name!r} is not a host name, `*.name` or `*`",
                              f"admin.allowed_hosts[{i}]")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in admin.token):
        raise ConfigError("control characters cannot be sent in a header", "admin.token")
    if bool(admin.tls_certfile) != bool(admin.tls_keyfile):
        missing = "tls_keyfile" if admin.tls_certfile else "tls_certfile"
        raise ConfigError("tls_certfile and tls_keyfile go together", f"admin.{missing}")
    if admin.tls_certfile:
        try:
            server_context(admin.tls_certfile, admin.tls_keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot use {admin.tls_certfile} with {admin.tls_keyfile}: "
                              f"{exc.strerror or exc}", "admin.tls_certfile") from None


def _check_networks(egress: EgressConfig) -> None:
    for key, cidrs in (("allow_networks", egress.allow_networks),
                       ("deny_networks", egress.deny_networks or [])):
        for i, cidr in enumerate(cidrs):
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ConfigError(f"{cidr!r} is not a CIDR network (e.g. 10.0.0.0/8)",
                                  f"egress.{key}[{i}]") from None


def _check_references(egress: EgressConfig) -> None:
    for i, pattern in enumerate(egress.allow_references or []):
        if not pattern.startswith(("env:", "file:/")):
            raise ConfigError(f"{pattern!r}: a pattern over 'env:NAME' or 'file:/path' "
                              "(e.g. 'env:HOOK_*', 'file:/run/secrets/*')",
                              f"egress.allow_references[{i}]")


def _check_levels(levels: list[DelayLevel]) -> None:
    seen: set[str] = set()
    for i, level in enumerate(levels):
        for topic in level.topics:
            if topic in seen:
                raise ConfigError(f"topic {topic!r} belongs to two levels",
                                  f"delay.levels[{i}].topics")
            seen.add(topic)


def _valid_servers(servers: str) -> bool:
    return all(re.fullmatch(r"[^\s:,]+:\d{1,5}", part.strip()) for part in servers.split(","))


def parse_config(data: dict[str, object]) -> Config:
    try:
        config = msgspec.convert(data, Config)
    except msgspec.ValidationError as exc:
        path, message = _path_of(str(exc))
        raise ConfigError(message, path) from None
    return _check(config)


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML config file; raises `ConfigError` naming the bad key."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {file}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:  # #34: a traceback
        raise ConfigError(f"{file}: not UTF-8 text (byte {exc.start}), as TOML must be"
                          ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: invalid TOML: {exc}") from None
    except RecursionError:  # #34: `a = [[[[...` 100,000 deep was a traceback
        raise ConfigError(f"{file}: invalid TOML: nested too deeply") from None
    return parse_config(data)
