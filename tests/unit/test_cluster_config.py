"""`[cluster]` status keys: decoded with their defaults, bad values named by key."""

from __future__ import annotations

import pytest

from runtime.errors import ConfigError
from runtime.host.config import parse_config

BROKERS = [{"name": "Kafka", "bootstrap_servers": "127.0.0.1:9092"}]


def test_the_status_view_is_off_unless_a_topic_is_given() -> None:
    cluster = parse_config({"brokers": BROKERS}).cluster
    assert (cluster.status_topic, cluster.status_interval_ms,
            cluster.gone_after_intervals) == ("", 3000, 3)


@pytest.mark.parametrize("cluster", [
    {"status_topic": "bad topic!"},
    {"status_topic": "same", "subscriptions_topic": "same"},
])
def test_a_bad_status_topic_is_named(cluster: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="status_topic"):
        parse_config({"brokers": BROKERS, "cluster": cluster})


@pytest.mark.parametrize("cluster", [{"status_interval_ms": 10}, {"gone_after_intervals": 1}])
def test_too_small_intervals_are_named(cluster: dict[str, int]) -> None:
    with pytest.raises(ConfigError, match=next(iter(cluster))):
        parse_config({"brokers": BROKERS, "cluster": cluster})
