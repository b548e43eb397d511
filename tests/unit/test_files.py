"""Durable writes: an atomic write leaves the old file or the new one, never a mix, and
no temp file once it returns or fails."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.host.files import atomic_write, fsync_directory, replace_all_synced


def test_atomic_write_creates_the_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    atomic_write(path, b"first")
    assert path.read_bytes() == b"first"
    assert os.listdir(tmp_path) == ["a.json"]


def test_atomic_write_replaces_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    atomic_write(path, b"first")
    atomic_write(path, b"second")
    assert path.read_bytes() == b"second"
    assert os.listdir(tmp_path) == ["a.json"]


def test_the_file_is_readable_by_its_owner_only_even_over_a_readable_one(
        tmp_path: Path) -> None:
    path = tmp_path / "secret.json"
    path.write_bytes(b"old")
    os.chmod(path, 0o644)
    atomic_write(path, b"new")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_mode_can_be_asked_for(tmp_path: Path) -> None:
    atomic_write(tmp_path / "shared", b"x", mode=0o640)
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o640 & ~_umask()


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_a_failed_rename_leaves_the_old_file_and_removes_the_temp_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.json"
    atomic_write(path, b"old")

    def fail(src: object, dst: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write(path, b"new")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["a.json"]


def test_a_crash_between_write_and_rename_leaves_the_old_file_intact(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    atomic_write(path, b"old")
    # The child process dies where the rename would be: no cleanup code runs.
    crash = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from runtime.host import files\n"
        "files.os.replace = lambda src, dst: os._exit(3)\n"
        "files.atomic_write(Path(sys.argv[1]), b'new')\n"
    )
    result = subprocess.run([sys.executable, "-c", crash, str(path)], check=False,
                            cwd=Path(__file__).parents[2])
    assert result.returncode == 3
    assert path.read_bytes() == b"old"
    leftovers = [p for p in tmp_path.iterdir() if p != path]
    assert len(leftovers) == 1 and leftovers[0].name.startswith(".a.json.")
    assert leftovers[0].suffix == ".tmp" and leftovers[0].read_bytes() == b"new"
    assert list(tmp_path.glob("*.json")) == [path]


def test_fsync_directory_accepts_a_directory(tmp_path: Path) -> None:
    fsync_directory(tmp_path)


def test_fsync_directory_of_a_missing_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        fsync_directory(tmp_path / "missing")


def test_several_files_are_written_together_each_failing_alone_and_no_temp_is_left(
        tmp_path: Path) -> None:
    (tmp_path / "blocked.json").mkdir()  # a rename onto a non-empty directory fails
    (tmp_path / "blocked.json" / "inside").touch()
    (tmp_path / "b.json").write_bytes(b"old")
    names = ["a.json", "blocked.json", "b.json", "missing/c.json"]
    errors = replace_all_synced([(tmp_path / n, n.encode()) for n in names])
    assert [type(e).__name__ for e in errors] == [
        "NoneType", "IsADirectoryError", "NoneType", "FileNotFoundError"]
    assert (tmp_path / "a.json").read_bytes() == b"a.json"
    assert (tmp_path / "b.json").read_bytes() == b"b.json"
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.json", "blocked.json"]
