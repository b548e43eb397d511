"""The fast `OffsetCommit` codec writes and reads what aiokafka's generic one does."""

from __future__ import annotations

from io import BytesIO

from aiokafka.protocol.api import ResponseHeader_v0
from aiokafka.protocol.commit import (
    OffsetCommitRequest,
    OffsetCommitRequest_v2,
    OffsetCommitRequest_v3,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.kafka.commit_wire import FastOffsetCommitRequest

names = st.text(min_size=0, max_size=12)
partitions = st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(-1, 2**63 - 1), names),
                      max_size=4)
topics = st.lists(st.tuples(names, partitions), max_size=3)
answers = st.lists(st.tuples(names, st.lists(st.tuples(st.integers(0, 2**31 - 1),
                                                       st.integers(-2**15, 2**15 - 1)),
                                             max_size=4)), max_size=3)


@settings(max_examples=60, deadline=None)
@given(group=names, member=names, generation=st.integers(-1, 2**31 - 1), topics=topics,
       correlation=st.integers(0, 2**31 - 1), client=names)
def test_a_commit_request_is_written_as_aiokafka_writes_it(
        group: str, member: str, generation: int,
        topics: list[tuple[str, list[tuple[int, int, str]]]], correlation: int,
        client: str) -> None:
    for struct_class in (OffsetCommitRequest_v2, OffsetCommitRequest_v3):
        args = (group, generation, member, -1, topics)
        fast = FastOffsetCommitRequest(*args).build(struct_class)
        slow = OffsetCommitRequest(*args).build(struct_class)
        assert fast.encode() == slow.encode()
        assert fast.build_request_header(correlation, client).encode() == \
            slow.build_request_header(correlation_id=correlation, client_id=client).encode()
        assert fast.API_VERSION == slow.API_VERSION and fast.API_KEY == slow.API_KEY


@settings(max_examples=60, deadline=None)
@given(topics=answers, throttle=st.integers(0, 2**31 - 1), correlation=st.integers(0, 2**31 - 1))
def test_a_commit_answer_is_read_as_aiokafka_reads_it(
        topics: list[tuple[str, list[tuple[int, int]]]], throttle: int, correlation: int) -> None:
    for struct_class, fields in ((OffsetCommitRequest_v2, (topics,)),
                                 (OffsetCommitRequest_v3, (throttle, topics))):
        fast = FastOffsetCommitRequest("g", -1, "", -1, []).build(struct_class)
        slow = OffsetCommitRequest("g", -1, "", -1, []).build(struct_class)
        wire = ResponseHeader_v0(correlation).encode() + slow.RESPONSE_TYPE(*fields).encode()
        read_fast, read_slow = BytesIO(wire), BytesIO(wire)
        assert fast.parse_response_header(read_fast).correlation_id == \
            slow.parse_response_header(read_slow).correlation_id == correlation
        got, expected = fast.RESPONSE_TYPE.decode(read_fast), slow.RESPONSE_TYPE.decode(read_slow)
        assert [(t, [tuple(p) for p in ps]) for t, ps in got.topics] == \
            [(t, [tuple(p) for p in ps]) for t, ps in expected.topics]
        assert vars(got) == vars(expected)
        if struct_class is OffsetCommitRequest_v3:
            assert got.throttle_time_ms == expected.throttle_time_ms == throttle
