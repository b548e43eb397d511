"""The direct `OffsetCommit` codec writes and reads what aiokafka's generic one does."""

from __future__ import annotations

from io import BytesIO

import pytest
from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.protocol.api import ResponseHeader_v0
from aiokafka.protocol.commit import OffsetCommitRequest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.kafka import commit_wire
from runtime.kafka.commit_wire import Commit

names = st.text(min_size=0, max_size=12)
partitions = st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(-1, 2**63 - 1)),
                      max_size=4)
answers = st.lists(st.tuples(names, st.lists(st.tuples(st.integers(0, 2**31 - 1),
                                                       st.integers(-2**15, 2**15 - 1)),
                                             max_size=4)), max_size=3)


@settings(max_examples=60, deadline=None)
@given(group=names, topics=st.dictionaries(names, partitions, max_size=3), metadata=names,
       correlation=st.integers(0, 2**31 - 1), client=names)
def test_a_commit_is_written_as_aiokafka_writes_it(
        group: str, topics: dict[str, list[tuple[int, int]]], metadata: str,
        correlation: int, client: str) -> None:
    for version in commit_wire.VERSIONS:
        written = commit_wire.write(Commit(group, topics, metadata), version, correlation,
                                    client)
        theirs = OffsetCommitRequest(group, -1, "", -1, [
            (topic, [(p, offset, metadata) for p, offset in parts])
            for topic, parts in topics.items()]).prepare({8: (version, version)})
        assert version == theirs.API_VERSION
        assert written == theirs.build_request_header(
            correlation_id=correlation, client_id=client).encode() + theirs.encode()


@settings(max_examples=60, deadline=None)
@given(topics=answers, throttle=st.integers(0, 2**31 - 1), correlation=st.integers(0, 2**31 - 1))
def test_an_answer_is_read_into_the_partitions_that_refused(
        topics: list[tuple[str, list[tuple[int, int]]]], throttle: int, correlation: int) -> None:
    for version in commit_wire.VERSIONS:
        theirs = OffsetCommitRequest("g", -1, "", -1, []).prepare({8: (version, version)})
        fields = (throttle, topics) if version >= 3 else (topics,)
        wire = BytesIO(ResponseHeader_v0(correlation).encode()
                       + theirs.RESPONSE_TYPE(*fields).encode())
        answers = commit_wire.ANSWERS[version]
        assert answers.parse_response_header(wire).correlation_id == correlation
        assert answers.RESPONSE_TYPE.decode(wire) == tuple(
            (topic, p, error) for topic, parts in topics for p, error in parts if error)


def test_the_newest_version_both_sides_speak_is_written() -> None:
    assert commit_wire.version_of({8: (0, 8)}) == 3
    assert commit_wire.version_of({8: (0, 2)}) == 2
    with pytest.raises(IncompatibleBrokerVersion, match="OffsetCommit: the broker speaks v0-v1"):
        commit_wire.version_of({8: (0, 1)})
    with pytest.raises(IncompatibleBrokerVersion):
        commit_wire.version_of({})
