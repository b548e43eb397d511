"""`Runtime.wait()` (the embedding program's "run until done"): it returns when the runtime
is stopped from elsewhere, or when its actor tree ends, and at once once stopped."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from tests.integration.delivery_harness import make_runtime

pytestmark = pytest.mark.integration


async def test_wait_returns_when_the_runtime_is_stopped_and_at_once_after(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    waiting = asyncio.ensure_future(runtime.wait())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await runtime.stop()
    await asyncio.wait_for(waiting, 5)
    await asyncio.wait_for(runtime.wait(), 1)


async def test_wait_returns_when_the_actor_tree_ends_and_says_why(
        kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        waiting = asyncio.ensure_future(runtime.wait())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        with caplog.at_level(logging.ERROR, logger="runtime.host.app"):
            runtime.system.root.tell_system(_Boom())
            await asyncio.wait_for(waiting, 5)
        assert "actor tree failed" in caplog.text
    finally:
        await runtime.stop()


class _Boom:
    """A message the root supervisor does not know: it fails (UsageError)."""
