"""The roster of a shared group member: who owns a topic, what to subscribe to, and which
subscription of a group a new one would collide with (actors/delivery/path/roster.py);
the member owns it and changes it only on its messages. The conflict check is the control
plane's, on documents (actors/delivery/document/overlap.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from actors.delivery.document.overlap import conflict
from actors.delivery.document.settings import rider_settings
from actors.delivery.document.subscription import Consumer, decode_consumer
from actors.delivery.path.member import Hold, InstanceMemberActor, Join, Release
from actors.delivery.path.roster import Rider, Roster
from actors.shared.group_consumer import Wiring
from runtime.host.metrics import Registry


def consumer(sub_id: str, *topics: dict[str, Any], group: str = "team",
             broker: str = "Kafka") -> Consumer:
    return decode_consumer({"id": sub_id, "group.id": group, "broker": broker,
                            "topics": list(topics),
                            "subscriptionMethod": {"type": "http",
                                                   "uri": "http://127.0.0.1:1/hook"}})


def rider(sub: Consumer) -> Rider:
    return Rider(rider_settings(sub), cast(Any, None), cast(Any, None))


def test_a_topic_already_consumed_in_the_group_conflicts_with_the_first_subscription() -> None:
    first = consumer("first", {"name": "orders"})
    second = consumer("second", {"name": "payments"}, {"name": "orders"})
    found = conflict(second, [first])
    assert found is not None and found[0].key == "first_team" and found[1] == "orders"


def test_other_groups_other_brokers_and_the_subscription_itself_never_conflict() -> None:
    mine = consumer("s", {"name": "orders"})
    others = [consumer("s", {"name": "orders"}), consumer("o", {"name": "orders"}, group="x"),
              consumer("b", {"name": "orders"}, broker="Other")]
    assert conflict(mine, others) is None


def test_a_pattern_conflicts_with_a_name_it_matches_and_with_the_same_pattern_only() -> None:
    named = consumer("named", {"name": "orders.eu"})
    broad = consumer("broad", {"name": r"orders\..*", "pattern": True})
    same = consumer("same", {"name": r"orders\..*", "pattern": True})
    different = consumer("different", {"name": r"orders\.(eu|us)", "pattern": True})
    assert conflict(broad, [named]) is not None
    assert conflict(named, [broad]) is not None
    assert conflict(same, [broad]) is not None
    assert conflict(different, [broad]) is None  # undecidable: routed to the first at run time
    assert conflict(consumer("n", {"name": "orders-eu"}), [broad]) is None  # full match only


def test_records_of_a_topic_go_to_its_owner_and_a_shared_pattern_match_to_the_first() -> None:
    roster = Roster("team")
    roster.join(rider(consumer("a", {"name": "orders"})))
    roster.join(rider(consumer("b", {"name": "pay.*", "pattern": True})))
    roster.join(rider(consumer("c", {"name": "payments|refunds", "pattern": True})))
    assert owner(roster, "orders") == "a_team"
    assert owner(roster, "payments") == "b_team"
    assert roster.claimants("payments") == ["b_team", "c_team"]
    assert owner(roster, "refunds") == "c_team"
    assert owner(roster, "unknown") is None


def owner(roster: Roster, topic: str) -> str | None:
    found = roster.owner_of(topic)
    return found.settings.key if found is not None else None


def test_the_roster_subscribes_to_the_union_and_moves_its_version_on_each_change() -> None:
    roster = Roster("team")
    roster.join(rider(consumer("a", {"name": "orders"})))
    roster.join(rider(consumer("b", {"name": "payments"})))
    assert roster.topics() == ["orders", "payments"] and not roster.uses_pattern()
    version = roster.version
    assert roster.leave("a_team") is not None and roster.version == version + 1
    assert roster.leave("a_team") is None and roster.version == version + 1
    assert roster.owner_of("orders") is None and roster.topics() == ["payments"]
    roster.join(rider(consumer("p", {"name": "x.+", "pattern": True})))
    assert roster.uses_pattern() and roster.patterns() == ["x.+"]
    assert roster.topics() == ["payments"]  # the member adds what the pattern matches


def test_joining_with_the_same_seat_again_changes_nothing_and_a_new_seat_joins_last() -> None:
    roster = Roster("team")
    a, b = rider(consumer("a", {"name": "orders"})), rider(consumer("b", {"name": "orders"}))
    roster.join(a)
    roster.join(b)
    version = roster.version
    roster.join(a)  # a member built with a copy of the record, then the rider's own Join
    assert roster.version == version and list(roster.riders) == ["a_team", "b_team"]
    roster.join(Rider(a.settings, cast(Any, None), cast(Any, None)))  # its tree built again
    assert roster.version == version + 1 and list(roster.riders) == ["b_team", "a_team"]


async def test_the_member_owns_its_roster_and_takes_joins_holds_and_releases_by_message(
        ) -> None:
    wiring = Wiring(cast(Any, None), "127.0.0.1:9", 100, 10)
    seated = rider(consumer("a", {"name": "orders"}))
    member = InstanceMemberActor("instance:Kafka", "instances", [seated], wiring, {},
                                 Registry(), held=True)
    assert list(member.roster.riders) == ["a_team"] and member.held
    await member.handle(Join(rider(consumer("b", {"name": "payments"}))))
    assert member.roster.topics() == ["orders", "payments"]
    await member.handle(Release())
    assert not member.held
    await member.handle(Hold())
    assert member.held


def test_the_roster_knows_a_groups_riders_and_who_joined_since_it_was_asked() -> None:
    roster = Roster("instances")
    a, b = rider(consumer("a", {"name": "t1"})), rider(consumer("b", {"name": "t2"}, group="x"))
    roster.join(a)
    roster.join(b)
    assert roster.of_group("team") == {a.settings.key} and roster.topics() == ["t1", "t2"]
    assert roster.joined() == [a.settings.key, b.settings.key] and roster.joined() == []
    roster.leave(a.settings.key)
    assert roster.of_group("team") == set() and roster.topics() == ["t2"]
    roster.join(a)
    roster.leave(a.settings.key)
    assert roster.joined() == []  # joined and left again: nothing to route
    c = rider(consumer("c", {"name": "t2"}, {"pattern": "t.*"}, group="y"))
    roster.join(c)
    assert roster.topics() == ["t2"] and roster.patterns() == ["t.*"]
    roster.leave(b.settings.key)  # c still names t2
    assert roster.topics() == ["t2"] and roster.groups() == ["y"]
    roster.leave(c.settings.key)
    assert roster.topics() == [] and not roster.uses_pattern() and roster.groups() == []


class Walked(list[Rider]):
    """Riders that count how often they are walked."""

    walks = 0

    def __iter__(self) -> Iterator[Rider]:
        Walked.walks += 1
        return super().__iter__()


def test_fetch_tuning_walks_the_riders_only_when_one_is_new_or_one_left() -> None:
    """#34 item 7: every roster change walked all 10,000 riders to find none new."""
    from actors.delivery.path.member.tuning import FetchTuning

    tuning = FetchTuning()
    riders = Walked(rider(consumer(f"s{n}", {"name": f"t{n}"})) for n in range(3))
    tuning.note(riders)
    Walked.walks = 0
    tuning.note(riders)
    assert Walked.walks == 0 and len(tuning.tuned) == 3
    riders.append(rider(consumer("s9", {"name": "t9"})))
    tuning.note(riders)
    assert Walked.walks == 1 and "s9_team" in tuning.tuned
    del riders[0]
    tuning.left()
    tuning.note(riders)
    assert Walked.walks == 2 and "s0_team" not in tuning.tuned
