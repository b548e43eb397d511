"""`OffsetCommit` on the wire, written and read with `struct` alone (issue 37).

At fan-out a commit round sends one `OffsetCommit` per group that moved (the protocol
carries one group per request): at 10,000 subscribers, 10,000 requests for one record
each. Through aiokafka's `Request`, its versioned struct, its header struct and its
generic `Schema`, writing one took more CPU than the rest of its round; a faster struct
under the same classes (this module's first form) still built three objects a request.
Here a request is bytes from a few cached pieces (a group's name and a topic's are
encoded once), and an answer is read into the partitions that refused, nothing for a
group that took its commit: the same bytes aiokafka writes and the same errors it reads
(tests/unit/test_commit_wire.py compares them with aiokafka's codec).

`CommitAnswers` is what aiokafka's connection reader needs in place of a request struct
(`parse_response_header`, `RESPONSE_TYPE.decode`), shared by every commit of a version.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO

from aiokafka.errors import IncompatibleBrokerVersion

API_KEY = 8
VERSIONS = (3, 2)
"""The versions written, newest first (aiokafka's `OffsetCommitRequest` speaks these)."""
NO_GENERATION = -1
NO_MEMBER = ""
KEEP_FOREVER = -1  # retention_time: the broker's default

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id (then the client id)
_PARTITION = struct.Struct(">iq")  # partition, offset (then the metadata)
_ANSWER = struct.Struct(">ih")  # partition, error code

Refused = tuple[tuple[str, int, int], ...]
"""An answer: (topic, partition, error code) of each partition that refused; () if none."""


@dataclass(frozen=True, slots=True)
class Commit:
    """One group's positions: per topic, (partition, next offset)."""

    group: str
    topics: Mapping[str, list[tuple[int, int]]]
    metadata: str = ""


@functools.lru_cache(maxsize=1 << 16)
def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def version_of(versions: Mapping[int, tuple[int, int]]) -> int:
    """The newest version both sides speak (`versions`: the broker's, per api key)."""
    low, high = versions.get(API_KEY, (0, -1))
    for version in VERSIONS:
        if low <= version <= high:
            return version
    raise IncompatibleBrokerVersion(f"OffsetCommit: the broker speaks v{low}-v{high}, "
                                    f"this client v{VERSIONS[-1]}-v{VERSIONS[0]}")


def write(commit: Commit, version: int, correlation_id: int, client_id: str) -> bytes:
    """The request (header and body, without the size in front) committing `commit`
    without membership (no generation, no member id, the broker's retention)."""
    metadata = _string(commit.metadata)
    parts = [_HEADER.pack(API_KEY, version, correlation_id), _string(client_id),
             _string(commit.group), _ANONYMOUS, _I32.pack(len(commit.topics))]
    for topic, partitions in commit.topics.items():
        parts += (_string(topic), _I32.pack(len(partitions)))
        for partition, offset in partitions:
            parts += (_PARTITION.pack(partition, offset), metadata)
    return b"".join(parts)


_ANONYMOUS = _I32.pack(NO_GENERATION) + _string(NO_MEMBER) + struct.pack(">q", KEEP_FOREVER)


class _Header:
    __slots__ = ("correlation_id",)

    def __init__(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id


class CommitAnswers:
    """Reads the answers of one version's commits (for aiokafka's connection reader)."""

    __slots__ = ("RESPONSE_TYPE", "_throttled")

    def __init__(self, version: int) -> None:
        self.RESPONSE_TYPE = self  # aiokafka decodes with `request.RESPONSE_TYPE.decode`
        self._throttled = version >= 3  # v3 answers start with the throttle time

    @staticmethod
    def parse_response_header(data: BytesIO) -> _Header:
        return _Header(_I32.unpack(data.read(4))[0])

    def decode(self, data: BytesIO) -> Refused:
        return refused_in(data.read(), 4 if self._throttled else 0)


ANSWERS = {version: CommitAnswers(version) for version in VERSIONS}


def refused_in(data: bytes, at: int) -> Refused:
    """The refusals in an answer's body from `at` (after the throttle time, if any)."""
    refused: list[tuple[str, int, int]] = []
    (count,) = _I32.unpack_from(data, at)
    at += 4
    for _ in range(max(count, 0)):
        (size,) = _I16.unpack_from(data, at)
        at += 2
        topic = data[at:at + max(size, 0)].decode()
        at += max(size, 0)
        (partitions,) = _I32.unpack_from(data, at)
        at += 4
        for partition, error in _ANSWER.iter_unpack(data[at:at + 6 * max(partitions, 0)]):
            if error:
                refused.append((topic, partition, error))
        at += 6 * max(partitions, 0)
    return tuple(refused)
