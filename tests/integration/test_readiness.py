"""Liveness, readiness and process metrics of a running runtime (real broker, real HTTP)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.integration.delivery_harness import Admin, make_runtime

pytestmark = pytest.mark.integration


async def test_an_idle_runtime_is_live_and_ready(kafka_bootstrap: str, tmp_path: Path) -> None:
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        status, health = await admin.call("GET", "/healthz")
        assert status == 200 and health.pop("uptime_s") >= 0 and health.pop("version")
        assert health == {
            "status": "ok", "services": ["delivery"], "brokers": {"Kafka": kafka_bootstrap}}
        assert await admin.call("GET", "/readyz") == (200, {"ready": True, "reasons": []})


async def test_an_unreachable_broker_makes_readyz_503_naming_it_while_healthz_stays_200(
        kafka_bootstrap: str, tmp_path: Path, unused_port: int,
        caplog: pytest.LogCaptureFixture) -> None:
    brokers = [{"name": "Kafka", "bootstrap_servers": kafka_bootstrap},
               {"name": "Down", "bootstrap_servers": f"127.0.0.1:{unused_port}"}]
    with caplog.at_level(logging.INFO, logger="runtime"):
        async with make_runtime(kafka_bootstrap, tmp_path, brokers=brokers):
            pass
    said = [r.getMessage() for r in caplog.records]
    # #34: it said "ready" and warned nothing for 25 s
    assert [m for m in said if "'Down'" in m and "unreachable" in m and str(unused_port) in m]
    assert not [m for m in said if m.startswith("ready:")]
    assert [m for m in said if m.startswith("started, not ready (broker 'Down' unreachable")]
    async with make_runtime(kafka_bootstrap, tmp_path, brokers=brokers) as runtime:
        admin = Admin(runtime)
        status, body = await admin.call("GET", "/readyz")
        assert status == 503 and body["ready"] is False
        assert [r for r in body["reasons"] if "'Down'" in r and str(unused_port) in r]
        assert not [r for r in body["reasons"] if "'Kafka'" in r]
        assert (await admin.call("GET", "/healthz"))[0] == 200


async def test_process_metrics_use_the_usual_names(kafka_bootstrap: str, tmp_path: Path) -> None:
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        text = runtime.metrics.render()
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line and not line.startswith("#") and "{" not in line.split(" ")[0]}
    assert values["process_resident_memory_bytes"] > 10_000_000
    assert values["process_open_fds"] > 3
    assert values["process_cpu_seconds_total"] > 0
    assert "hookstream_event_loop_lag_ms_bucket" in text
    assert "hookstream_gc_pause_ms_count" in text


async def test_a_clean_stop_says_so_in_one_line_with_totals(
        kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    with caplog.at_level(logging.INFO, logger="runtime"):
        async with make_runtime(kafka_bootstrap, tmp_path):
            pass
    lines = [r.getMessage() for r in caplog.records if "stopped cleanly" in r.getMessage()]
    assert len(lines) == 1 and "0 subscriptions, 0 records delivered" in lines[0]
    assert " events written" in lines[0] and "DROPPED" not in lines[0]  # the journal's
