"""A subscription's life as the control plane tracks it, on plain `now` integers."""

from __future__ import annotations

import msgspec

from actors.delivery.control.commits import with_accepted, without_accepted
from actors.delivery.control.status import Counters, Live, RefusedCommit, SubscriptionStatus
from actors.delivery.egress.origin import CircuitBreaker, Origin
from actors.delivery.egress.outlet import EndpointHealth
from actors.delivery.path.status import MemberStatus, PartitionStatus


def test_since_changes_with_the_state_not_with_the_reason() -> None:
    status = SubscriptionStatus("failed", since_ms=5, reason="a")
    assert status.move("failed", 50, "b") is False and status.since_ms == 5
    assert status.move("running", 60) is True and status.since_ms == 60


def test_a_retry_shows_its_wall_time_until_the_subscription_runs_or_pauses() -> None:
    status = SubscriptionStatus("starting", since_ms=0)
    status.retrying(100, "no broker", broker_down=True, delay_ms=500)
    assert (status.state, status.reason, status.retry_at_ms) == ("waiting_for_broker",
                                                                 "no broker", 600)
    assert status.answer().next_attempt_at == 600
    status.move("paused", 700, "paused by request")
    assert status.retry_at_ms is None and status.answer().next_attempt_at is None


def test_the_answer_encodes_as_the_status_api_always_showed_it() -> None:
    status = SubscriptionStatus("running", since_ms=7)
    live = Live(partitions=[PartitionStatus(topic="t", partition=0, committed=3,
                                            dead_lettered=2)],
                counters=Counters(delivered=5, failed_attempts=1, dead_lettered=2))
    encoded = msgspec.json.decode(msgspec.json.encode(status.answer(live)))
    assert list(encoded) == ["state", "reason", "since", "in_process", "next_attempt_at",
                             "partitions", "endpoint", "counters", "member", "activity",
                             "refused_commits", "positions_unavailable"]
    assert encoded["partitions"][0] == {
        "topic": "t", "partition": 0, "committed": 3, "highwater": None, "lag": None,
        "inflight": 0, "retrying": 0, "pending": 0, "oldest_pending_ms": None,
        "paused": False, "last_error": None, "dead_lettered": 2, "filtered": 0,
        "stalled_for_ms": None}
    assert encoded["counters"] == {"delivered": 5, "failed_attempts": 1, "dead_lettered": 2,
                                   "filtered": 0}


def test_the_endpoint_and_member_encode_with_the_keys_they_always_had() -> None:
    origin = Origin("http://h:80", CircuitBreaker(min_requests=1, open_ms=100))
    origin.answered(False, 5)
    origin.take_transitions()
    health = EndpointHealth()
    health.record(False, 500, "HTTP 500", wall_ms=1_000)
    endpoint = health.status(origin.status(now_mono_ms=10, now_wall_ms=1_010))
    member = MemberStatus(group="hs", member="instance:Kafka", member_id="m-1",
                          generation=3, subscriptions=2, rebalances=1, assigned=["t-0"],
                          cursors={"t-0": "live"}, commit_error=None,
                          waiting_for_topics=[], pattern_topics=[], group_partitions=4)
    encoded = msgspec.json.decode(msgspec.json.encode(SubscriptionStatus(
        "running", since_ms=0).answer(Live(endpoint=endpoint, member=member))))
    shown = encoded["endpoint"]
    assert list(shown) == ["last_status", "last_error", "last_success_at", "error_rate",
                           "recent_failures", "origin"]
    assert shown["recent_failures"] == [{"at": 1_000, "status": 500, "error": "HTTP 500"}]
    assert list(shown["origin"]) == [
        "origin", "breaker", "breaker_enabled", "opened_at", "probe_at", "failure_ratio",
        "min_requests", "open_ms", "throttled_until", "rate_limit", "max_connections",
        "transitions"]
    assert shown["origin"]["transitions"] == [
        {"at": 1_005, "from": "closed", "to": "open", "why": "1 of the last 1 answers failed"}]
    assert list(encoded["member"]) == [
        "group", "member", "memberId", "generation", "subscriptions", "rebalances",
        "assigned", "cursors", "commitError", "waitingForTopics", "patternTopics",
        "groupPartitions"]


def test_refused_positions_show_apart_from_what_kafka_accepted() -> None:
    live = Live(partitions=[PartitionStatus(topic="t", partition=0, committed=30),
                            PartitionStatus(topic="t", partition=1, committed=7)])
    shown = with_accepted(live, {("t", 0): None, ("t", 1): 7}, "the group has live members")
    assert [(p.partition, p.committed) for p in shown.partitions] == [(0, None), (1, 7)]
    assert shown.refused_commits == [RefusedCommit(
        topic="t", partition=0, position=30, reason="the group has live members")]


def test_a_refused_position_the_member_knows_shows_though_no_partition_actor_answered() -> None:
    known = [RefusedCommit(topic="t", partition=1, position=12, accepted=4)]
    live = Live(partitions=[PartitionStatus(topic="t", partition=0, committed=30)])
    shown = with_accepted(live, {("t", 0): None, ("t", 1): 9}, "live members", known)
    assert [(c.partition, c.position, c.accepted, c.reason)
            for c in shown.refused_commits] == [(0, 30, None, "live members"),
                                                (1, 12, 9, "live members")]
    assert shown.positions_unavailable is None


def test_when_kafka_cannot_say_what_it_holds_the_refused_positions_show_and_why() -> None:
    """The details showed no refused commit at all when Kafka's read timed out (a loaded
    machine), while the row showed it: the refused positions are the runtime's own."""
    known = [RefusedCommit(topic="t", partition=0, position=30, accepted=None)]
    live = Live(partitions=[PartitionStatus(topic="t", partition=0, committed=30),
                            PartitionStatus(topic="t", partition=1, committed=7)])
    shown = without_accepted(live, known, "live members", "TimeoutError: not done in time")
    assert shown.refused_commits == [RefusedCommit(topic="t", partition=0, position=30,
                                                   accepted=None, reason="live members")]
    assert [(p.partition, p.committed) for p in shown.partitions] == [(0, None), (1, 7)]
    encoded = msgspec.json.decode(msgspec.json.encode(
        SubscriptionStatus("running", since_ms=0).answer(shown)))
    assert encoded["positions_unavailable"] == "TimeoutError: not done in time"
