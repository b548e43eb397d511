"""A subscription is the pair (`id`, `group.id`) (issue 25, item 15): its key is one
string per pair, the joined `<id>_<group.id>` whenever `group.id` has no `_`, and parses
back into the pair."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.delivery.document.identity import legacy_name, pair_of_key, subscription_key
from actors.delivery.document.store import MAX_STEM, file_stem
from actors.delivery.document.subscription import InvalidSubscription

ids = st.text(alphabet="ab_%-.5F", max_size=12)
safe_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,98}", fullmatch=True)


def test_pairs_that_join_alike_get_two_keys_that_parse_back_to_each() -> None:
    first, second = subscription_key("k_a", "b"), subscription_key("k", "a_b")
    assert (first, second) == ("k_a_b", "k_a%5Fb")
    assert (pair_of_key(first), pair_of_key(second)) == (("k_a", "b"), ("k", "a_b"))
    assert legacy_name("k_a", "b") == legacy_name("k", "a_b") == "k_a_b"


@given(ids, ids, ids, ids)
def test_no_two_pairs_share_a_key(a: str, b: str, c: str, d: str) -> None:
    assert (subscription_key(a, b) == subscription_key(c, d)) == ((a, b) == (c, d))


@given(ids, ids)
def test_a_key_parses_back_into_its_pair(sub_id: str, group_id: str) -> None:
    assert pair_of_key(subscription_key(sub_id, group_id)) == (sub_id, group_id)


@given(safe_ids, safe_ids.filter(lambda g: "_" not in g))
def test_a_pair_whose_group_has_no_underscore_keeps_the_joined_name(
        sub_id: str, group_id: str) -> None:
    assert subscription_key(sub_id, group_id) == f"{sub_id}_{group_id}"


@pytest.mark.parametrize("text", ["no-separator", "a%41_b", "a_b%5f", "a_%5Fb%", "a%5F_b"])
def test_a_string_that_is_no_pairs_key_does_not_parse(text: str) -> None:
    with pytest.raises(ValueError, match="not a subscription key"):
        pair_of_key(text)


def test_long_keys_become_bounded_distinct_file_names_and_short_ones_stay() -> None:
    short = subscription_key("a" * 99, "b" * 100)
    assert file_stem(short) == short
    group = "g" + "_" * 98  # 99 characters, 98 of them 3 in the key
    stems = {file_stem(subscription_key(sub, group)) for sub in ("s" * 99, "t" * 99)}
    assert len(stems) == 2
    assert all(len(stem) == MAX_STEM and "/" not in stem for stem in stems)


@pytest.mark.parametrize("key", ["k_a/b", "../x_g", "x_" + "g" * 200, "%2E%2E_g"])
def test_keys_of_no_valid_pair_are_not_file_names(key: str) -> None:
    with pytest.raises(InvalidSubscription, match="invalid subscription name"):
        file_stem(key)
