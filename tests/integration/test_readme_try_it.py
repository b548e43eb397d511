"""README.md's "Try it" as a new user runs it (issue 36): the demo config, the receiver
one-liner, the curl subscribe, the producer one-liner, each README block run by bash as
written except for the ports (the demo's fixed 8080, 9092 and the receiver's 9000 become
free ones, so the test runs beside anything) and `.venv/bin/python` (this interpreter).
The receiver prints the line the README promises, `hookstream status` and `hookstream
attempts` answer what the README says they do, and the runtime stops with exit 0 on
Ctrl-C."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from runtime.kafka.broker import free_port
from tests.waits import until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60
RECORD_TIMEOUT_S = 60
BANNER = re.compile(r"^(=+ Running on .*|\(Press CTRL\+C to quit\))$")


def try_it_blocks() -> list[str]:
    """The `sh` blocks of the "Try it" section, in order."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Try it"):]
    section = section[:section.index("\n### ", 1)]
    return re.findall(r"^```sh\n(.*?)^```", section, re.S | re.M)


def promised_line() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"The receiver prints `([^`]+)`", text)
    assert found, "the README says what the receiver prints"
    return found.group(1)


async def until_answers(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        async def answers() -> bool:
            try:
                async with session.get(url) as answer:
                    return answer.status == 200
            except aiohttp.ClientError:
                return False  # not listening yet

        await until(answers, timeout_s=START_TIMEOUT_S, what=f"{url} answers 200",
                    poll_s=0.1)


async def test_try_it_delivers_the_record_to_the_receiver(tmp_path: Path) -> None:
    receiver_block, subscribe_block, produce_block = try_it_blocks()
    broker, admin, hook = free_port(), free_port(), free_port()

    def ported(block: str) -> str:
        return (block.replace(".venv/bin/python", sys.executable)
                .replace("8080", str(admin)).replace("9092", str(broker))
                .replace("9000", str(hook)))

    demo = (ROOT / "config" / "demo.toml").read_text()
    (tmp_path / "demo.toml").write_text(ported(demo))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    runtime = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runtime", "demo.toml", cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    receiver = await asyncio.create_subprocess_exec(
        "bash", "-c", ported(receiver_block), cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True)
    try:
        await until_answers(f"http://127.0.0.1:{admin}/healthz")
        for block in (subscribe_block, produce_block):
            done = await asyncio.create_subprocess_exec(
                "bash", "-c", ported(block), cwd=tmp_path, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await done.communicate()
            assert done.returncode == 0, err.decode()
            if block is subscribe_block:
                assert b'"success":true' in out, out
        assert receiver.stdout is not None
        printed = ""
        async with asyncio.timeout(RECORD_TIMEOUT_S):
            while not printed or BANNER.match(printed):  # aiohttp's start banner first
                printed = (await receiver.stdout.readline()).decode().strip()
        assert printed == promised_line()
        # what the README says to run next (`hookstream` is `python -m runtime`)
        console = {**env, "HOOKSTREAM_URL": f"http://127.0.0.1:{admin}"}
        for command, expected in (("status", "\ndemo demo running "),
                                  ("attempts demo demo --offset orders/0/0",
                                   ": delivered")):
            asked = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "runtime", *command.split(), env=console,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asked.communicate()
            assert asked.returncode == 0, err.decode()
            assert expected in re.sub(" +", " ", out.decode()), out.decode()
        runtime.send_signal(signal.SIGINT)  # Ctrl-C
        async with asyncio.timeout(START_TIMEOUT_S):
            _, logged = await runtime.communicate()
        assert runtime.returncode == 0, logged.decode()[-2000:]
        assert b"Traceback" not in logged
    finally:
        os.killpg(receiver.pid, signal.SIGTERM)
        await receiver.wait()
        if runtime.returncode is None:
            runtime.kill()
            await runtime.wait()
