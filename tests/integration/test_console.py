"""`hookstream status|attempts|pause|resume|replay` (runtime/host/console.py) run as the
command, in a process of its own, against a running runtime: tables and `--json`, the
exit status, the instance found from a config file with its token."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    make_runtime,
    produce,
    subscription,
)
from tests.waits import until

pytestmark = pytest.mark.integration
TOKEN = "console-test-token"


async def hookstream(*argv: str) -> tuple[int, str, str]:
    """Run `python -m runtime ARGV` (the `hookstream` command): exit status, stdout,
    stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runtime", *argv, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "HOOKSTREAM_URL": "",
                                             "HOOKSTREAM_TOKEN": ""})
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def as_json(*argv: str) -> Any:
    code, out, err = await hookstream(*argv, "--json")
    assert code in (0, 1), err
    return json.loads(out)


async def test_status_attempts_pause_resume_and_replay_against_a_running_runtime(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    await produce(kafka_bootstrap, topic, 3)

    async def fails(push: Push) -> int:
        return 503

    good = await Receiver().start()
    bad = await Receiver(fails, answer_body=lambda push, status: b"database is down").start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path,
                                admin={"token": TOKEN}) as runtime:
            admin = Admin(runtime, TOKEN)
            await admin.subscribe(subscription("ok", [{"name": topic}], good.url,
                                               fast_group=fast_group_kwargs))
            await admin.subscribe(subscription("bad", [{"name": topic}], bad.url,
                                               fast_group=fast_group_kwargs,
                                               delayOnErrorMs=200, circuitBreaker={
                                                   "failureRatio": 1.0,
                                                   "minRequests": 1_000_000}))
            await good.wait_for(lambda: len(good.delivered()) == 3)
            await bad.wait_for(lambda: len(bad.pushes) >= 2)
            host, port = runtime.admin.host, runtime.admin.port
            config = tmp_path / "console.toml"
            config.write_text(f'[[brokers]]\nname = "Kafka"\nbootstrap_servers = '
                              f'"{kafka_bootstrap}"\n\n[admin]\nlisten = "{host}:{port}"\n'
                              f'token = "{TOKEN}"\n')  # the instance's own config file
            url = ["--url", runtime.admin.url, "--token", TOKEN]

            async def failing_shown() -> dict[str, Any] | None:  # the summary is gathered
                shown = await as_json("status", "--config", str(config))  # every 2 s
                return shown if shown["totals"]["needing_attention"] else None

            summary = await until(failing_shown, timeout_s=10, poll_s=0.2,
                                  what="the failing subscription in the status")
            assert summary["totals"]["subscriptions"] == 2
            assert [r["key"] for r in summary["items"]] == ["bad_g-bad", "ok_g-ok"]
            assert summary["items"][0]["attention"] == ["failing"]

            code, out, _ = await hookstream("status", *url)
            assert code == 1  # some subscription needs attention
            assert "2 subscriptions (2 running); 1 need attention (1 failing)" in out
            lines = out.splitlines()
            header = next(i for i, line in enumerate(lines) if line.startswith("id "))
            assert lines[header + 2].split()[:4] == ["bad", "g-bad", "running", "failing"]
            code, out, _ = await hookstream("status", "--failing", *url)
            assert "ok" not in [line.split()[0] for line in out.splitlines() if line]

            code, out, err = await hookstream("attempts", "ok", "g-ok", "--offset",
                                              f"{topic}/0/1", *url)
            assert code == 0, err
            assert out.startswith(f"{topic}/0/1 (webhook-id msg_") and ": delivered" in out
            found = await as_json("attempts", "ok", "g-ok", "--offset", f"{topic}/0/1", *url)
            by_id = await as_json("attempts", "ok", "g-ok", "--webhook-id",
                                  found["record"]["webhookId"], *url)
            assert by_id["record"]["offset"] == 1 and by_id["state"] == "delivered"
            code, out, _ = await hookstream("attempts", "bad", "g-bad", "--failed", *url)
            assert code == 0 and "database is down" in out and "503" in out

            paused = await as_json("pause", "ok", "g-ok", *url)
            assert paused["status"]["state"] == "paused"
            code, out, _ = await hookstream("resume", "ok", "g-ok", *url)
            assert code == 0 and out.startswith("ok / g-ok: ")
            assert runtime.service("delivery").status["ok_g-ok"].state != "paused"
            code, out, err = await hookstream("replay", "ok", "g-ok", "--topic", topic,
                                              "--partition", "0", "--from-offset", "0", *url)
            assert code == 0, err
            assert out.startswith("replay ")

            code, _, err = await hookstream("pause", "nope", "g-nope", *url)
            assert code == 1 and "404 subscription not found" in err
            code, _, err = await hookstream("attempts", "ok", "g-ok", "--offset", "x", *url)
            assert code == 2 and "TOPIC/PARTITION/OFFSET" in err
            code, _, err = await hookstream("status", "--url", runtime.admin.url)
            assert code == 1 and "401" in err  # no token
    finally:
        await good.stop()
        await bad.stop()


async def test_no_instance_is_exit_status_2_saying_where_it_looked() -> None:
    code, _, err = await hookstream("status", "--url", "http://127.0.0.1:9")
    assert code == 2 and "no answer from http://127.0.0.1:9" in err


def documented_commands() -> list[list[str]]:
    """docs/admin-api.md's `hookstream` block, a command a line, comments dropped."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "admin-api.md").read_text()
    block = page.split("## From a terminal", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].split() for line in block.splitlines() if line.strip()]


async def test_the_documented_console_commands_run_as_written(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    """Issue 36: each command of docs/admin-api.md's block, against a running runtime
    with the subscription it names (`demo demo` on `orders`, with a dead-letter topic);
    only the names the test cannot fix are replaced: the topics, the config file, the
    webhook-id."""
    orders, dead = await topic_factory(partitions=1), await topic_factory(partitions=1)
    await produce(kafka_bootstrap, orders, 101)  # offsets 17 and 100 exist
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe({**subscription(
                "demo", [{"name": orders}], receiver.url, group="demo",
                fast_group=fast_group_kwargs, deadLetterTopic=dead)})
            await receiver.wait_for(lambda: len(receiver.delivered()) == 101)
            found = await as_json("attempts", "demo", "demo", "--offset", f"{orders}/0/17",
                                  "--url", runtime.admin.url)
            config = tmp_path / "demo.toml"
            config.write_text(f'[[brokers]]\nname = "Kafka"\nbootstrap_servers = '
                              f'"{kafka_bootstrap}"\n\n[admin]\nlisten = '
                              f'"{runtime.admin.host}:{runtime.admin.port}"\n')
            given = {"config/demo.toml": str(config), "msg_...": found["record"]["webhookId"]}
            commands = documented_commands()
            assert len(commands) == 9 and all(c[0] == "hookstream" for c in commands)
            for command in commands:
                argv = [given.get(word, word).replace("orders", orders)
                        for word in command[1:]]
                process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "runtime", *argv, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    env={**os.environ, "HOOKSTREAM_URL": runtime.admin.url,
                         "HOOKSTREAM_TOKEN": ""})
                out, err = await process.communicate()
                assert process.returncode == 0, (command, out.decode(), err.decode())
                assert out.strip(), command
    finally:
        await receiver.stop()
