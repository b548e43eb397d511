"""Checks before anything starts, so that a process that cannot run here says why in one
line (and the CLI exits 2) instead of starting a broker and then failing with a traceback.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

from runtime.errors import StartupError
from runtime.host.config import Config


def preflight(config: Config) -> None:
    host, port = config.admin.host_port
    check_listen(host, port)
    check_directory(config.persistence.dir, "persistence.dir")
    if config.journal.enabled:
        check_directory(config.journal.dir, "journal.dir")


def check_listen(host: str, port: int) -> None:
    """The admin address can be bound now (a later bind can still lose a race; the
    runtime reports that the same way)."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise listen_error(host, port, exc) from None


def listen_error(host: str, port: int, exc: OSError) -> StartupError:
    if exc.errno == errno.EADDRINUSE:
        why = "the port is in use by another process"
    elif exc.errno == errno.EADDRNOTAVAIL:
        why = "no such address on this machine"
    else:
        why = exc.strerror or repr(exc)
    return StartupError(f"admin.listen: cannot listen on {host}:{port}: {why}")


def check_directory(path: str, key: str) -> None:
    """`path` exists (or can be made) and we can read, write and list it."""
    directory = Path(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"{key}: cannot create {directory}: {exc.strerror}") from None
    if not directory.is_dir():
        raise StartupError(f"{key}: {directory} is not a directory")
    if not os.access(directory, os.R_OK | os.W_OK | os.X_OK):
        raise StartupError(f"{key}: {directory} is not readable and writable by this user")
