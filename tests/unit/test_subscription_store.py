"""The subscription store: a round trip through the disk, all of it in a worker thread;
corrupt files moved aside; names that could escape the directory refused."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import threading
import time
from asyncio import Future
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from actors.delivery.document.store import SubscriptionStore, encode
from actors.delivery.document.subscription import (
    Consumer,
    InvalidSubscription,
    decode_consumer,
    document,
)
from actors.delivery.document.writes import WriteQueue


def consumer(sub_id: str, **method: Any) -> Consumer:
    return decode_consumer({
        "id": sub_id, "group.id": "g", "broker": "Kafka", "topics": [{"name": "orders"}],
        "subscriptionMethod": {"uri": "http://127.0.0.1:9/hook", **method},
    })


async def test_saved_subscriptions_load_back_equal_in_name_order(tmp_path: Path) -> None:
    store = SubscriptionStore(tmp_path / "persist")
    second, first = consumer("b", signingSecret="whsec_c2VjcmV0"), consumer("a")
    await store.save(second)
    await store.save(first)
    assert await store.load_all() == ([first, second], [])
    assert sorted(os.listdir(tmp_path / "persist")) == ["a_g.json", "b_g.json"]


async def test_saving_again_replaces_the_file(tmp_path: Path) -> None:
    store = SubscriptionStore(tmp_path)
    await store.save(consumer("a"))
    await store.save(consumer("a", timeoutMs=5))
    loaded, _ = await store.load_all()
    assert [c.subscriptionMethod.timeoutMs for c in loaded] == [5]


async def test_delete_removes_the_file_and_a_missing_one_is_fine(tmp_path: Path) -> None:
    store = SubscriptionStore(tmp_path)
    await store.save(consumer("a"))
    await store.delete("a_g")
    await store.delete("a_g")
    assert await store.load_all() == ([], [])
    assert os.listdir(tmp_path) == []


async def test_files_deleted_together_go_in_one_batch_a_failure_raised_after_the_rest(
        tmp_path: Path) -> None:
    store = SubscriptionStore(tmp_path)
    await asyncio.gather(*(store.save(consumer(f"s{i}")) for i in range(3)))
    (tmp_path / "stuck_g.json").mkdir()  # a directory: unlink fails
    (tmp_path / "stuck_g.json" / "inside").touch()
    batches = store.batches
    with pytest.raises(IsADirectoryError):
        await store.delete("s0_g", "stuck_g", "s1_g", "s2_g")
    assert store.batches == batches + 1
    assert sorted(os.listdir(tmp_path)) == ["stuck_g.json"]


async def test_changes_asked_together_are_all_queued_before_the_writer_takes_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer thread may take its first batch before the loop goes on (it did under
    `make test`'s load: files deleted together went in two batches). Here it takes at once,
    as soon as it is started: the deletes asked together still go in one batch."""
    store = SubscriptionStore(tmp_path)
    await asyncio.gather(*(store.save(consumer(f"s{i}")) for i in range(3)))
    loop = asyncio.get_running_loop()

    def at_once(executor: object, work: Callable[..., None], *args: object) -> Future[None]:
        done: Future[None] = loop.create_future()
        done.set_result(work(*args))
        return done

    monkeypatch.setattr(loop, "run_in_executor", at_once)
    batches = store.batches
    await store.delete("s0_g", "s1_g", "s2_g")
    assert store.batches == batches + 1
    assert os.listdir(tmp_path) == []


async def test_a_missing_directory_loads_as_empty(tmp_path: Path) -> None:
    assert await SubscriptionStore(tmp_path / "none").load_all() == ([], [])


@pytest.mark.parametrize("key", ["../etc", "..", ".hidden", "a/b", "", "a_g\n", "x" * 201])
async def test_names_that_could_escape_the_directory_are_refused(
        tmp_path: Path, key: str) -> None:
    with pytest.raises(InvalidSubscription, match="invalid subscription name"):
        await SubscriptionStore(tmp_path).delete(key)


async def test_a_corrupt_file_is_reported_moved_aside_and_the_rest_loaded(
        tmp_path: Path) -> None:
    store = SubscriptionStore(tmp_path)
    await store.save(consumer("good"))
    (tmp_path / "broken_g.json").write_text("{half a file")
    loaded, problems = await store.load_all()
    assert [c.key for c in loaded] == ["good_g"]
    assert len(problems) == 1 and problems[0].startswith("broken_g.json: malformed JSON")
    assert sorted(os.listdir(tmp_path)) == ["broken_g.json.corrupt", "good_g.json"]
    assert await store.load_all() == (loaded, [])  # not retried


async def test_a_temp_file_left_by_a_crash_is_not_loaded(tmp_path: Path) -> None:
    store = SubscriptionStore(tmp_path)
    await store.save(consumer("a"))
    (tmp_path / ".a_g.json.0badf00d.tmp").write_text("{half a file")
    assert [c.key for c in (await store.load_all())[0]] == ["a_g"]


async def test_file_work_runs_off_the_event_loop_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads = _record_threads(monkeypatch, "fsync", "replace", "unlink", "rename")
    (tmp_path / "broken_g.json").write_text("{half a file")
    store = SubscriptionStore(tmp_path)
    await store.save(consumer("a"))
    await store.delete("a_g")
    await store.load_all()
    assert {"fsync", "replace", "unlink", "rename"} <= {name for name, _ in threads}
    assert threading.get_ident() not in {ident for _, ident in threads}


def _record_threads(monkeypatch: pytest.MonkeyPatch, *names: str) -> list[tuple[str, int]]:
    """Record which thread calls each of the `os` functions `names` (pathlib uses them)."""
    seen: list[tuple[str, int]] = []
    for name in names:
        monkeypatch.setattr(os, name, _recording(name, getattr(os, name), seen))
    return seen


def _recording(name: str, real: Callable[..., Any],
               seen: list[tuple[str, int]]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        seen.append((name, threading.get_ident()))
        return real(*args, **kwargs)

    return call


async def test_saves_of_different_subscriptions_may_run_at_once(tmp_path: Path) -> None:
    store = SubscriptionStore(tmp_path)
    await asyncio.gather(*(store.save(consumer(f"s{i}")) for i in range(8)))
    assert [c.id for c in (await store.load_all())[0]] == [f"s{i}" for i in range(8)]
    assert len(os.listdir(tmp_path)) == 8


def _hold_the_first_batch(store: SubscriptionStore) -> threading.Event:
    """The writer's first batch waits in its thread until the event is set."""
    write_all, held = store._write_all, threading.Event()

    def writing(files: list[tuple[Path, bytes | None]]) -> list[OSError | None]:
        if store.batches == 1:  # `take` counts the batch before it is written
            assert held.wait(timeout=30), "the test never let the first batch go"
        return write_all(files)

    store._write_all = writing  # type: ignore[method-assign]
    return held


async def test_saves_asked_together_are_written_in_one_batch_each_answered_alone(
        tmp_path: Path) -> None:
    """A group commit: the first save's batch is written while the next 19 queue, and
    those go together. A file that cannot be written fails its own save only."""
    (tmp_path / "bad_g.json").mkdir()  # a rename onto a directory fails
    (tmp_path / "bad_g.json" / "inside").touch()
    store = SubscriptionStore(tmp_path)
    queued = _hold_the_first_batch(store)  # else the writer may take the queue in parts
    saves = [store.save(consumer(f"s{i}")) for i in range(19)] + [store.save(consumer("bad"))]
    queued.set()
    outcomes = await asyncio.gather(*saves, return_exceptions=True)
    assert [type(o).__name__ for o in outcomes] == ["NoneType"] * 19 + ["IsADirectoryError"]
    assert store.batches == 2
    assert {c.id for c in (await store.load_all())[0]} == {f"s{i}" for i in range(19)}


async def test_two_saves_of_one_file_never_overlap_and_the_last_asked_stays(
        tmp_path: Path) -> None:
    store = SubscriptionStore(tmp_path)
    versions = [consumer("s", uri=f"http://127.0.0.1:{8000 + n}/hook") for n in range(6)]
    await asyncio.gather(*(store.save(c) for c in versions))
    assert store.batches == len(versions)  # each waited for the one before
    assert (await store.load_all())[0] == [versions[-1]]


async def test_the_writer_takes_the_next_batch_without_waiting_for_the_loop(
        tmp_path: Path) -> None:
    """Two changes of one file are two batches; the second is written while the loop is
    held (on purpose, here) and never ran the first one's completion (issue 32: a loop
    turn at 10,000 subscribers is long, and each batch waited for one)."""
    store = SubscriptionStore(tmp_path)
    first, second = (consumer("s", uri=f"http://127.0.0.1:{port}/hook") for port in (8001, 8002))
    saves = [store.save(first), store.save(second)]
    path, wanted = store.path(second.key), encode(second)
    held_until = time.monotonic() + 10
    while not (path.exists() and path.read_bytes() == wanted):  # the loop thread held
        assert time.monotonic() < held_until, "the second batch waited for the loop"
        threading.Event().wait(0.005)
    assert not any(save.done() for save in saves)  # answered on the loop, which was held
    await asyncio.gather(*saves)
    assert store.batches == 2


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_files_are_0600_in_a_0700_directory_even_one_made_0755_before(
        tmp_path: Path) -> None:
    directory = tmp_path / "persist"
    directory.mkdir(mode=0o755)  # as the preflight check leaves it
    os.chmod(directory, 0o755)
    await SubscriptionStore(directory).save(consumer("a", signingSecret="whsec_c2VjcmV0"))
    assert mode(directory) == 0o700
    assert mode(directory / "a_g.json") == 0o600


async def test_a_file_holds_the_queue_over_http_document_with_its_secrets(
        tmp_path: Path) -> None:
    await SubscriptionStore(tmp_path).save(consumer("a", signingSecret="whsec_c2VjcmV0"))
    saved = json.loads((tmp_path / "a_g.json").read_bytes())
    assert saved["group"] == {"id": "g", "name": "NO_NAME"}
    assert saved["subscriptionMethod"]["signingSecret"] == "whsec_c2VjcmV0"


async def test_a_file_from_an_earlier_version_loads_and_is_rewritten_in_the_current_form(
        tmp_path: Path) -> None:
    old = {"id": "a", "group.id": "g", "broker": "Kafka", "topics": [{"pattern": "o.*"}],
           "subscriptionMethod": {"uri": "http://127.0.0.1:9/hook"}}
    path = tmp_path / "a_g.json"
    path.write_text(json.dumps(old))
    os.chmod(path, 0o644)
    [loaded], problems = await SubscriptionStore(tmp_path).load_all()
    assert (loaded.key, loaded.topics[0].pattern, problems) == ("a_g", "o.*", [])
    rewritten = json.loads(path.read_bytes())
    assert rewritten["group"]["id"] == "g" and "group.id" not in rewritten
    assert rewritten["topics"][0] | {"config": None} == {
        "name": "o.*", "pattern": True, "partitions": [], "config": None}
    assert mode(path) == 0o600


async def test_a_file_named_unlike_its_subscription_is_renamed_and_a_second_copy_set_aside(
        tmp_path: Path) -> None:
    store = SubscriptionStore(tmp_path)
    await store.save(consumer("a"))
    content = (tmp_path / "a_g.json").read_bytes()
    (tmp_path / "a_g.json").rename(tmp_path / "copied.json")
    (tmp_path / "z-second.json").write_bytes(content)
    loaded, problems = await store.load_all()
    assert [c.key for c in loaded] == ["a_g"]
    assert len(problems) == 1 and problems[0].startswith("z-second.json")
    assert sorted(os.listdir(tmp_path)) == ["a_g.json", "z-second.json.corrupt"]
    await store.delete("a_g")  # unsubscribe finds it under its own name
    assert sorted(os.listdir(tmp_path)) == ["z-second.json.corrupt"]


def paired(sub_id: str, group_id: str) -> Consumer:
    return decode_consumer({
        "id": sub_id, "group": {"id": group_id}, "broker": "Kafka",
        "topics": [{"name": "orders"}], "subscriptionMethod": {"uri": "http://127.0.0.1:9/hook"},
    })


async def test_pairs_that_join_alike_are_two_files_each_deleted_alone(tmp_path: Path) -> None:
    store = SubscriptionStore(tmp_path)
    await store.save(paired("k_a", "b"))
    await store.save(paired("k", "a_b"))
    assert sorted(os.listdir(tmp_path)) == ["k_a%5Fb.json", "k_a_b.json"]
    loaded, _ = await store.load_all()
    assert sorted((c.id, c.group_id) for c in loaded) == [("k", "a_b"), ("k_a", "b")]
    await store.delete(paired("k", "a_b").key)
    assert [(c.id, c.group_id) for c in (await store.load_all())[0]] == [("k_a", "b")]


async def test_a_store_written_with_the_joined_names_of_before_issue_25_still_loads(
        tmp_path: Path) -> None:
    """Files named `<id>_<group.id>.json`, as every version before issue 25 named them: a
    pair whose group.id has no `_` keeps its file; one with a `_` is renamed to its key."""
    for pair in (("svc_1", "orders"), ("k", "a_b")):
        raw = msgspec.json.encode(document(paired(*pair), redact=False))
        (tmp_path / f"{pair[0]}_{pair[1]}.json").write_bytes(raw)
    loaded, problems = await SubscriptionStore(tmp_path).load_all()
    assert problems == []
    assert sorted((c.id, c.group_id) for c in loaded) == [("k", "a_b"), ("svc_1", "orders")]
    assert sorted(os.listdir(tmp_path)) == ["k_a%5Fb.json", "svc_1_orders.json"]


async def test_a_key_too_long_for_a_file_name_is_stored_under_a_bounded_one(
        tmp_path: Path) -> None:
    long = paired("s" * 100, "g" + "_" * 98)  # accepted before issue 25: 199 joined
    store = SubscriptionStore(tmp_path)
    await store.save(long)
    [name] = os.listdir(tmp_path)
    assert len(name) < 255 - 20 and len(long.key) > 255
    assert await store.load_all() == ([long], [])
    await store.delete(long.key)
    assert os.listdir(tmp_path) == []


async def test_a_writer_that_fails_outside_its_batches_fails_the_saves_it_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No save waits for ever: an error of the writer itself (not a file's) goes to every
    save still queued, and the next save starts a new writer."""
    store = SubscriptionStore(tmp_path)

    def broken(self: WriteQueue[Any]) -> list[Any]:
        raise RuntimeError("the writer broke")

    monkeypatch.setattr(WriteQueue, "take", broken)
    saves = [store.save(consumer(f"s{i}")) for i in range(3)]
    outcomes = await asyncio.gather(*saves, return_exceptions=True)
    assert [str(o) for o in outcomes] == ["the writer broke"] * 3
    monkeypatch.undo()
    await store.save(consumer("after"))
    assert [c.id for c in (await store.load_all())[0]] == ["after"]
