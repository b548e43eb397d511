"""A small Prometheus text-format registry: counters, gauges and histograms with labels.

Hot paths call `inc`/`set`/`observe` on a child bound to its labels once, so an
update is a dict-free attribute change.

An actor with series in several families (a partition actor has eight) computes its label
key once with `label_key` and binds with `child(key)`: the families then share one key
tuple instead of building one each (about 1.6 KiB per partition actor otherwise: 1,024
partitions, bench/scale.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, TypeVar

Labels = tuple[tuple[str, str], ...]
INDEXED = "subscription"
"""Series are found by this label's value without a scan: an unsubscribe forgets its
subscription's series, and a scan of 10,000 subscriptions' series for each took most of
50 unsubscribes' time (issue 32, item 12)."""
C = TypeVar("C")
F = TypeVar("F", bound="Counter | Histogram")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _render_labels(labels: Labels, extra: str = "") -> str:
    parts = [f'{k}="{_escape(v)}"' for k, v in labels]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


class Value:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def set(self, value: float) -> None:
        self.value = value


class HistogramValue:
    __slots__ = ("bounds", "buckets", "count", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.buckets[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def merge(self, other: HistogramValue) -> None:
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.count += other.count
        self.sum += other.sum

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding quantile `q` (None before any
        observation; the largest bound when it lies above every bound)."""
        if not self.count:
            return None
        rank, seen = q * self.count, 0
        for bound, count in zip(self.bounds, self.buckets, strict=False):
            seen += count
            if seen >= rank:
                return bound
        return self.bounds[-1]


class _Family:
    kind = "untyped"

    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self.help = help_text

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]


class _Labelled(_Family, Generic[C]):
    """A family of children of type `C`, one per label set, made on first use. The keys
    with an `INDEXED` label are also kept by its value, so `forget` finds them without
    a scan."""

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help_text)
        self.children: dict[Labels, C] = {}
        self._index: dict[str, set[Labels]] = {}

    def labels(self, **labels: str | int) -> C:
        return self.child(_key(labels))

    def child(self, key: Labels) -> C:
        """The series of a key from `label_key` (made on first use); the family keeps that
        very tuple, so families bound with one key share it."""
        child = self.children.get(key)
        if child is None:
            child = self.children[key] = self._new_child()
            for label, value in key:
                if label == INDEXED:
                    self._index.setdefault(value, set()).add(key)
        return child

    def remove(self, **labels: str | int) -> None:
        self.discard(_key(labels))

    def discard(self, key: Labels) -> None:
        """Remove the series of a key from `label_key`, if present."""
        if self.children.pop(key, None) is None:
            return
        for label, value in key:
            if label == INDEXED:
                keys = self._index.get(value, set())
                keys.discard(key)
                if not keys:
                    self._index.pop(value, None)

    def forget(self, pairs: set[tuple[str, str]]) -> None:
        """Remove every series whose labels include all of `pairs`."""
        indexed = [value for label, value in pairs if label == INDEXED]
        candidates = (list(self._index.get(indexed[0], ())) if indexed
                      else list(self.children))
        for key in candidates:
            if pairs <= set(key):
                self.discard(key)

    def _new_child(self) -> C:
        raise NotImplementedError


def _key(labels: dict[str, str | int]) -> Labels:
    return tuple((k, str(v)) for k, v in labels.items())


def label_key(**labels: str | int) -> Labels:
    """The key of a label set, to bind the series of several families with `child`."""
    return _key(labels)


class Counter(_Labelled[Value]):
    kind = "counter"

    def _new_child(self) -> Value:
        return Value()

    def render(self) -> list[str]:
        lines = self.header()
        for key, child in self.children.items():
            lines.append(f"{self.name}{_render_labels(key)} {child.value:g}")
        return lines


class Gauge(Counter):
    kind = "gauge"


class Histogram(_Labelled[HistogramValue]):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, bounds: Iterable[float]) -> None:
        super().__init__(name, help_text)
        self.bounds = tuple(sorted(bounds))

    def _new_child(self) -> HistogramValue:
        return HistogramValue(self.bounds)

    def render(self) -> list[str]:
        lines = self.header()
        for key, child in self.children.items():
            total = 0
            for bound, count in zip((*self.bounds, float("inf")), child.buckets, strict=True):
                total += count
                le = "+Inf" if bound == float("inf") else f"{bound:g}"
                bucket_labels = _render_labels(key, 'le="' + le + '"')
                lines.append(f"{self.name}_bucket{bucket_labels} {total}")
            lines.append(f"{self.name}_sum{_render_labels(key)} {child.sum:g}")
            lines.append(f"{self.name}_count{_render_labels(key)} {child.count}")
        return lines


LATENCY_BOUNDS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class Registry:
    """Metric families by name, rendered in Prometheus text format."""

    def __init__(self) -> None:
        self._families: dict[str, Counter | Histogram] = {}

    def counter(self, name: str, help_text: str) -> Counter:
        return self._family(name, lambda: Counter(name, help_text), Counter)

    def gauge(self, name: str, help_text: str) -> Gauge:
        return self._family(name, lambda: Gauge(name, help_text), Gauge)

    def histogram(self, name: str, help_text: str,
                  bounds: Iterable[float] = LATENCY_BOUNDS_MS) -> Histogram:
        return self._family(name, lambda: Histogram(name, help_text, bounds), Histogram)

    def _family(self, name: str, make: Callable[[], F], kind: type[F]) -> F:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = make()
        if not isinstance(family, kind):
            raise TypeError(f"metric {name} already registered as {type(family).__name__}")
        return family

    def children(self, name: str) -> Mapping[Labels, Value]:
        """The series of counter or gauge family `name` by label set, read-only; empty
        when there is no such family yet (none is made: its help text comes with the
        first real use)."""
        family = self._families.get(name)
        return family.children if isinstance(family, Counter) else {}

    def series(self, name: str, **labels: str) -> list[Value | HistogramValue]:
        """The children of family `name` whose labels include all of `labels`."""
        family = self._families.get(name)
        pairs = set(labels.items())
        return [] if family is None else [
            child for key, child in family.children.items() if pairs <= set(key)]

    def forget(self, **labels: str) -> None:
        """Remove every series, in every family, labelled with all of `labels` (an
        unsubscribed subscription's, say): Prometheus then stops reporting them."""
        pairs = set(labels.items())
        for family in self._families.values():
            family.forget(pairs)

    def render(self) -> str:
        lines: list[str] = []
        for family in self._families.values():
            lines.extend(family.render())
        return "\n".join(lines) + "\n"
