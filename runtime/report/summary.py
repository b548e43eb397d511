"""The report's summary: a JSON document and its Markdown rendering (plain Python, no Spark).

`summary.json` always has the totals `delivered` (distinct records delivered), `lost`,
`duplicates` (extra successful deliveries) and `dead_lettered`; the definitions are in
`runtime.report.transforms`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

AUDIT_OFFSETS_SHOWN = 100  # per partition and problem in summary.json; tables list all
MARKDOWN_OFFSETS_SHOWN = 20
DEAD_LETTERS_SHOWN = 100  # in summary.json; the dead_letters table lists all
MARKDOWN_DEAD_LETTERS_SHOWN = 20
CONSOLE_DEAD_LETTERS_SHOWN = 10
SNIPPET_CHARS = 120  # of an answer, in summary.md and on stdout; the tables keep it whole
NAMES_SHOWN = 3  # skipped segments named on stdout


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


def _count(counts: Mapping[str, tuple[int, int]], event_type: str) -> int:
    return counts.get(event_type, (0, 0))[0]


def build_summary(
    *,
    journal: str,
    segments: Mapping[str, int],
    events: int,
    malformed_lines: int,
    time_range: tuple[int | None, int | None],
    bucket_ms: int,
    totals: Mapping[str, int],
    event_counts: Mapping[str, tuple[int, int]],
    subscriptions: Sequence[Mapping[str, Any]],
    audit_rows: Sequence[Mapping[str, Any]],
    outputs: Mapping[str, Sequence[str]],
    dead_letters: Sequence[Mapping[str, Any]] = (),
    replays: Sequence[Mapping[str, Any]] = (),
    instances: Sequence[Mapping[str, Any]] = (),
    gap: Mapping[str, int] | None = None,
    skipped_segments: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Assemble summary.json. `event_counts` maps type -> (events, sum of `count`);
    `dead_letters` and `replays` are the rows of those tables (runtime/report/tables.py);
    `gap` the journal's gaps (runtime/report/gaps.py: `dropped`, `from_ms`, `to_ms`);
    `skipped_segments` the segments a live writer held (`path`, `bytes`)."""
    first, last = time_range
    problems = [_audit_entry(row) for row in audit_rows
                if row["lost"] or row["duplicates"] or row.get("unknown")]
    return {
        "journal": journal,
        "generated_at": dt.datetime.now(tz=dt.UTC).isoformat(timespec="seconds"),
        "segments": dict(segments),
        "events": events,
        "malformed_lines": malformed_lines,
        "skipped_segments": [dict(row) for row in skipped_segments],
        "first_event": _iso(first),
        "last_event": _iso(last),
        "span_s": (last - first) / 1000 if first is not None and last is not None else 0.0,
        "throughput_bucket_ms": bucket_ms,
        **{key: int(value) for key, value in totals.items()},
        "lost_committed_past": sum(int(row["lost_committed_past"]) for row in audit_rows),
        "actor_crashes": _count(event_counts, "actor_crashed"),
        "actor_restarts": _count(event_counts, "actor_restarted"),
        "partition_assignments": _count(event_counts, "partition_assigned"),
        "partition_revocations": _count(event_counts, "partition_revoked"),
        "delay_forwarded": _count(event_counts, "delay_forwarded"),
        "journal_dropped": event_counts.get("journal_dropped", (0, 0))[1],
        "journal_gap": None if gap is None else {
            "dropped": gap["dropped"], "from": _iso(gap["from_ms"]), "to": _iso(gap["to_ms"]),
            "unknown": int(totals.get("unknown", 0))},
        "event_types": {t: n for t, (n, _) in sorted(event_counts.items())},
        "replayed": sum(int(r["delivered"]) for r in replays),
        "replay_failed": sum(int(r["failed"]) for r in replays),
        "subscriptions": [dict(row) for row in subscriptions],
        "audit": problems,
        "dead_letters": [dict(row) for row in dead_letters[:DEAD_LETTERS_SHOWN]],
        "dead_letters_truncated": len(dead_letters) > DEAD_LETTERS_SHOWN,
        "replays": [dict(row) for row in replays],
        "instances": [dict(row) for row in instances],
        "outputs": {key: list(value) for key, value in outputs.items()},
    }


def _audit_entry(row: Mapping[str, Any]) -> dict[str, Any]:
    lost, dups = list(row["lost_offsets"]), list(row["duplicate_offsets"])
    return {
        "subscription": row["subscription"],
        "topic": row["topic"],
        "partition": row["partition"],
        "lost": row["lost"],
        "unknown": row.get("unknown", 0),
        "lost_committed_past": row["lost_committed_past"],
        "lost_offsets": lost[:AUDIT_OFFSETS_SHOWN],
        "duplicates": row["duplicates"],
        "duplicated_offsets": len(dups),
        "duplicate_offsets": dups[:AUDIT_OFFSETS_SHOWN],
        "offsets_truncated": len(lost) > AUDIT_OFFSETS_SHOWN or len(dups) > AUDIT_OFFSETS_SHOWN,
    }


def render_markdown(summary: Mapping[str, Any]) -> str:
    """A short human summary of summary.json."""
    parts = [
        _header(summary),
        _totals_table(summary),
        _subscriptions_table(summary["subscriptions"]),
        _audit_section(summary["audit"]),
        _dead_letters_section(summary),
        _replays_section(summary.get("replays", [])),
        _instances_section(summary.get("instances", [])),
        _files_section(summary["outputs"]),
    ]
    return "\n\n".join(part for part in parts if part) + "\n"


def _header(s: Mapping[str, Any]) -> str:
    seg = s["segments"]
    lines = [
        "# Delivery report",
        "",
        f"Journal `{s['journal']}`: {s['events']:,} events from {seg['closed']} closed "
        f"segment(s) and {seg['recovered_tails']} recovered crash tail(s); "
        f"{s['malformed_lines']} malformed line(s) skipped.",
        f"Events from {s['first_event']} to {s['last_event']} ({s['span_s']:.1f} s).",
    ]
    if seg.get("skipped_live"):
        lines.append(f"{seg['skipped_live']} segment(s) still being written were not read.")
    follow = s.get("follow")
    if follow:
        lines.append(
            f"Live (`--follow`), as of micro-batch {follow['batch']}: {s['in_flight']:,} "
            f"record(s) in flight (fetched less than {follow['grace_s']:g} s before the "
            "newest event, neither delivered nor dead-lettered yet) are not counted as lost.")
    gap = s.get("journal_gap")
    if gap:
        lines.append(
            f"**The journal dropped {gap['dropped']:,} event(s)** (journal_dropped, a write "
            f"error or unencodable events) from {gap['from']} to {gap['to']}: "
            f"{gap['unknown']:,} record(s) fetched by then with no outcome journaled are "
            "**unknown: journal gap**, not lost (their delivery may be among the dropped "
            "events); records whose every event was dropped are not counted at all.")
    elif s["journal_dropped"]:
        lines.append(
            f"**The journal dropped {s['journal_dropped']:,} event(s)** (journal_dropped): "
            "records whose events were dropped may show up as lost or undercounted."
        )
    return "\n".join(lines)


def _totals_table(s: Mapping[str, Any]) -> str:
    rows = [
        ("delivered records (distinct)", s["delivered"]),
        ("lost (fetched, never delivered nor dead-lettered)", s["lost"]),
        ("unknown: journal gap (no outcome journaled, the journal dropped events)",
         s.get("unknown", 0)),
        ("  of which committed past (lost for good)", s["lost_committed_past"]),
        ("duplicates (extra successful deliveries)", s["duplicates"]),
        ("dead-lettered records", s["dead_lettered"]),
        ("replayed deliveries / failed", f"{s['replayed']:,} / {s['replay_failed']:,}"),
        ("records fetched", s["records_fetched"]),
        ("HTTP attempts / failed", f"{s['attempts']:,} / {s['failed_attempts']:,}"),
        ("retries scheduled", s["retries"]),
        ("actor crashes / restarts", f"{s['actor_crashes']} / {s['actor_restarts']}"),
        ("partitions assigned / revoked",
         f"{s['partition_assignments']} / {s['partition_revocations']}"),
    ]
    body = [f"| {name} | {_fmt(value)} |" for name, value in rows]
    return "## Totals\n\n" + _table(["", ""], "l r", body)


def _table(columns: Sequence[str], align: str, body: Sequence[str]) -> str:
    """A Markdown table; `align` has one `l` or `r` per column, so the rule cannot drift
    from the header."""
    rule = "".join("|---:" if a == "r" else "|---" for a in align.split()) + "|"
    return "\n".join([f"| {' | '.join(columns)} |", rule, *body])


def _subscriptions_table(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return ""
    columns = ["subscription", "endpoint", "delivered", "attempts", "retries",
               "dead letters", "lost", "duplicates", "end-to-end p50/p95/p99 ms",
               "added p50/p95/p99 ms"]
    body = [
        f"| {r['subscription']} | {r['endpoint']} | {_fmt(r['delivered'])} | "
        f"{_fmt(r['attempts'])} | {_fmt(r['retries'])} | {_fmt(r['dead_lettered'])} | "
        f"{_fmt(r['lost'])} | {_fmt(r['duplicates'])} | {_pcts(r, 'e2e')} | {_pcts(r, 'added')} |"
        for r in rows
    ]
    table = _table(columns, "l l r r r r r r r r", body)
    return "## Per subscription and endpoint\n\n" + table


def _audit_section(problems: Sequence[Mapping[str, Any]]) -> str:
    if not problems:
        return "## Audit\n\nNo lost and no duplicated offsets."
    columns = ["subscription", "topic-partition", "lost offsets", "unknown: journal gap",
               "duplicated offsets"]
    body = [
        f"| {p['subscription']} | {p['topic']}-{p['partition']} | "
        f"{_offsets(p['lost_offsets'], p['lost'])} | {_fmt(p.get('unknown') or None)} | "
        f"{_offsets(p['duplicate_offsets'], p['duplicated_offsets'])} |"
        for p in problems
    ]
    note = "Full lists: tables `audit` and `audit_offsets`."
    return "## Audit\n\n" + _table(columns, "l l l r l", body) + "\n\n" + note


def _dead_letters_section(s: Mapping[str, Any]) -> str:
    rows = s.get("dead_letters", [])
    if not rows:
        return ""
    columns = ["subscription", "topic-partition", "offset", "reason", "status",
               "receiver's answer", "attempts", "replayed"]
    body = [
        f"| {r['subscription']} | {r['topic']}-{r['partition']} | {r['offset']} | "
        f"{_cell(r['reason'])} | {_fmt(r.get('status'))} | "
        f"{_cell(short_snippet(r.get('response')))} | {_fmt(r['attempts'])} | "
        f"{_fmt(r['replayed'])} |"
        for r in rows[:MARKDOWN_DEAD_LETTERS_SHOWN]
    ]
    more = s["dead_lettered"] - len(body)
    note = (f"{more:,} more: " if more > 0 else "") + "table `dead_letters` lists them all " \
        "(with the whole answer snippet); `replayed` counts deliveries by a replay since " \
        "(`POST .../replay`)."
    return "## Dead letters\n\n" + _table(columns, "l l r l r l r r", body) + "\n\n" + note


def short_snippet(text: str | None) -> str | None:
    """An answer snippet on one line, cut at SNIPPET_CHARS."""
    if text is None:
        return None
    line = " ".join(text.split())
    return line if len(line) <= SNIPPET_CHARS else line[:SNIPPET_CHARS - 3] + "..."


def console_lines(s: Mapping[str, Any], out_dir: str) -> list[str]:
    """What `hookstream report` prints after its totals: what it skipped (nothing when
    nothing was), then the first dead letters with the receiver's answer."""
    return _skipped_lines(s) + _dead_letter_lines(s, out_dir)


def _skipped_lines(s: Mapping[str, Any]) -> list[str]:
    lines = []
    live = s.get("skipped_segments") or []
    if live:
        named = "; ".join(f"{Path(seg['path']).name}, {_size(seg['bytes'])}"
                          for seg in live[:NAMES_SHOWN])
        more = f"; {len(live) - NAMES_SHOWN} more" if len(live) > NAMES_SHOWN else ""
        closes = "it closes" if len(live) == 1 else "they close"
        lines.append(f"skipped: {_plural(len(live), 'segment')} being written ({named}{more});"
                     f" run again after {closes}, or use --follow")
    if s.get("malformed_lines"):
        lines.append(f"skipped: {_plural(s['malformed_lines'], 'unreadable line')} (torn, "
                     "not JSON, or without type or ts_ms)")
    return lines


def _dead_letter_lines(s: Mapping[str, Any], out_dir: str) -> list[str]:
    rows = s.get("dead_letters") or []
    if not rows:
        return []
    shown = rows[:CONSOLE_DEAD_LETTERS_SHOWN]
    lines = [f"dead letters ({len(shown)} of {s['dead_lettered']:,}; all in "
             f"{Path(out_dir) / 'csv' / 'dead_letters.csv'}):"]
    for r in shown:
        status = f"HTTP {r['status']}" if r.get("status") is not None else "status -"
        answer = short_snippet(r.get("response"))
        lines.append(f"  {r['subscription']} {r['topic']}/{r['partition']}/{r['offset']}: "
                     f"{r['reason'] or '-'}; last {status}; answer: "
                     f"{'-' if answer is None else repr(answer)}")
    return lines


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _size(size: int | None) -> str:
    if size is None:
        return "size unknown"
    if size < 1_000_000:
        return f"{size / 1000:.1f} kB"
    return f"{size / 1_000_000:.1f} MB"


def _replays_section(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return ""
    columns = ["replay", "subscription", "records", "delivered", "failed", "from", "to"]
    body = [
        f"| {r['replay_id']} | {r['subscription']} | {_fmt(r['records'])} | "
        f"{_fmt(r['delivered'])} | {_fmt(r['failed'])} | {_iso(r['first_ms'])} | "
        f"{_iso(r['last_ms'])} |"
        for r in rows
    ]
    return "## Replays\n\n" + _table(columns, "l l r r r l l", body)


def _instances_section(rows: Sequence[Mapping[str, Any]]) -> str:
    if len(rows) < 2:
        return ""
    columns = ["instance (journal)", "events", "fetched", "delivered", "failed",
               "dead-lettered", "from", "to"]
    body = [
        f"| `{r['instance']}` | {_fmt(r['events'])} | {_fmt(r['fetched'])} | "
        f"{_fmt(r['delivered'])} | {_fmt(r['failed'])} | {_fmt(r['dead_lettered'])} | "
        f"{_iso(r['first_ms'])} | {_iso(r['last_ms'])} |"
        for r in rows
    ]
    note = ("The audit counts a record once across instances: fetched by one and "
            "delivered by another is delivered; a second successful delivery by any "
            "instance is a duplicate.")
    return "## Instances\n\n" + _table(columns, "l r r r r r l l", body) + "\n\n" + note


def _cell(text: str | None) -> str:
    """Text for a Markdown table cell: no pipes, no line breaks."""
    if text is None:
        return "-"
    return text.replace("|", "\\|").replace("\n", " ")


def _files_section(outputs: Mapping[str, Sequence[str]]) -> str:
    charts = ", ".join(f"`{c}`" for c in outputs.get("charts", []))
    tables = ", ".join(f"`{t}`" for t in outputs.get("tables", []))
    return (
        f"## Files\n\nTables (Parquet in `parquet/`, CSV in `csv/`): {tables}.\n"
        f"Charts: {charts}."
    )


def _offsets(offsets: Sequence[int], total: int) -> str:
    if total == 0:
        return "-"
    shown = ", ".join(str(o) for o in offsets[:MARKDOWN_OFFSETS_SHOWN])
    more = total - min(len(offsets), MARKDOWN_OFFSETS_SHOWN)
    return f"{shown} (+{more} more)" if more > 0 else shown


def _pcts(row: Mapping[str, Any], name: str) -> str:
    values = [row.get(f"{name}_p{q}_ms") for q in (50, 95, 99)]
    return "/".join("-" if v is None else f"{v:g}" for v in values)


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:,}" if isinstance(value, int) else str(value)
