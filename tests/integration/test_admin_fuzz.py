"""A property-based fuzz of the whole admin API (issue 13): schemathesis reads the
runtime's own `/openapi.json` and sends generated requests, valid and invalid, to a real
runtime on the session's broker. It fails on any 5xx, any answer that breaks the
document (status, content type, schema, headers), any invalid request that is accepted,
any operation that works without the token, and any request that hangs (a per-request
timeout). The routes of one subscription are fuzzed on a real one (`fz`, `g`), so pause,
resume, update and replay run, not just their 404. Bounded: a fixed seed, the coverage
and fuzzing phases with a per-operation example cap and an overall deadline; at least
`MIN_REQUESTS` requests, counted by the server. The coverage phase (every operation's
boundary and invalid values, about 1,700 requests) runs whole; the random fuzzing phase
stops at `MAX_EXAMPLES` per operation (about 2,050 requests in all, 20 s of CPU; at 100
examples about 2,500, 34 s: generating random documents is what costs).

Not checked: `positive_data_acceptance`, since a document can be valid by the schema and
still refused for what a schema cannot say (an unknown broker, a name already taken)."""

from __future__ import annotations

import asyncio
import copy
import shutil
import sys
from pathlib import Path

import pytest
from aiohttp import web

from actors.delivery.service import DeliveryService
from runtime.host.app import Runtime
from runtime.host.config import parse_config
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import Admin, runtime_config
from tests.waits import SLACK

pytestmark = [pytest.mark.integration, pytest.mark.timeout(200)]  # stretched by SLACK

TOKEN = "fuzz-token"
MIN_REQUESTS = 1000
MAX_EXAMPLES = 50
DEADLINE_S = 150  # hang bounds, stretched by SLACK like every wait of the suite
REQUEST_TIMEOUT_S = 5
CONFIG = '[parameters]\n"path.id" = "fz"\n"path.groupId" = "g"\n'
SUBSCRIPTION = {"id": "fz", "group": {"id": "g"}, "broker": "Kafka",
                "topics": [{"name": "", "partitions": [{"number": 0}]}],
                "subscriptionMethod": {"uri": "http://127.0.0.1:9/fuzz"}}


def _schemathesis() -> list[str]:
    installed = Path(sys.executable).parent / "schemathesis"
    return [str(installed)] if installed.exists() else [shutil.which("schemathesis") or
                                                          "schemathesis"]


async def test_generated_requests_never_get_a_5xx_hang_or_an_answer_off_the_document(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    subscription = copy.deepcopy(SUBSCRIPTION)
    subscription["topics"][0]["name"] = await topic_factory(prefix="fuzz")
    (tmp_path / "schemathesis.toml").write_text(CONFIG)
    runtime = Runtime(parse_config(runtime_config(kafka_bootstrap, tmp_path,
                                                  admin={"token": TOKEN})),
                      services=[DeliveryService])
    answered: list[int] = []

    async def count(request: web.Request, response: web.StreamResponse) -> None:
        answered.append(response.status)

    runtime.admin.app.on_response_prepare.append(count)
    async with runtime:
        assert runtime.admin.openapi.undescribed(runtime.admin.app.router) == []
        await Admin(runtime, token=TOKEN).subscribe(subscription)
        process = await asyncio.create_subprocess_exec(
            *_schemathesis(), "--config-file", str(tmp_path / "schemathesis.toml"),
            "run", f"{runtime.admin.url}/openapi.json",
            "--header", f"Authorization: Bearer {TOKEN}",
            "--checks", "all", "--exclude-checks", "positive_data_acceptance",
            "--phases", "coverage,fuzzing", "--max-examples", str(MAX_EXAMPLES),
            "--request-timeout", str(REQUEST_TIMEOUT_S * SLACK), "--seed", "13", "--workers", "1",
            "--no-shrink", "--suppress-health-check", "all", "--warnings", "off",
            cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        try:
            output, _ = await asyncio.wait_for(process.communicate(), DEADLINE_S * SLACK)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    report = output.decode(errors="replace")
    assert process.returncode == 0, report[-20_000:]
    assert len(answered) >= MIN_REQUESTS, f"only {len(answered)} requests\n{report[-3000:]}"
    assert not [s for s in answered if s >= 500], report[-3000:]
