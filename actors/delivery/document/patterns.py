"""Topic patterns: a regex subset that no topic name can make slow, in either engine.

The runtime matches a subscription's pattern only with RE2 (`matches`: a full match, linear
time): to find a topic's settings, and in the instance member's `TopicMatcher`
(actors/delivery/path/topic_matcher.py), which finds the topic names the member subscribes
aiokafka to. No pattern reaches aiokafka: its pattern subscription runs Python's
backtracking `re` against every topic on every metadata refresh, and even a pattern within
the bound below took 97 ms per long name there (issue 25). In a backtracking engine a
pattern like `((a|a)*)*b` takes exponential time (issue 13: it hung the whole process once
a topic of 30 a's existed); the rules below stay, so that the stored document (which
Queue-Over-Http's Java clients and servers read too, with a backtracking `Pattern`) means
the same and stays safe in both kinds of engine. A pattern is accepted only when

1. it is at most `MAX_PATTERN_CHARS` long and written in the subset both engines read the
   same way (`parse`): literals, `.`, classes `[a-z0-9._-]` and `[^...]`, `\\d \\w \\s` and
   their negations, escaped punctuation (`\\.`), groups `(...)` and `(?:...)`, `|`, the
   quantifiers `* + ? {m} {m,} {m,n}` (m, n <= `MAX_REPEAT`) and their lazy forms, `^`
   and `$`. No flags, backreferences, lookarounds, named groups or Unicode escapes;
2. RE2 and Python's `re` both compile it;
3. its backtracking bound (`backtracking_bound`) is at most `MAX_BACKTRACKING`.

The bound counts, for the pattern as a backtracking matcher runs it (`^(?:p)$` on a topic
name of at most `TOPIC_MAX_CHARS` characters), how many ways it can get past each piece
and still go on: a sequence multiplies, alternatives add (or take the largest when
their first characters differ, so that at most one of them gets past its first
character), and a quantifier multiplies by its number of counts unless what follows it
cannot start with a character it repeats (then only the longest run goes on: `[a-z]+\\.`
costs 1, `.*x` costs 250). A repeated group that can match the empty string, or whose
body is itself ambiguous (`(a|a)*`, `(a+)+`), multiplies per iteration and is refused.
The matcher's work is then at most about bound x name length x pattern length steps;
`tests/unit/test_topic_patterns.py` times accepted patterns against hostile names.

Sets are over Kafka's topic alphabet (`[a-zA-Z0-9._-]`) plus OTHER, which stands for any
other character (a broker that allows more), and END, the end of the name.
"""

from __future__ import annotations

import functools
import re
import string
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import re2

MAX_PATTERN_CHARS: Final = 256
MAX_REPEAT: Final = 255
TOPIC_MAX_CHARS: Final = 249
"""Kafka's longest topic name: the longest input a pattern is ever run on."""
MAX_BACKTRACKING: Final = 62_500
"""Two free-running repetitions (`.*a.*b`) fit; three overlapping ones do not."""

OTHER: Final = "\0other"
END: Final = "\0end"
ALPHABET: Final = frozenset(string.ascii_letters + string.digits + "._-")
_ANY: Final = ALPHABET | {OTHER}
_DIGITS: Final = frozenset(string.digits)
_WORD: Final = frozenset(string.ascii_letters + string.digits + "_")
_CLASS_ESCAPES: Final = {
    # Python's are Unicode-aware and RE2's ASCII-only: OTHER keeps the difference in view
    "d": _DIGITS | {OTHER}, "w": _WORD | {OTHER}, "s": frozenset({OTHER}),
    "D": _ANY - _DIGITS, "W": _ANY - _WORD, "S": _ANY,
}
_META: Final = frozenset("\\^$.|?*+()[]{}")
_PUNCTUATION: Final = frozenset(string.punctuation)
_COUNTS: Final = re.compile(r"(\d{1,3})(?:(,)(\d{1,3})?)?\}")
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is the client's error, not a log line


class PatternRejected(ValueError):
    """Why a pattern is refused: the text names the position or the construct."""


# -- the syntax tree --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Chars:
    """One character out of `chars`."""

    chars: frozenset[str]


@dataclass(frozen=True, slots=True)
class Anchor:
    end: bool  # `$` when True, `^` when False


@dataclass(frozen=True, slots=True)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Alt:
    branches: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Repeat:
    body: Node
    low: int
    high: int | None  # None: no upper bound


Node = Chars | Anchor | Seq | Alt | Repeat


# -- parsing the accepted subset ---------------------------------------------------------
class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        self.pos += 1
        return char

    def fail(self, why: str) -> PatternRejected:
        return PatternRejected(f"{why} at position {self.pos}")

    def alternation(self) -> Node:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.take()
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else Alt(tuple(branches))

    def sequence(self) -> Node:
        items: list[Node] = []
        while self.peek() not in ("", "|", ")"):
            items.append(self.quantified(self.atom()))
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def atom(self) -> Node:
        char = self.take()
        if char == "(":
            if self.text.startswith("?:", self.pos):
                self.pos += 2
            elif self.peek() == "?":
                raise self.fail("only plain groups and (?:...) are supported (no flags, "
                                "lookarounds or named groups)")
            inner = self.alternation()
            if self.take() != ")":
                raise self.fail("missing ')'")
            return inner
        if char == "[":
            return Chars(self.char_class())
        if char == ".":
            return Chars(_ANY)
        if char in "^$":
            return Anchor(end=char == "$")
        if char == "\\":
            return Chars(self.escape(in_class=False))
        if char in _META or not char.isprintable() or char.isspace() or not char.isascii():
            raise self.fail(f"unexpected {char!r}")
        return Chars(_literal(char))

    def escape(self, *, in_class: bool) -> frozenset[str]:
        char = self.take()
        if char in _CLASS_ESCAPES:
            return _CLASS_ESCAPES[char]
        if char in _PUNCTUATION:
            return _literal(char)
        where = "in a class" if in_class else ""
        raise self.fail(f"unsupported escape \\{char} {where}".rstrip())

    def char_class(self) -> frozenset[str]:
        negate = self.peek() == "^"
        if negate:
            self.take()
        chars: set[str] = set()
        first = True
        while True:
            char = self.take()
            if char == "":
                raise self.fail("missing ']'")
            if char == "]" and not first:
                break
            start, members = self.class_atom(char)
            if self.peek() == "-" and not self.text.startswith("-]", self.pos):
                self.take()
                end, _ = self.class_atom(self.take())
                members = self.char_range(start, end)
            chars |= members
            first = False
        return frozenset(_ANY - chars if negate else chars)

    def class_atom(self, char: str) -> tuple[str | None, frozenset[str]]:
        """A class member: (its character, or None for `\\d` and the like; its set)."""
        if char == "\\":
            escaped = self.peek()
            members = self.escape(in_class=True)
            return (None if escaped in _CLASS_ESCAPES else escaped), members
        if char == "":
            raise self.fail("missing ']'")
        if char in "[]" or (char in "&~|-" and self.peek() == char):
            # `[[:alpha:]]`, `[]a]`, `[a&&b]` mean different things in RE2 and in `re`
            raise self.fail(f"write {char!r} inside a class as '\\{char}'")
        if not char.isprintable() or char.isspace() or not char.isascii():
            raise self.fail(f"unexpected {char!r}")
        return char, _literal(char)

    def char_range(self, start: str | None, end: str | None) -> frozenset[str]:
        if start is None or end is None:
            raise self.fail("a range goes from one character to another")
        if ord(start) > ord(end):
            raise self.fail(f"range {start}-{end} is backwards")
        return frozenset().union(*(_literal(chr(c)) for c in range(ord(start), ord(end) + 1)))

    def quantified(self, atom: Node) -> Node:
        char = self.peek()
        if char not in ("*", "+", "?", "{"):
            return atom
        if isinstance(atom, Anchor):
            raise self.fail("an anchor cannot be repeated")
        self.take()
        low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(char) or self.counts()
        if self.peek() == "?":  # lazy: the same counts, tried in another order
            self.take()
        if self.peek() in ("*", "+", "?", "{"):
            raise self.fail("a quantifier cannot follow another (possessive forms are "
                            "not supported)")
        return Repeat(atom, low, high)

    def counts(self) -> tuple[int, int | None]:
        match = _COUNTS.match(self.text, self.pos)
        if match is None:
            raise self.fail("expected {m}, {m,} or {m,n} with numbers up to "
                            f"{MAX_REPEAT}")
        self.pos = match.end()
        low = int(match.group(1))
        high = None if match.group(2) and not match.group(3) else int(
            match.group(3) or match.group(1))
        if low > MAX_REPEAT or (high is not None and (high > MAX_REPEAT or high < low)):
            raise self.fail(f"repetition counts go from 0 to {MAX_REPEAT}, lowest first")
        return low, high


def _literal(char: str) -> frozenset[str]:
    return frozenset({char if char in ALPHABET else OTHER})


def parse(pattern: str) -> Node:
    """The syntax tree of `pattern`; `PatternRejected` outside the supported subset."""
    if not pattern:
        raise PatternRejected("empty pattern")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternRejected(f"{len(pattern)} characters; at most {MAX_PATTERN_CHARS}")
    parser = _Parser(pattern)
    tree = parser.alternation()
    if parser.pos != len(pattern):
        raise parser.fail("unbalanced ')'")
    return tree


# -- the backtracking bound ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Shape:
    cost: int
    first: frozenset[str]
    nullable: bool


def _capped(value: int) -> int:
    return min(value, MAX_BACKTRACKING + 1)


def _power(base: int, exponent: int) -> int:
    if base <= 1 or exponent == 0:
        return 1
    if exponent > 64:
        return MAX_BACKTRACKING + 1
    return _capped(base ** exponent)


def _shape(node: Node, follow: frozenset[str]) -> _Shape:
    """How `node` matches when followed by something that starts with `follow`."""
    if isinstance(node, Chars):
        return _Shape(1, node.chars, False)
    if isinstance(node, Anchor):
        return _Shape(1, frozenset({END}) if node.end else frozenset(), not node.end)
    if isinstance(node, Seq):
        return _sequence(node.items, follow)
    if isinstance(node, Alt):
        return _alternatives(node.branches, follow)
    return _repeat(node, follow)


def _sequence(items: Sequence[Node], follow: frozenset[str]) -> _Shape:
    cost, first, nullable = 1, frozenset[str](), True
    for item in reversed(items):
        shape = _shape(item, first | follow if nullable else first)
        cost = _capped(cost * shape.cost)
        first = shape.first | first if shape.nullable else shape.first
        nullable = nullable and shape.nullable
    return _Shape(cost, first, nullable)


def _alternatives(branches: Iterable[Node], follow: frozenset[str]) -> _Shape:
    shapes = [_shape(b, follow) for b in branches]
    starts = [s.first | follow if s.nullable else s.first for s in shapes]
    disjoint = sum(len(s) for s in starts) == len(frozenset().union(*starts))
    costs = [s.cost for s in shapes]
    return _Shape(max(costs) if disjoint else _capped(sum(costs)),
                  frozenset().union(*(s.first for s in shapes)),
                  any(s.nullable for s in shapes))


def _repeat(node: Repeat, follow: frozenset[str]) -> _Shape:
    first = _shape(node.body, frozenset()).first
    body = _shape(node.body, first | follow)
    if body.nullable and node.high != 1:
        raise PatternRejected("a repeated group must not match an empty string")
    if any(isinstance(n, Anchor) for n in _nodes(node.body)):
        raise PatternRejected("an anchor inside a repeated group")
    most = min(node.high if node.high is not None else TOPIC_MAX_CHARS, TOPIC_MAX_CHARS)
    counts = max(most - node.low + 1, 1)
    per_iteration = _power(body.cost, most)
    choices = 1 if not body.first & follow else counts
    return _Shape(_capped(per_iteration * choices), body.first, node.low == 0 or body.nullable)


def _nodes(node: Node) -> Iterable[Node]:
    yield node
    children: tuple[Node, ...] = ()
    if isinstance(node, Seq):
        children = node.items
    elif isinstance(node, Alt):
        children = node.branches
    elif isinstance(node, Repeat):
        children = (node.body,)
    for child in children:
        yield from _nodes(child)


def backtracking_bound(trees: Sequence[Node]) -> int:
    """The bound for `^(?:t1|t2|...)$`, a subscription's patterns and names as one
    backtracking matcher would run them; more than `MAX_BACKTRACKING` means "too
    many"."""
    whole = Seq((Anchor(end=False), Alt(tuple(trees)) if len(trees) > 1 else trees[0],
                 Anchor(end=True)))
    return _shape(whole, frozenset()).cost


def literal_tree(name: str) -> Node:
    """A topic name as a pattern that matches just it (`re.escape`d)."""
    return Seq(tuple(Chars(_literal(c)) for c in name))


# -- checks and matching -------------------------------------------------------------------
def check_pattern(pattern: str) -> Node:
    """Parse `pattern`, compile it in both engines and bound it alone; its tree, or
    `PatternRejected` saying why."""
    tree = parse(pattern)
    try:
        re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        raise PatternRejected(f"RE2: {_text(exc)}") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # e.g. FutureWarning "possible nested set"
            re.compile(pattern)
    except (re.error, Warning, OverflowError, RecursionError) as exc:
        raise PatternRejected(f"Python re: {exc}") from None
    check_combined([tree], [])
    return tree


def check_combined(trees: Sequence[Node], names: Sequence[str]) -> None:
    """The subscription's patterns and topic names as one combined pattern within
    `MAX_BACKTRACKING`."""
    if backtracking_bound([*trees, *(literal_tree(n) for n in names)]) > MAX_BACKTRACKING:
        raise PatternRejected(
            "too ambiguous: a backtracking matcher could take very long on some topic name. "
            "Avoid nested or overlapping repetitions such as (a+)+ or (a|a)*, alternatives "
            "in a repeated group that start with the same character, and more than two "
            "repetitions like .* that can match the same text: let what follows a "
            "repetition start with a character it does not repeat ([a-z]+\\.[0-9]+)")


def _text(exc: BaseException) -> str:
    arg = exc.args[0] if exc.args else exc
    return arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> re2._Regexp[str]:
    return re2.compile(pattern, _RE2_OPTIONS)


def matches(pattern: str, topic: str) -> bool:
    """`topic` matches the whole of `pattern` (an accepted one), in linear time."""
    return compiled(pattern).fullmatch(topic) is not None
