"""SASL/OAUTHBEARER tokens for aiokafka: read from a file, or printed by a command.

aiokafka asks its `sasl_oauth_token_provider` for a token each time a connection
authenticates. Both providers here leave getting and refreshing the token to something
outside the runtime: a sidecar that rewrites a file (Kubernetes projected service account
tokens, Vault agent), or a command that prints one (`gcloud auth print-access-token`, a
cloud CLI, a script). Neither knows the token's lifetime, so neither keeps a token long.

- `FileTokenProvider` reads the file on every call: a rotated file is used at the next
  connection, and reading a small file costs less than any cache bookkeeping.
- `CommandTokenProvider` runs the command, at most once every `reuse_s` (default 60 s): a
  runtime with many subscriptions opens many connections at once, and one run serves them
  all. Concurrent callers wait for the same run.

A token that cannot be had raises `TokenError`, a `KafkaError`: aiokafka then treats the
connection as failed, logs the reason and tries again later, as for a broker that is down.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from aiokafka.abc import AbstractTokenProvider
from aiokafka.errors import KafkaError

COMMAND_TIMEOUT_S = 10.0
COMMAND_REUSE_S = 60.0
_STDERR_TAIL_CHARS = 300


class TokenError(KafkaError):  # type: ignore[misc]  # aiokafka is untyped
    """No OAUTHBEARER token: the file is missing or empty, or the command failed."""

    retriable = True


class FileTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """The token is the content of `path` (surrounding whitespace removed)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    async def token(self) -> str:
        try:
            text = await asyncio.to_thread(self.path.read_text, encoding="utf-8")
        except OSError as exc:
            raise TokenError(f"cannot read the token file {self.path}: "
                             f"{exc.strerror or exc}") from None
        token = text.strip()
        if not token:
            raise TokenError(f"the token file {self.path} is empty")
        return token

    def __repr__(self) -> str:
        return f"<FileTokenProvider {self.path}>"


class CommandTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """The token is what `argv` prints on stdout (surrounding whitespace removed).

    Run without a shell; exit status 0 required; killed after `timeout_s`.
    """

    def __init__(self, argv: Sequence[str], *, timeout_s: float = COMMAND_TIMEOUT_S,
                 reuse_s: float = COMMAND_REUSE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not argv:
            raise ValueError("CommandTokenProvider needs a command")
        self.argv = tuple(argv)
        self.timeout_s = timeout_s
        self.reuse_s = reuse_s
        self.runs = 0
        self._clock = clock
        self._token = ""
        self._fetched_at = 0.0
        self._lock = asyncio.Lock()
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    async def token(self) -> str:
        async with self._lock_of_this_loop():
            if not self._token or self._clock() - self._fetched_at >= self.reuse_s:
                self._token = await self._run()
                self._fetched_at = self._clock()
            return self._token

    def _lock_of_this_loop(self) -> asyncio.Lock:
        # The provider is shared through the process-wide table (runtime.kafka.security),
        # and an asyncio.Lock that ever waited is bound to its loop: one lock per loop.
        loop = asyncio.get_running_loop()
        if self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def _run(self) -> str:
        self.runs += 1
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except OSError as exc:
            raise TokenError(f"cannot run the token command {self.argv[0]!r}: "
                             f"{exc.strerror or exc}") from None
        out, err = await self._communicate(process)
        if process.returncode != 0:
            tail = err.decode("utf-8", "replace").strip()[-_STDERR_TAIL_CHARS:]
            raise TokenError(f"the token command {self.argv[0]!r} exited with "
                             f"{process.returncode}: {tail or '(no stderr)'}")
        token = out.decode("utf-8", "replace").strip()
        if not token:
            raise TokenError(f"the token command {self.argv[0]!r} printed nothing")
        return token

    async def _communicate(self, process: asyncio.subprocess.Process) -> tuple[bytes, bytes]:
        try:
            async with asyncio.timeout(self.timeout_s):
                return await process.communicate()
        except BaseException as exc:  # timed out or cancelled: leave no child behind
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            if isinstance(exc, TimeoutError):
                raise TokenError(f"the token command {self.argv[0]!r} did not finish "
                                 f"within {self.timeout_s}s") from None
            raise

    def __repr__(self) -> str:
        return f"<CommandTokenProvider {self.argv[0]!r} runs={self.runs}>"
