"""Foreign writers of a subscription's group (issue 32, item 8): pure decisions."""

from __future__ import annotations

from aiokafka import TopicPartition

from actors.delivery.path.member.writers import CLEAN_READS, Writers, mark

TP = TopicPartition("t", 0)


def test_a_commit_marked_by_another_instance_group_is_foreign_and_named() -> None:
    writers = Writers(mark("ours"))
    assert writers.seen("g", TP, 10, mark("theirs"), settled=False) == "theirs"
    assert "instance group 'theirs'" in (writers.reason("g") or "")
    assert writers.seen("g", TP, 11, mark("theirs"), settled=False) is None  # said once


def test_an_offset_this_instance_did_not_write_is_foreign_once_its_own_commits_settled() -> None:
    writers = Writers(mark("ours"))
    writers.wrote("g", TP, 10)
    assert writers.seen("g", TP, 12, "", settled=False) is None  # ours may be on the way
    assert writers.seen("g", TP, 10, "", settled=True) is None
    assert writers.seen("g", TP, 12, "", settled=True) is not None
    assert "did not commit" in (writers.reason("g") or "")


def test_a_read_asked_before_one_of_ours_landed_is_not_judged_on_its_older_offset() -> None:
    """The read goes out, our commit of 12 settles, the read's answer (10) comes in: it
    may predate our commit, so it says nothing; the next read judges again."""
    writers = Writers(mark("ours"))
    writers.wrote("g", TP, 10)
    writers.asking({"g": [TP]})
    writers.wrote("g", TP, 12)
    assert writers.seen("g", TP, 10, "", settled=True) is None
    assert writers.reason("g") is None
    writers.asking({"g": [TP]})
    assert writers.seen("g", TP, 11, "", settled=True) is not None  # not ours, asked after


def test_a_partition_that_moved_to_another_instance_is_not_foreign() -> None:
    writers = Writers(mark("ours"))
    writers.wrote("g", TP, 10)
    writers.forget("g", TP)  # revoked: the next owner writes there now
    assert writers.seen("g", TP, 50, "", settled=True) is None


def test_a_foreign_writer_is_forgotten_after_clean_reads_in_a_row() -> None:
    writers = Writers(mark("ours"))
    writers.seen("g", TP, 10, mark("theirs"), settled=True)
    for _ in range(CLEAN_READS - 1):
        writers.seen("g", TP, 10, mark("ours"), settled=True)
    assert writers.reason("g") is not None
    writers.seen("g", TP, 10, mark("ours"), settled=True)
    assert writers.reason("g") is None


def test_samples_rotate_over_every_group() -> None:
    writers = Writers(mark("ours"))
    groups = [f"g{n}" for n in range(100)]
    seen: set[str] = set()
    now = 0
    while len(seen) < len(groups):
        assert writers.due(now)
        seen.update(writers.sample(groups, now))
        writers.reading = False
        now = writers.next_ms
