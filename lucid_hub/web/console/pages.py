"""The console's pages about the hub's own data: the overview, the graphs, a graph, a patch,
two versions compared."""

from __future__ import annotations

from collections import Counter
from typing import Any

from flask import Response, render_template, request

from lucid_hub.errors import InputError, LucidError
from lucid_hub.rdf.msg import Msg
from lucid_hub.rdf.patch import check_patch_id
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.signing import TrustedKeys
from lucid_hub.web.admin import ui
from lucid_hub.web.console.attention import attention
from lucid_hub.web.console.figures import (
    PAGE,
    Chart,
    _graph_row,
    graph_figures,
    overview_figures,
)
from lucid_hub.web.console.live import _live, version
from lucid_hub.web.console.review import COMPARE_PATCHES, NetChange, review
from lucid_hub.web.http import runtime
from lucid_hub.web.parts import HubParts


def _overview_update(hub: HubParts) -> tuple[dict[str, Any], dict[str, Chart]]:
    """The overview's moving figures and charts, and the version of its attention list (when
    it differs from the page's, the page fetches its list again)."""
    mirrors = hub.mirror_registry.list()  # (one read for both)
    figures, charts = overview_figures(hub, mirrors)
    return {**figures, "attention": version(attention(hub, mirrors))}, charts


@ui.get("/overview/events")
def overview_events() -> Response:
    hub = runtime()
    return _live(lambda: _overview_update(hub))


@ui.get("/overview")
def overview() -> Any:
    hub = runtime()
    graphs, total_graphs = hub.archive.graph_page(0, 10, internal=False)
    mirrors = hub.mirror_registry.list()
    items = attention(hub, mirrors)
    figures, charts = overview_figures(hub, mirrors)
    return render_template("overview.html", graphs=graphs, total_graphs=total_graphs, attention=items,
                           figures=figures, charts=charts, attention_version=version(items))


@ui.get("/graphs")
def graphs_page() -> Any:
    offset = _number("offset", 0)
    graphs, total = runtime().archive.graph_page(offset, PAGE)
    mirrored = {m["graph"] for m in runtime().mirror_registry.list()}
    return render_template("graphs.html", graphs=graphs, total=total, offset=offset, page=PAGE, mirrored=mirrored)


def _ids() -> list[int]:
    """The subscriptions a live stream follows (`ids`: the page's rows, at most a page)."""
    raw = [i for i in request.args.get("ids", "").split(",") if i]
    ids = [int(i) for i in raw if i.isdigit() and len(i) <= 12]
    if len(ids) != len(raw) or len(ids) > PAGE:
        raise InputError(f"ids: at most {PAGE} subscription numbers, separated by commas")
    return ids


@ui.get("/graph/events")
def graph_events() -> Response:
    graph, seen, ids = request.args.get("graph", ""), _number("seen", 0), _ids()
    _graph_row(graph)  # (an unknown graph is refused before the stream starts)
    return _live(lambda: (graph_figures(graph, seen, ids), {}))


@ui.get("/graph")
def graph_page() -> Any:
    hub = runtime()
    graph = request.args.get("graph", "")
    before = _number("before", None)  # (the request's own faults first)
    row = _graph_row(graph)
    shown = hub.hub.subscriptions(graph=graph, worst_first=True, limit=PAGE)
    patches = hub.archive.timeline(graph, before, PAGE + 1)
    readers = hub.policies.engine.who_may(graph, "read")
    writers = hub.policies.engine.who_may(graph, "write")
    return render_template("graph.html", graph=row, figures=graph_figures(graph, ids=[s["id"] for s in shown]),
                           patches=patches[:PAGE], older=patches[PAGE - 1].seq if len(patches) > PAGE else None,
                           readers=readers, writers=writers, subscribers=shown,
                           total_subscribers=hub.hub.count(graph=graph), ids=",".join(str(s["id"]) for s in shown),
                           names=hub.clients.names())


@ui.get("/patch")
def patch_page() -> Any:
    hub = runtime()
    patch_id = check_patch_id(request.args.get("id", ""))
    record = hub.archive.patch(patch_id)
    patch = read_rdf_patch(record.body, hub.canonicalizer)
    pinned = hub.mirror_registry.pinned_keys(record.graph)
    keys = TrustedKeys(pinned) if pinned is not None else TrustedKeys(hub.keys.jwks())
    try:
        verified, problem = keys.verify(patch.id, patch.signature), ""
    except LucidError as exc:
        verified, problem = "", str(exc)
    return render_template("patch.html", record=record, patch=patch, changes=review(patch), verified=verified,
                           problem=problem, against="the publisher's pinned keys" if pinned is not None
                           else "this hub's keys", body=record.body.decode("utf-8", "replace"))


@ui.get("/compare")
def compare_page() -> Any:
    """Two versions of a graph compared: the patches from `from` (excluded) to `to` (included,
    default the head) composed into one change, shown as a patch is."""
    hub = runtime()
    graph = request.args.get("graph", "")
    start = check_patch_id(request.args.get("from", ""), "from")
    row = _graph_row(graph)
    end = check_patch_id(request.args.get("to") or (row.head or ""), "to")
    first, last = hub.archive.position(start, graph), hub.archive.position(end, graph)
    if last < first:
        raise InputError("`to` must be the later version (swap them)")
    if last - first > COMPARE_PATCHES:
        raise InputError(f"the versions are {last - first} patches apart; compare at most {COMPARE_PATCHES} at once")
    removed: Counter[Msg] = Counter()
    added: Counter[Msg] = Counter()
    for record in hub.archive.chain_records(graph, first, last):
        patch = read_rdf_patch(record.body, hub.canonicalizer)
        for msg in patch.removed:  # an MSG added in between and removed again: no change
            if added[msg]:
                added[msg] -= 1
            else:
                removed[msg] += 1
        for msg in patch.added:
            if removed[msg]:
                removed[msg] -= 1
            else:
                added[msg] += 1
    change = NetChange(sorted(removed.elements()), sorted(added.elements()))
    return render_template("compare.html", graph=row, start=start, end=end, patches=last - first,
                           changes=review(change), removed=len(change.removed), added=len(change.added))


@ui.get("/patch/raw")
def patch_raw() -> Any:
    """The patch's RDF Patch bytes as archived (shown as text by the browser)."""
    record = runtime().archive.patch(check_patch_id(request.args.get("id", "")))
    return Response(record.body, mimetype="text/plain", headers={"X-Content-Type-Options": "nosniff"})


def _number(name: str, default: Any) -> Any:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or len(raw) > 12:
        raise InputError(f"{name} must be a whole number")
    return int(raw)
