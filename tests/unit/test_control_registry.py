"""The control plane's decisions (actors/delivery/control/registry.py) on a FakeClock:
what starts, when a failed start is retried, what is refused, and what a record of the
cluster's subscriptions topic or the files ask for."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from actors.delivery.control.registry import (
    Adopt,
    Disable,
    Pause,
    Remove,
    Replace,
    Resume,
    Retry,
    SubscriptionRegistry,
)
from actors.delivery.document.store import encode
from actors.delivery.document.subscription import Consumer, decode_consumer
from actors.delivery.errors import InvalidSubscription, SubscriptionExists, SubscriptionNotFound
from runtime.kernel.clock import FakeClock

WALL = 1_700_000_000_000


def consumer(sub_id: str, *topics: str, group: str = "team", uri: str = "http://e/hook",
             concurrency: int = 1) -> Consumer:
    document: dict[str, Any] = {
        "id": sub_id, "group": {"id": group}, "broker": "Kafka",
        "topics": [{"name": t, "config": {"concurrencyFactor": concurrency}}
                   for t in topics or ("orders",)],
        "subscriptionMethod": {"type": "http", "uri": uri}}
    return decode_consumer(document)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start_ms=1000, wall_offset_ms=WALL)


@pytest.fixture
def registry(clock: FakeClock) -> SubscriptionRegistry:
    return SubscriptionRegistry(clock)


def test_a_new_subscription_is_listed_starting_and_runs_once_started(
        registry: SubscriptionRegistry, clock: FakeClock) -> None:
    assert registry.add(consumer("a")) is True
    assert registry.state("a_team") == "starting"
    clock.advance(20)
    registry.started("a_team")
    status = registry.known("a_team").status
    assert (status.state, status.since_ms, status.retry_at_ms) == ("running", WALL + 1020, None)


def test_a_second_subscribe_of_one_key_and_a_shared_topic_in_one_group_are_refused(
        registry: SubscriptionRegistry) -> None:
    registry.add(consumer("a", "orders"))
    with pytest.raises(SubscriptionExists):
        registry.refuse_new(consumer("a", "payments"))
    with pytest.raises(InvalidSubscription, match="topic already consumed"):
        registry.refuse_new(consumer("b", "payments", "orders"))
    registry.refuse_new(consumer("b", "orders", group="other"))  # another group: fine


def test_a_failed_start_is_retried_after_the_kernels_backoff_doubling_to_its_cap(
        registry: SubscriptionRegistry, clock: FakeClock) -> None:
    registry.add(consumer("a"))
    delays = []
    for _ in range(6):
        retry = registry.start_failed("a_team", "broker away", broker_down=False)
        assert retry.at_ms == clock.monotonic_ms() + retry.delay_ms
        assert registry.known("a_team").status.retry_at_ms == clock.wall_ms() + retry.delay_ms
        delays.append(retry.delay_ms)
        clock.advance(retry.delay_ms)
        assert registry.due(retry) is not None
    assert delays == [500, 1000, 2000, 4000, 5000, 5000]
    assert registry.state("a_team") == "failed"
    registry.started("a_team")
    assert registry.start_failed("a_team", "again", broker_down=True).delay_ms == 500
    assert registry.state("a_team") == "waiting_for_broker"


def test_a_retry_is_stale_once_the_subscription_started_failed_again_or_paused(
        registry: SubscriptionRegistry) -> None:
    registry.add(consumer("a"))
    first = registry.start_failed("a_team", "boom", broker_down=False)
    second = registry.start_failed("a_team", "boom", broker_down=False)
    assert registry.due(first) is None and registry.due(second) is not None
    registry.move("a_team", "paused", "paused by request")
    assert registry.due(second) is None
    assert registry.due(Retry("gone_team", 1, 0, 0)) is None


def test_a_tree_that_exits_by_itself_is_retried_unless_it_was_meant_to_stop(
        registry: SubscriptionRegistry) -> None:
    registry.add(consumer("a"))
    registry.started("a_team")
    retry = registry.exited("a_team", "its actors crashed", broker_down=False)
    assert retry is not None and retry.delay_ms == 500
    assert registry.known("a_team").status.reason == "its actors crashed"
    assert registry.exited("a_team", "again", broker_down=False) is None  # already retrying
    for state in ("stopping", "paused", "disabled"):
        registry.move("a_team", state)
        assert registry.exited("a_team", "stopped", broker_down=False) is None
    assert registry.exited("unknown_team", "x", broker_down=False) is None


def test_an_update_restarts_a_running_subscription_and_leaves_a_paused_one_paused(
        registry: SubscriptionRegistry) -> None:
    registry.add(consumer("a"))
    registry.started("a_team")
    assert registry.replace("a_team", consumer("a", concurrency=5)) is True
    assert registry.known("a_team").consumer.topics[0].config.concurrencyFactor == 5
    registry.move("a_team", "paused", "paused by request")
    assert registry.replace("a_team", consumer("a", concurrency=7)) is False


def test_an_update_may_not_change_the_key_nor_touch_an_in_process_subscription(
        registry: SubscriptionRegistry) -> None:
    registry.add(consumer("a"))
    registry.add(consumer("p"), in_process=True)
    with pytest.raises(InvalidSubscription, match="cannot change"):
        registry.refuse_update("a_team", consumer("b"))
    with pytest.raises(InvalidSubscription, match="in-process"):
        registry.refuse_update("p_team", consumer("p"))
    with pytest.raises(SubscriptionNotFound):
        registry.refuse_update("x_team", consumer("x"))


def test_pause_and_resume_are_wanted_only_when_they_change_something(
        registry: SubscriptionRegistry) -> None:
    registry.add(consumer("a"))
    registry.started("a_team")
    assert registry.wants_pause("a_team") and not registry.wants_resume("a_team")
    registry.move("a_team", "paused", "paused by request")
    assert not registry.wants_pause("a_team") and registry.wants_resume("a_team")
    assert registry.paused_keys() == ["a_team"]


def test_a_410_disables_only_a_running_subscription_and_is_kept_for_the_next_start(
        registry: SubscriptionRegistry) -> None:
    registry.add(consumer("a"))
    assert not registry.wants_disable("a_team")  # still starting
    registry.started("a_team")
    assert registry.wants_disable("a_team")
    registry.move("a_team", "disabled", "http://e/hook answered 410 Gone")
    assert not registry.wants_disable("a_team") and registry.wants_resume("a_team")
    assert registry.disabled_reasons() == {"a_team": "http://e/hook answered 410 Gone"}
    assert not registry.wants_disable("unknown_team")


def test_in_process_subscriptions_are_kept_out_of_the_files(
        registry: SubscriptionRegistry) -> None:
    registry.add(consumer("p"), in_process=True)
    registry.move("p_team", "paused")
    assert registry.in_process("p_team") and registry.paused_keys() == []


def test_the_local_files_marks_restore_paused_and_disabled_subscriptions_stopped(
        registry: SubscriptionRegistry) -> None:
    registry.marked_paused |= {"a_team"}
    registry.marked_disabled.update({"b_team": "410"})
    assert registry.add(consumer("a")) is False and registry.state("a_team") == "paused"
    assert registry.add(consumer("b", "payments")) is False
    assert registry.known("b_team").status.reason == "410"
    assert registry.add(consumer("c", "refunds")) is True


def test_cluster_records_adopt_replace_and_remove_a_subscription(
        registry: SubscriptionRegistry) -> None:
    first = consumer("a")
    assert registry.change_of("a_team", encode(first)) == Adopt(first)
    registry.add(first)
    assert registry.change_of("a_team", encode(first)) is None  # the same document
    changed = consumer("a", concurrency=9)
    assert registry.change_of("a_team", encode(changed)) == Replace(changed)
    assert registry.change_of("a_team", None) == Remove("a_team")
    assert registry.change_of("b_team", None) is None


def test_cluster_pause_and_disable_records_are_remembered_for_a_subscription_adopted_later(
        registry: SubscriptionRegistry) -> None:
    assert registry.change_of("paused:a_team", b"true") is None
    assert registry.change_of("disabled:b_team", b"gone") is None
    assert registry.add(consumer("a"), paused_reason="paused in the cluster") is False
    assert registry.known("a_team").status.reason == "paused in the cluster"
    assert registry.add(consumer("b", "payments")) is False
    assert registry.state("b_team") == "disabled"
    assert registry.change_of("paused:a_team", None) == Resume("a_team")
    assert registry.change_of("paused:a_team", b"true") == Pause("a_team")
    assert registry.change_of("disabled:b_team", None) == Resume("b_team")
    registry.started("b_team")
    assert registry.change_of("disabled:b_team", b"410 again") == Disable("b_team", "410 again")
    assert registry.change_of("disabled:b_team", None) is None  # not disabled here now


def test_an_undecodable_cluster_record_is_refused_with_the_documents_error(
        registry: SubscriptionRegistry) -> None:
    with pytest.raises(InvalidSubscription):
        registry.change_of("a_team", msgspec.json.encode({"id": "a"}))


def test_readers_see_published_copies_that_later_changes_replace_but_never_write(
        registry: SubscriptionRegistry) -> None:
    registry.add(consumer("a"))
    registry.add(consumer("b"))
    read = registry.published.statuses["a_team"]
    other = registry.published.statuses["b_team"]
    registry.started("a_team")
    assert read.state == "starting"  # what a reader holds is a copy: never written
    assert registry.published.statuses["a_team"].state == "running"
    assert registry.published.statuses["b_team"] is other  # only the change is copied
    registry.remove("a_team")
    assert "a_team" not in registry.published.consumers
    assert list(registry.published.statuses) == ["b_team"]


def test_pairs_that_join_alike_are_two_subscriptions_in_the_cluster_topic(
        registry: SubscriptionRegistry) -> None:
    first, second = consumer("k_a", group="b"), consumer("k", "payments", group="a_b")
    assert (first.key, second.key) == ("k_a_b", "k_a%5Fb")
    registry.refuse_new(first)
    registry.add(first)
    registry.refuse_new(second)  # not taken: another pair
    registry.add(second)
    assert registry.change_of("paused:k_a%5Fb", b"true") == Pause("k_a%5Fb")
    assert registry.change_of("k_a%5Fb", None) == Remove("k_a%5Fb")
    assert registry.state("k_a_b") == "starting"


def test_records_under_the_joined_name_of_before_issue_25_apply_to_their_pair(
        registry: SubscriptionRegistry) -> None:
    """A version before issue 25 wrote (`k`, `a_b`) under `k_a_b`; after compaction its
    pause may come before the document."""
    old = consumer("k", group="a_b")
    assert registry.change_of("paused:k_a_b", b"true") is None
    assert registry.change_of("k_a_b", encode(old)) == Adopt(old)
    assert registry.add(old) is False and registry.state("k_a%5Fb") == "paused"
    assert "k_a_b" not in registry.marked_paused  # not a flag of (`k_a`, `b`)
    assert registry.change_of("paused:k_a_b", None) == Resume("k_a%5Fb")
    assert registry.change_of("disabled:k_a_b", b"410") == Disable("k_a%5Fb", "410")
    with pytest.raises(SubscriptionExists, match="earlier version"):  # it would replace it
        registry.refuse_new(consumer("k_a", "payments", group="b"))
    assert registry.change_of("k_a_b", None) == Remove("k_a%5Fb")
    assert registry.change_of("k_a_b", None) is None


def test_a_subscription_conflicts_only_within_its_group_even_after_an_update(
        registry: SubscriptionRegistry) -> None:
    registry.add(consumer("a", "orders", group="g1"))
    registry.add(consumer("b", "payments", group="g2"))
    registry.refuse_shared_topic(consumer("c", "orders", group="g2"))  # another group
    with pytest.raises(InvalidSubscription):
        registry.refuse_shared_topic(consumer("c", "orders", group="g1"))
    registry.replace("a_g1", consumer("a", "refunds", group="g1"))  # no longer orders
    registry.refuse_shared_topic(consumer("c", "orders", group="g1"))
    registry.remove("a_g1")
    registry.refuse_shared_topic(consumer("c", "refunds", group="g1"))
