"""The guard that fails the session when a test rewrites a tracked file."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests import tracked


def _repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.png").write_bytes(b"old")
    (tmp_path / "notes.md").write_text("mine")
    (tmp_path / "ignored.png").write_bytes(b"untracked")
    subprocess.run(["git", "-C", str(tmp_path), "add", "docs", "notes.md"], check=True)
    return tmp_path


def test_a_rewritten_tracked_image_is_named(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    before = tracked.digests(tracked.tracked_files(root))
    (root / "docs" / "page.png").write_bytes(b"new")
    (root / "ignored.png").write_bytes(b"changed too, but not tracked")
    assert tracked.changed(before, root) == ["docs/page.png"]


def test_untouched_files_and_hand_edited_markdown_pass(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    before = tracked.digests(tracked.tracked_files(root))
    (root / "notes.md").write_text("edited while the suite ran")
    assert tracked.changed(before, root) == []
    assert [p.name for p in tracked.tracked_files(root)] == ["page.png"]
