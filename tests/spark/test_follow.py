"""The live audit: a follow job (`python -m runtime report --follow`, a subprocess, as an
operator runs it) started before a real delivery run shows the delivered count growing
while the run goes on, survives kill -9 and a restart without double counting, ends with
the exact audit, and writes a final summary on Ctrl-C. Since the audit on ranges (issue
35) the run's retries (a 503 in ten) split its cursors' runs, and its redeliveries are
duplicates, both counted exactly."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.host.journal import RECORD_EVENT_TYPES
from runtime.kafka import create_topics
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    make_runtime,
    produce,
    subscription,
)
from tests.spark import cluster as standalone
from tests.spark.conftest import JVM_OPTIONS, SPARK, java_missing
from tests.waits import until

pytestmark = [*SPARK, pytest.mark.timeout(240)]  # a hang bound, stretched by SLACK
WAVE, PARTITIONS = 150, 2
STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
Summary = dict[str, Any]


class FollowJob:
    """One `--follow` process; stopped by its PID (and its JVM's, found as its child)."""

    def __init__(self, journal: Path, out: Path, base: Path) -> None:
        self.out = out
        self.log = base / f"follow-{time.monotonic_ns()}.log"
        env = standalone.loopback_env(base, JVM_OPTIONS)
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "runtime", "report", str(journal), "--follow", "--out",
                 str(out), "--master", "local[2]", "--refresh-s", "1"],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=Path(__file__).parents[2])

    def summary(self) -> Summary | None:
        try:
            return json.loads((self.out / "summary.json").read_text())  # type: ignore[no-any-return]
        except FileNotFoundError:
            return None

    async def wait_for(self, predicate: Callable[[Summary], bool], what: str,
                       timeout_s: float = STARTUP_TIMEOUT_S) -> Summary:
        last: list[Summary | None] = [None]

        def shown() -> Summary | None:
            summary = last[0] = self.summary()
            if summary is not None and predicate(summary):
                return summary
            if self.process.poll() is not None:
                raise AssertionError(f"follow job exited ({self.process.poll()}) before its "
                                     f"{what}; last summary {_totals(summary)}\n{self.tail()}")
            return None

        try:
            return await until(shown, timeout_s=timeout_s, poll_s=0.5, what=what)
        except AssertionError as failed:
            raise AssertionError(f"follow job: {failed}; last summary {_totals(last[0])}\n"
                                 f"{self.tail()}") from None

    def tail(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if " WARN " not in line)[-4000:]

    def kill_9(self) -> None:
        jvms = standalone._descendants(self.process.pid)
        self.process.kill()
        self.process.wait(timeout=STOP_TIMEOUT_S)
        deadline = time.monotonic() + STOP_TIMEOUT_S  # the JVM exits when our pipe closes
        while any(standalone._running(pid) for pid in jvms) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in jvms:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not any(standalone._running(pid) for pid in jvms)

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=STOP_TIMEOUT_S * 2)


def _totals(summary: Summary | None) -> Any:
    if summary is None:
        return None
    return {k: summary.get(k) for k in ("events", "delivered", "duplicates", "lost",
                                         "in_flight")}


@pytest.fixture
def follow_jobs(tmp_path: Path) -> Any:
    pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")
    if java_missing():
        pytest.skip("Spark needs Java 17+ (no java on PATH and no JAVA_HOME)")
    jobs: list[FollowJob] = []

    def start() -> FollowJob:
        jobs.append(FollowJob(tmp_path / "journal", tmp_path / "live", tmp_path))
        return jobs[-1]

    yield start
    for job in jobs:
        if job.process.poll() is None:
            job.kill_9()


def event_rows(segment: Path) -> int:
    """The events a report counts in a segment: a line each, a record event with offset
    ranges (a batch's `fetched`, a cursor's ranged `delivered`) once per offset it names,
    a columnar `delivered` once per row and a commit round once per position (as
    journals before issue 35 wrote them)."""
    rows = 0
    for line in segment.read_bytes().splitlines():
        event = json.loads(line)
        ranged = event["type"] in RECORD_EVENT_TYPES and (
            "offsets" in event or "record_offsets" in event)
        rows += event["count"] if ranged else len(event.get("positions") or [None])
    return rows


async def test_a_follow_job_audits_a_run_live_and_survives_kill_9(
    kafka_bootstrap: str, fast_group_kwargs: dict[str, int], tmp_path: Path,
    follow_jobs: Callable[[], FollowJob],
) -> None:
    first = follow_jobs()  # before the run: the journal directory does not exist yet
    topic = f"t-{uuid.uuid4().hex[:12]}"
    await create_topics(kafka_bootstrap, {topic: PARTITIONS})
    rng = random.Random(3)

    async def flaky(push: Push) -> int:
        return 503 if rng.random() < 0.1 else 200

    receiver = await Receiver(flaky).start()
    seen: list[int] = []
    runtime = make_runtime(kafka_bootstrap, tmp_path, journal={"max_segment_age_ms": 300})
    async with runtime:
        await Admin(runtime).subscribe(subscription(
            "live", [{"name": topic, "config": {"concurrencyFactor": 8}}], receiver.url,
            fast_group=fast_group_kwargs, delayOnErrorMs=5))
        for wave in range(3):
            await produce(kafka_bootstrap, topic, WAVE, partitions=PARTITIONS,
                          start=wave * WAVE)
            await receiver.wait_for(lambda n=wave: len(receiver.delivered()) == (n + 1) * WAVE)
            if wave == 0:
                summary = await first.wait_for(lambda s: s["delivered"] == WAVE, "first wave")
                seen.append(summary["delivered"])
                killed_at_batch = summary["follow"]["batch"]
            if wave == 1:  # killed while the second wave's segments come in
                first.kill_9()
                second = follow_jobs()
        during = await second.wait_for(lambda s: s["delivered"] >= 3 * WAVE, "last wave")
        seen.append(during["delivered"])
    await receiver.stop()
    lines = sum(event_rows(p) for p in (tmp_path / "journal").iterdir())
    final = await second.wait_for(lambda s: s["events"] >= lines, "the whole journal")

    oks = Counter((p.partition, p.offset) for p in receiver.ok)
    assert seen == [WAVE, 3 * WAVE]  # it grew while the run went on, counted nothing twice
    assert final["events"] == lines  # every journal event once: no segment read twice
    assert final["follow"]["batch"] > killed_at_batch  # resumed, not started over
    assert (final["delivered"], final["records_fetched"]) == (3 * WAVE, 3 * WAVE)
    assert final["duplicates"] == sum(oks.values()) - len(oks)
    assert (final["lost"], final["in_flight"], final["follow"]["grace_s"]) == (0, 0, 300)
    assert final["follow"]["open_records"] == 0 and final["follow"]["batch_s"] > 0
    assert second.interrupt() == 0
    assert "final: batch" in second.tail()
    log = second.log.read_text(errors="replace").splitlines()
    noise = [line for line in log if " WARN " in line or " INFO " in line]
    assert not noise, noise[:5]  # Spark's log stays out of the progress lines
    stopped = second.summary()
    assert stopped is not None and stopped["events"] == lines
