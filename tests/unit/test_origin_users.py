"""Which subscriptions push to each origin and the limits they ask for
(actors/delivery/control/origin_users.py): joins and leaves are counted by value."""

from __future__ import annotations

from actors.delivery.control.origin_users import Limits, OriginUsers
from actors.delivery.egress.origin import BreakerSettings, Origins


def test_an_origin_sees_the_distinct_limits_of_who_pushes_there_now() -> None:
    origins, users = Origins(), OriginUsers()
    here, there = origins.get("http://a.example/hook"), origins.get("http://b.example/x")
    loose, strict = Limits(None, BreakerSettings()), Limits(5.0, BreakerSettings(0.1, 5, 1))
    for n in range(1000):
        users.join(f"s{n}", here, loose)
    users.join("strict", here, strict)
    assert set(users.limits(here)) == {loose, strict} and users.limits(there) == []
    users.join("strict", there, strict)  # an update moved it elsewhere
    assert users.limits(here) == [loose] and users.limits(there) == [strict]
    users.leave("strict")
    users.leave("never joined")
    assert users.limits(there) == []
    for n in range(1000):
        users.leave(f"s{n}")
    assert users.limits(here) == [] and len(users) == 0
