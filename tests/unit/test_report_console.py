"""What `hookstream report` prints after its totals (runtime/report/summary.py,
`console_lines`): what it skipped, only when it skipped something, and the dead letters
with the receiver's answer (issue 36). The report runs end to end in
tests/spark/test_report_end_to_end.py; these are the wording's edge cases."""

from __future__ import annotations

from typing import Any

from runtime.report.summary import CONSOLE_DEAD_LETTERS_SHOWN, console_lines


def summary(**fields: Any) -> dict[str, Any]:
    return {"skipped_segments": [], "malformed_lines": 0, "dead_lettered": 0,
            "dead_letters": []} | fields


def segment(name: str, size: int | None) -> dict[str, Any]:
    return {"path": f"/srv/journal/{name}", "bytes": size}


def test_nothing_skipped_and_no_dead_letters_print_nothing() -> None:
    assert console_lines(summary(), "report") == []


def test_segments_being_written_are_counted_named_with_their_size_and_the_rest_counted() -> None:
    live = [segment(f"segment-{i}.jsonl.open", 3_200_000) for i in range(4)]
    live[1] = segment("segment-1.jsonl.open", None)  # closed since it was listed
    assert console_lines(summary(skipped_segments=live[:1]), "report") == [
        "skipped: 1 segment being written (segment-0.jsonl.open, 3.2 MB); run again after "
        "it closes, or use --follow"]
    assert console_lines(summary(skipped_segments=live), "report") == [
        "skipped: 4 segments being written (segment-0.jsonl.open, 3.2 MB; "
        "segment-1.jsonl.open, size unknown; segment-2.jsonl.open, 3.2 MB; 1 more); run "
        "again after they close, or use --follow"]


def test_a_dead_letter_line_has_where_why_the_last_status_and_the_answer_on_one_line() -> None:
    row = {"subscription": "billing_g1", "topic": "orders", "partition": 3, "offset": 40,
           "reason": "gave up after 3 attempts: HTTP 502", "status": 502,
           "response": '{"error":\n  "' + "y" * 300 + '"}'}
    old = row | {"offset": 41, "status": None, "response": None}  # a journal before #36
    lines = console_lines(summary(dead_lettered=2, dead_letters=[row, old]), "out")
    assert lines[0] == "dead letters (2 of 2; all in out/csv/dead_letters.csv):"
    assert lines[1].startswith("  billing_g1 orders/3/40: gave up after 3 attempts: HTTP 502; "
                               "last HTTP 502; answer: '{\"error\": \"yyy")
    assert lines[1].endswith("yyy...'") and "\n" not in lines[1]
    assert lines[2] == ("  billing_g1 orders/3/41: gave up after 3 attempts: HTTP 502; "
                        "last status -; answer: -")


def test_at_most_ten_dead_letters_are_listed() -> None:
    row = {"subscription": "s", "topic": "t", "partition": 0, "reason": "r", "status": 500,
           "response": "no"}
    rows = [row | {"offset": i} for i in range(30)]
    lines = console_lines(summary(dead_lettered=30, dead_letters=rows), "out")
    assert len(lines) == 1 + CONSOLE_DEAD_LETTERS_SHOWN
    assert lines[0].startswith("dead letters (10 of 30; ")
