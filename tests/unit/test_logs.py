"""Operator logs: JSON lines, and aiokafka's reconnect noise summarised."""

from __future__ import annotations

import json
import logging

from runtime.host.logs import JsonFormatter, Summarised
from runtime.kernel.clock import FakeClock


def _record(name: str, msg: str, *args: object, level: int = logging.WARNING
            ) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_repeats_of_one_kind_pass_once_per_window_and_the_next_says_how_many_were_held() -> None:
    clock = FakeClock()
    summary = Summarised(window_ms=30_000, clock=clock)
    passed = [summary.filter(_record("aiokafka.conn", f"Unable connect to node {i}"))
              for i in range(5)]
    assert passed == [True, False, False, False, False]
    clock.advance(30_000)
    again = _record("aiokafka.conn", "Unable connect to node 99")
    assert summary.filter(again)
    assert "4 similar lines held back" in again.getMessage()


def test_different_kinds_and_our_own_loggers_are_not_held_back() -> None:
    summary = Summarised(clock=FakeClock())
    assert summary.filter(_record("aiokafka.conn", "Unable connect to node 1"))
    assert summary.filter(_record("aiokafka.cluster", "Metadata refresh failed"))
    assert all(summary.filter(_record("runtime", "subscription s started")) for _ in range(3))


def test_json_lines_carry_time_level_logger_and_the_formatted_message() -> None:
    line = json.loads(JsonFormatter().format(_record("runtime", "%d records", 7)))
    assert (line["level"], line["logger"], line["message"]) == ("WARNING", "runtime", "7 records")
    assert line["ts"].endswith("Z") and "T" in line["ts"]


def test_a_throttle_allows_a_few_lines_a_window_and_counts_the_rest() -> None:
    from runtime.host.logs import Throttle

    throttle = Throttle(per_window=2, window_ms=1000)
    assert [throttle.allow(t)[0] for t in (0, 1, 2, 3)] == [True, True, False, False]
    assert throttle.allow(1000) == (True, 2)  # a new window: says what it held back
    assert throttle.allow(1001) == (True, 0)
