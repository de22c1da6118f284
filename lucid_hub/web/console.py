"""The console: pages for the people who run a hub, on the admin pages' sign-in and
CSRF protection (web.admin's `ui` blueprint). Server-rendered, no script needed to read them;
every list is a page of a bounded size.

The overview (what needs attention, figures, charts), the graphs, a graph (its history as a
timeline, who may read and write it, its subscribers, two versions compared), a patch shown as
a review shows a change, the subscribers, the mirrors and the clients, with their actions
behind confirmation pages. Pages with moving figures follow a Server-Sent Events stream each
(`_live`); a page and its stream take their figures from one function (docs/console.md).
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyoxigraph as ox
from flask import Response, current_app, redirect, render_template, request, session, url_for

from lucid_hub.auth.clients import SCOPES
from lucid_hub.db.session import Database
from lucid_hub.delivery.deliverer import deliveries_by_minute
from lucid_hub.errors import InputError, LucidError, NotFoundError
from lucid_hub.mirror import list_mirrors, pinned_keys, trust_mirror
from lucid_hub.outbound import AddressPolicy
from lucid_hub.rdf.msg import Msg
from lucid_hub.rdf.patch import check_patch_id
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.signing import TrustedKeys
from lucid_hub.web import push
from lucid_hub.web.admin import ui
from lucid_hub.web.http import runtime

PAGE = 50  # patches or graphs a page
FOLD = 160  # literals longer than this are folded
LAGGING = 100  # a subscription or mirror this many patches behind needs attention
KEY_AGE_DAYS = 365  # a signing key older than this is named for rotation (docs/operations.md, Key rotation)
RULE_FIRINGS = 200  # the newest rule firings the overview looks at for failures


@dataclass
class Bar:
    """One bar of a server-drawn chart: what its tooltip says, and its geometry (SVG units of
    a 100 by 48 view, the baseline at 44)."""

    title: str
    x: float
    y: float
    height: float


@dataclass
class Chart:
    """A bar chart as the overview draws it, and as its live updates redraw it."""

    caption: str
    total: int
    unit: str
    bars: list[Bar]
    span: str  # the first and last bars' labels

    def update(self) -> dict[str, Any]:
        """What a live update sends for it: each bar's (title, y, height), and its label."""
        return {"label": f"{self.caption}: {self.total} {self.unit}",
                "bars": [[b.title, round(b.y, 2), round(b.height, 2)] for b in self.bars]}


def _chart(caption: str, unit: str, bars: list[tuple[str, int, str]]) -> Chart:
    """A chart of (label, height count, tooltip) bars, scaled to the highest."""
    top = max((count for _label, count, _title in bars), default=0) or 1
    width = 100 / len(bars)
    drawn = [Bar(title, i * width, 44 - 40 * count / top, 40 * count / top)
             for i, (_label, count, title) in enumerate(bars)]
    return Chart(caption, sum(count for _label, count, _title in bars), unit, drawn,
                 f"{bars[0][0]} to {bars[-1][0]}")


def _patch_chart(counts: dict[datetime, int], start: datetime, step: timedelta, n: int, label: str,
                 caption: str) -> Chart:
    """`n` bars of `step` from `start`, each the sum of the hourly patch counts inside it."""
    sums = [0] * n
    for hour, count in counts.items():
        index = int((hour - start) / step)
        if 0 <= index < n:
            sums[index] += count
    labels = [(start + i * step).strftime(label) for i in range(n)]
    return _chart(caption, "patches", [(text, c, f"{text}: {c}") for text, c in zip(labels, sums, strict=True)])


DELIVERY_MINUTES = 60  # the minutes the deliveries chart shows


def _delivery_chart(db: Database, at: datetime) -> tuple[Chart, int]:
    """Deliveries a minute over the last hour (every delivering process's, from the table the
    recorders add to), and the current rate: the last whole minute and this one so far."""
    current = at.replace(second=0, microsecond=0)
    start = current - timedelta(minutes=DELIVERY_MINUTES - 1)
    counts = deliveries_by_minute(db, start)
    bars = []
    for i in range(DELIVERY_MINUTES):
        minute = start + timedelta(minutes=i)
        delivered, failed = counts.get(minute, (0, 0))
        text = minute.strftime("%H:%M")
        bars.append((text, delivered, f"{text}: {delivered} delivered" + (f", {failed} failed" if failed else "")))
    recent = counts.get(current, (0, 0))[0] + counts.get(current - timedelta(minutes=1), (0, 0))[0]
    rate = round(recent * 60 / (60 + (at - current).total_seconds()))
    return _chart("Deliveries per minute, last hour", "patches delivered", bars), rate


def key_age_days(path: Path) -> int:
    """Days since the active signing key was written (its file's time)."""
    try:
        return int((time.time() - path.stat().st_mtime) // 86400)
    except OSError:
        return 0


def _states(counts: Counter[str]) -> str:
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "none"


def overview_figures(hub: Any, mirrors: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], dict[str, Chart]]:
    """The overview's moving figures and charts (the page's, and each live update's);
    `mirrors` as the page read them, or read here."""
    total_graphs = hub.archive.graph_page(0, 1)[1]
    mirrors = list_mirrors(hub.db) if mirrors is None else mirrors
    subscriptions, failures = hub.hub.states()
    at = datetime.now(UTC)
    now = at.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)  # the end of this hour
    week = hub.archive.per_hour(now - timedelta(days=7))
    day_start = now - timedelta(hours=24)
    charts = {"day": _patch_chart({h: c for h, c in week.items() if h >= day_start}, day_start, timedelta(hours=1),
                                  24, "%H:00", "Patches per hour, last 24 hours"),
              "week": _patch_chart(week, now - timedelta(days=7), timedelta(days=1), 7, "%a %d",
                                   "Patches per day, last 7 days")}
    charts["deliveries"], rate = _delivery_chart(hub.db, at)
    figures = {"published": total_graphs - len(mirrors), "mirrored": len(mirrors),
               "subscriptions": _states(Counter(subscriptions)),
               "mirror_states": _states(Counter(m["state"] for m in mirrors)),
               "failures": failures, "deliveries_per_minute": rate}
    for name, chart in charts.items():
        figures[f"{name}_total"], figures[f"{name}_span"] = chart.total, chart.span
    return figures, charts


# Seconds a live stream stays open (the browser's EventSource then opens the next), the least
# time between two updates of one stream (a burst of patches is one update), and the most while
# the archive does not change (deliveries, mirrors and lags move without a patch of ours).
LIVE_SECONDS = 300.0
LIVE_EVERY = 1.0
LIVE_IDLE = 5.0
# The share of a process's request threads that console streams may hold (each open page holds
# one): the rest stay for the API and the partners' streams, however many tabs are open. With
# every slot taken a new stream waits LIVE_WAIT seconds for one (pages clicked through quickly
# free theirs at the next heartbeat) before it is refused.
LIVE_SHARE = 0.5
LIVE_WAIT = 3.0
HEARTBEAT = 0.5


_slots_made = threading.Lock()  # (one semaphore a process, made at the first stream)


def _live_slots() -> threading.BoundedSemaphore:
    """This process's slots for console streams (LIVE_SHARE of LUCID_WEB_THREADS, at least 1)."""
    extensions = current_app.extensions
    if "console_live" not in extensions:
        with _slots_made:
            extensions.setdefault("console_live", threading.BoundedSemaphore(
                max(1, int(runtime().settings.web_threads * LIVE_SHARE))))
    slots: threading.BoundedSemaphore = extensions["console_live"]
    return slots


def _live(update: Callable[[], tuple[dict[str, Any], dict[str, Chart]]]) -> Response:
    """A page's moving figures as Server-Sent Events: an `update` after every change of the
    archive (at most one a second) and every LIVE_IDLE seconds while nothing changes. The page
    rendered the figures just now, so the first update comes with the first change or pause.
    Each event is {"figures": {name: text}, "charts": {name: bars}} (admin.js applies it).
    A comment goes out every HEARTBEAT seconds in between: a page closed is noticed at the next
    writes, and its thread freed. With every slot taken for LIVE_WAIT seconds the answer is 503
    (the page stays as rendered)."""
    stream = runtime().stream
    slots = None if push.on_loop() else _live_slots()  # (on the event loop a stream holds no thread)
    if slots is not None and not slots.acquire(timeout=LIVE_WAIT):
        return Response("every live slot of this process is in use (LUCID_WEB_THREADS / 2): the page is not "
                        "updated live; reload it later", status=503, mimetype="text/plain",
                        headers={"Retry-After": "30", "Cache-Control": "no-store"})
    generation, last = stream.generation(), time.monotonic()

    def poll() -> tuple[list[bytes], bool]:
        nonlocal generation, last
        if stream.ended:
            return [], True
        now = stream.generation()
        if now == generation and time.monotonic() - last < LIVE_IDLE:
            return [], False
        generation, last = now, time.monotonic()
        figures, charts = update()
        data = {"figures": figures, "charts": {name: chart.update() for name, chart in charts.items()}}
        return [f"event: figures\ndata: {json.dumps(data)}\n\n".encode()], False

    # (a comment: the browser knows the stream is open; another every HEARTBEAT seconds: a page
    # closed is noticed at the next writes)
    channel = push.Channel(b"retry: 2000\n\n: open\n\n", poll, stream, keepalive=HEARTBEAT,
                           keepalive_line=b": -\n\n", pace=LIVE_EVERY, lifetime=LIVE_SECONDS, in_app=True)
    if slots is not None:
        channel.on_close.append(slots.release)  # (the server closes every answer, begun or not: no slot is lost)
    return push.answer(channel)


@ui.get("/overview/events")
def overview_events() -> Response:
    hub = runtime()
    return _live(lambda: overview_figures(hub))


@ui.get("/overview")
def overview() -> Any:
    hub = runtime()
    graphs, total_graphs = hub.archive.graph_page(0, 10)
    mirrors = list_mirrors(hub.db)
    attention: list[tuple[str, str, str]] = []  # (what, detail, link)
    for s in hub.hub.subscriptions(worst_first=True, limit=PAGE):  # (the worst; all on the subscribers' page)
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
    figures, charts = overview_figures(hub, mirrors)
    return render_template("overview.html", graphs=graphs, total_graphs=total_graphs, attention=attention,
                           figures=figures, charts=charts)


@ui.get("/graphs")
def graphs_page() -> Any:
    offset = _number("offset", 0)
    graphs, total = runtime().archive.graph_page(offset, PAGE)
    mirrored = {m["graph"] for m in list_mirrors(runtime().db)}
    return render_template("graphs.html", graphs=graphs, total=total, offset=offset, page=PAGE, mirrored=mirrored)


def subscription_figures(subscriptions: list[dict[str, Any]]) -> dict[str, str]:
    """Each subscription's moving figures, named `s<id>.<what>` (its row on the subscribers
    and graph pages, and their live updates): state, lag in patches and in time, last success,
    failures with the last reason."""
    hub, at = runtime(), datetime.now(UTC)

    def undelivered(s: dict[str, Any]) -> tuple[str, int]:  # the oldest patch not yet delivered
        return s["graph"], int(s["delivered_seq"]) + 1

    made_at = hub.archive.created_times(undelivered(s) for s in subscriptions if s["lag"])
    out: dict[str, str] = {}
    for s in subscriptions:
        made = made_at.get(undelivered(s)) if s["lag"] else None  # behind in time: since it was made
        key = f"s{s['id']}."
        out |= {f"{key}state": s["state"], f"{key}lag": f"{s['lag']} patches",
                f"{key}behind": f"for {_duration(at - made)}" if made else "",
                f"{key}last": s["last_success_at"] or "never", f"{key}failures": str(s["failures"]),
                f"{key}error": s["last_error"] or ""}
    return out


def _ids() -> list[int]:
    """The subscriptions a live stream follows (`ids`: the page's rows, at most a page)."""
    raw = [i for i in request.args.get("ids", "").split(",") if i]
    ids = [int(i) for i in raw if i.isdigit() and len(i) <= 12]
    if len(ids) != len(raw) or len(ids) > PAGE:
        raise InputError(f"ids: at most {PAGE} subscription numbers, separated by commas")
    return ids


def _graph_row(graph: str) -> Any:
    """The archive's row of a graph (head, length); NotFoundError for one it does not hold."""
    row = runtime().archive.graphs_of([graph]).get(graph)
    if row is None:
        raise NotFoundError(f"unknown graph <{graph}>")
    return row


def graph_figures(graph: str, seen: int | None = None, ids: list[int] | None = None) -> dict[str, Any]:
    """A graph's moving figures: version, size, patches, how it is kept, how many patches are
    newer than the page (loaded at `seen`), and its subscribers' rows (those with `ids`)."""
    hub, row = runtime(), _graph_row(graph)
    mirror = next((m for m in list_mirrors(hub.db) if m["graph"] == graph), None)
    newer = row.length - seen if seen is not None else 0
    return {"head": row.head or "(none)", "size": str(hub.archive.size(graph)), "length": str(row.length),
            "kind": f"mirrored from {mirror['hub']} ({mirror['state']}, {mirror['quarantined']} quarantined)"
            if mirror else "published by this hub",
            "newer": f"{newer} patches since this page was loaded: reload to see them" if newer > 0 else "",
            **subscription_figures(hub.hub.subscriptions(ids=ids) if ids else [])}


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
                           total_subscribers=hub.hub.count(graph=graph), ids=",".join(str(s["id"]) for s in shown))


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
    """Every subscription to our graphs (partners' mirrors of them among them), or to one
    graph (`graph`), a page at a time, the failing and lagging ones first."""
    offset = _number("offset", 0)
    graph = request.args.get("graph") or None
    page = runtime().hub.subscriptions(graph=graph, worst_first=True, offset=offset, limit=PAGE)
    return render_template("subscriptions.html", subscriptions=page, total=runtime().hub.count(graph=graph),
                           offset=offset, page=PAGE, graph=graph, figures=subscription_figures(page),
                           ids=",".join(str(s["id"]) for s in page), message=request.args.get("message"))


@ui.get("/subscriptions/events")
def subscriptions_events() -> Response:
    """The moving figures of the subscriptions a page shows."""
    hub, ids = runtime(), _ids()
    return _live(lambda: (subscription_figures(hub.hub.subscriptions(ids=ids)), {}))


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
    subscription = next(iter(runtime().hub.subscriptions(ids=[sid])), None)
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


def mirror_figures(mirrors: list[dict[str, Any]], lags: dict[str, str]) -> dict[str, str]:
    """The mirrors' moving figures, named `m<id>.<what>`: state, head, lag behind the publisher
    (`lags`, as `_lags` asked them), counts and the last error."""
    figures: dict[str, str] = {}
    for m in mirrors:
        key = f"m{m['id']}"
        figures |= {f"{key}.state": m["state"], f"{key}.head": m["head"] or "(none)",
                    f"{key}.length": f"{m['length']} patches",
                    f"{key}.lag": lags.get(m["id"], f"not followed ({m['state']})"),
                    f"{key}.counts": f"{m['applied']} · {m['quarantined']} · {m['hmac_failures']}",
                    f"{key}.error": m["last_error"] or "none"}
    return figures


@ui.get("/mirrors")
def mirrors_page() -> Any:
    """The graphs this hub mirrors: publisher, pinned keys, head, state, and each mirror's
    quarantine with the reason for every patch in it."""
    mirrors = list_mirrors(runtime().db)
    quarantine = {m["id"]: runtime().mirrors.quarantined(m["id"])[:PAGE] for m in mirrors if m["quarantined"]}
    return render_template("mirrors.html", mirrors=mirrors, quarantine=quarantine,
                           figures=mirror_figures(mirrors, _lags(mirrors)), message=request.args.get("message"))


@ui.get("/mirrors/events")
def mirrors_events() -> Response:
    """The mirrors' figures; the publishers are asked again when a mirror's head moved or
    LIVE_IDLE seconds passed (not at every update of a burst of our own patches)."""
    asked: dict[str, Any] = {"heads": None, "at": 0.0, "lags": {}}

    def update() -> tuple[dict[str, Any], dict[str, Chart]]:
        mirrors = list_mirrors(runtime().db)
        heads = [(m["id"], m["head"], m["state"]) for m in mirrors]
        if heads != asked["heads"] or time.monotonic() - asked["at"] >= LIVE_IDLE:
            asked.update(heads=heads, at=time.monotonic(), lags=_lags(mirrors))
        return mirror_figures(mirrors, asked["lags"]), {}

    return _live(update)


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
