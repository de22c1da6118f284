"""The patch stream (lucid_hub.patch_stream): a graph's patches from a position, in chain order,
resumable, woken by the archiving process and found from another process's archive."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lucid_hub.config import Settings
from lucid_hub.rdf.msg import GraphMsgs
from lucid_hub.runtime import Runtime

G = "http://example.org/graphs/orders"
OTHER = "http://example.org/graphs/other"


def put(runtime: Runtime, graph: str, n: int) -> str:
    patch = runtime.publisher.replace(graph, GraphMsgs({f"<http://ex/o> <http://ex/n> \"{n}\""}),
                                      author="test", message=f"v{n}")
    assert patch is not None
    return patch.id


@pytest.fixture
def runtime(tmp_path: Path, db_url: str) -> Iterator[Runtime]:
    rt = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_DATABASE_URL": db_url}))
    yield rt
    rt.close()


def test_a_graph_is_read_from_any_position_in_chain_order(runtime: Runtime) -> None:
    ids = [put(runtime, G, n) for n in range(5)]
    put(runtime, OTHER, 0)
    stream = runtime.stream
    assert stream.position(G) == 5 and stream.position("http://example.org/unknown") == 0
    assert [link.id for link in stream.read(G, 0)] == ids
    assert [link.seq for link in stream.read(G, 0)] == [1, 2, 3, 4, 5]
    resumed = stream.read(G, 3)  # a consumer that handled the third patch goes on from there
    assert [link.id for link in resumed] == ids[3:]
    assert [link.prev for link in resumed] == ids[2:4]
    assert stream.read(G, 1, limit=2, bodies=True)[0].body == runtime.archive.patch(ids[1]).body
    assert stream.read(G, 5) == []


def test_a_follower_hears_each_new_patch_once_in_order_and_stops_when_told(runtime: Runtime) -> None:
    first = put(runtime, G, 0)
    stream = runtime.stream
    stop = threading.Event()
    heard: list[str] = []
    arrived = threading.Condition()
    start = stream.position(G)  # "now", before the patches below (not whenever the thread starts)

    def follow() -> None:
        for link in stream.follow(G, start, stopped=stop.is_set):
            with arrived:
                heard.append(link.id if link is not None else "idle")
                arrived.notify_all()

    follower = threading.Thread(target=follow)
    follower.start()
    ids = [put(runtime, G, n) for n in range(1, 4)]
    with arrived:
        assert arrived.wait_for(lambda: len(heard) >= 3, timeout=30)
    stop.set()
    put(runtime, OTHER, 9)  # an announcement wakes it to see the stop
    follower.join(timeout=30)
    assert not follower.is_alive()
    assert heard == ids and first not in heard  # from "now": the patch before it is not replayed


def test_changes_name_the_graphs_announced_since_a_generation(runtime: Runtime) -> None:
    stream = runtime.stream
    generation = stream.generation()
    put(runtime, G, 0)
    put(runtime, OTHER, 0)
    now, graphs = stream.changes(generation, timeout=0)
    assert now == generation + 2 and graphs == {G, OTHER}
    later, none = stream.changes(now, timeout=0.01)  # nothing new: the timeout passes
    assert later == now and none == set()


def test_patches_archived_by_another_process_are_followed_too(tmp_path: Path, db_url: str) -> None:
    """Two runtimes on one database stand for two processes of a hub: b archives, a's
    follower finds the patches from the archive within its poll interval."""
    settings = {"LUCID_DATABASE_URL": db_url}
    a = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "a"), **settings}))
    b = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "b"), **settings}))
    try:
        a.stream.poll = 0.05
        stop = threading.Event()
        heard: list[str] = []

        def follow() -> None:
            for link in a.stream.follow(G, 0, stopped=stop.is_set):
                assert link is not None
                heard.append(link.id)
                if len(heard) == 3:
                    return

        follower = threading.Thread(target=follow)
        follower.start()
        ids = [put(b, G, n) for n in range(3)]  # (no announcement in a: found by reading)
        follower.join(timeout=30)
        stop.set()
        follower.join(timeout=30)
        assert heard == ids
    finally:
        b.close()
        a.close()


def test_the_end_of_the_stream_ends_every_follower(runtime: Runtime) -> None:
    put(runtime, G, 0)
    stream = runtime.stream
    results: list[list[object]] = []
    follower = threading.Thread(target=lambda: results.append(list(stream.follow(G, 1))))
    follower.start()
    stream.end()
    follower.join(timeout=30)
    assert not follower.is_alive() and results == [[]]
