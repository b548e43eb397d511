"""The instance member's TopicMatcher (actors/delivery/path/topic_matcher.py): RE2 full
matches, each (pattern, topic) pair matched once, at most `budget` pairs per round."""

from __future__ import annotations

from actors.delivery.document.patterns import check_pattern
from actors.delivery.path.topic_matcher import TopicMatcher

HOSTILE = r"[ab]*(?:a|ba)*(?:a|ba)*\d{0,9}x?"
"""Issue 25: accepted by the backtracking bound, yet 97 ms per long name in Python's `re`."""


def long_names(count: int) -> frozenset[str]:
    return frozenset("a" * 246 + f"c{i:02d}" for i in range(count))


def test_a_pattern_must_match_the_whole_topic_name() -> None:
    matcher = TopicMatcher()
    topics = frozenset({"orders", "orders.eu", "pre-orders", "orders-eu", "ORDERS"})
    assert matcher.round([r"orders(\..*)?"], topics) == {"orders", "orders.eu"}
    assert matcher.round(["ord", "ers"], topics) == frozenset()


def test_the_hostile_pattern_is_matched_once_per_long_name_and_then_answered_from_cache(
        ) -> None:
    check_pattern(HOSTILE)  # still accepted: only its matching changed
    matcher = TopicMatcher()
    topics = long_names(30) | {"aab01", "ba7x"}
    assert matcher.round([HOSTILE], topics) == {"aab01", "ba7x"}
    assert (matcher.matched, matcher.pending) == (32, 0)
    for _ in range(5):  # every metadata refresh lists the same topics again
        assert matcher.round([HOSTILE], topics) == {"aab01", "ba7x"}
    assert matcher.matched == 32


def test_a_new_topic_is_matched_against_every_pattern_and_a_new_pattern_against_every_topic(
        ) -> None:
    matcher = TopicMatcher()
    assert matcher.round(["a.*"], frozenset({"a1", "b1"})) == {"a1"}
    assert matcher.round(["a.*"], frozenset({"a1", "b1", "a2"})) == {"a1", "a2"}
    assert matcher.matched == 3
    assert matcher.round(["a.*", "b.*"], frozenset({"a1", "b1", "a2"})) == {"a1", "a2", "b1"}
    assert matcher.matched == 6
    assert matcher.matching("b.*") == ["b1"]


def test_topics_and_patterns_that_went_away_are_forgotten() -> None:
    matcher = TopicMatcher()
    matcher.round(["a.*", "b.*"], frozenset({"a1", "b1"}))
    assert matcher.round(["a.*"], frozenset({"b1"})) == frozenset()
    assert matcher.matching("a.*") == [] and matcher.matching("b.*") == []
    assert matcher.round(["a.*"], frozenset({"a1", "b1"})) == {"a1"}  # back: matched again
    assert matcher.matched == 5


def test_a_round_decides_at_most_its_budget_and_the_next_round_goes_on() -> None:
    matcher = TopicMatcher(budget=25)
    topics = long_names(30) | {f"aa{i}" for i in range(10)}
    found: frozenset[str] = frozenset()
    rounds = 0
    while rounds == 0 or matcher.pending:
        before = matcher.matched
        found = matcher.round([HOSTILE, "aa[0-9]"], topics)
        assert matcher.matched - before <= 25
        rounds += 1
    assert found == {f"aa{i}" for i in range(10)}
    assert (rounds, matcher.matched) == (4, 80)  # 2 patterns x 40 topics, 25 per round


def test_a_topic_gone_before_its_turn_is_not_matched() -> None:
    matcher = TopicMatcher(budget=1)
    matcher.round(["t.*"], frozenset({"t1", "t2"}))
    assert matcher.pending == 1
    assert matcher.round(["t.*"], frozenset()) == frozenset()
    assert (matcher.matched, matcher.pending) == (1, 0)
