"""SPARQL 1.1 Update at `/sparql` on owned graphs: each changed graph gets exactly one patch."""

from __future__ import annotations

import re

import pyoxigraph as ox
from flask import Blueprint, Response, jsonify, request

from lucid_hub.errors import InputError, UnsupportedMediaTypeError
from lucid_hub.rdf.msg import GraphMsgs, graph_msgs
from lucid_hub.store.graphs import check_no_skolem
from lucid_hub.web.common import author, message, patch_url, runtime

blueprint = Blueprint("sparql", __name__)
_PREFIX = re.compile(r"PREFIX\s+([A-Za-z][\w.-]*)?:\s*<([^>]*)>", re.IGNORECASE)


def _update_text() -> str:
    if request.mimetype == "application/sparql-update":
        return request.get_data(as_text=True)
    if request.mimetype == "application/x-www-form-urlencoded" and "update" in request.form:
        return request.form["update"]
    if request.mimetype == "application/x-www-form-urlencoded" and "query" in request.form:
        raise InputError("SPARQL queries are not served here yet; /sparql takes updates")
    raise UnsupportedMediaTypeError("send the update as application/sparql-update or as form field update=")


def _mentioned(update: str, graphs: list[str]) -> list[str]:
    """Owned graphs the update names, by full IRI or by a declared prefix."""
    prefixes = _PREFIX.findall(update)
    out = []
    for graph in graphs:
        if f"<{graph}>" in update or any(
            graph.startswith(ns) and f"{name}:{graph[len(ns):]}" in update for name, ns in prefixes if ns
        ):
            out.append(graph)
    return out


@blueprint.post("/sparql")
def sparql_update() -> Response:
    """Run the update on a scratch copy of the graphs it names, then publish each difference.

    The scratch copy makes the patch exactly what changed, whatever the update's form
    (INSERT DATA, DELETE/INSERT WHERE, LOAD is refused: no network access from here).
    """
    update = _update_text()
    if re.search(r"\bLOAD\b", update, re.IGNORECASE):
        raise InputError("LOAD is not allowed (the hub does not fetch URLs on behalf of updates)")
    rt = runtime()
    owned = [g.iri for g in rt.publisher.graphs()]
    scratch = ox.Store()
    loaded = _mentioned(update, owned)
    for graph in loaded:
        _, statements = rt.publisher.content(graph)
        name = ox.NamedNode(graph)
        scratch.extend(ox.Quad(q.subject, q.predicate, q.object, name) for q in
                       ox.parse("".join(f"{s} .\n" for s in statements), format=ox.RdfFormat.N_TRIPLES))
    try:
        scratch.update(update)
    except SyntaxError as exc:
        raise InputError(f"malformed SPARQL update: {' '.join(str(exc).split())}") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"the update failed: {exc}") from None
    if any(True for _ in scratch.quads_for_pattern(None, None, None, ox.DefaultGraph())):
        raise InputError("updates must write into named graphs (GRAPH <IRI> { … } or WITH <IRI>)")
    results = []
    touched = sorted(set(loaded) | {g.value for g in scratch.named_graphs() if isinstance(g, ox.NamedNode)})
    for graph in touched:
        quads = list(scratch.quads_for_pattern(None, None, None, ox.NamedNode(graph)))
        check_no_skolem((str(q) for q in quads), "update result")
        new = graph_msgs(quads, rt.canonicalizer) if quads else GraphMsgs()
        patch = rt.publisher.replace(graph, new, author=author(), message=message())
        if patch is not None:
            results.append({"graph": graph, "patch": patch.id, "url": patch_url(patch.id),
                            "removed": len(patch.removed), "added": len(patch.added)})
    return jsonify({"patches": results})
