"""Contracts of the ports the publisher is built from, each run against the parts alone (no
running hub): the hooks port (what reacts to archived patches: a recording fake, the rules'
cascade), the store (the embedded one; a remote store joins the parameter list) and the
archive (on SQLite and PostgreSQL). As tests/log/test_log_contract.py does for the patch log."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lucid_hub.archive import Archive, Archiving, MirroredGraphError
from lucid_hub.config import Settings
from lucid_hub.db.models import Mirror
from lucid_hub.db.session import Database
from lucid_hub.diff import GraphChange
from lucid_hub.errors import ConflictError, LucidError
from lucid_hub.log.sql import SqlPatchLog
from lucid_hub.metrics import Metrics
from lucid_hub.publish.hooks import Hooks, NoHooks, Writer
from lucid_hub.publish.publisher import Publisher
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import Msg, graph_msgs
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import write_rdf_patch
from lucid_hub.signing import KeyRing, SigningKey, sign_patch
from lucid_hub.store import GraphStore
from tests.conftest import parse_nt

G = "http://example.org/graphs/orders"
H = "http://example.org/graphs/alerts"


@dataclass
class Parts:
    db: Database
    archive: Archive
    store: GraphStore
    canonicalizer: Canonicalizer
    key: SigningKey
    data: Path
    closers: list[Callable[[], None]] = field(default_factory=list)

    def publisher(self, hooks: Hooks | None = None) -> Publisher:
        return Publisher(self.archive, self.store, SqlPatchLog(self.db), self.key, self.canonicalizer, hooks=hooks)

    def msgs(self, text: str) -> tuple[Msg, ...]:
        return tuple(graph_msgs(parse_nt(text), self.canonicalizer).msgs())

    def patch(self, graph: str, prev: str | None, removed: str = "", added: str = "") -> Patch:
        change = GraphChange(graph, self.msgs(removed) if removed else (), self.msgs(added) if added else ())
        return sign_patch(change.to_patch(prev, author="contract", message=""), self.key)


@pytest.fixture
def parts(tmp_path: Path, db_url: str) -> Iterator[Parts]:
    db = Database(db_url)
    db.upgrade()
    store = GraphStore(tmp_path / "store")
    canonicalizer = Canonicalizer()
    built = Parts(db, Archive(db), store, canonicalizer, KeyRing(tmp_path / "keys").ensure(), tmp_path)
    try:
        yield built
    finally:
        for close in built.closers:
            close()
        canonicalizer.close()
        store.close()
        db.dispose()


def added(parts: Parts, graph: str, text: str) -> Callable[[Any], GraphChange]:
    msgs = parts.msgs(text)
    return lambda _view: GraphChange(graph, (), msgs)


# --- the hooks port ----------------------------------------------------------------------------

@dataclass
class Seen:
    patch: str
    graph: str
    store_at: str | None
    archive_at: str | None
    pending: bool
    locked: set[str]
    writer: Writer


class Recording:
    """Hooks that record what the publisher promises at each reaction."""

    def __init__(self, parts: Parts, locks: dict[str, frozenset[str]] | None = None,
                 then: Callable[[Patch, Writer], None] | None = None) -> None:
        self.parts = parts
        self.locks = locks or {}
        self.then = then
        self.seen: list[Seen] = []
        self.publisher: Publisher | None = None

    def locks_for(self, graph: str) -> frozenset[str]:
        return self.locks.get(graph, frozenset())

    def will_react(self, patch: Patch) -> bool:
        return patch.graph in self.locks

    def react(self, patch: Patch, writer: Writer) -> None:
        assert self.publisher is not None
        held = {g for g in (G, H) if self.publisher.locks.lock(g).locked()}
        pending = patch.id in {p for p, _g in self.parts.archive.pending_reactions()}
        self.seen.append(Seen(patch.id, patch.graph, self.parts.store.version(patch.graph),
                              self.parts.archive.current_head(patch.graph), pending, held, writer))
        if self.then is not None:
            self.then(patch, writer)


def recording_publisher(parts: Parts, **kwargs: Any) -> tuple[Publisher, Recording]:
    hooks = Recording(parts, **kwargs)
    publisher = parts.publisher(hooks)
    hooks.publisher = publisher
    return publisher, hooks


def test_each_archived_patch_is_reacted_to_once_in_chain_order_after_the_store_holds_it(parts: Parts) -> None:
    publisher, hooks = recording_publisher(parts)
    made = [publisher.publish(G, added(parts, G, f'<http://ex/o{i}> <http://ex/qty> "{i}" .\n'),
                              author="t", message="") for i in range(3)]
    assert [s.patch for s in hooks.seen] == [p.id for p in made if p is not None]
    for seen in hooks.seen:  # archived and applied before the reaction; the writer is the publisher
        assert seen.store_at == seen.patch and seen.archive_at == seen.patch and seen.writer is publisher
        assert not seen.pending  # nothing said it would react


def test_a_reacting_graph_is_locked_with_what_its_reaction_writes_and_a_pending_reaction_is_recorded(
        parts: Parts) -> None:
    publisher, hooks = recording_publisher(parts, locks={G: frozenset({G, H})})
    patch = publisher.publish(G, added(parts, G, '<http://ex/o1> <http://ex/qty> "1" .\n'), author="t", message="")
    assert patch is not None and len(hooks.seen) == 1
    assert hooks.seen[0].locked == {G, H} and hooks.seen[0].pending
    assert not publisher.locks.lock(G).locked() and not publisher.locks.lock(H).locked()  # released after
    parts.archive.reacted(patch.id)  # (the reaction's own part of the contract: it says when it is done)
    assert parts.archive.pending_reactions() == []


def test_what_a_reaction_writes_through_the_writer_follows_its_trigger_and_is_reacted_to(parts: Parts) -> None:
    def alert(patch: Patch, writer: Writer) -> None:
        if patch.graph == G:
            writer.publish_all({H: added(parts, H, f'<http://ex/alert> <http://ex/about> <{G}> .\n')},
                               {H: parts.store.version(H)}, author="rule", message=f"fired by {patch.id}")

    publisher, hooks = recording_publisher(parts, locks={G: frozenset({G, H})}, then=alert)
    trigger = publisher.publish(G, added(parts, G, '<http://ex/o1> <http://ex/qty> "1" .\n'), author="t", message="")
    assert trigger is not None
    assert [s.graph for s in hooks.seen] == [G, H]  # the trigger first, then the reaction's patch
    reaction = parts.archive.history(H)[-1]
    assert reaction.message == f"fired by {trigger.id}" and hooks.seen[1].patch == reaction.id
    assert parts.store.contains(H, f"<http://ex/alert> <http://ex/about> <{G}>")


def test_a_reaction_that_fails_leaves_its_patch_archived_and_the_publish_answered(parts: Parts) -> None:
    def fail(_patch: Patch, _writer: Writer) -> None:
        raise RuntimeError("the reaction broke")

    publisher, hooks = recording_publisher(parts, then=fail)
    patch = publisher.publish(G, added(parts, G, '<http://ex/o1> <http://ex/qty> "1" .\n'), author="t", message="")
    assert patch is not None and len(hooks.seen) == 1
    assert parts.archive.current_head(G) == patch.id == parts.store.version(G)


def test_a_mirrors_verified_chain_is_reacted_to_patch_by_patch(parts: Parts) -> None:
    publisher, hooks = recording_publisher(parts)
    first = parts.patch(G, None, added='<http://ex/o1> <http://ex/qty> "1" .\n')
    second = parts.patch(G, first.id, removed='<http://ex/o1> <http://ex/qty> "1" .\n',
                         added='<http://ex/o1> <http://ex/qty> "2" .\n')
    publisher.archive_verified_chain([first, second])
    assert [s.patch for s in hooks.seen] == [first.id, second.id]
    assert hooks.seen[-1].store_at == second.id


def _no_rules(parts: Parts) -> Hooks:
    from lucid_hub.rules.service import RuleParts

    settings = Settings.from_env({"LUCID_DATA_DIR": str(parts.data / "data")})
    built = RuleParts.build(settings, parts.db, parts.archive, parts.store, parts.canonicalizer, Metrics(),
                            parts.key, leader=True, allows=lambda _p, _g, _a: False, read_only=lambda _g: False)
    parts.closers.append(built.lanes.close)
    return built.cascade


@pytest.mark.parametrize("make", [lambda _parts: NoHooks(), _no_rules], ids=["no-hooks", "rule-cascade"])
def test_hooks_with_nothing_to_do_lock_nothing_more_and_record_no_pending_reaction(
        parts: Parts, make: Callable[[Parts], Hooks]) -> None:
    hooks = make(parts)
    publisher = parts.publisher(hooks)
    patch = publisher.publish(G, added(parts, G, '<http://ex/o1> <http://ex/qty> "1" .\n'), author="t", message="")
    assert patch is not None and hooks.locks_for(G) == frozenset() and not hooks.will_react(patch)
    assert parts.archive.pending_reactions() == [] and parts.store.version(G) == patch.id


# --- the store ---------------------------------------------------------------------------------

STORES = ["embedded"]  # (a remote SPARQL store joins here)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, parts: Parts) -> GraphStore:
    return parts.store


def chain_of(parts: Parts, n: int) -> list[Patch]:
    patches: list[Patch] = []
    prev: str | None = None
    for i in range(n):
        removed = f'<http://ex/o> <http://ex/qty> "{i - 1}" .\n' if i else ""
        patch = parts.patch(G, prev, removed=removed,
                            added=f'<http://ex/o> <http://ex/qty> "{i}" .\n_:b <http://ex/line> "{i}" .\n')
        patches.append(patch)
        prev = patch.id
    return patches


def test_a_chain_applied_at_once_equals_it_applied_patch_by_patch(store: GraphStore, parts: Parts,
                                                                   tmp_path: Path) -> None:
    patches = chain_of(parts, 5)
    for patch in patches:
        store.apply(patch)
    other = GraphStore(tmp_path / "other")
    try:
        chain = other.chain(G, None)
        for patch in patches:
            chain.plan(patch)
        other.apply_all(chain.planned)
        assert other.version(G) == store.version(G) == patches[-1].id
        assert sorted(other.statements(G)) == sorted(store.statements(G))
    finally:
        other.close()


def test_a_patch_that_does_not_follow_or_does_not_apply_changes_nothing(store: GraphStore, parts: Parts) -> None:
    first, second = chain_of(parts, 2)
    store.apply(first)
    before = sorted(store.statements(G))
    stray = parts.patch(G, "urn:sha256:" + "0" * 64, added='<http://ex/x> <http://ex/y> "z" .\n')
    missing = parts.patch(G, first.id, removed='<http://ex/never> <http://ex/was> "here" .\n')
    for patch in (stray, missing):
        with pytest.raises(LucidError):
            store.check(patch)
        with pytest.raises(LucidError):
            store.apply(patch)
        assert store.version(G) == first.id and sorted(store.statements(G)) == before
    store.apply(second)  # the chain goes on as if nothing had been tried
    assert store.version(G) == second.id


def test_the_version_outlives_a_restart_and_a_drop_forgets_the_graph(parts: Parts, tmp_path: Path) -> None:
    path = tmp_path / "restarting"
    first = GraphStore(path)
    patch = chain_of(parts, 1)[0]
    first.apply(patch)
    first.close()
    again = GraphStore(path)
    try:
        assert again.version(G) == patch.id and again.read.holds_any(G)
        again.drop(G)
        assert again.version(G) is None and not again.read.holds_any(G) and again.statements(G) == []
    finally:
        again.close()


def test_watchers_hear_each_change_once_in_order(store: GraphStore, parts: Parts) -> None:
    heard: list[str | None] = []
    store.watch(lambda change: heard.append(change.patch))
    patches = chain_of(parts, 3)
    for patch in patches:
        store.apply(patch)
    assert heard == [p.id for p in patches]


# --- the archive -------------------------------------------------------------------------------

def archiving(patch: Patch, reacting: bool = False) -> Archiving:
    return Archiving(patch.id, patch.graph, patch.prev, patch.author, patch.message, patch.created,
                     len(patch.removed), len(patch.added), write_rdf_patch(patch), reacting)


def test_the_archive_advances_a_head_only_from_where_it_is(parts: Parts) -> None:
    archive = parts.archive
    first, second, third = chain_of(parts, 3)
    archive.append([archiving(first)], local=True, log_entries=False)
    with pytest.raises(ConflictError):  # follows nothing the archive holds as head
        archive.append([archiving(third)], local=True, log_entries=False)
    archive.append([archiving(second), archiving(third)], local=True, log_entries=False)  # a group: one CAS
    assert archive.current_head(G) == third.id and archive.length(G) == 3
    assert [r.id for r in archive.history(G)] == [first.id, second.id, third.id]
    assert [r.id for r in archive.after(G, first.id)] == [second.id, third.id]
    assert archive.position(second.id, G) == 2 and archive.heads() == [(G, third.id)]


def test_concurrent_appends_of_one_head_let_exactly_one_win(parts: Parts) -> None:
    archive = parts.archive
    base = chain_of(parts, 1)[0]
    archive.append([archiving(base)], local=True, log_entries=False)
    rivals = [parts.patch(G, base.id, added=f'<http://ex/rival> <http://ex/n> "{i}" .\n') for i in range(4)]
    outcomes: list[str] = []
    start = threading.Barrier(len(rivals))

    def race(patch: Patch) -> None:
        start.wait()
        try:
            archive.append([archiving(patch)], local=True, log_entries=False)
            outcomes.append("won")
        except ConflictError:
            outcomes.append("lost")

    threads = [threading.Thread(target=race, args=(p,)) for p in rivals]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["lost", "lost", "lost", "won"] and archive.length(G) == 2


def test_an_appended_patch_is_in_the_outbox_until_relayed_and_a_pending_reaction_until_done(parts: Parts) -> None:
    archive = parts.archive
    first, second = chain_of(parts, 2)
    archive.append([archiving(first), archiving(second, reacting=True)], local=True, log_entries=False)
    rows = archive.outbox(10)
    assert [pid for _seq, _graph, pid, _body in rows] == [first.id, second.id]
    assert archive.pending_reactions() == [(second.id, G)]
    archive.relayed(rows[0][0])
    assert [pid for _seq, _graph, pid, _body in archive.outbox(10)] == [second.id]
    archive.reacted(second.id)
    assert archive.pending_reactions() == []


def test_a_local_change_of_a_mirrored_graph_is_refused_in_the_same_transaction(parts: Parts) -> None:
    from lucid_hub.db.times import now

    with parts.db.session() as session:
        session.add(Mirror(id="m1", graph=G, hub_url="http://partner.example/hub",
                           publisher_url="http://partner.example", client_id="c", client_secret="s", jwks="{}",
                           hmac_secret="x", state="active", created_at=now()))
    patch = chain_of(parts, 1)[0]
    with pytest.raises(MirroredGraphError):
        parts.archive.append([archiving(patch)], local=True, log_entries=False)
    assert parts.archive.current_head(G) is None and not parts.archive.exists(G)  # nothing half-written
    parts.archive.append([archiving(patch)], local=False, log_entries=False)  # the mirror's own patch
    assert parts.archive.current_head(G) == patch.id
