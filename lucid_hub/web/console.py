"""The console (issue 21): pages for the people who run a hub, on the admin pages' sign-in and
CSRF protection (web.admin's `ui` blueprint). Server-rendered, no script needed to read them;
every list is a page of a bounded size.

This step: the overview (graphs, patches per hour over a day and a week, subscribers and
mirrors by health, what needs attention), the graphs, a graph's history as a timeline, and a
patch shown as a review shows a change — removed and added statements side by side, grouped
by subject, blank-node structures nested, long literals folded — with its signature checked.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyoxigraph as ox
from flask import Response, redirect, render_template, request, session, stream_with_context, url_for

from lucid_hub.auth.clients import SCOPES
from lucid_hub.errors import InputError, LucidError, NotFoundError
from lucid_hub.mirror import list_mirrors, pinned_keys, trust_mirror
from lucid_hub.outbound import AddressPolicy
from lucid_hub.rdf.msg import Msg
from lucid_hub.rdf.patch import check_patch_id
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.signing import TrustedKeys
from lucid_hub.web.admin import ui
from lucid_hub.web.http import runtime

PAGE = 50  # patches or graphs a page
FOLD = 160  # literals longer than this are folded
LAGGING = 100  # a subscription or mirror this many patches behind needs attention
KEY_AGE_DAYS = 365  # a signing key older than this is named for rotation (docs/operations.md, Key rotation)
RULE_FIRINGS = 200  # the newest rule firings the overview looks at for failures


@dataclass
class Bar:
    """One bar of a server-drawn chart: its label, count and geometry (SVG units)."""

    label: str
    count: int
    x: float
    height: float


def _bars(counts: dict[datetime, int], start: datetime, step: timedelta, n: int, label: str) -> list[Bar]:
    """`n` bars of `step` from `start`, each the sum of the hourly counts inside it."""
    sums = [0] * n
    for hour, count in counts.items():
        index = int((hour - start) / step)
        if 0 <= index < n:
            sums[index] += count
    top = max(sums) or 1
    width = 100 / n
    return [Bar((start + i * step).strftime(label), c, i * width, 40 * c / top) for i, c in enumerate(sums)]


def _figures(total_graphs: int, mirrors: list[dict[str, Any]], subscriptions: list[dict[str, Any]],
             day: dict[datetime, int], week: dict[datetime, int]) -> dict[str, Any]:
    """The overview's moving figures (the page's, and each live update's)."""
    def states(items: list[dict[str, Any]]) -> str:
        counts = Counter(str(i["state"]) for i in items)
        return ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "none"

    return {"published": total_graphs - len(mirrors), "mirrored": len(mirrors), "subscriptions": states(subscriptions),
            "mirror_states": states(mirrors), "failures": sum(int(s["failures"]) for s in subscriptions),
            "day_total": sum(day.values()), "week_total": sum(week.values())}


def key_age_days(path: Path) -> int:
    """Days since the active signing key was written (its file's time)."""
    try:
        return int((time.time() - path.stat().st_mtime) // 86400)
    except OSError:
        return 0


def _windows() -> tuple[datetime, datetime, dict[datetime, int], dict[datetime, int]]:
    """The chart windows (the last 24 hours and 7 days, to the end of this hour) and their counts."""
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    week = runtime().archive.per_hour(now - timedelta(days=7))
    day_start = now - timedelta(hours=24)
    return now, day_start, {h: c for h, c in week.items() if h >= day_start}, week


# Seconds a live-figures stream stays open (the browser's EventSource then opens the next),
# and the least time between two updates of one stream (a burst of patches is one update).
LIVE_SECONDS = 300.0
LIVE_EVERY = 1.0
LIVE_IDLE = 5.0  # seconds between updates while the archive does not change


@ui.get("/overview/events")
def overview_events() -> Response:
    """The overview's figures as Server-Sent Events: one at once, then one after every change
    of the archive (at most one a second) and every LIVE_IDLE seconds while nothing changes
    (deliveries go on after the patches that caused them). Deliveries per minute are measured
    between two updates of the stream (the subscriptions' delivered counts)."""
    hub = runtime()
    stream = hub.stream
    last: list[tuple[float, int]] = []  # (monotonic time, deliveries so far) of the previous update

    def figures() -> str:
        _now, _start, day, week = _windows()
        subscriptions = hub.hub.subscriptions()
        data = _figures(hub.archive.graph_page(0, 1)[1], list_mirrors(hub.db), subscriptions, day, week)
        delivered, at = sum(int(s["delivered"]) for s in subscriptions), time.monotonic()
        if last:
            then, before = last[0]
            data["deliveries_per_minute"] = round(max(0, delivered - before) * 60 / max(at - then, 1e-3))
        last[:] = [(at, delivered)]
        return f"event: figures\ndata: {json.dumps(data)}\n\n"

    def events() -> Iterator[str]:
        yield "retry: 2000\n\n"
        generation = stream.generation()
        yield figures()
        end = time.monotonic() + LIVE_SECONDS
        while time.monotonic() < end and not stream.ended:
            generation = stream.wait(generation, LIVE_IDLE)
            yield figures()
            time.sleep(LIVE_EVERY)  # (pacing the stream, not synchronising anything)

    return Response(stream_with_context(events()), mimetype="text/event-stream",
                    headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@ui.get("/overview")
def overview() -> Any:
    hub = runtime()
    now, day_start, day, week = _windows()
    graphs, total_graphs = hub.archive.graph_page(0, 10)
    mirrors = list_mirrors(hub.db)
    subscriptions = hub.hub.subscriptions()
    attention: list[tuple[str, str, str]] = []  # (what, detail, link)
    for s in subscriptions:
        if s["state"] == "failed":
            attention.append(("Subscription failed", f"{s['callback']} ({s['graph']}): {s['last_error']}",
                              f"graph?graph={s['graph']}"))
        elif s["lag"] >= LAGGING:
            attention.append(("Subscriber behind", f"{s['callback']}: {s['lag']} patches of {s['graph']}",
                              f"graph?graph={s['graph']}"))
    for m in mirrors:
        if m["quarantined"]:
            attention.append(("Patches quarantined", f"{m['graph']}: {m['quarantined']} ({m['last_error']})",
                              f"graph?graph={m['graph']}"))
        if m["state"] not in ("active",):
            attention.append((f"Mirror {m['state']}", f"{m['graph']} from {m['hub']}", f"graph?graph={m['graph']}"))
    failing = Counter(f["rule"] for f in hub.rules.history(limit=RULE_FIRINGS)
                      if f["outcome"] in ("failed", "rolled-back"))
    for rule, count in sorted(failing.items()):
        attention.append(("Rule failing", f"{rule}: {count} of its recent firings failed (lucid-hub rules show)", ""))
    age = key_age_days(hub.keys.active_path)
    if age >= KEY_AGE_DAYS:
        attention.append(("Signing key due for rotation", f"in use for {age} days (lucid-hub keys rotate)",
                          "/.well-known/jwks.json"))
    return render_template(
        "overview.html", graphs=graphs, total_graphs=total_graphs, attention=attention,
        day=_bars(day, day_start, timedelta(hours=1), 24, "%H:00"),
        week=_bars(week, now - timedelta(days=7), timedelta(days=1), 7, "%a %d"),
        **_figures(total_graphs, mirrors, subscriptions, day, week))


@ui.get("/graphs")
def graphs_page() -> Any:
    offset = _number("offset", 0)
    graphs, total = runtime().archive.graph_page(offset, PAGE)
    mirrored = {m["graph"] for m in list_mirrors(runtime().db)}
    return render_template("graphs.html", graphs=graphs, total=total, offset=offset, page=PAGE, mirrored=mirrored)


@ui.get("/graph")
def graph_page() -> Any:
    hub = runtime()
    graph = request.args.get("graph", "")
    before = _number("before", None)  # (the request's own faults first)
    row = hub.archive.graphs_of([graph]).get(graph)
    if row is None:
        raise NotFoundError(f"unknown graph <{graph}>")
    patches = hub.archive.timeline(graph, before, PAGE + 1)
    readers = hub.policies.engine.who_may(graph, "read")
    writers = hub.policies.engine.who_may(graph, "write")
    subscribers = [s for s in hub.hub.subscriptions() if s["graph"] == graph]
    mirror = next((m for m in list_mirrors(hub.db) if m["graph"] == graph), None)
    return render_template("graph.html", graph=row, size=hub.archive.size(graph), patches=patches[:PAGE],
                           older=patches[PAGE - 1].seq if len(patches) > PAGE else None, readers=readers,
                           writers=writers, subscribers=subscribers, mirror=mirror)


@dataclass
class Node:
    """A statement's object as the patch view shows it: a term, or a nested blank node."""

    predicate: str
    text: str = ""
    folded: str = ""  # the whole of a long literal (text is its start)
    children: list[Node] = field(default_factory=list)


@dataclass
class SubjectChange:
    """One subject's removed and added statements."""

    subject: str
    removed: list[Node] = field(default_factory=list)
    added: list[Node] = field(default_factory=list)


def _term(term: Any) -> tuple[str, str]:
    """(shown text, whole text when folded) of an object term."""
    text = str(term)
    if isinstance(term, ox.Literal) and len(term.value) > FOLD:
        return f'"{term.value[:FOLD]}…"', text
    return text, ""


def _nested(quads: list[ox.Quad]) -> list[tuple[str, Node]]:
    """An MSG's statements as (subject, node) trees: statements about blank nodes nest under
    the statement that names them (once: a cycle or a shared node is shown where first met)."""
    about: dict[str, list[ox.Quad]] = defaultdict(list)
    for q in quads:
        about[str(q.subject)].append(q)
    named = {str(q.object) for q in quads if isinstance(q.object, ox.BlankNode)}
    roots = [s for s in about if not s.startswith("_:") or s not in named] or list(about)[:1]
    seen: set[str] = set()

    def node(q: ox.Quad) -> Node:
        obj = q.object
        key = str(obj)
        if isinstance(obj, ox.BlankNode) and key in about and key not in seen:
            seen.add(key)
            return Node(str(q.predicate), "[ ]", children=[node(inner) for inner in about[key]])
        text, whole = _term(obj)
        return Node(str(q.predicate), text, whole)

    out = []
    for subject in roots:
        seen.add(subject)
        out += [("[ ]" if subject.startswith("_:") else subject, node(q)) for q in about[subject]]
    return out


def review(patch: Any) -> list[SubjectChange]:
    """The patch's rows by subject, removed and added side by side, subjects in order."""
    changes: dict[str, SubjectChange] = {}
    for side, msgs in (("removed", patch.removed), ("added", patch.added)):
        for msg in msgs:
            quads = list(ox.parse(msg.nquads, format=ox.RdfFormat.N_QUADS))
            for subject, node in _nested(quads):
                change = changes.setdefault(subject, SubjectChange(subject))
                getattr(change, side).append(node)
    return [changes[s] for s in sorted(changes)]


@ui.get("/patch")
def patch_page() -> Any:
    hub = runtime()
    patch_id = check_patch_id(request.args.get("id", ""))
    record = hub.archive.patch(patch_id)
    patch = read_rdf_patch(record.body, hub.canonicalizer)
    pinned = pinned_keys(hub.db, record.graph)
    keys = TrustedKeys(pinned) if pinned is not None else TrustedKeys(hub.keys.jwks())
    try:
        verified, problem = keys.verify(patch.id, patch.signature), ""
    except LucidError as exc:
        verified, problem = "", str(exc)
    return render_template("patch.html", record=record, patch=patch, changes=review(patch), verified=verified,
                           problem=problem, against="the publisher's pinned keys" if pinned is not None
                           else "this hub's keys", body=record.body.decode("utf-8", "replace"))


@ui.get("/subscriptions")
def subscriptions_page() -> Any:
    """Every subscription to our graphs (partners' mirrors of them among them), a page at a
    time, the failing and lagging ones first."""
    offset = _number("offset", 0)
    hub = runtime()
    rows = sorted(hub.hub.subscriptions(),
                  key=lambda s: (s["state"] != "failed", -int(s["lag"]), s["graph"], s["callback"]))
    page = rows[offset:offset + PAGE]
    now = datetime.now(UTC)
    for s in page:  # behind in time: since the oldest patch not yet delivered was made
        oldest = hub.archive.created_at(s["graph"], hub.archive.length(s["graph"]) - int(s["lag"]) + 1) \
            if s["lag"] else None
        s["behind_for"] = _duration(now - oldest) if oldest else ""
    return render_template("subscriptions.html", subscriptions=page, total=len(rows), offset=offset, page=PAGE,
                           message=request.args.get("message"))


def _duration(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


ACTIONS = {"redeliver": "Deliver again", "cancel": "Cancel the subscription"}


@ui.get("/subscriptions/confirm")
def confirm_subscription_action() -> Any:
    """What an action will do, and the form that does it (nothing happens on a GET)."""
    action = request.args.get("action", "")
    if action not in ACTIONS:
        raise InputError(f"action must be one of {', '.join(ACTIONS)}")
    sid = _number("id", None)
    subscription = next((s for s in runtime().hub.subscriptions() if s["id"] == sid), None)
    if subscription is None:
        raise NotFoundError(f"no subscription {sid}")
    start = request.args.get("from", "")
    if start:
        check_patch_id(start, "from")
    return render_template("confirm.html", action=action, title=ACTIONS[action], subscription=subscription,
                           start=start)


@ui.post("/subscriptions/act")
def subscription_action() -> Any:
    """Carry out a confirmed action (the CSRF token was checked before this ran)."""
    action = request.form.get("action", "")
    raw = request.form.get("id", "")
    if action not in ACTIONS or not raw.isdigit():
        raise InputError("the form names no known action and subscription")
    sid = int(raw)
    if action == "redeliver":
        start = request.form.get("from") or None
        runtime().delivery.redeliver(sid, check_patch_id(start, "from") if start else None)
        done = f"subscription {sid}: delivering again" + (f" from {start}" if start else "")
    else:
        runtime().hub.cancel(sid, f"cancelled by {session.get('admin')} (console)")
        done = f"subscription {sid} cancelled; its callback was told"
    return redirect(url_for("admin_ui.subscriptions_page", message=done))


@ui.get("/clients")
def clients_page() -> Any:
    """OAuth clients (partners' hubs and tools) with their groups, and the groups the access
    conditions name; a new client's secret is shown once, on the answer to its creation."""
    return render_template("clients.html", **_clients(), scopes=SCOPES, message=request.args.get("message"),
                           created=None)


def _clients() -> dict[str, Any]:
    """The clients, and every group a client is in or a condition names."""
    clients = runtime().clients.list()
    groups = sorted({g for c in clients for g in c.groups}
                    | {g for c in runtime().policies.conditions() for g in c.requiresGroup})
    return {"clients": clients, "groups": groups}


@ui.post("/clients")
def create_client_page() -> Any:
    form = request.form
    record, secret = runtime().clients.create(
        form.get("name", "").strip(), groups=form.get("groups", "").split(), scopes=form.getlist("scopes"),
        callback_prefixes=form.get("callback_prefixes", "").split())
    answer = render_template("clients.html", **_clients(), scopes=SCOPES, message=None, created=(record, secret))
    return Response(answer, status=201, headers={"Cache-Control": "no-store"})  # the secret: never cached


@ui.get("/clients/confirm")
def confirm_client_delete() -> Any:
    client = runtime().clients.get(request.args.get("id", ""))
    if client is None:
        raise NotFoundError(f"unknown client {request.args.get('id', '')}")
    return render_template("confirm_client.html", client=client)


@ui.post("/clients/delete")
def delete_client_page() -> Any:
    client_id = request.form.get("id", "")
    runtime().clients.delete(client_id)
    return redirect(url_for("admin_ui.clients_page", message=f"client {client_id} deleted: its tokens are refused"))


@ui.get("/mirrors")
def mirrors_page() -> Any:
    """The graphs this hub mirrors: publisher, pinned keys, head, state, and each mirror's
    quarantine with the reason for every patch in it."""
    hub = runtime()
    mirrors = list_mirrors(hub.db)
    quarantine = {m["id"]: hub.mirrors.quarantined(m["id"])[:PAGE] for m in mirrors if m["quarantined"]}
    return render_template("mirrors.html", mirrors=mirrors, quarantine=quarantine, lag=_lags(mirrors),
                           message=request.args.get("message"))


# Seconds the mirrors page waits for the publishers to say how far behind each mirror is.
LAG_WAIT = 2.0
_asking = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="console-lag")


def _lags(mirrors: list[dict[str, Any]]) -> dict[str, str]:
    """Each mirror's lag behind its publisher in words, asked of the publishers at once; what
    does not answer within LAG_WAIT (or refuses) says so instead of holding the page."""
    service = runtime().mirrors
    asked = {m["id"]: _asking.submit(service.publisher_lag, m["id"]) for m in mirrors if m["state"] == "active"}
    done, _ = concurrent.futures.wait(asked.values(), timeout=LAG_WAIT)
    out = {}
    for mirror_id, future in asked.items():
        if future not in done:
            out[mirror_id] = "unknown: the publisher did not answer in time"
        elif future.exception() is not None:
            out[mirror_id] = f"unknown: {future.exception()}"[:300]
        else:
            count, more = future.result()
            out[mirror_id] = "up to date" if count == 0 else f"{count}{'+' if more else ''} patches behind"
    return out


def _mirror(mirror_id: str) -> dict[str, Any]:
    found = next((m for m in list_mirrors(runtime().db) if m["id"] == mirror_id), None)
    if found is None:
        raise NotFoundError(f"no mirror {mirror_id}")
    return found


def _mirror_action(act: Callable[[str], int], done: str) -> Any:
    """Carry out an action on the mirror the form names; back to the mirrors with `done`
    (formatted with the patches applied)."""
    mirror = _mirror(request.form.get("id", ""))
    applied = act(mirror["id"])
    return redirect(url_for("admin_ui.mirrors_page", message=f"{mirror['graph']}: {done.format(applied)}"))


@ui.post("/mirrors/reverify")
def reverify_mirror() -> Any:
    """Fetch and verify again what the mirror lacks (after a partner fixed its side, or keys
    were trusted anew): patches that verify now are applied, in order."""
    return _mirror_action(runtime().mirrors.catch_up, "{} patches verified and applied")


@ui.get("/mirrors/reclone")
def confirm_reclone() -> Any:
    return render_template("confirm_reclone.html", mirror=_mirror(request.args.get("id", "")))


@ui.post("/mirrors/reclone")
def reclone_mirror() -> Any:
    """Drop the mirror's copy and clone it again from the publisher (confirmed first)."""
    return _mirror_action(runtime().mirrors.reclone, "cloned again, {} patches verified and applied")


@ui.get("/mirrors/trust")
def confirm_trust() -> Any:
    """The keys to pin anew (a rotated publisher key), asked before it is done."""
    mirror = _mirror(request.args.get("id", ""))
    default = mirror["publisher"].rstrip("/") + "/.well-known/jwks.json"
    return render_template("confirm_trust.html", mirror=mirror, jwks=request.args.get("jwks") or default)


@ui.post("/mirrors/trust")
def trust_keys() -> Any:
    mirror = _mirror(request.form.get("id", ""))
    source = request.form.get("jwks", "")
    if not source.startswith(("https://", "http://")):
        raise InputError("the publisher's keys: an http(s) URL of its JWKS")
    trusted = trust_mirror(runtime().db, mirror["id"], source, policy=AddressPolicy.of(runtime().settings),
                           replace=request.form.get("replace") == "yes")
    runtime().mirrors.wake()
    return redirect(url_for("admin_ui.mirrors_page", message=f"{mirror['graph']}: keys pinned "
                                                            f"({', '.join(map(str, trusted.get('keys', [])))})"))


# The most patches a comparison of two versions reads (each is parsed): farther apart, the
# page asks for nearer versions.
COMPARE_PATCHES = 2_000


@dataclass
class NetChange:
    """What changed between two versions of a graph: the patches between them composed."""

    removed: list[Msg]
    added: list[Msg]


@ui.get("/compare")
def compare_page() -> Any:
    """Two versions of a graph compared: the patches from `from` (excluded) to `to` (included,
    default the head) composed into one change, shown as a patch is."""
    hub = runtime()
    graph = request.args.get("graph", "")
    start = check_patch_id(request.args.get("from", ""), "from")
    row = hub.archive.graphs_of([graph]).get(graph)
    if row is None:
        raise NotFoundError(f"unknown graph <{graph}>")
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
