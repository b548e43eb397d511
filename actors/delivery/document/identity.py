"""A subscription's identity: the pair (`id`, `group.id`), kept inside as one string, its
key (issue 25, item 15).

Queue-Over-Http joins the pair as `<id>_<group.id>` (the `QOH-Consumer` header), but
(`k_a`, `b`) and (`k`, `a_b`) join the same: they are two subscriptions all the same. The
key is that joined name with `%` and `_` of `group.id` percent-encoded (and `%` of `id`),
so it splits at its last `_` and no two pairs share a key. A pair whose `group.id` holds
neither `_` nor `%` keeps the joined name as its key, which is what every key was before:
store files, journals, metrics and records of the subscriptions topic written by earlier
versions keep their names. Earlier names of the other pairs are still recognised where
they were persisted (`legacy_name`, actors/delivery/document/store.py,
actors/delivery/control/registry.py).

The key is the actor's, the store file's (a stem, see the store), the metrics label's, the
journal's `subscription` and the subscriptions topic's record key. The admin API
addresses a subscription by its pair (`/broker/subscription/{id}/{groupId}`).
"""

from __future__ import annotations

import urllib.parse


def subscription_key(sub_id: str, group_id: str) -> str:
    """The key of (`sub_id`, `group_id`): injective, and `<id>_<group.id>` when `group_id`
    holds no `_` and neither part a `%`."""
    sub = sub_id.replace("%", "%25")
    group = group_id.replace("%", "%25").replace("_", "%5F")
    return f"{sub}_{group}"


def pair_of_key(key: str) -> tuple[str, str]:
    """The pair whose key is `key`; `ValueError` for a string no pair has as its key."""
    sub, separator, group = key.rpartition("_")
    pair = urllib.parse.unquote(sub), urllib.parse.unquote(group)
    if not separator or subscription_key(*pair) != key:
        raise ValueError(f"not a subscription key: {key!r}")
    return pair


def legacy_name(sub_id: str, group_id: str) -> str:
    """`<id>_<group.id>`: the key before issue 25, and still the `QOH-Consumer` header
    (Queue-Over-Http's contract). Not unique: never a key."""
    return f"{sub_id}_{group_id}"
