"""Topic patterns (issue 13): the subset both engines read alike, and a backtracking bound
that keeps a backtracking engine (Python's `re`, Java's `Pattern`) fast on every topic name;
the runtime itself matches with RE2 only (issue 25).

The property tests generate patterns from the grammar, and for every accepted one check
what the module promises: RE2 and `re` agree on random names, and `re` runs the pattern
as consumer.py builds it without hanging on names made to be hostile."""

from __future__ import annotations

import contextlib
import re
import signal
import string
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.delivery.document.patterns import (
    MAX_BACKTRACKING,
    PatternRejected,
    backtracking_bound,
    check_combined,
    check_pattern,
    matches,
    parse,
)
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.errors import InvalidSubscription
from tests.waits import SLACK

TOPIC_CHARS = string.ascii_letters + string.digits + "._-"
HANG_S = 5.0
"""A hang bound (times SLACK) in CPU seconds for one match: an accepted pattern takes a few
ms on any name, a catastrophic one hours on a hostile name; how fast is no test's business."""


class Hung(Exception):
    """A match ran past its hang bound."""


@contextlib.contextmanager
def hang_bound(cpu_seconds: float) -> Iterator[None]:
    """Raise `Hung` in the block after `cpu_seconds` of this process's CPU time. CPU time,
    not the wall clock: a busy machine does not use it up, and the wall-clock timer stays
    pytest-timeout's. `re` checks for signals while it backtracks, so the signal
    interrupts even a match that would run for hours."""
    def interrupt(signum: int, frame: object) -> None:
        raise Hung(f"still matching after {cpu_seconds:g} s of CPU")

    previous = signal.signal(signal.SIGPROF, interrupt)
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def bound(pattern: str) -> int:
    return backtracking_bound([parse(pattern)])


@pytest.mark.parametrize("pattern", [
    "orders", "orders\\..*", ".*", "events-[0-9]+", "[a-z]+-[0-9]+\\.v[0-9]+",
    "(\\.[a-z]+)*", "(a|b)*c", "[^.]+\\.dlq", "(ab|cd){1,5}", "\\d+", "a*?b", ".*a.*b",
    "(?:eu|us)-orders", "[-a-z]+", "x{3}", "x{2,}", "^x$",
])
def test_ordinary_patterns_are_accepted(pattern: str) -> None:
    check_pattern(pattern)


@pytest.mark.parametrize(("pattern", "why"), [
    ("((a|a)*)*b", "empty string"),
    ("(a|a)*", "too ambiguous"),
    ("(a+)+", "too ambiguous"),
    ("(a|aa)*b", "too ambiguous"),
    (".*a.*b.*c", "too ambiguous"),
    ("(a|a)(a|a)" * 20, "too ambiguous"),
    ("a{4294967296}", "expected {m}"),
    ("(" * 130 + ")" * 130, "characters; at most"),
    ("", "empty pattern"),
    ("(?i)x", "only plain groups"),
    ("(?=x)", "only plain groups"),
    ("(?P<n>x)", "only plain groups"),
    ("(a)\\1", "unsupported escape"),
    ("\\bx", "unsupported escape"),
    ("[[:alpha:]]", "inside a class"),
    ("[a&&b]", "inside a class"),
    ("a**", "cannot follow another"),
    ("a*+", "cannot follow another"),
    ("a{2,1}", "lowest first"),
    ("[z-a]", "backwards"),
    ("(x", "missing ')'"),
    ("x)", "unbalanced"),
    ("x y", "unexpected ' '"),
    ("é", "unexpected"),
])
def test_patterns_outside_the_subset_or_the_bound_are_refused(pattern: str, why: str) -> None:
    with pytest.raises(PatternRejected, match=re.escape(why)):
        check_pattern(pattern)


def test_the_bound_counts_only_ways_that_can_go_on() -> None:
    assert bound("[a-z]+\\.[0-9]+") == 1  # what follows each run cannot continue it
    assert bound(".*x") == 250  # `.*` can stop before any of 250 positions
    assert bound(".*a.*b") == 250 * 250
    assert bound("(foo|bar)*") == 1  # alternatives that start differently: one goes on
    assert bound(".*a.*b.*c") > MAX_BACKTRACKING


def test_names_beside_patterns_count_in_the_combined_bound() -> None:
    check_combined([parse(".*a.*b")], [])
    with pytest.raises(PatternRejected, match="too ambiguous"):
        check_combined([parse(".*a.*b"), parse(".*a.*c")], ["ab"])


def test_a_subscription_with_a_pattern_that_re2_cannot_compile_names_the_field() -> None:
    for pattern in ("(a)\\1", "(?=a)b", "(?<!a)b"):
        with pytest.raises(InvalidSubscription) as refused:
            decode_consumer({"id": "a", "group.id": "g", "broker": "K",
                             "topics": [{"name": "x"}, {"name": pattern, "pattern": True}],
                             "subscriptionMethod": {"uri": "http://h"}})
        assert refused.value.reason == "invalid topics[1].pattern", pattern


# -- properties over generated patterns ---------------------------------------------------
_ATOMS = st.sampled_from(["a", "b", "-", ".", "\\.", "[ab]", "[^a]", "[a-c]", "\\d", "\\w",
                          "x", "0"])
_QUANTIFIERS = st.sampled_from(["", "", "*", "+", "?", "{2}", "{0,3}", "{1,}", "*?"])


def _patterns() -> st.SearchStrategy[str]:
    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        group = st.builds(lambda a, b, q: f"({a}|{b}){q}", inner, inner, _QUANTIFIERS)
        plain = st.builds(lambda a, q: f"(?:{a}){q}", inner, _QUANTIFIERS)
        return st.one_of(group, plain, st.lists(inner, min_size=2, max_size=4).map("".join))

    leaf = st.builds(lambda a, q: a + q, _ATOMS, _QUANTIFIERS)
    return st.recursive(leaf, extend, max_leaves=8)


_NAMES = st.text(alphabet="abcx0-.", max_size=40)


def _hostile_names(pattern: str) -> list[str]:
    """Long runs of what the pattern repeats, each spoilt at the end."""
    chars = sorted({c for c in pattern if c in TOPIC_CHARS} | {"a"})
    return [c * 248 + end for c in chars for end in ("!", "_", c)] + ["ab" * 124 + "!"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_patterns(), st.lists(_NAMES, max_size=8))
def test_an_accepted_pattern_means_the_same_in_re2_and_in_python_re(
        pattern: str, names: list[str]) -> None:
    try:
        check_pattern(pattern)
    except PatternRejected:
        return
    python = re.compile(f"^(?:{pattern})$")
    for name in names:
        assert matches(pattern, name) == bool(python.match(name)), (pattern, name)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_patterns())
def test_an_accepted_pattern_is_fast_in_python_re_on_hostile_names(pattern: str) -> None:
    try:
        check_pattern(pattern)
    except PatternRejected:
        return
    python = re.compile(f"^(?:{pattern})$")  # as a backtracking matcher would run it
    for name in _hostile_names(pattern):
        with hang_bound(HANG_S * SLACK):
            python.match(name)


def test_the_hostile_name_check_can_catch_a_catastrophic_pattern() -> None:
    """The property above would see a pattern this module refuses: on a name of 40 a's
    `(a|a)*b` backtracks through 2**40 paths, so the bound fires on any machine."""
    with pytest.raises(PatternRejected):
        check_pattern("(a|a)*b")
    catastrophic = re.compile("^(?:(a|a)*b)$")
    with pytest.raises(Hung), hang_bound(0.1):
        catastrophic.match("a" * 40 + "!")
