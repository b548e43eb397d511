"""Fixtures of the unit tests."""

from __future__ import annotations

import pytest

from runtime.kernel.actor import Actor


@pytest.fixture(params=["task", "light"])
def turns_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernel test twice: actors on their own tasks, and every actor light (its turns on
    the shared runner, runtime/kernel/turns.py), supervisors included."""
    if request.param == "light":
        monkeypatch.setattr(Actor, "light", True)
    return str(request.param)
