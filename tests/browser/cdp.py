"""Headless Chromium (Debian's package) driven over the DevTools protocol with aiohttp's
websocket client: navigate, evaluate JavaScript, take screenshots. The browser process is
started here and stopped by its PID (killed if it ignores SIGTERM)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from tests.waits import until

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-port=0", "--window-size=1280,900")
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 5


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, executable: str) -> None:
        self.executable = executable
        self._profile = tempfile.TemporaryDirectory(prefix="hookstream-chromium-")
        self._process: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)

    async def __aenter__(self) -> Browser:
        profile = Path(self._profile.name)
        self._process = await asyncio.create_subprocess_exec(
            self.executable, *FLAGS, f"--user-data-dir={profile}", "about:blank",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "TMPDIR": str(profile)})  # its singleton socket dies with it
        try:
            port = await self._devtools_port(profile / "DevToolsActivePort")
            self._session = aiohttp.ClientSession()
            async with self._session.get(f"http://127.0.0.1:{port}/json/list") as response:
                targets = await response.json()
            page = next(t for t in targets if t["type"] == "page")
            self._ws = await self._session.ws_connect(page["webSocketDebuggerUrl"],
                                                      max_msg_size=0)
            await self.send("Page.enable")
            await self.send("Runtime.enable")
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def _devtools_port(self, path: Path) -> int:
        """Chromium writes the port it chose into the profile once it listens."""
        process = self._process
        assert process is not None

        def port() -> int | None:
            if process.returncode is not None:
                raise RuntimeError(f"chromium exited with {process.returncode}")
            return _read_port(path)

        found: int = await until(port, timeout_s=START_TIMEOUT_S, poll_s=0.05,
                                 what="chromium's DevTools port")
        return found

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        assert self._ws is not None
        call_id = next(self._ids)
        await self._ws.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        async for message in self._ws:
            reply = json.loads(message.data)
            if reply.get("id") == call_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
        raise RuntimeError("the DevTools connection closed")

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete'")

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression,
                                 awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, condition: str, timeout_s: float = 15) -> Any:
        """Poll a JavaScript expression until it is truthy; return its value."""
        return await until(lambda: self.evaluate(condition), timeout_s=timeout_s, poll_s=0.1,
                           what=condition)

    async def screenshot(self, path: Path) -> bytes:
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        png = base64.b64decode(shot["data"])
        await asyncio.to_thread(path.write_bytes, png)
        return png

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        self._profile.cleanup()


def _read_port(path: Path) -> int | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return int(text.split()[0]) if text.strip() else None
