"""The Parquet store: closed journal segments converted once to Parquet, then read from there.

JSON parsing was the largest step of the report (issue 16), and a journal is read many times
(every report, every follow refresh) but written once. The store is a Structured Streaming
query over the journal directories: a file source per directory that picks up closed
segments (`segment-*.jsonl`) as they appear, and Spark's Parquet file sink, whose commit
log (`events/_spark_metadata`) lists the files of every finished micro-batch. Its
checkpoint remembers which segments are in, so the query is incremental (each segment is
read once) and restartable (a killed query resumes without writing a segment twice), and
readers of `events/`, batch or streaming, see only committed files.

Layout of a store directory:

- `events/`: the journal lines as Parquet, with the journal's schema and the directory
  each came from (`transforms.stored_schema`, malformed lines kept with `_corrupt_record`
  set);
- `checkpoint/`: the compaction query's checkpoint;
- `journals.json`: the journal directories this store was built from, in order (the
  checkpoint's sources are positional, so another list needs another store);
- `segments.json`: the segments a completed batch compaction saw, so the next report
  starts no query when nothing is new;
- `writer.lock`: held by the process compacting (a batch report for a moment, a follow
  job all along): one compaction per checkpoint.

`python -m runtime report DIR... --store STORE` compacts what is new, then reports from
the store; `--follow` keeps compacting while it runs. With a cluster master the store
must be on storage every executor sees at the same path, like the journal.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

from runtime.errors import UsageError
from runtime.host.files import atomic_write
from runtime.host.journal import FINAL_SUFFIX, SEGMENT_PREFIX, closed_segments
from runtime.report import transforms

CLOSED_SEGMENTS = f"{SEGMENT_PREFIX}*{FINAL_SUFFIX}"
# A recovered crash leftover keeps the mtime of its last write; the file source would skip
# it as too old after the default 7 days.
MAX_FILE_AGE = "36500d"


@dataclass(frozen=True, slots=True)
class Store:
    root: Path

    @property
    def events(self) -> Path:
        return self.root / "events"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def journals_file(self) -> Path:
        return self.root / "journals.json"

    @property
    def segments_file(self) -> Path:
        return self.root / "segments.json"

    def has_events(self) -> bool:
        return (self.events / "_spark_metadata").is_dir()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the store's writer lock (released when the process dies, too): one
        compaction query per checkpoint. UsageError if another process holds it."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / "writer.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError(
                    f"store {self.root} is being written by another process (a follow "
                    "job?); its report is kept up to date in its --out directory") from None
            yield
        finally:
            os.close(fd)

    def compacted(self) -> set[str]:
        """Segments known to be in the store (written after each complete compaction)."""
        if not self.segments_file.exists():
            return set()
        return set(json.loads(self.segments_file.read_text()))

    def claim(self, journal_dirs: tuple[Path, ...]) -> None:
        """Record which journals this store holds; UsageError if it holds others."""
        wanted = [str(d) for d in journal_dirs]
        if self.journals_file.exists():
            held = json.loads(self.journals_file.read_text())
            if held != wanted:
                raise UsageError(
                    f"store {self.root} holds journal(s) {', '.join(held)}; use another "
                    "--store for a different list of journal directories")
            return
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write(self.journals_file, (json.dumps(wanted) + "\n").encode())


def journal_stream(spark: SparkSession, journal_dirs: tuple[Path, ...],
                   max_files_per_trigger: int | None = None) -> DataFrame:
    """Closed segments of every directory, as they appear, as one stream of raw lines."""
    streams = []
    for directory in journal_dirs:
        reader = (
            spark.readStream.schema(transforms.event_schema())
            .option("pathGlobFilter", CLOSED_SEGMENTS)
            .option("maxFileAge", MAX_FILE_AGE)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", transforms.CORRUPT)
        )
        if max_files_per_trigger is not None:
            reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
        streams.append(transforms.with_instance(reader.json(str(directory)), str(directory)))
    union = streams[0]
    for stream in streams[1:]:
        union = union.unionByName(stream)
    return union


def compaction(spark: SparkSession, journal_dirs: tuple[Path, ...], store: Store,
               *, max_files_per_trigger: int | None = None) -> DataStreamWriter:
    """The compaction query, not started: the caller picks the trigger."""
    store.claim(journal_dirs)
    return (
        journal_stream(spark, journal_dirs, max_files_per_trigger).writeStream
        .queryName("hookstream-store")
        .format("parquet")
        .option("path", str(store.events))
        .option("checkpointLocation", str(store.checkpoint))
    )


def compact(spark: SparkSession, journal_dirs: tuple[Path, ...], store: Store) -> None:
    """Convert every closed segment not yet in the store, then return. Without new
    segments no query runs (starting one costs seconds)."""
    with store.writing():
        store.claim(journal_dirs)
        closed = {str(p) for d in journal_dirs for p in closed_segments(d)}
        done = store.compacted()
        if closed <= done:
            return
        # availableNow reads every file there when it starts, so all of `closed` is in
        query: StreamingQuery = compaction(spark, journal_dirs, store).trigger(
            availableNow=True).start()
        query.awaitTermination()
        error = query.exception()
        if error is not None:
            raise UsageError(f"compacting into {store.root} failed: {error}")
        atomic_write(store.segments_file, (json.dumps(sorted(closed | done)) + "\n").encode())


def read_events(spark: SparkSession, store: Store, *, per_record: bool = True) -> DataFrame:
    """Everything the store holds (committed micro-batches only), as raw journal rows:
    one per record, or with `per_record=False` one per event (`job.read_raw`)."""
    raw = spark.read.schema(transforms.stored_schema()).parquet(str(store.events))
    if per_record:
        return transforms.one_row_per_record(raw)
    return transforms.one_row_per_event(raw)
