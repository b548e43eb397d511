"""Shared fixtures of the Spark tests: one local[1] SparkSession per worker (startup takes
seconds on 2 cores) and a helper that writes events through the real journal writer.

Spark tests skip, with the reason, when PySpark or Java is missing.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from runtime.host.journal import Event, Journal
from runtime.kernel.clock import FakeClock
from tests.spark.class_archive import java_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.spark.reference_journal import SharedReports

WriteJournal = Callable[..., Journal]  # the type of the `journal_writer` fixture
SPARK = [pytest.mark.spark, pytest.mark.xdist_group("spark")]
"""Every Spark test file's `pytestmark`: under pytest-xdist (`--dist loadgroup`, as `make
test` runs) the Spark tests share one worker, so one JVM and one session serve them all.
tests/conftest.py's scheduler does that by path: pytest-xdist's own cannot see the
`xdist_group` mark under pytest 9, which the mark says all the same."""
# JVMs on 2 cores: C2 compilations compete with the tasks for the cores; C1 alone halved
# the cluster test's report (bench/RESULTS.md, "Report: fast path"), and it pays even in
# the session that lives for the whole Spark unit (with C2 the unit's heaviest files took
# about 1.5x the CPU). The serial collector spares the G1 threads, as the report's own
# short jobs do (runtime/report/job.py, SHORT_JOB_JAVA_OPTIONS).
QUICK_JIT = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
JVM_OPTIONS = java_options(QUICK_JIT)
"""The options of every JVM the tests start: QUICK_JIT, and the classes mapped from the
archive `make test` builds (tests/spark/class_archive.py) where it exists."""


def pytest_configure(config: pytest.Config) -> None:
    # PySpark 4.x warns about pandas 3 on import; the report does not use pandas.
    config.addinivalue_line(
        "filterwarnings", "ignore:PySpark does not yet fully support pandas:FutureWarning"
    )


def java_missing() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is None and not (
        java_home and Path(java_home, "bin", "java").exists()
    )


def make_session(java_options: str) -> SparkSession:
    """The tests' SparkSession (the class archive's build runs one too)."""
    from pyspark.sql import SparkSession

    from runtime.report.job import NO_CALL_SITES

    session = (
        # One task thread and one shuffle partition: the frames are a few hundred rows, and
        # under `make test` the unit's worker has about one core; a second thread and
        # partition doubled the tasks of every stage for no result (about a tenth of a
        # report's CPU). Nothing here depends on it: `--master local[2]` in a test reuses
        # this session, and the JVMs the tests start (follow job, cluster) keep theirs.
        SparkSession.builder.master("local[1]")
        .appName("hookstream-tests")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", java_options)
        # Adaptive query execution re-plans every query at its shuffles, which on frames
        # of a few hundred rows costs more than it saves: off, the heaviest files of the
        # unit took about a fifth less CPU. It changes plans, never results, and no test
        # reads a plan or counts output files of a Spark write.
        .config("spark.sql.adaptive.enabled", "false")
        # Expressions interpreted, not compiled: Janino compiles each query's generated
        # Java, on a C1-only JVM some seconds per report of a few hundred rows, whatever
        # their number (a fifth to a quarter of a report's CPU). Spark guarantees the same
        # results either way (its own suites run both); the report's code generation still
        # runs in the JVMs the tests start: the follow job and the standalone cluster.
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
        .config(*NO_CALL_SITES)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")
    if java_missing():
        pytest.skip("Spark needs Java 17+ (no java on PATH and no JAVA_HOME)")
    session = make_session(JVM_OPTIONS)
    yield session
    session.stop()


def write_journal(
    directory: Path,
    events: Iterable[Event],
    *,
    clock: FakeClock | None = None,
    flush_every: int = 1_000,
    advance_ms: int = 0,
    **options: int,
) -> Journal:
    """Write events through a real Journal, flushing every `flush_every` events and moving
    the fake clock `advance_ms` at each flush (so age rotation can happen)."""
    fake = clock or FakeClock()

    async def run() -> Journal:
        journal = Journal(directory, clock=fake, **options)
        await journal.open()
        for i, event in enumerate(events, start=1):
            journal.emit(event)
            if i % flush_every == 0:
                fake.advance(advance_ms)
                await journal.flush()
        await journal.stop()
        return journal

    return asyncio.run(run())


@pytest.fixture(scope="session")
def journal_writer() -> WriteJournal:
    return write_journal


@pytest.fixture(scope="session")
def shared_reports(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory,
                   ) -> Callable[[str], SharedReports]:
    """Each engine's two reports that four files share, made once per session on first
    use (tests/spark/reference_journal.py says which and why)."""
    from tests.spark.reference_journal import shared_reports

    made: dict[str, SharedReports] = {}

    def of(engine: str) -> SharedReports:
        if engine not in made:
            made[engine] = shared_reports(tmp_path_factory.mktemp(engine), engine)
        return made[engine]

    return of
