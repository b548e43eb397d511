"""TopicMatcher: which of the cluster's topic names the subscriptions' patterns match.

Pure logic (no I/O). The instance member (actors/delivery/path/member/) lists the
cluster's topics every `PATTERN_METADATA_MAX_AGE_MS` and subscribes aiokafka to the
names this matcher finds, never to a pattern: aiokafka would run the pattern with
Python's backtracking `re` against every topic on every metadata refresh, and one
accepted pattern took 97 ms per long name there, 3 s per refresh with 30 such topics
(issue 25, item 7). Here:

- every match is RE2's (`patterns.matches`: a full match, linear in the name);
- a (pattern, topic) pair is matched once: a round matches only the pairs it has not
  decided yet (new topics for every pattern, every topic for a new pattern), and forgets
  the topics and patterns that went away;
- one round decides at most `budget` pairs; the rest wait for the next round (`pending`
  says how many), so a cluster of 100,000 topics costs a few rounds, never a long pause
  of the event loop. Besides the matching, a round costs one pass over the topic names
  (what appeared, what went).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Final

from actors.delivery.document.patterns import matches

MATCHES_PER_ROUND: Final = 10_000
"""Pairs decided per round: RE2 takes 1.5-3 us on a 249-character name (measured with
issue 25's pattern), so a round stays within about 30 ms."""


@dataclass(slots=True)
class _Todo:
    """Names a pattern has yet to be matched against: `names[at:]` (`names` is shared by
    every pattern that waits for them)."""

    names: Sequence[str]
    at: int = 0


class TopicMatcher:
    def __init__(self, budget: int = MATCHES_PER_ROUND) -> None:
        self.budget = budget
        self._topics: frozenset[str] = frozenset()
        self._hits: dict[str, set[str]] = {}  # pattern -> the topics it matches
        self._todo: dict[str, deque[_Todo]] = {}  # pattern -> names not matched yet
        self.matched = 0
        """RE2 matches made so far: one per (pattern, topic) pair."""
        self.pending = 0
        """Pairs the last round left for the next one (the budget ran out)."""

    def round(self, patterns: Iterable[str], topics: AbstractSet[str]) -> frozenset[str]:
        """The `topics` some pattern matches, as far as decided, after deciding at most
        `budget` more pairs."""
        self._follow(set(patterns), frozenset(topics))
        self._decide()
        return frozenset[str]().union(*self._hits.values())

    def matching(self, pattern: str) -> list[str]:
        """The topics `pattern` was found to match (sorted)."""
        return sorted(self._hits.get(pattern, ()))

    def _follow(self, patterns: set[str], topics: frozenset[str]) -> None:
        """Forget what went; queue what is new."""
        for pattern in self._hits.keys() - patterns:
            del self._hits[pattern], self._todo[pattern]
        gone, added = self._topics - topics, tuple(topics - self._topics)
        self._topics = topics
        for pattern, hits in self._hits.items():
            hits -= gone
            if added:
                self._todo[pattern].append(_Todo(added))
        new = patterns - self._hits.keys()
        everything = tuple(topics) if new else ()
        for pattern in new:
            self._hits[pattern] = set()
            self._todo[pattern] = deque([_Todo(everything)])

    def _decide(self) -> None:
        left = self.budget
        for pattern, todo in self._todo.items():
            while todo and left:
                left -= self._match_some(pattern, todo[0], left)
                if todo[0].at == len(todo[0].names):
                    todo.popleft()
        self.pending = sum(len(t.names) - t.at for ts in self._todo.values() for t in ts)

    def _match_some(self, pattern: str, todo: _Todo, most: int) -> int:
        """Match `pattern` against up to `most` of `todo`'s names; how many it took."""
        names = todo.names[todo.at:todo.at + most]
        hits = self._hits[pattern]
        for name in names:
            if name in self._topics:  # else it went away before its turn
                self.matched += 1
                if matches(pattern, name):
                    hits.add(name)
        todo.at += len(names)
        return len(names)

    def __repr__(self) -> str:
        return (f"<TopicMatcher patterns={len(self._hits)} topics={len(self._topics)} "
                f"matched={self.matched} pending={self.pending}>")
