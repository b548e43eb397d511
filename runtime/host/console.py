"""`hookstream status|attempts|pause|resume|replay`: the admin API from a terminal, against
a running instance (issue 36). Readable tables by default, `--json` for scripts (the
API's `data`, unchanged).

    hookstream status [--failing] [--search TEXT] [--state STATE] [--limit N]
    hookstream attempts SUB GROUP (--offset TOPIC/PARTITION/OFFSET | --webhook-id ID
                                   | --failed [--limit N])
    hookstream pause SUB GROUP
    hookstream resume SUB GROUP
    hookstream replay SUB GROUP (--dead-letters | --topic TOPIC [--partition P]
                                 [--from-offset N] [--to-offset N]) [--limit N]

Where the instance is: `--url` and `--token`, else `HOOKSTREAM_URL` and
`HOOKSTREAM_TOKEN`, else `--config CONFIG.toml`'s `[admin]` (`listen`, `token`, https
with `tls_certfile`), else `http://127.0.0.1:8080`. A listen address of all interfaces
(`0.0.0.0`, `[::]`) is reached on loopback.

Exit status: 0 done; 1 the API refused (its reason on stderr) or, for `status`, some
subscription needs attention; 2 a usage error or no answer from the instance.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, TextIO
from urllib.parse import quote, urlencode

import aiohttp

from runtime.errors import ConfigError
from runtime.host.config import load_config

JsonObject = dict[str, Any]
"""A JSON object of the admin API, as decoded."""

DEFAULT_URL: Final = "http://127.0.0.1:8080"
TIMEOUT_S: Final = 30
CELL_CHARS: Final = 60
"""A table's cell is cut to this many characters (`--json` has everything)."""


class Refused(Exception):
    """The API answered an error (its status, reason and details)."""


class Unreachable(Exception):
    """No answer from the instance."""


class UsageError(Exception):
    """The command line names something the API cannot be asked (a bad `--offset`)."""


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_argument_group("the instance")
    where.add_argument("--url", help="admin API address (HOOKSTREAM_URL)")
    where.add_argument("--token", help="admin token (HOOKSTREAM_TOKEN)")
    where.add_argument("--config", help="read [admin] listen and token from this file")
    common.add_argument("--json", action="store_true", help="the API's answer as JSON")
    top = argparse.ArgumentParser(prog="hookstream", description="The admin API from a "
                                  "terminal (runtime/host/console.py).")
    sub = top.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", parents=[common],
                            help="every subscription: totals, origins, attention first")
    status.add_argument("--failing", action="store_true",
                        help="only those needing attention")
    status.add_argument("--search", default="", help="in id, group, topic, endpoint, state")
    status.add_argument("--state", default="", help="a state or a reason for attention")
    status.add_argument("--limit", type=int, default=50)
    attempts = sub.add_parser("attempts", parents=[common], help="what happened to a record")
    _pair(attempts)
    which = attempts.add_mutually_exclusive_group(required=True)
    which.add_argument("--offset", metavar="TOPIC/PARTITION/OFFSET")
    which.add_argument("--webhook-id")
    which.add_argument("--failed", action="store_true", help="the latest failed attempts")
    attempts.add_argument("--limit", type=int, default=None)
    for verb, what in (("pause", "stop fetching (in-flight pushes finish, commit)"),
                       ("resume", "start again from the committed positions")):
        _pair(sub.add_parser(verb, parents=[common], help=what))
    replay = sub.add_parser("replay", parents=[common], help="deliver records again")
    _pair(replay)
    source = replay.add_mutually_exclusive_group(required=True)
    source.add_argument("--dead-letters", action="store_true",
                        help="the subscription's dead-letter topic")
    source.add_argument("--topic", help="a topic the subscription reads")
    replay.add_argument("--partition", type=int)
    replay.add_argument("--from-offset", type=int)
    replay.add_argument("--to-offset", type=int)
    replay.add_argument("--limit", type=int)
    return top


def _pair(command: argparse.ArgumentParser) -> None:
    command.add_argument("id", help="the subscription's id")
    command.add_argument("group", help="its group.id")


def where(args: argparse.Namespace) -> tuple[str, str]:
    """(admin URL, token) from the flags, the environment, a config file, the default."""
    url = args.url or os.environ.get("HOOKSTREAM_URL") or None  # empty: not set
    token = args.token if args.token is not None else (
        os.environ.get("HOOKSTREAM_TOKEN") or None)
    if args.config and (url is None or token is None):
        admin = load_config(args.config).admin
        host, port = admin.host_port
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
        scheme = "https" if admin.tls_certfile else "http"
        url = url or f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"
        token = token if token is not None else admin.token
    return (url or DEFAULT_URL).rstrip("/"), token or ""


async def call(url: str, token: str, method: str, path: str,
               body: JsonObject | None = None) -> Any:
    """The `data` of the API's answer; `Refused` with its reason, `Unreachable`."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    try:
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session, \
                session.request(method, url + path, json=body) as answer:
            reply = await answer.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise Unreachable(f"{url}: {type(exc).__name__}: {exc}") from None
    if not isinstance(reply, dict) or answer.status >= 400:
        why = reply if not isinstance(reply, dict) else \
            f"{reply.get('reason', '')}: {reply.get('details', '')}".strip(": ")
        raise Refused(f"{answer.status} {why}")
    return reply.get("data")


def one(sub_id: str, group: str) -> str:
    return f"/broker/subscription/{quote(sub_id, safe='')}/{quote(group, safe='')}"


async def run(args: argparse.Namespace, out: TextIO) -> int:
    url, token = where(args)
    if args.command == "status":
        query = {"limit": str(args.limit), **({"q": args.search} if args.search else {}),
                 **({"state": args.state} if args.state else {}),
                 **({"attention": "true"} if args.failing else {})}
        data = await call(url, token, "GET", "/broker/summary?" + urlencode(query))
        out.write(_json(data) if args.json else show_status(data))
        return 1 if data["totals"]["needing_attention"] else 0
    path = one(args.id, args.group)
    if args.command == "attempts":
        data = await call(url, token, "GET", path + "/attempts?" + attempts_query(args))
        out.write(_json(data) if args.json else show_attempts(data))
        return 0
    if args.command in ("pause", "resume"):
        data = await call(url, token, "POST", f"{path}/{args.command}")
        state = data["status"]["state"]
        out.write(_json(data) if args.json else f"{args.id} / {args.group}: {state}\n")
        return 0
    data = await call(url, token, "POST", path + "/replay", replay_body(args))
    progress = await call(url, token, "GET", f"{path}/replay/{quote(data['replayId'])}")
    out.write(_json(progress) if args.json else
              f"replay {progress['replayId']}: {progress['state']} (follow it: GET "
              f"{url}{path}/replay/{progress['replayId']})\n")
    return 0


def attempts_query(args: argparse.Namespace) -> str:
    if args.failed:
        return urlencode({"failed": "true", **({"limit": args.limit} if args.limit else {})})
    if args.webhook_id:
        return urlencode({"webhookId": args.webhook_id})
    topic, _, rest = args.offset.rpartition("/")
    topic, _, partition = topic.rpartition("/")
    if not topic or not partition.isdecimal() or not rest.isdecimal():
        raise UsageError(f"--offset {args.offset!r}: expected TOPIC/PARTITION/OFFSET")
    return urlencode({"topic": topic, "partition": partition, "offset": rest})


def replay_body(args: argparse.Namespace) -> JsonObject:
    body: JsonObject = {"source": "deadLetter" if args.dead_letters else "topic"}
    for name, value in (("topic", args.topic), ("partition", args.partition),
                        ("fromOffset", args.from_offset), ("toOffset", args.to_offset),
                        ("limit", args.limit)):
        if value is not None:
            body[name] = value
    return body


# -- tables --------------------------------------------------------------------------------
def table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned; None as "-"."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(head)]
    right = [all(_numeric(row[i]) for row in rows) and bool(rows) for i in range(len(head))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if r else v.ljust(w)
                         for v, w, r in zip(values, widths, right, strict=True)).rstrip()

    return "\n".join([line(head), line(["-" * w for w in widths]),
                      *(line(r) for r in cells)]) + "\n"


def _cell(value: object) -> str:
    text = "-" if value is None else str(value)
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS - 1] + "…"


def _numeric(value: object) -> bool:
    return value is None or isinstance(value, (int, float))


def show_status(data: JsonObject) -> str:
    t = data["totals"]
    states = ", ".join(f"{n} {s}" for s, n in t["states"].items())
    why = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in t["attention"].items() if n)
    runtime = data.get("runtime") or {}
    count = t["subscriptions"]
    lines = [f"{count} subscription{'' if count == 1 else 's'} ({states or 'none'}); "
             f"{t['needing_attention']} need attention" + (f" ({why})" if why else ""),
             f"lag {t['lag']}, delivered {t['delivered']}, failed attempts "
             f"{t['failed_attempts']}, dead-lettered {t['dead_lettered']}",
             "ready" if runtime.get("ready") else
             "not ready: " + "; ".join(runtime.get("reasons", []))
             + (f" (and {runtime['reasons_total'] - len(runtime['reasons'])} more)"
                if runtime.get("reasons_total", 0) > len(runtime.get("reasons", [])) else ""),
             ""]
    unusual = [o for o in data["origins"] if o["breaker"] != "closed" or o["throttled_until"]]
    if unusual:
        lines.append(table(["origin", "breaker", "opened", "next probe", "throttled until"],
                           [[o["origin"], o["breaker"], _time(o["opened_at"]),
                             _time(o["probe_at"]), _time(o["throttled_until"])]
                            for o in unusual]))
    refused = [[r["id"], r["group"], f"{c['topic']}/{c['partition']}", c["position"],
                c["accepted"]] for r in data["items"] for c in r.get("refused_commits", [])]
    if refused:
        lines.append("commits Kafka refuses (a live consumer in the group?):\n" + table(
            ["id", "group", "partition", "refused", "accepted"], refused))
    rows = [[r["id"], r["group"], r["state"], ",".join(r["attention"]), r["lag"],
             r["delivered"], r["failed_attempts"], r["dead_lettered"], r["endpoint"]]
            for r in data["items"]]
    lines.append(table(["id", "group", "state", "attention", "lag", "delivered", "failed",
                        "dead", "endpoint"], rows) if rows else "no subscription matches\n")
    shown = len(data["items"])
    if data["matched"] > shown:
        lines.append(f"{shown} of {data['matched']} shown (--limit, --search, --state)\n")
    return "\n".join(lines)


def show_attempts(data: JsonObject) -> str:
    lines = []
    record = data.get("record")
    if record is not None:
        lines.append(f"{record['topic']}/{record['partition']}/{record['offset']}"
                     f" (webhook-id {record.get('webhookId') or '-'}): {data['state']}")
    if data.get("reason"):
        lines.append(str(data["reason"]))
    attempts = data.get("attempts", [])

    def name(a: JsonObject) -> list[object]:
        r = a.get("record")
        return [f"{r['topic']}/{r['partition']}/{r['offset']}"] if record is None and r else []

    head = (["record"] if record is None else []) + ["sent", "attempt", "status",
                                                     "latency ms", "error", "response"]
    lines.append(table(head, [[*name(a), _time(a["at"]), a["attempt"], a["status"],
                               a["latencyMs"], a["error"], a["response"]]
                              for a in attempts]) if attempts else "no attempts\n")
    return "\n".join(lines)


def _time(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000).isoformat(
        sep=" ", timespec="seconds")


def _json(data: object) -> str:
    return json.dumps(data, indent=2) + "\n"


def main(argv: list[str], out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse printed why
        return int(exc.code or 0)
    try:
        return asyncio.run(run(args, out))
    except (UsageError, ConfigError) as exc:
        print(f"hookstream {args.command}: {exc}", file=err)
        return 2
    except Unreachable as exc:
        print(f"hookstream {args.command}: no answer from {exc}", file=err)
        return 2
    except Refused as exc:
        print(f"hookstream {args.command}: refused: {exc}", file=err)
        return 1
