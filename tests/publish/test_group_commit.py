"""Group commit: concurrent publishes of a graph share a database transaction and a store
update, each still its own signed patch chained to the one before, and each change sees
exactly the patches committed before it in the group (Publisher._commit_group)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lucid_hub.config import Settings
from lucid_hub.diff import GraphChange
from lucid_hub.errors import ConflictError, InputError, PreconditionFailedError
from lucid_hub.publish.publisher import GraphView, Publisher
from lucid_hub.rdf.apply import GraphReplica
from lucid_hub.rdf.msg import Msg, graph_msgs
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.runtime import Runtime
from tests.conftest import assert_consistent, parse_nt

G = "http://example.org/graphs/kpis"
INT = "<http://www.w3.org/2001/XMLSchema#integer>"


@pytest.fixture
def runtime(tmp_path: Path, db_url: str) -> Iterator[Runtime]:
    rt = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_DATABASE_URL": db_url}))
    try:
        yield rt
    finally:
        rt.close()


def statements(text: str) -> tuple[Msg, ...]:
    """The MSGs of an N-Triples text (each as `GraphChange` takes them)."""
    from lucid_hub.rdf.canon import Canonicalizer

    with Canonicalizer() as canon:
        return tuple(graph_msgs(parse_nt(text), canon).msgs())


def replayed(runtime: Runtime, graph: str) -> list[str]:
    """The graph rebuilt from its archived patches alone (what a mirror would hold)."""
    replica = GraphReplica([], runtime.canonicalizer)
    for record in runtime.archive.history(graph):
        replica.apply(read_rdf_patch(record.body, runtime.canonicalizer))
    return sorted(replica.statements())


def group_sizes(publisher: Publisher) -> tuple[float, float]:
    """(groups committed, patches in them) as the metrics count them."""
    samples = {s.name: s.value for metric in publisher.metrics.publish_group.collect() for s in metric.samples}
    return samples["lucid_publish_group_patches_count"], samples["lucid_publish_group_patches_sum"]


class Gate:
    """Holds a graph's lock while publishing threads queue up behind it, then lets one of
    them commit everything queued as one group."""

    def __init__(self, publisher: Publisher, graph: str) -> None:
        self.publisher, self.graph = publisher, graph
        self.threads: list[threading.Thread] = []
        self.results: dict[str, Patch | BaseException | None] = {}

    def publish(self, name: str, compute: Callable[[GraphView], GraphChange | None], **kwargs: object) -> None:
        """Start a thread publishing `compute`, and wait until it has queued (order = call order)."""
        queue = self.publisher.commits.queue(self.graph)
        queued = len(queue)

        def run() -> None:
            try:
                self.results[name] = self.publisher.publish(self.graph, compute, author=name, message=name,
                                                            **kwargs)  # type: ignore[arg-type]
            except BaseException as exc:  # asserted by the test
                self.results[name] = exc

        thread = threading.Thread(target=run, name=name)
        self.threads.append(thread)
        thread.start()
        deadline = time.monotonic() + 10
        while len(queue) == queued:  # a condition with a deadline, not a sleep: it queues in microseconds
            assert time.monotonic() < deadline, f"{name} never queued"
            time.sleep(0.001)

    def release(self) -> None:
        for thread in self.threads:
            thread.join(timeout=30)
            assert not thread.is_alive()


def change(graph: str, removed: str = "", added: str = "") -> Callable[[GraphView], GraphChange]:
    gone, came = statements(removed) if removed else (), statements(added) if added else ()
    return lambda _view: GraphChange(graph, gone, came)


def merge(graph: str, added: str) -> Callable[[GraphView], GraphChange]:
    """Add what the graph does not hold yet (as POST does)."""
    came = statements(added)
    return lambda view: GraphChange(graph, (), tuple(m for m in came if not view.contains(m.nquads[:-3])))


def test_changes_queued_behind_a_lock_commit_as_one_group_each_seeing_the_ones_before(runtime: Runtime) -> None:
    publisher = runtime.publisher
    first = publisher.publish(G, change(G, added='<http://ex/a> <http://ex/v> "1" .\n'), author="t", message="")
    assert first is not None
    groups_before, patches_before = group_sizes(publisher)
    seen: dict[str, bool] = {}

    def remove_if_there(view: GraphView) -> GraphChange | None:
        seen["b sees a2"] = view.contains('<http://ex/a> <http://ex/v> "2"')
        seen["b sees a1"] = view.contains('<http://ex/a> <http://ex/v> "1"')
        return GraphChange(G, statements('<http://ex/a> <http://ex/v> "2" .\n'), ())

    def after_removal(view: GraphView) -> GraphChange | None:
        seen["c sees a2"] = view.contains('<http://ex/a> <http://ex/v> "2"')
        return None

    def refuse(_view: GraphView) -> GraphChange:
        raise InputError("not RDF")

    gate = Gate(publisher, G)
    with publisher.writing((G,)):
        gate.publish("a", change(G, added='<http://ex/a> <http://ex/v> "2" .\n'))
        gate.publish("b", remove_if_there)
        gate.publish("c", after_removal)
        gate.publish("stale", change(G, added='<http://ex/x> <http://ex/v> "x" .\n'), if_match=lambda h: h == first.id)
        gate.publish("bad", refuse)
        gate.publish("d", change(G, added='<http://ex/d> <http://ex/v> "4" .\n'))
    gate.release()

    a, b, c, stale, bad, d = (gate.results[n] for n in ("a", "b", "c", "stale", "bad", "d"))
    assert isinstance(a, Patch) and isinstance(b, Patch) and isinstance(d, Patch)
    assert (a.prev, b.prev, d.prev) == (first.id, a.id, b.id)  # one chain, in queue order
    assert seen == {"b sees a2": True, "b sees a1": True, "c sees a2": False}
    assert c is None
    assert isinstance(stale, PreconditionFailedError)  # its own failure; the others went on
    assert isinstance(bad, InputError)
    assert group_sizes(publisher) == (groups_before + 1, patches_before + 3)  # one transaction, one update
    assert [r.id for r in runtime.archive.history(G)] == [first.id, a.id, b.id, d.id]
    assert sorted(publisher.store.statements(G)) == replayed(runtime, G) == [
        '<http://ex/a> <http://ex/v> "1"', '<http://ex/d> <http://ex/v> "4"']
    assert_consistent(runtime)


class _Stop(BaseException):
    """Something no job can be told of (as KeyboardInterrupt or SystemExit) in a group's thread."""


def test_a_group_stopped_by_something_else_than_an_error_leaves_no_publish_answered_as_unchanged(
        runtime: Runtime) -> None:
    publisher = runtime.publisher

    def stop(_view: GraphView) -> GraphChange:
        raise _Stop

    gate = Gate(publisher, G)
    with publisher.writing((G,)):
        gate.publish("stops", stop)
        gate.publish("waits", change(G, added='<http://ex/w> <http://ex/v> "w" .\n'))
    gate.release()
    outcomes = sorted(type(r).__name__ for r in gate.results.values())
    assert outcomes == ["ConflictError", "_Stop"]  # the group's thread stopped; the other is told so
    conflict = next(r for r in gate.results.values() if isinstance(r, ConflictError))
    assert "interrupted" in str(conflict)
    assert runtime.archive.current_head(G) is None  # nothing half-written
    again = publisher.publish(G, change(G, added='<http://ex/w> <http://ex/v> "w" .\n'), author="t", message="")
    assert again is not None  # and the graph publishes after


def test_typed_literals_and_blank_nodes_are_planned_on_the_group_and_a_whole_graph_change_ends_it(
        runtime: Runtime) -> None:
    publisher = runtime.publisher
    base = publisher.publish(G, change(G, added=f'<http://ex/q> <http://ex/qty> "1"^^{INT} .\n'), author="t",
                             message="")
    assert base is not None
    groups_before, patches_before = group_sizes(publisher)
    blank = '<http://ex/o> <http://ex/line> _:l .\n_:l <http://ex/qty> "3" .\n'
    gate = Gate(publisher, G)
    with publisher.writing((G,)):
        # one value in two lexical forms on one subject and predicate: the store records the
        # forms, and the second change is planned on the forms the first one leaves
        gate.publish("typed", change(G, added=f'<http://ex/q> <http://ex/qty> "01"^^{INT} .\n'))
        gate.publish("typed again", change(G, removed=f'<http://ex/q> <http://ex/qty> "1"^^{INT} .\n'))
        gate.publish("blank", change(G, added=blank))
        gate.publish("blank again", change(G, added=blank))  # a second copy: occurrence 1, after the first
        gate.publish("blank gone", change(G, removed=blank))  # the highest occurrence goes: the second one
        gate.publish("whole graph", lambda view: GraphChange(G, (), statements(
            "".join(f"{s} .\n" for s in view.msgs().ground if "qty" in s).replace("/q>", "/r>"))))
    gate.release()

    results = gate.results
    assert all(isinstance(r, Patch) for r in results.values()), results
    # [typed, typed again, blank, blank again, blank gone] then [whole graph]: it needs the store
    assert group_sizes(publisher) == (groups_before + 2, patches_before + 6)
    again, gone = results["blank again"], results["blank gone"]
    assert isinstance(again, Patch) and again.added_occurrences == (1,)
    assert isinstance(gone, Patch) and gone.removed_occurrences == (1,)
    whole = results["whole graph"]
    assert isinstance(whole, Patch) and [m.nquads for m in whole.added] == [
        f'<http://ex/r> <http://ex/qty> "01"^^{INT} .\n']
    assert sorted(publisher.store.statements(G)) == replayed(runtime, G)
    assert len(replayed(runtime, G)) == 4  # q "01", one copy of the blank structure, r "01"
    assert f'<http://ex/q> <http://ex/qty> "01"^^{INT}' in replayed(runtime, G)
    assert f'<http://ex/q> <http://ex/qty> "1"^^{INT}' not in replayed(runtime, G)
    assert_consistent(runtime)


def test_many_concurrent_publishers_keep_one_chain_and_the_store_equals_the_archive(runtime: Runtime) -> None:
    publisher = runtime.publisher
    errors: list[BaseException] = []
    made: list[Patch] = []
    groups_before, patches_before = group_sizes(publisher)  # (the hub's own policy graph, at start)

    def writer(n: int) -> None:
        try:
            for i in range(25):
                text = (f'<http://ex/k{i % 5}> <http://ex/by{n}> "{i}" .\n'
                        f'<http://ex/k{i % 5}> <http://ex/n> "{i % 3}"^^{INT} .\n'
                        f'<http://ex/k{i % 5}> <http://ex/at> _:b .\n_:b <http://ex/w> "{n}" .\n')
                patch = publisher.merge(G, graph_msgs(parse_nt(text), runtime.canonicalizer), author=f"w{n}",
                                        message=str(i))
                if patch is not None:
                    made.append(patch)
                if i % 10 == 9:  # now and then a whole-graph change among the small ones
                    patch = publisher.drop(G, author=f"w{n}", message="drop")
                    if patch is not None:
                        made.append(patch)
        except BaseException as exc:  # asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    history = [r.id for r in runtime.archive.history(G)]
    assert sorted(history) == sorted(p.id for p in made)  # every acknowledged patch archived, nothing else
    groups, patches = group_sizes(publisher)
    assert patches - patches_before == len(made) and groups - groups_before < len(made)  # some shared a commit
    assert sorted(publisher.store.statements(G)) == replayed(runtime, G)
    assert_consistent(runtime)


def test_a_store_behind_the_archive_is_caught_up_before_a_group_is_decided(tmp_path: Path, db_url: str) -> None:
    # Two runtimes = two hub processes on one database, each its own store.
    env = {"LUCID_DATABASE_URL": db_url}
    a = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "a"), **env}))
    b = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "b"), **env}))
    x = '<http://ex/a> <http://ex/v> "1" .\n'
    try:
        first = a.publisher.publish(G, change(G, added=x), author="a", message="")
        assert first is not None
        assert b.publisher.store.version(G) is None  # b has not seen it
        # A precondition that only b's stale store fails: b catches up and it holds.
        gate = Gate(b.publisher, G)
        with b.publisher.writing((G,)):
            gate.publish("if-match", change(G, added='<http://ex/b> <http://ex/v> "2" .\n'),
                         if_match=lambda head: head == first.id)
        gate.release()
        made = gate.results["if-match"]
        assert isinstance(made, Patch) and made.prev == first.id
        # "No change" that only b's stale store sees: a removed x meanwhile, so adding it is a change.
        removal = a.publisher.publish(G, change(G, removed=x), author="a", message="")
        assert removal is not None and b.publisher.store.version(G) == made.id
        gate = Gate(b.publisher, G)
        with b.publisher.writing((G,)):
            gate.publish("again", merge(G, x))
        gate.release()
        again = gate.results["again"]
        assert isinstance(again, Patch) and again.prev == removal.id and [m.nquads for m in again.added] == [x]
        assert sorted(b.publisher.store.statements(G)) == replayed(b, G)
        assert_consistent(b)
    finally:
        a.close()
        b.close()


def test_group_commit_off_publishes_one_patch_per_transaction(tmp_path: Path) -> None:
    rt = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_GROUP_COMMIT": "false"}))
    try:
        assert rt.publisher.commits.group_commit is False
        patch = rt.publisher.publish(G, change(G, added='<http://ex/a> <http://ex/v> "1" .\n'), author="a",
                                     message="")
        assert patch is not None and group_sizes(rt.publisher) == (0, 0)
        assert rt.publisher.store.statements(G) == replayed(rt, G)
    finally:
        rt.close()


def test_a_mirror_archives_a_verified_chain_in_groups_and_ends_up_with_the_publishers_graph(
        tmp_path: Path, db_url: str) -> None:
    publisher = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "publisher")}))
    mirror = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "mirror"),
                                             "LUCID_DATABASE_URL": db_url}))
    blank = '<http://ex/o> <http://ex/line> _:l .\n_:l <http://ex/qty> "3" .\n'
    steps = [  # each a patch; several touch what an earlier one in the same page changed
        change(G, added=f'<http://ex/a> <http://ex/v> "1" .\n<http://ex/q> <http://ex/n> "1"^^{INT} .\n'),
        change(G, added='<http://ex/b> <http://ex/v> "2" .\n'),
        change(G, removed='<http://ex/a> <http://ex/v> "1" .\n'),  # removes what the first added
        change(G, added=f'<http://ex/q> <http://ex/n> "01"^^{INT} .\n'),  # typed, same subject and predicate
        change(G, added=blank),
        change(G, added=blank),  # a second copy of a blank-node MSG
        change(G, removed=blank),
        change(G, added='<http://ex/a> <http://ex/v> "1" .\n'),  # back again
    ]
    try:
        made = [publisher.publisher.publish(G, step, author="p", message=str(i)) for i, step in enumerate(steps)]
        patches = [read_rdf_patch(r.body, mirror.canonicalizer) for r in publisher.archive.history(G)]
        assert [p.id for p in patches] == [p.id for p in made if p is not None]
        groups_before, patches_before = group_sizes(mirror.publisher)
        mirror.publisher.archive_verified_chain(patches[:5])
        mirror.publisher.archive_verified_chain(patches[5:], sync=False)
        groups, count = group_sizes(mirror.publisher)
        assert count - patches_before == len(patches) and groups - groups_before < len(patches)
        assert sorted(mirror.publisher.store.statements(G)) == sorted(publisher.publisher.store.statements(G))
        assert [r.id for r in mirror.archive.history(G)] == [p.id for p in patches]  # their ids, in order
        assert_consistent(mirror)
        # A chain that does not follow the head changes nothing.
        with pytest.raises(ConflictError):
            mirror.publisher.archive_verified_chain(patches[2:4])
        assert mirror.archive.current_head(G) == patches[-1].id
    finally:
        publisher.close()
        mirror.close()


# A child process queues five publishes behind the graph's lock, then lets them commit as one
# group with the crash point set: it dies (exit 137, like kill -9) after the group's archive
# commit, before the store update and before any publish is answered.
_CRASHING_GROUP = """
import os, sys, threading, time
from pathlib import Path
from lucid_hub.config import Settings
from lucid_hub.diff import GraphChange
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import graph_msgs
from lucid_hub.runtime import Runtime
from tests.conftest import parse_nt

graph = sys.argv[2]
rt = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": sys.argv[1]}))
rt.publisher.publish(graph, lambda _v: GraphChange(graph, (), tuple(graph_msgs(parse_nt(
    '<http://ex/base> <http://ex/v> "0" .\\n'), rt.canonicalizer).msgs())), author="t", message="base")
queue = rt.publisher.commits.queue(graph)
with rt.publisher.writing((graph,)):
    for i in range(5):
        msgs = tuple(graph_msgs(parse_nt(f'<http://ex/s{i}> <http://ex/v> _:b .\\n_:b <http://ex/n> "{i}" .\\n'),
                                rt.canonicalizer).msgs())
        threading.Thread(target=rt.publisher.publish, args=(graph, lambda _v, m=msgs: GraphChange(graph, (), m)),
                         kwargs={"author": "t", "message": str(i)}, daemon=True).start()
        deadline = time.monotonic() + 10
        while len(queue) < i + 1 and time.monotonic() < deadline:
            time.sleep(0.001)
    os.environ["LUCID_FAULT"] = "after-archive-commit"
time.sleep(30)  # (the leader thread exits the process at the crash point long before this)
sys.exit("the crash point was not reached")
"""


def test_a_crash_after_a_groups_archive_commit_leaves_every_patch_of_the_group_applied_at_start(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "LUCID_FAULT"}
    child = subprocess.run([sys.executable, "-c", _CRASHING_GROUP, str(data), G], env=env,
                           cwd=Path(__file__).resolve().parents[2], capture_output=True, timeout=120)
    assert child.returncode == 137, child.stderr.decode()[-2000:]
    rt = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(data)}))  # repair at open
    try:
        history = rt.archive.history(G)
        assert [r.message for r in history] == ["base", "0", "1", "2", "3", "4"]  # the whole group, in order
        assert rt.publisher.store.version(G) == history[-1].id
        assert sorted(rt.publisher.store.statements(G)) == replayed(rt, G)
        assert len(replayed(rt, G)) == 11
        assert_consistent(rt)
    finally:
        rt.close()


def test_a_patch_the_mirror_cannot_apply_stops_its_chain_after_the_ones_before_it(tmp_path: Path) -> None:
    from lucid_hub.errors import PatchApplyError

    publisher = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "publisher")}))
    mirror = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "mirror")}))
    a1 = '<http://ex/a> <http://ex/v> "1" .\n'
    try:
        for step in (change(G, added=a1), change(G, added='<http://ex/b> <http://ex/v> "2" .\n'),
                     change(G, removed=a1), change(G, added='<http://ex/c> <http://ex/v> "3" .\n')):
            publisher.publisher.publish(G, step, author="p", message="")
        patches = [read_rdf_patch(r.body, mirror.canonicalizer) for r in publisher.archive.history(G)]
        mirror.publisher.archive_verified_chain(patches[:1])
        # The mirror's store diverged (a triple gone that the third patch removes).
        import pyoxigraph as ox

        mirror.publisher.store._store.remove(ox.Quad(ox.NamedNode("http://ex/a"), ox.NamedNode("http://ex/v"),
                                                     ox.Literal("1"), ox.NamedNode(G)))
        with pytest.raises(PatchApplyError):
            mirror.publisher.archive_verified_chain(patches[1:])
        # The second patch, verified and planned before the failing third, is archived and applied.
        assert [r.id for r in mirror.archive.history(G)] == [p.id for p in patches[:2]]
        assert mirror.publisher.store.version(G) == patches[1].id
    finally:
        publisher.close()
        mirror.close()
