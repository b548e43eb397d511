"""`python -m runtime report JOURNAL_DIR... --follow --out OUT`: the live audit.

Two Structured Streaming queries and a loop that rewrites the report:

1. compaction (runtime/report/store.py): closed segments, as they appear, into the Parquet
   store (`OUT/store` unless `--store`);
2. the audit: the store's new files, a micro-batch at a time (`foreachBatch`, checkpoint
   in `OUT/follow/checkpoint-ranges`), reduced by Spark without streaming state
   (runtime/report/follow_batch.py: the batch's small facts, and its record events as
   ranges per cursor) and folded by `FollowState.apply` into the report's state
   (runtime/report/follow_state.py: per cursor, runs of offsets with equal tallies, so a
   batch costs per cursor, not per record), one stored version per micro-batch in
   `OUT/follow/state-ranges/`;
3. every `--refresh-s` seconds (and whenever a batch changed something), the tables,
   charts and summary in OUT are rewritten from that state, and a progress line printed.

Restartable: both queries resume from their checkpoints and the state from the version of
the last batch Spark committed, so a follow job killed at any point and started again with
the same arguments neither skips nor double counts an event. Ctrl-C (or SIGTERM) stops the
queries and writes a final summary.

Lost means fetched and neither delivered nor dead-lettered within `--grace-s` (default 5
minutes) of the newest event in the journal; younger open records are "in flight".
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from runtime.errors import UsageError
from runtime.host.files import atomic_write
from runtime.host.journal import closed_segments, open_segments
from runtime.report import follow_batch, output, tables, transforms
from runtime.report.follow_state import FollowState
from runtime.report.job import choose_bucket_ms
from runtime.report.sources import GLOB_CHARACTERS, journal_directories
from runtime.report.store import Store, compaction

Progress = Callable[[str], None]
STATE_SUFFIX = ".msgpack"
KEEP_VERSIONS = 3
MAX_QUIET_S = 10.0  # rewrite the report at least this often, changed or not


@dataclass(frozen=True, slots=True)
class FollowOptions:
    out_dir: Path
    store: Store
    grace_ms: int = 300_000
    refresh_s: float = 5.0

    # new names since the audit on ranges (the state's form and the query changed): a
    # follow directory of an older version starts over from the store, counting nothing
    # twice, instead of failing on a checkpoint of another query
    @property
    def checkpoint(self) -> Path:
        return self.out_dir / "follow" / "checkpoint-ranges"

    @property
    def state_dir(self) -> Path:
        return self.out_dir / "follow" / "state-ranges"


class StateKeeper:
    """The current `FollowState`, one stored version per micro-batch (see module doc).

    `apply` runs on Spark's streaming thread, `render` on the main thread: a lock."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._state = self._load_latest()
        self.last_batch_s = 0.0  # the last batch's time in `apply`

    def _path(self, version: int) -> Path:
        return self._dir / f"{version:012d}{STATE_SUFFIX}"

    def _versions(self) -> list[int]:
        return sorted(int(p.name.removesuffix(STATE_SUFFIX))
                      for p in self._dir.glob(f"*{STATE_SUFFIX}"))

    def _load_latest(self) -> FollowState:
        versions = self._versions()
        return self._load(versions[-1]) if versions else FollowState()

    def _load(self, version: int) -> FollowState:
        if version < 0:
            return FollowState()
        path = self._path(version)
        if not path.exists():
            raise UsageError(f"follow state {path} is missing but the checkpoint needs it; "
                             f"delete {self._dir.parent} to start the follow job over")
        return FollowState.decode(path.read_bytes())

    def apply(self, batch: DataFrame, batch_id: int) -> None:
        """foreachBatch: fold batch `batch_id` (the store's new rows, as
        `follow_batch.prepared` makes them) into version `batch_id - 1`."""
        started = time.monotonic()
        changes = follow_batch.prepared_changes(batch)
        with self._lock:
            state = self._state
            if state.version != batch_id - 1:  # Spark runs this batch again after a crash
                state = self._load(batch_id - 1)
            state.apply(changes, batch_id)
            atomic_write(self._path(batch_id), state.encode())
            self._state = state
        for old in self._versions()[:-KEEP_VERSIONS]:
            self._path(old).unlink(missing_ok=True)
        self.last_batch_s = time.monotonic() - started

    @property
    def version(self) -> int:
        return self._state.version

    def render(self, grace_ms: int) -> tuple[tables.Report, int, Any]:
        """The report as of the last batch, its bucket size and the state's summary."""
        with self._lock:
            state = self._state
            _, in_flight = state.lost_and_in_flight(grace_ms)
            types = [f for f in state.facts.values() if f["kind"] == "tick"]
            first = min((f["first_ms"] for f in types), default=0)
            last = max((f["last_ms"] for f in types), default=0)
            bucket_ms = choose_bucket_ms(last - first)
            report = tables.build(state.aggregates(grace_ms, bucket_ms))
            in_flight_records = sum(run.size for run in in_flight)
            extra = {"follow": {
                "batch": state.version, "grace_s": grace_ms / 1000,
                "in_flight": in_flight_records, "open_records": state.open_records(),
                "batch_s": round(self.last_batch_s, 3),
            }}
        report.extra.update(extra)
        report.extra["in_flight"] = in_flight_records
        return report, bucket_ms, extra


def _segments(dirs: tuple[Path, ...]) -> dict[str, int]:
    return {"closed": sum(len(closed_segments(d)) for d in dirs), "recovered_tails": 0,
            "skipped_live": sum(len(open_segments(d)) for d in dirs)}


def _configure(spark: SparkSession) -> None:
    """Few shuffle partitions: a micro-batch's aggregations are small."""
    spark.conf.set("spark.sql.shuffle.partitions",
                   str(max(2, spark.sparkContext.defaultParallelism)))


def start_queries(spark: SparkSession, dirs: tuple[Path, ...], options: FollowOptions,
                  keeper: StateKeeper) -> list[StreamingQuery]:
    _configure(spark)
    trigger = f"{max(0.5, options.refresh_s / 2):g} seconds"
    store = options.store
    compact = compaction(spark, dirs, store).trigger(processingTime=trigger).start()
    store.events.mkdir(parents=True, exist_ok=True)  # the stream below needs the directory
    events = spark.readStream.schema(transforms.stored_schema()).parquet(str(store.events))
    aggregate = (
        follow_batch.prepared(events).writeStream.queryName("hookstream-follow")
        .foreachBatch(keeper.apply)
        .option("checkpointLocation", str(options.checkpoint))
        .trigger(processingTime=trigger).start()
    )
    return [compact, aggregate]


class _Follow:
    def __init__(self, dirs: tuple[Path, ...], options: FollowOptions,
                 progress: Progress) -> None:
        self.dirs = dirs
        self.options = options
        self.progress = progress
        self.keeper = StateKeeper(options.state_dir)
        self.label = ", ".join(str(d) for d in dirs)
        self._written_version: int | None = None
        self._written_at = 0.0
        self._delivered = 0

    def refresh(self, force: bool = False) -> dict[str, Any] | None:
        """Rewrite the report if a batch changed it or MAX_QUIET_S passed."""
        version = self.keeper.version
        quiet = time.monotonic() - self._written_at >= MAX_QUIET_S
        if not force and version == self._written_version and not quiet:
            return None
        report, bucket_ms, _ = self.keeper.render(self.options.grace_ms)
        result = output.write_report(
            self.options.out_dir, report, journal=self.label, segments=_segments(self.dirs),
            bucket_ms=bucket_ms, chart_note="live")
        self._written_version, self._written_at = version, time.monotonic()
        return result

    def line(self, result: dict[str, Any], prefix: str) -> str:
        delivered = result["delivered"]
        grown, self._delivered = delivered - self._delivered, delivered
        return (f"{prefix} batch {result['follow']['batch']}: {result['events']:,} events, "
                f"delivered {delivered:,} (+{grown:,}), lost {result['lost']:,}, in flight "
                f"{result['in_flight']:,}, duplicates {result['duplicates']:,}, "
                f"dead-lettered {result['dead_lettered']:,} "
                f"(last batch {result['follow']['batch_s']:.2f} s)")


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _check(queries: list[StreamingQuery]) -> None:
    for query in queries:
        error = query.exception()
        if error is not None or not query.isActive:
            raise UsageError(f"streaming query {query.name} stopped: {error or 'stopped'}")


def run(spark: SparkSession, journal_dirs: list[Path], options: FollowOptions,
        progress: Progress = print) -> dict[str, Any]:
    """Follow until Ctrl-C or SIGTERM; return the final summary."""
    for directory in journal_dirs:
        if not GLOB_CHARACTERS & set(str(directory)):  # the runtime may not have started yet
            directory.mkdir(parents=True, exist_ok=True)
    dirs = journal_directories(journal_dirs)
    with options.store.writing():
        return _follow(spark, dirs, options, progress)


def _follow(spark: SparkSession, dirs: tuple[Path, ...], options: FollowOptions,
            progress: Progress) -> dict[str, Any]:
    job = _Follow(dirs, options, progress)
    queries = start_queries(spark, dirs, options, job.keeper)
    progress(f"following {job.label} (store {options.store.root}, grace "
             f"{options.grace_ms / 1000:g} s); Ctrl-C stops")
    try:
        with _sigterm_as_interrupt():
            while True:
                time.sleep(options.refresh_s)
                _check(queries)
                result = job.refresh()
                if result is not None:
                    progress(job.line(result, time.strftime("[%H:%M:%S]")))
    except KeyboardInterrupt:
        progress("stopping ...")
    finally:
        for query in queries:
            with contextlib.suppress(Exception):
                query.stop()
    result = job.refresh(force=True)
    assert result is not None
    progress(job.line(result, "final:"))
    return result
