"""Start-up errors are one clear line and exit code 2, never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

CONFIG = """
[[brokers]]
name = "Kafka"
bootstrap_servers = "127.0.0.1:9"
[admin]
listen = "{listen}"
[persistence]
dir = "{persist}"
[journal]
dir = "{journal}"
"""


def _config(tmp_path: Path, listen: str = "127.0.0.1:0", persist: str = "") -> Path:
    path = tmp_path / "runtime.toml"
    path.write_text(CONFIG.format(listen=listen, persist=persist or tmp_path / "persist",
                                  journal=tmp_path / "journal"))
    return path


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def _one_line_error(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for text in expected:
        assert text in lines[0]


def test_a_bad_listen_address_fails_check_naming_the_key(tmp_path: Path) -> None:
    result = _run("check", _config(tmp_path, listen="localhost"), cwd=tmp_path)
    _one_line_error(result, "admin.listen", "'localhost'")


def test_a_port_in_use_is_one_line_and_exit_code_2(tmp_path: Path, busy_port: int) -> None:
    result = _run(_config(tmp_path, listen=f"127.0.0.1:{busy_port}"), cwd=tmp_path)
    _one_line_error(result, "admin.listen", str(busy_port), "in use")


def test_a_persistence_directory_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = _run(_config(tmp_path, persist=str(blocker / "persist")), cwd=tmp_path)
    _one_line_error(result, "persistence.dir", "cannot create")
