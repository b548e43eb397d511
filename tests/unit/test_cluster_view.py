"""The cluster view's decisions on plain times: owners per partition, total lag, gone and
stopped instances, forgetting, and a partition two instances claim."""

from __future__ import annotations

import msgspec

from actors.delivery.cluster.view import (
    FORGET_AFTER_INTERVALS,
    ClusterView,
    InstanceStatus,
    OwnedPartition,
    Share,
)

INTERVAL = 1000


def record(instance: str, at_ms: int, partitions: dict[int, int], *,
           state: str = "running", key: str = "s_g") -> bytes:
    share = Share(state="running", partitions=[
        OwnedPartition(topic="t", partition=p, lag=lag) for p, lag in partitions.items()])
    return msgspec.json.encode(InstanceStatus(
        instance=instance, address=f"http://{instance}", state=state,  # type: ignore[arg-type]
        published_ms=at_ms, interval_ms=INTERVAL, subscriptions={key: share}))


def test_owners_and_total_lag_come_from_every_live_instance() -> None:
    view = ClusterView(gone_after_intervals=3)
    view.apply("a", record("a", 0, {0: 5, 1: 0}), now_ms=0)
    view.apply("b", record("b", 0, {2: 7}), now_ms=0)
    owners = view.owners("s_g", now_ms=500)
    assert [(o["partition"], o["instance"], o["lag"]) for o in owners] == [
        (0, "a", 5), (1, "a", 0), (2, "b", 7)]
    assert view.subscription("s_g", now_ms=500)["total_lag"] == 12
    assert view.as_dict(500)["total_lag"] == 12


def test_a_silent_instance_is_gone_after_its_intervals_and_its_partitions_unowned() -> None:
    view = ClusterView(gone_after_intervals=3)
    view.apply("a", record("a", 0, {0: 5}), now_ms=0)
    view.apply("b", record("b", 0, {1: 7}), now_ms=0)
    view.apply("a", record("a", 3500, {0: 1}), now_ms=3500)
    assert view.shown("b", now_ms=3000) == "running"
    assert view.shown("b", now_ms=3001) == "gone"
    owners = view.owners("s_g", now_ms=3501)
    assert [(o["partition"], o["instance"], o.get("last_owner"), o["lag"])
            for o in owners] == [(0, "a", None, 1), (1, None, "b", 7)]
    assert view.subscription("s_g", now_ms=3501)["total_lag"] == 8  # b's last lag counts
    assert view.as_dict(3501)["total_lag"] == 8
    assert [(i["instance"], i["state"], i["lag"]) for i in view.instances(3501)] == [
        ("a", "running", 1), ("b", "gone", 7)]


def test_a_gone_instances_partition_is_owned_again_once_a_live_one_reports_it() -> None:
    view = ClusterView(gone_after_intervals=3)
    view.apply("a", record("a", 0, {0: 5}), now_ms=0)
    view.apply("b", record("b", 0, {1: 7}), now_ms=0)
    view.apply("a", record("a", 4000, {0: 5, 1: 9}), now_ms=4000)  # took b's partition
    owners = view.owners("s_g", now_ms=4000)
    assert [(o["partition"], o["instance"], "last_owner" in o, o["lag"]) for o in owners] == [
        (0, "a", False, 5), (1, "a", False, 9)]
    assert view.as_dict(4000)["total_lag"] == 14


def test_a_subscription_only_a_gone_instance_read_stays_in_the_view() -> None:
    view = ClusterView(gone_after_intervals=3)
    view.apply("a", record("a", 0, {0: 5}), now_ms=0)
    view.apply("b", record("b", 0, {3: 4}, key="other_g"), now_ms=0)
    view.apply("a", record("a", 3500, {0: 5}), now_ms=3500)
    whole = view.as_dict(3501)
    assert whole["total_lag"] == 9
    assert whole["subscriptions"]["other_g"]["partitions"][0]["last_owner"] == "b"  # type: ignore[index]


def test_an_old_record_read_at_start_up_is_judged_by_when_it_was_written() -> None:
    view = ClusterView(gone_after_intervals=3)
    view.apply("old", record("old", 0, {0: 9}), now_ms=60_000)
    assert view.shown("old", now_ms=60_000) == "gone"


def test_a_clean_stop_shows_stopped_and_a_tombstone_forgets() -> None:
    view = ClusterView(gone_after_intervals=3)
    view.apply("a", record("a", 0, {0: 5}, state="stopped"), now_ms=0)
    assert view.shown("a", 10) == "stopped"
    assert view.owners("s_g", 10) == []
    assert view.expired(FORGET_AFTER_INTERVALS * INTERVAL) == []
    assert view.expired(FORGET_AFTER_INTERVALS * INTERVAL + 1) == ["a"]
    view.apply("a", None, now_ms=0)
    assert view.instances(0) == []


def test_a_partition_two_instances_claim_goes_to_the_fresher_record() -> None:
    view = ClusterView(gone_after_intervals=3)
    view.apply("a", record("a", 0, {0: 5}), now_ms=0)
    view.apply("b", record("b", 900, {0: 2}), now_ms=900)
    owners = view.owners("s_g", now_ms=1000)
    assert [(o["instance"], o["lag"]) for o in owners] == [("b", 2)]


def test_partitions_survivors_gave_up_in_a_rebalance_keep_their_lag_until_taken() -> None:
    """#34: three instances, one killed: the partitions the survivors gave up in the
    rebalance fell out of the view (and of total_lag) until their new owner reported."""
    view = ClusterView(gone_after_intervals=3)
    view.apply("a", record("a", 0, {0: 50, 1: 60}), now_ms=0)
    view.apply("b", record("b", 0, {2: 70}), now_ms=0)
    view.apply("a", record("a", 1000, {}), now_ms=1000)  # rebalancing: a gave up 0 and 1
    view.apply("b", record("b", 1000, {}), now_ms=1000)  # and b its 2
    owners = view.owners("s_g", now_ms=1500)
    assert [(o["partition"], o["instance"], o.get("last_owner"), o["lag"])
            for o in owners] == [(0, None, "a", 50), (1, None, "a", 60), (2, None, "b", 70)]
    assert view.as_dict(1500)["total_lag"] == 180
    view.apply("b", record("b", 2000, {0: 40, 1: 55, 2: 65}), now_ms=2000)  # b took them
    owners = view.owners("s_g", now_ms=2000)
    assert [(o["partition"], o["instance"], o["lag"]) for o in owners] == [
        (0, "b", 40), (1, "b", 55), (2, "b", 65)]
    view.apply("a", record("a", 2500, {}, key="other_g"), now_ms=2500)  # unsubscribed
    view.apply("b", record("b", 2500, {}, key="other_g"), now_ms=2500)
    assert view.owners("s_g", now_ms=2500) == [] and view.as_dict(2500)["total_lag"] == 0


def test_an_instances_problems_show_in_the_view() -> None:
    view = ClusterView(gone_after_intervals=3)
    status = InstanceStatus(instance="a", address="http://a", state="running", published_ms=0,
                            interval_ms=INTERVAL, problems=["record 'k' not applied"])
    view.apply("a", msgspec.json.encode(status), now_ms=0)
    view.apply("b", record("b", 0, {0: 1}), now_ms=0)
    assert [(i["instance"], i["problems"]) for i in view.instances(0)] == [
        ("a", ["record 'k' not applied"]), ("b", [])]
