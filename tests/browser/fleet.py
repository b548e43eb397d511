"""Many subscriptions for the status page's tests and bench/status_page.py: posted through
the admin API as a user would, a bounded number at a time; and what the page measures of
its own refresh rounds (`window.hookstreamRefreshes`, runtime/host/status_page.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aiohttp

from tests.browser.cdp import Browser

POSTS_AT_ONCE = 16


async def post_all(admin_url: str, documents: Sequence[dict[str, Any]],
                   token: str = "", at_once: int = POSTS_AT_ONCE) -> None:
    """POST every document to `/broker/subscription`, `at_once` in flight; raise on the
    first refusal."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    gate = asyncio.Semaphore(at_once)
    async with aiohttp.ClientSession(headers=headers) as session:

        async def post(document: dict[str, Any]) -> None:
            async with gate, session.post(admin_url + "/broker/subscription",
                                          json=document) as answer:
                if answer.status != 200:
                    raise AssertionError(f"{document['id']}: {answer.status} "
                                         f"{await answer.text()}")

        await asyncio.gather(*(post(document) for document in documents))


ROUNDS = "window.hookstreamRefreshes.filter(r => r.end != null)"
WEIGHTS = f"""{ROUNDS}.map(r => performance.getEntriesByType('resource')
  .filter(e => e.startTime >= r.start && e.startTime <= r.end)
  .reduce((sum, e) => sum + (e.transferSize || e.encodedBodySize), 0))"""
"""The bytes each finished round fetched (headers and body as sent)."""
GAPS = f"{ROUNDS}.slice(1).map((r, i) => r.start - {ROUNDS}[i].end)"
"""Between the end of each round and the start of the next (never negative: no overlap)."""


async def rounds_done(browser: Browser, count: int, timeout_s: float = 60) -> None:
    await browser.wait_for(f"{ROUNDS}.length >= {count}", timeout_s=timeout_s)


async def weights(browser: Browser) -> list[int]:
    found: list[int] = await browser.evaluate(WEIGHTS)
    return found


async def gaps(browser: Browser) -> list[float]:
    found: list[float] = await browser.evaluate(GAPS)
    return found
