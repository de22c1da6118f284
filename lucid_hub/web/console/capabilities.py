"""The console's pages for what the hub does beyond publishing and partners: its rules (each
rule, its recent firings and their outcomes, which rules can trigger which, any cycle), and
the hub itself (its background roles' health and last good round, the leadership lease,
this replica's store)."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from flask import Response, render_template, request

from lucid_hub.db.times import aware
from lucid_hub.leadership import lease_of
from lucid_hub.publish.relay import backlog
from lucid_hub.queries.troubles import listing
from lucid_hub.replicas import REPORT_EVERY, SILENT
from lucid_hub.rules.model import RULES_GRAPH
from lucid_hub.streams.inbox import senders
from lucid_hub.web.admin import ui
from lucid_hub.web.console.figures import KEY_AGE_DAYS, key_age_days
from lucid_hub.web.console.live import _changes, version
from lucid_hub.web.http import runtime
from lucid_hub.web.receipts import receipts

FIRINGS = 500  # the newest firings the rules page counts outcomes over
SHOWN_FIRINGS = 50  # and lists
GRAPHS = 50  # graphs whose receipts the inboxes page shows
CHANGES = 20  # the newest changes of the rule set the rules page lists
NODE_GAP = 4.5  # from a node's centre to where the triggering graph's arrows start and end (radius 3.5, a gap)


def _triggering(edges: list[tuple[str, str]], names: list[str], cycles: list[tuple[str, ...]]) -> dict[str, Any]:
    """The triggering graph drawn as an SVG: the rules on a circle, an arrow for each edge
    (in red when on a cycle), laid out by the server (no script)."""
    on_cycle = {r for group in cycles for r in group}
    n = max(len(names), 1)
    radius = 40 if n > 1 else 0
    spots = {name: (50 + radius * math.cos(2 * math.pi * i / n - math.pi / 2),
                    50 + radius * math.sin(2 * math.pi * i / n - math.pi / 2)) for i, name in enumerate(names)}
    lines = []
    for a, b in edges:
        (x1, y1), (x2, y2) = spots[a], spots[b]
        dx, dy = x2 - x1, y2 - y1
        length = math.hypot(dx, dy)
        if length > 2 * NODE_GAP:  # (the arrow ends at the node's rim, its head not hidden under the node)
            x1, y1 = x1 + dx * NODE_GAP / length, y1 + dy * NODE_GAP / length
            x2, y2 = x2 - dx * NODE_GAP / length, y2 - dy * NODE_GAP / length
        lines.append({"x1": round(x1, 2), "y1": round(y1, 2), "x2": round(x2, 2), "y2": round(y2, 2),
                      "cycle": a in on_cycle and b in on_cycle, "self": a == b, "title": f"{a} can raise {b}"})
    nodes = [{"x": round(x, 2), "y": round(y, 2), "name": name, "label": str(i + 1), "cycle": name in on_cycle}
             for i, (name, (x, y)) in enumerate(spots.items())]
    return {"lines": lines, "nodes": nodes}


def _rules() -> dict[str, Any]:
    hub = runtime()
    registered = sorted(hub.rules.rules(), key=lambda r: r.order)
    firings = hub.rules.history(limit=FIRINGS)
    outcomes: dict[str, Counter[str]] = {}
    for f in firings:
        outcomes.setdefault(f["rule"], Counter())[f["outcome"]] += 1
    changes = [{"id": p.id, "author": p.author, "message": p.message, "at": aware(p.created), "seq": p.seq}
               for p in hub.archive.timeline(RULES_GRAPH, None, CHANGES)]
    lanes = sorted((owner or "the operator", state["overruns"], state["resting"])
                   for owner, state in hub.rules.lanes().items())
    return {"rules": registered, "outcomes": outcomes, "firings": firings[:SHOWN_FIRINGS], "changes": changes,
            "lanes": lanes}


def _rules_signature(state: dict[str, Any]) -> object:
    return ([(r.rule.iri, r.text, r.owner.account) for r in state["rules"]], state["firings"],
            sorted((rule, sorted(counts.items())) for rule, counts in state["outcomes"].items()),
            state["changes"][:1], state["lanes"])


@ui.get("/rules")
def rules_page() -> Any:
    hub, state = runtime(), _rules()
    analysis = hub.rules.explain()
    names = [r.rule.iri for r in state["rules"]]
    return render_template("rules.html", **state, analysis=analysis, version=version(_rules_signature(state)),
                           names=hub.clients.names(),
                           picture=_triggering(list(analysis.edges), names, list(analysis.cycles)),
                           numbers={name: i + 1 for i, name in enumerate(names)})


def _hub() -> dict[str, Any]:
    hub = runtime()
    roles = [{"name": r.name, "up": r.up, "failing": r.failures_in_a_row, "restarts": r.restarts,
              "last": datetime.fromtimestamp(r.last_success, UTC) if r.last_success else None, "every": r.every}
             for r in hub.roles.all()]
    lease = lease_of(hub.db)
    leader = None if lease is None else {"holder": lease[0], "epoch": lease[1],
                                         "expires": datetime.fromtimestamp(lease[2], UTC),
                                         "live": lease[2] >= time.time()}
    waiting, oldest = backlog(hub.db)
    stores = [{"name": s.store.config.name, "at": s.store.name, "problem": s.problem, "behind": s.behind,
               "written": s.written, "refused": sorted(s.refused.items()), "graphs": ", ".join(s.store.config.graphs)}
              for s in hub.remotes]
    return {"roles": roles, "leader": leader, "this_leads": hub.leader, "lag": hub.publisher.sync.lag(),
            "max_lag": hub.settings.ready_max_lag, "replicas": hub.replicas.all() if hub.replicas is not None else [],
            "topic": getattr(hub.log, "topic", None),  # (Kafka's; the embedded log has none)
            "outbox": waiting, "outbox_since": oldest, "relayed_by_archive": hub.log.written_by_archive,
            "stores": stores}


def _hub_signature(state: dict[str, Any]) -> object:
    """What changes the page: a role stopping, failing or recovering, the lease changing hands or
    running out, the store's lag. (A healthy role's last round and the lease's expiry move
    every few seconds; they are shown, but do not make the page fetched again.)"""
    leader = state["leader"]
    roles = [(r["name"], r["up"], r["failing"], r["restarts"]) for r in state["roles"]]
    replicas = [(r["name"], r["silent"], r["lag"], r["leader"], r["failing"]) for r in state["replicas"]]
    return (roles, leader and (leader["holder"], leader["epoch"], leader["live"]), state["this_leads"],
            state["lag"], replicas, state["outbox"], [(s["name"], s["problem"], s["behind"], s["refused"])
                                                     for s in state["stores"]])


@ui.get("/hub")
def hub_page() -> Any:
    """This process's background roles, the leadership lease and this replica's store."""
    hub, state = runtime(), _hub()
    # (the key files are read once a page load, not at each of its stream's looks)
    key = {"kid": hub.keys.active().kid, "age": key_age_days(hub.keys.active_path),
           "retired": len(hub.keys.retired()), "due": KEY_AGE_DAYS}
    return render_template("hub.html", **state, key=key, version=version(_hub_signature(state)),
                           report_every=REPORT_EVERY, silent=int(SILENT.total_seconds()))


def _queries() -> dict[str, Any]:
    """The queries and windows, the parties over their time budget (overruns in a row, by
    queries and windows alike), and the store's changes the queries have not evaluated yet."""
    hub = runtime()
    over: dict[str, tuple[int, float]] = {}
    for overruns in (hub.queries.evaluation.overruns, hub.windows.overruns):
        for account, (count, wait) in overruns.standing().items():
            before = over.get(account, (0, 0.0))
            over[account] = (before[0] + count, max(before[1], wait))
    return {**listing(hub.db), "overruns": sorted(over.items()), "waiting": hub.queries.evaluation.waiting,
            "budget": hub.settings.query_budget}


def _queries_signature(state: dict[str, Any]) -> object:
    """(a party's wait counts down: its overruns are what shows a change)"""
    return {**state, "overruns": [(account, count) for account, (count, _wait) in state["overruns"]]}


@ui.get("/queries")
def queries_page() -> Any:
    """Continuous queries and windows: who holds them, over what, how they stand."""
    state = _queries()
    return render_template("queries.html", **state, version=version(_queries_signature(state)),
                           names=runtime().clients.names())  # (a party is its client's account)


def _inboxes() -> dict[str, Any]:
    hub = runtime()
    sent = senders(hub.db)
    graphs = sorted({str(s["graph"]) for s in sent})
    return {"senders": sent, "receipts": {graph: receipts(hub, graph) for graph in graphs[:GRAPHS]}}


@ui.get("/inboxes")
def inboxes_page() -> Any:
    """Notifications by sender per graph, and each partner's newest receipt (who applied what)."""
    state = _inboxes()
    names = runtime().clients.names()  # (a sender is its client's account)
    return render_template("inboxes.html", **state, names=names, version=version(state))


# What each page's live stream watches: the data it shows (docs/console.md, "Live updates").
SIGNATURES: dict[str, Callable[[], object]] = {
    "rules": lambda: _rules_signature(_rules()),
    "hub": lambda: _hub_signature(_hub()),
    "queries": lambda: _queries_signature(_queries()),
    "inboxes": _inboxes,
}


@ui.get("/<any(rules, hub, queries, inboxes):page>/events")
def page_events(page: str) -> Response:
    """The page's changes as they happen (`shown`: the version it was rendered at)."""
    shown = request.args.get("shown", "")[:64]
    return _changes(SIGNATURES[page], shown)
