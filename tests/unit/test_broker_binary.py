"""The embedded broker's binary is copied out by one process at a time."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from runtime.kafka.broker import _resolve_binary


def test_a_process_waits_while_another_copies_the_binary_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the lock, test workers starting together renamed fresh, not yet executable
    copies over one another's, and a broker start was refused (`Permission denied`)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CALF_TANSU_BIN", raising=False)
    (tmp_path / ".calfkit").mkdir()
    found: list[str] = []
    with open(tmp_path / ".calfkit" / ".resolve.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process is copying
        resolving = threading.Thread(target=lambda: found.append(_resolve_binary()))
        resolving.start()
        resolving.join(0.5)
        assert resolving.is_alive() and not found
        assert not (tmp_path / ".calfkit" / "bin").exists()
        fcntl.flock(lock, fcntl.LOCK_UN)
    resolving.join(30)
    assert found and os.access(found[0], os.X_OK)
    assert Path(found[0]).is_relative_to(tmp_path)
