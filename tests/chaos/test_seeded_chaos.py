"""Chaos, seeded: a runtime with ten subscriptions (failing, slow and filtered endpoints
among them) under load while a seeded schedule kills random actors anywhere in its tree,
pauses, resumes and updates subscriptions; nothing is lost, nothing unexpected arrives,
duplicates come only after a fault that found them uncommitted, and every group commits
to the end (tests/chaos/harness.py says how each is judged).

A failing run prints its seed; `HOOKSTREAM_CHAOS_SEED=<seed> make test` (or pytest on this
file) replays the same schedule. bench/chaos.py runs it for minutes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import ChaosRun, Shape
from tests.chaos.schedule import seed_from_env

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]


async def test_seeded_faults_lose_nothing_and_duplicate_only_what_was_uncommitted(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    seed = seed_from_env()
    print(f"chaos seed {seed}")  # shown with a failure: the replay's seed
    verdict = await ChaosRun(kafka_bootstrap, tmp_path, seed, Shape(seconds=40.0)).run()
    print(verdict.summary())
    assert verdict.hits, "the schedule fired no fault"
    assert verdict.clean, verdict.summary()
