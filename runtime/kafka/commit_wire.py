"""`OffsetCommit` on the wire without aiokafka's generic codec (issue 37).

At fan-out a commit round sends one `OffsetCommit` per group that moved: with a thousand
subscriptions, a request and its answer every few deliveries. aiokafka writes and reads
each through its generic `Schema` (a generator per array, a `Struct` for each header), an
eighth of a fan-out delivery's CPU in a cProfile of `bench/fanout.py --subscribers 1000`.
`FastOffsetCommitRequest` is aiokafka's `OffsetCommitRequest` whose structs (v2 and v3,
the versions aiokafka speaks) write the header and the body, and read the answer's header
and body, with `struct`: the same bytes, the same response objects
(tests/unit/test_commit_wire.py compares them with aiokafka's codec).
"""

from __future__ import annotations

import struct
from io import BytesIO

from aiokafka.protocol.commit import (
    OffsetCommitRequest,
    OffsetCommitRequest_v2,
    OffsetCommitRequest_v3,
    OffsetCommitRequestStruct,
    OffsetCommitResponse_v2,
    OffsetCommitResponse_v3,
)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id (then the client id)
_PARTITION = struct.Struct(">iq")  # partition, offset (then the metadata)
_ANSWER = struct.Struct(">ih")  # partition, error code


def _string(text: str | None) -> bytes:
    if text is None:
        return b"\xff\xff"
    data = text.encode()
    return _I16.pack(len(data)) + data


class _Encoded:
    """A request header, encoded once."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def encode(self) -> bytes:
        return self._data


class _ResponseHeader:
    """`ResponseHeader_v0`: the correlation id."""

    __slots__ = ("correlation_id",)

    def __init__(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id


def _read_topics(data: bytes, at: int) -> list[tuple[str | None, list[tuple[int, int]]]]:
    topics: list[tuple[str | None, list[tuple[int, int]]]] = []
    (count,) = _I32.unpack_from(data, at)
    at += 4
    for _ in range(max(count, 0)):
        (size,) = _I16.unpack_from(data, at)
        at += 2
        topic = None
        if size >= 0:
            topic = data[at:at + size].decode()
            at += size
        (parts,) = _I32.unpack_from(data, at)
        at += 4
        answers = [_ANSWER.unpack_from(data, at + 6 * n) for n in range(max(parts, 0))]
        at += 6 * max(parts, 0)
        topics.append((topic, answers))
    return topics


def _rest(data: BytesIO | bytes) -> bytes:
    return data.read() if isinstance(data, BytesIO) else data


class _FastResponseV2(OffsetCommitResponse_v2):  # type: ignore[misc]  # aiokafka is untyped
    @classmethod
    def decode(cls, data: BytesIO | bytes) -> _FastResponseV2:
        return cls(_read_topics(_rest(data), 0))


class _FastResponseV3(OffsetCommitResponse_v3):  # type: ignore[misc]  # aiokafka is untyped
    @classmethod
    def decode(cls, data: BytesIO | bytes) -> _FastResponseV3:
        raw = _rest(data)
        (throttle,) = _I32.unpack_from(raw, 0)
        return cls(throttle, _read_topics(raw, 4))


class _FastCodec:
    """What the v2 and v3 structs share: the same body, the v1 request header."""

    API_KEY: int
    API_VERSION: int

    def encode(self) -> bytes:
        fields = vars(self)  # aiokafka's `Struct` keeps its fields there
        topics = fields["topics"]
        parts = [_string(fields["consumer_group"]),
                 _I32.pack(fields["consumer_group_generation_id"]),
                 _string(fields["consumer_id"]), _I64.pack(fields["retention_time"]),
                 _I32.pack(len(topics))]
        for topic, partitions in topics:
            parts += (_string(topic), _I32.pack(len(partitions)))
            for partition, offset, metadata in partitions:
                parts += (_PARTITION.pack(partition, offset), _string(metadata))
        return b"".join(parts)

    def build_request_header(self, correlation_id: int,
                             client_id: str) -> _Encoded:
        return _Encoded(_HEADER.pack(self.API_KEY, self.API_VERSION, correlation_id)
                        + _string(client_id))

    def parse_response_header(self,
                              read_buffer: BytesIO | bytes) -> _ResponseHeader:
        data = read_buffer.read(4) if isinstance(read_buffer, BytesIO) else read_buffer[:4]
        return _ResponseHeader(_I32.unpack(data)[0])


class _FastV2(_FastCodec, OffsetCommitRequest_v2):  # type: ignore[misc]  # aiokafka is untyped
    RESPONSE_TYPE = _FastResponseV2


class _FastV3(_FastCodec, OffsetCommitRequest_v3):  # type: ignore[misc]  # aiokafka is untyped
    RESPONSE_TYPE = _FastResponseV3


_FAST: dict[type[OffsetCommitRequestStruct], type[OffsetCommitRequestStruct]] = {
    OffsetCommitRequest_v2: _FastV2, OffsetCommitRequest_v3: _FastV3}


class FastOffsetCommitRequest(OffsetCommitRequest):  # type: ignore[misc]  # aiokafka is untyped
    """aiokafka's `OffsetCommitRequest`, built as the fast struct of its version."""

    def build(self, request_struct_class: type[OffsetCommitRequestStruct],
              ) -> OffsetCommitRequestStruct:
        return super().build(_FAST.get(request_struct_class, request_struct_class))
