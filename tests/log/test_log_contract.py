"""One contract, two patch logs: the embedded SQL log and Kafka (a real tansu broker)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lucid_hub.db.session import Database
from lucid_hub.log import LogConsumer, LogRecord, PatchLog


@pytest.fixture(params=["sql", "kafka"])
def patch_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PatchLog]:
    if request.param == "sql":
        from lucid_hub.log.sql import SqlPatchLog

        db = Database(f"sqlite:///{tmp_path / 'log.db'}")
        db.upgrade()
        yield SqlPatchLog(db)
        db.dispose()
    else:
        from lucid_hub.log.kafka import KafkaPatchLog

        bootstrap = request.getfixturevalue("kafka_bootstrap")
        # A topic per test keeps tests independent on the shared broker.
        log = KafkaPatchLog(bootstrap, f"patches-{request.node.name[-40:].replace('[', '-').rstrip(']')}-"
                            f"{time.monotonic_ns()}", partitions=3)
        yield log
        log.close()


def records(graph: str, n: int, start: int = 0) -> list[LogRecord]:
    return [LogRecord(graph, f"urn:sha256:{graph[-1]}{i:063d}", f"patch {i} of {graph}".encode())
            for i in range(start, start + n)]


def drain(consumer: LogConsumer, expected: int, deadline_s: float = 40.0) -> list[LogRecord]:
    """Poll until `expected` records arrived (or the deadline passed)."""
    got: list[LogRecord] = []
    deadline = time.monotonic() + deadline_s
    while len(got) < expected and time.monotonic() < deadline:
        got += consumer.poll(max_records=100, timeout=0.5)
    return got


def test_records_arrive_intact_and_in_order_per_graph(patch_log: PatchLog) -> None:
    a, b = records("http://ex/a", 20), records("http://ex/b", 20)
    patch_log.append([r for pair in zip(a, b, strict=True) for r in pair])
    consumer = patch_log.consumer("group-order")
    got = drain(consumer, 40)
    consumer.close()
    assert len(got) == 40
    for graph, sent in (("http://ex/a", a), ("http://ex/b", b)):
        mine = [(r.patch_id, r.body) for r in got if r.graph == graph]
        assert mine == [(r.patch_id, r.body) for r in sent]


def test_a_group_resumes_after_its_committed_position(patch_log: PatchLog) -> None:
    patch_log.append(records("http://ex/a", 10))
    first = patch_log.consumer("group-resume")
    got = drain(first, 10)
    first.commit(got[:6])
    first.close()
    patch_log.append(records("http://ex/a", 5, start=10))
    second = patch_log.consumer("group-resume")
    rest = drain(second, 9)
    second.close()
    assert [r.patch_id for r in rest] == [r.patch_id for r in records("http://ex/a", 15)][6:]


def test_groups_are_independent(patch_log: PatchLog) -> None:
    patch_log.append(records("http://ex/a", 4))
    one, two = patch_log.consumer("group-one"), patch_log.consumer("group-two")
    got_one = drain(one, 4)
    one.commit(got_one)
    got_two = drain(two, 4)
    one.close()
    two.close()
    assert len(got_one) == len(got_two) == 4


def test_uncommitted_records_are_read_again(patch_log: PatchLog) -> None:
    patch_log.append(records("http://ex/a", 3))
    first = patch_log.consumer("group-redeliver")
    assert len(drain(first, 3)) == 3
    first.close()  # crashed before committing
    second = patch_log.consumer("group-redeliver")
    again = drain(second, 3)
    second.close()
    assert [r.patch_id for r in again] == [r.patch_id for r in records("http://ex/a", 3)]


def test_a_consumers_position_advances_with_each_poll(patch_log: PatchLog) -> None:
    """Polling again without committing gives the next records, not the same ones (the
    worker commits only after its deliveries are recorded, and must not see them twice)."""
    patch_log.append(records("http://ex/a", 6))
    consumer = patch_log.consumer("group-position")
    got = drain(consumer, 6)
    later = consumer.poll(max_records=100, timeout=0.2)  # nothing new: an empty answer
    consumer.close()
    assert [r.patch_id for r in got] == [r.patch_id for r in records("http://ex/a", 6)]
    assert later == []


def test_a_groups_sql_consumers_commit_concurrently_and_the_offset_never_goes_back(db_url: str) -> None:
    """Delivery workers of one group commit at the same moments, their first commit too; a
    commit of an earlier position (a slower worker) leaves the later one in place."""
    import threading

    from lucid_hub.log.sql import SqlPatchLog

    db = Database(db_url)
    db.upgrade()
    try:
        sql_log = SqlPatchLog(db)
        sql_log.append(records("http://ex/a", 8))
        got = drain(sql_log.consumer("reader"), 8)
        errors: list[Exception] = []
        for round_ in range(10):
            group = f"group-race-{round_}"
            consumers = [sql_log.consumer(group) for _ in range(4)]
            barrier = threading.Barrier(len(consumers))

            def commit(n: int, consumer: LogConsumer, barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                try:
                    consumer.commit(got[: n + 2])
                except Exception as exc:  # collected and asserted below
                    errors.append(exc)

            threads = [threading.Thread(target=commit, args=(n, c)) for n, c in enumerate(consumers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert errors == []
            consumers[0].commit(got[:1])  # behind every commit above
            after = sql_log.consumer(group)
            assert [r.patch_id for r in drain(after, 3)] == [r.patch_id for r in got[5:]]  # after the 5th
    finally:
        db.dispose()
