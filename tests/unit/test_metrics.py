"""The Prometheus registry: a child per label set, made once and found again; removed
series disappear from the text; the text format itself."""

from __future__ import annotations

import pytest

from runtime.host.metrics import (
    Counter,
    Gauge,
    Histogram,
    HistogramValue,
    Registry,
    label_key,
)


@pytest.mark.parametrize("family", [
    Counter("c_total", "c"), Gauge("g", "g"), Histogram("h_ms", "h", (1, 10)),
])
def test_labels_returns_the_same_child_for_the_same_labels(
        family: Counter | Histogram) -> None:
    child = family.labels(subscription="s", partition=3)
    assert family.labels(subscription="s", partition=3) is child
    assert family.labels(subscription="s", partition="3") is child  # values are strings
    assert family.labels(subscription="s", partition=4) is not child
    assert len(family.children) == 2


@pytest.mark.parametrize("family", [
    Counter("c_total", "c"), Gauge("g", "g"), Histogram("h_ms", "h", (1, 10)),
])
def test_a_removed_series_is_made_afresh_on_next_use(family: Counter | Histogram) -> None:
    first = family.labels(partition=1)
    family.remove(partition=1)
    family.remove(partition=99)  # unknown labels: nothing to do
    assert family.children == {}
    assert family.labels(partition=1) is not first


def test_counter_and_gauge_children_count_and_set() -> None:
    counter, gauge = Counter("c_total", "c"), Gauge("g", "g")
    counter.labels(a="x").inc()
    counter.labels(a="x").inc(2)
    gauge.labels(a="x").set(7)
    assert counter.labels(a="x").value == 3 and gauge.labels(a="x").value == 7


def test_histogram_children_use_the_family_bounds() -> None:
    family = Histogram("h_ms", "h", (10, 1))
    child = family.labels(a="x")
    child.observe(5)
    assert child.bounds == (1, 10) and child.buckets == [0, 1, 0]


def test_render_is_the_prometheus_text_format() -> None:
    registry = Registry()
    registry.counter("sent_total", "pushes").labels(endpoint='a"b').inc(2)
    registry.gauge("up", "up").labels().set(1)
    latency = registry.histogram("latency_ms", "latency", (1, 10))
    latency.labels(endpoint="e").observe(0.5)
    latency.labels(endpoint="e").observe(20)
    assert registry.render() == "\n".join([
        "# HELP sent_total pushes",
        "# TYPE sent_total counter",
        'sent_total{endpoint="a\\"b"} 2',
        "# HELP up up",
        "# TYPE up gauge",
        "up 1",
        "# HELP latency_ms latency",
        "# TYPE latency_ms histogram",
        'latency_ms_bucket{endpoint="e",le="1"} 1',
        'latency_ms_bucket{endpoint="e",le="10"} 1',
        'latency_ms_bucket{endpoint="e",le="+Inf"} 2',
        'latency_ms_sum{endpoint="e"} 20.5',
        'latency_ms_count{endpoint="e"} 2',
    ]) + "\n"


def test_a_name_registered_as_one_kind_cannot_be_another() -> None:
    registry = Registry()
    assert registry.counter("x", "x") is registry.counter("x", "x")
    with pytest.raises(TypeError, match="already registered as Counter"):
        registry.histogram("x", "x")


def test_quantiles_are_bucket_upper_bounds_and_merge_adds_buckets() -> None:
    first, second = HistogramValue((1, 10, 100)), HistogramValue((1, 10, 100))
    assert first.quantile(0.99) is None
    for value in (0.5, 0.7, 5):
        first.observe(value)
    second.observe(50)
    second.observe(5000)  # above every bound
    first.merge(second)
    assert (first.count, first.sum) == (5, 5056.2)
    assert (first.quantile(0.4), first.quantile(0.6), first.quantile(0.8)) == (1, 10, 100)
    assert first.quantile(1.0) == 100


def test_series_picks_the_children_whose_labels_include_the_given_ones() -> None:
    registry = Registry()
    waiting = registry.gauge("waiting", "held")
    waiting.labels(level="a", partition="0").set(3)
    waiting.labels(level="a", partition="1").set(4)
    waiting.labels(level="b", partition="0").set(5)
    assert sorted(s.value for s in registry.series("waiting", level="a")) == [3, 4]
    assert registry.series("absent", level="a") == []


@pytest.mark.parametrize("family", [
    Counter("c_total", "c"), Gauge("g", "g"), Histogram("h_ms", "h", (1, 10)),
])
def test_child_by_label_key_is_the_child_by_labels(family: Counter | Histogram) -> None:
    key = label_key(subscription="s", partition=3)
    child = family.child(key)
    assert family.child(key) is child
    assert family.labels(subscription="s", partition="3") is child
    family.discard(key)
    family.discard(key)  # already gone: nothing to do
    assert family.children == {}


def test_families_bound_with_one_label_key_share_the_key_tuple() -> None:
    registry = Registry()
    key = label_key(subscription="s", topic="t", partition=0)
    registry.counter("a_total", "a").child(key).inc()
    registry.gauge("b", "b").child(key).set(7)
    stored = [next(iter(f.children)) for f in (registry.counter("a_total", ""),
                                                registry.gauge("b", ""))]
    assert all(k is key for k in stored)
    assert 'b{subscription="s",topic="t",partition="0"} 7' in registry.render()


def test_forgetting_a_subscription_finds_its_series_by_label_and_keeps_the_rest() -> None:
    registry = Registry()
    lag, delivered = registry.gauge("lag", "l"), registry.counter("d_total", "d")
    for sub in ("a", "b"):
        for partition in range(3):
            lag.child(label_key(subscription=sub, partition=partition)).set(1)
        delivered.labels(subscription=sub).inc()
    lag.discard(label_key(subscription="a", partition=0))
    lag.labels(topic="t").set(2)  # no subscription label: found by a scan
    registry.forget(subscription="a")
    assert [dict(k)["subscription"] for k in lag.children if "subscription" in dict(k)] \
        == ["b"] * 3
    assert list(delivered.children) == [label_key(subscription="b")]
    registry.forget(subscription="a", partition="1")  # nothing left of "a"
    registry.forget(topic="t")
    assert len(lag.children) == 3
    lag.child(label_key(subscription="a", partition=0)).set(5)  # made again, found again
    registry.forget(subscription="a")
    assert len(lag.children) == 3
