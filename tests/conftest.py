"""Shared fixtures: one Kafka-protocol broker for the whole test session.

Which broker, in order:
1. `KAFKA_BOOTSTRAP=host:port` in the environment: that Kafka, as is;
2. a Docker engine that answers within ~2 s: testcontainers' Kafka;
3. otherwise the embedded broker (Tansu), started once, without an event loop, so that no
   test's loop owns it. Under pytest-xdist each worker starts its own: group ids and
   subscription names may repeat across test files, never within one broker.

The broker starts only when a test asks for `kafka_bootstrap`; unit tests never start one.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from runtime.kafka import compat, create_topics
from runtime.kafka.broker import EmbeddedBroker, free_port
from tests import tracked, waits

BrokerKind = Literal["external", "container", "embedded"]
TopicFactory = Callable[..., Awaitable[str]]

_DOCKER_PING_TIMEOUT_S = 2
_DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"


_TRACKED = pytest.StashKey[dict[Path, str]]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.stash[_TRACKED] = tracked.digests(tracked.tracked_files())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A test that rewrites a tracked file fails the run, naming the file."""
    rewritten = tracked.changed(session.stash.get(_TRACKED, {}))
    if rewritten:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("")
            reporter.write_line(f"the tests rewrote tracked files: {', '.join(rewritten)} "
                                "(write to tmp_path instead)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# Every test file of these folders carries its folder's marker (`pytestmark`), so that
# `-m "not integration"` and the like select what they say; a file without it fails the
# collection, naming itself.
_FOLDER_MARKERS = {"integration": "integration", "browser": "integration", "spark": "spark",
                   "chaos": "chaos"}
_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = sorted({str(item.path.relative_to(_TESTS.parent)) for item in items
                       if _lacks_folder_marker(item)})
    if unmarked:
        raise pytest.UsageError("test files without their folder's marker (pytestmark = "
                                f"pytest.mark.<folder>): {', '.join(unmarked)}")
    for item in items:  # a file's own hang bound stretches like the waits inside it
        mark = item.get_closest_marker("timeout")
        if mark is not None and mark.args:
            item.add_marker(pytest.mark.timeout(mark.args[0] * waits.SLACK), append=False)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the order a parallel run hands tests out
        items.sort(key=_long_first)


def _long_first(item: pytest.Item) -> int:
    """The tests of `_LONG_FIRST` first, in its order; the rest as collected."""
    nodeid = item.nodeid
    return next((rank for rank, prefix in enumerate(_LONG_FIRST)
                 if nodeid.startswith(prefix)), len(_LONG_FIRST))


def _lacks_folder_marker(item: pytest.Item) -> bool:
    try:
        folder = item.path.relative_to(_TESTS).parts[0]
    except ValueError:
        return False  # a test outside tests/
    marker = _FOLDER_MARKERS.get(folder)
    return marker is not None and item.get_closest_marker(marker) is None


# -- parallel workers ----------------------------------------------------------------------
# `make test` runs pytest-xdist with `--dist loadgroup`. Its own group scheduler cannot see
# the `xdist_group` marks under pytest 9 (it renames `item._nodeid`, which pytest 9 no longer
# reads), so this one groups by path: the Spark tests are two units of work, each run by one
# worker with one JVM and one SparkSession (`_SPARK_UNIT_A` and the rest of tests/spark: one
# unit of them all, minutes long, was the run's critical path; a second session costs a
# JVM's start, seconds); every other test is a unit of its own, and so is the follow job,
# which starts JVMs of its own instead of using the session (`_OWN_UNIT`: it runs beside
# the Spark units, not after them). The standalone cluster's test stays in its file's unit:
# alone, its worker ran the file's three-instance delivery run a second time. A module's
# tests must stay together in a unit, and `_LONG_FIRST` must not name one of them (a
# module fixture is set up again when its tests are split). Units are handed
# out largest first (the Spark units start at once), then in collection order, which
# `_LONG_FIRST` sorts (in the workers: a serial run keeps the files' order): the longest
# tests start early, so none of them is left to run alone at the end while the other
# workers idle. A hint for the schedule only: no test depends on it.
_ONE_WORKER = ("tests/spark/",)
_SPARK_UNIT_A = tuple(f"tests/spark/{name}.py::" for name in (
    "test_ranged_deliveries", "test_attempt_latency", "test_journal_gaps",
    "test_columnar_deliveries", "test_filtered_audit", "test_transforms", "test_audit",
    "test_follow_state", "test_facts"))
# about half the Spark tests' time, measured per file (the other unit has the standalone
# cluster's test, which shares its file's three-instance delivery run with the file's
# local reports: one run, not one per worker)
_OWN_UNIT = ("tests/spark/test_follow.py::",)
_LONG_FIRST = (  # the longest first, as measured with --durations in a parallel run
    "tests/spark/test_follow.py::",
    "tests/integration/test_admin_fuzz.py::",
    "tests/chaos/test_seeded_chaos.py::",
    "tests/integration/test_fanout_processes.py::",
    "tests/integration/test_fanout.py::",
    "tests/integration/test_console.py::",
    "tests/browser/",
    "tests/integration/test_cluster_processes.py::",
    "tests/integration/test_readme_try_it.py::",
    "tests/integration/test_member_faults.py::",
    "tests/integration/test_qoh_end_to_end.py::",
    "tests/chaos/",
)

# The Spark units are the run's critical path: minutes of work in one JVM each, which the
# other workers starved while all of them shared the two cores (the unit's first test, the
# session's start and a first report, took 110 s; with the others niced, 34 s). So every
# other worker, and the Spark tests beside the units with the JVMs they start, run niced:
# the units keep their share of the cores and the rest fill them around them. Raising
# one's niceness needs no privilege.
_NICE_BESIDE_THE_SPARK_UNIT = 5
_NICED = pytest.StashKey[bool]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A worker whose first test is not of a Spark unit lowers its priority, once."""
    if _NICED in item.config.stash or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    item.config.stash[_NICED] = True
    nodeid = item.nodeid
    if not nodeid.startswith(_ONE_WORKER) or nodeid.startswith(_OWN_UNIT):
        os.nice(_NICE_BESIDE_THE_SPARK_UNIT)


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # no pytest-xdist: serial runs need none of this
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:
    class _SparkOnOneWorker(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(_OWN_UNIT):
                return nodeid
            if nodeid.startswith(_SPARK_UNIT_A):
                return "tests/spark/ (a)"
            for prefix in _ONE_WORKER:
                if nodeid.startswith(prefix):
                    return prefix
            return nodeid

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "loadgroup":
            return None
        return _SparkOnOneWorker(config, log)


@dataclass(frozen=True, slots=True)
class KafkaUnderTest:
    bootstrap: str
    kind: BrokerKind


@pytest.fixture(scope="session")
def kafka_under_test() -> Iterator[KafkaUnderTest]:
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        yield KafkaUnderTest(external, "external")
    elif _docker_answers():
        yield from _container_kafka()
    else:
        broker = EmbeddedBroker()
        broker.start_sync()
        # Runtimes of this process get the broker's workarounds (runtime.kafka.compat 4):
        # without them every held fetch on the shared broker waits 500 ms.
        compat.note_embedded(broker.bootstrap)
        try:
            yield KafkaUnderTest(broker.bootstrap, "embedded")
        finally:
            compat.forget_embedded(broker.bootstrap)
            broker.stop_sync()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_under_test: KafkaUnderTest) -> str:
    """`host:port` of the session's broker."""
    return kafka_under_test.bootstrap


@pytest.fixture(scope="session")
def broker_is_embedded(kafka_under_test: KafkaUnderTest) -> bool:
    """True when the session's broker is Tansu, whose quirks `runtime.kafka.compat` lists."""
    return kafka_under_test.kind == "embedded"


@pytest.fixture(scope="session")
def fast_group_kwargs(kafka_under_test: KafkaUnderTest) -> dict[str, int]:
    """Consumer settings that make group joins and rebalances quick on this broker.

    Tansu answers a JoinGroup after about half the session timeout, rounded up to whole
    seconds (10 s default -> 5 s; 2 s -> 1 s). Apache Kafka refuses session timeouts below
    `group.min.session.timeout.ms` (6 s by default), which our container lowers.
    """
    if kafka_under_test.kind == "external":
        return {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}
    return {"session_timeout_ms": 2000, "heartbeat_interval_ms": 300}


def embedded_quirks(bootstrap: str) -> str:
    """The TOML value of `[[brokers]] embedded_quirks` for a runtime in another process:
    `true` for the session's embedded broker, so that it works around the broker's quirks
    as the runtimes of this process do (runtime.kafka.compat)."""
    return "true" if compat.known_embedded(bootstrap) else "false"


@pytest.fixture
def topic_factory(kafka_bootstrap: str) -> TopicFactory:
    """`name = await topic_factory(partitions=1, prefix="t")`: a new, uniquely named topic."""

    async def make(partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        await create_topics(kafka_bootstrap, {name: partitions})
        return name

    return make


@pytest.fixture
def unused_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    return free_port()


def _docker_answers() -> bool:
    # Without an engine docker-py leaks the socket of its failed connect: don't even try.
    if not os.environ.get("DOCKER_HOST") and not Path(_DEFAULT_DOCKER_SOCKET).exists():
        return False
    try:
        import docker

        client = docker.from_env(timeout=_DOCKER_PING_TIMEOUT_S)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # no SDK, no socket, no daemon: all mean "no Docker"
        return False


def _container_kafka() -> Iterator[KafkaUnderTest]:
    from testcontainers.community.kafka import KafkaContainer

    container: Any = KafkaContainer()
    # A single broker: internal topics with one replica, and short sessions allowed.
    for key, value in {
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS": "1000",
    }.items():
        container.with_env(key, value)
    container.start()
    try:
        yield KafkaUnderTest(container.get_bootstrap_server(), "container")
    finally:
        container.stop()
