"""SPARQL Update on owned graphs: the update, evaluated into removals and additions in a
SPARQL worker (`store/sparql.py`), becomes one signed patch per written graph, all published
in one transaction.

Only what the update touches is read: a triple with an existing blank node belongs to an
MSG instance of the store (its skolem IRI names the instance), and removing or adding such
a triple replaces that whole MSG by what remains of it, decomposed again (it may split, or
join others). An update costs what it changes, not the size of the graphs it writes.

If a graph moves on between the snapshot the update was evaluated on and the publish, the
update is evaluated again (its WHERE may match differently), up to UPDATE_ATTEMPTS times.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

import pyoxigraph as ox

from lucid_hub.diff import GraphChange
from lucid_hub.errors import ConflictError, InputError
from lucid_hub.policy.decisions import Party
from lucid_hub.publish.publisher import GraphView, Publisher, StaleChange
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import GraphMsgs, Msg, by_hash, graph_msgs
from lucid_hub.rdf.patch import Patch
from lucid_hub.store.layout import check_no_skolem
from lucid_hub.store.sparql import GraphEdit, SparqlGuard

UPDATE_ATTEMPTS = 3
_SKOLEM = re.compile(r"<urn:lucid-hub:bnode:([0-9a-f]+)\.(\d+)>")


def run_update(publisher: Publisher, sparql: SparqlGuard, text: str, *, party: Party, readable: list[str],
               may_write: Callable[[str], None], author: str, message: str, using: list[str] | None = None,
               using_named: list[str] | None = None, base: str | None = None,
               default_graph: str | None = None) -> list[Patch]:
    """Evaluate and publish an update; the patches made (none if it changed nothing).

    `may_write(graph)` raises unless the caller may write the graph: it is asked for every
    graph the update names before evaluation, and for every graph it writes before publishing."""
    def authorize(graphs: list[str]) -> None:
        for graph in graphs:
            may_write(graph)

    archive = publisher.archive
    for _attempt in range(UPDATE_ATTEMPTS):
        outcome = sparql.update(text, party=party, readable=readable, authorize=authorize, using=using,
                                using_named=using_named, base=base, default_graph=default_graph,
                                absent=lambda graphs: [g for g in graphs if archive.deleted(g)])
        edits = outcome.graphs
        authorize(sorted(edits))  # GRAPH ?g templates: graphs known only now
        for edit in edits.values():  # the store's own terms: only its blank nodes, as read
            check_no_skolem((_SKOLEM.sub("", s) for s in edit.added), "the update")
        changes = {graph: edit_computer(graph, edit, publisher.canonicalizer) for graph, edit in edits.items()}
        try:
            patches = publisher.publish_all(changes, {g: e.version for g, e in edits.items()}, author=author,
                                            message=message)
        except StaleChange:
            continue
        # The Graph Store's view: DROP GRAPH deletes a graph, CREATE and any write make it again.
        for graph in outcome.written:
            if archive.deleted(graph):
                archive.restore(graph)
        for graph in outcome.dropped:
            if archive.exists(graph):
                archive.mark_deleted(graph, archive.current_head(graph))
        return patches
    raise ConflictError(f"the graphs changed while the update was evaluated, {UPDATE_ATTEMPTS} times; retry it")


def edit_computer(graph: str, edit: GraphEdit, canonicalizer: Canonicalizer) -> Callable[[GraphView], GraphChange]:
    """The change computation of one graph's edit (a SPARQL Update's, a rule action's)."""
    return lambda view: edit_change(graph, edit, view, canonicalizer)


def edit_change(graph: str, edit: GraphEdit, view: GraphView, canonicalizer: Canonicalizer) -> GraphChange:
    """The MSG change of one graph's removed and added statements."""
    removed_blank = {s for s in edit.removed if "<urn:lucid-hub:bnode:" in s}
    added_blank = {s for s in edit.added if "<urn:lucid-hub:bnode:" in s or "_:" in s}
    instances = {m.group(1) for s in (*removed_blank, *added_blank) for m in _SKOLEM.finditer(s)}
    old = GraphMsgs()
    region: set[str] = set()
    for instance in sorted(instances):
        statements, document = view.store.read.instance(graph, instance)
        if not statements:  # (the graph is at the version the update read: not a race)
            raise InputError(f"the update writes into <{graph}> a blank node of another graph "
                             f"(<urn:lucid-hub:bnode:{instance}.…>); blank nodes are not shared between graphs")
        region.update(statements)
        old.blank[document] += 1
    region = (region - removed_blank) | added_blank
    new = graph_msgs(ox.parse("".join(f"{_unskolemise(s)} .\n" for s in sorted(region)),
                              format=ox.RdfFormat.N_TRIPLES), canonicalizer) if region else GraphMsgs()
    old = GraphMsgs({s for s in edit.removed if s not in removed_blank}, old.blank)
    new = GraphMsgs({s for s in edit.added if s not in added_blank}, new.blank)
    return GraphChange(graph, *_net(old, new))


def _unskolemise(statement: str) -> str:
    """The store's skolem IRIs of an instance as blank nodes again (labels are local)."""
    return _SKOLEM.sub(lambda m: f"_:k{m.group(1)}x{m.group(2)}", statement)


def _net(old: GraphMsgs, new: GraphMsgs) -> tuple[tuple[Msg, ...], tuple[Msg, ...]]:
    """(removed, added) MSGs, with what both sides hold cancelled out (a multiset difference)."""
    removed = Counter({f"{s} .\n": 1 for s in old.ground}) + old.blank
    added = Counter({f"{s} .\n": 1 for s in new.ground}) + new.blank
    gone, came = removed - added, added - removed
    return (tuple(by_hash(Msg.of(text) for text in gone.elements())),
            tuple(by_hash(Msg.of(text) for text in came.elements())))
