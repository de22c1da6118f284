"""`lucid-hub bench console`: how long each console page takes to render with a graph of
10,000 patches, 1,000 subscriptions, 100 rules and 100 windows (the goal: at most 300 ms a
page), and each page's live update (computed every second of a burst, for every open page).

In process, through Flask's test client (no network: the page's own work), signed in as an
admin; the baseline is `/healthz` in the same process. Subscriptions are written as rows (as
the hub would after verifying them), half of them behind and some failed, so that the pages'
sorting and attention lists have work to do.
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import click

if TYPE_CHECKING:
    from flask import Flask
    from flask.testing import FlaskClient

    from lucid_hub.runtime import Runtime

GRAPH = "http://example.org/graphs/bench-console"
GOAL_MS = 300.0
LIVE_GOAL_S = 1.0


def _seed(hub: Runtime, patches: int, subscriptions: int) -> list[str]:
    import pyoxigraph as ox

    from lucid_hub.db.models import Subscription
    from lucid_hub.rdf.msg import GraphMsgsBuilder

    ids = []
    for i in range(patches):
        text = f'<http://example.org/s/{i}> <http://example.org/p> "{i}" .\n'
        msgs = GraphMsgsBuilder().add_default_graph(ox.parse(text, format=ox.RdfFormat.N_TRIPLES))
        patch = hub.publisher.merge(GRAPH, msgs.build(hub.canonicalizer), author="bench", message=f"change {i}")
        assert patch is not None
        ids.append(patch.id)
    now = datetime.now(UTC)
    with hub.db.session() as session:
        session.add_all([Subscription(
            graph=GRAPH, callback=f"https://partner{n}.example/callback/{n}", account=f"partner-{n}",
            endpoint_id=f"lc-{n}", groups="partners", secret=None, media_type="application/rdf-patch",
            state="failed" if n % 50 == 0 else "active", lease_expires_at=now + timedelta(days=10),
            # (not due: the hub's deliverer would try the made-up callbacks while the pages are timed)
            delivered_seq=patches - (n % 200), attempts=0, next_attempt_at=now + timedelta(days=10),
            last_success_at=now,
            last_error="HTTP 503" if n % 50 == 0 else "", delivered_total=patches, failures_total=n % 7,
            created_at=now) for n in range(subscriptions)])
    return ids


def _seed_rules_and_windows(hub: Runtime, rules: int, windows: int) -> None:
    """`rules` rules (one file, none raising another) and `windows` windowed queries (rows, as
    the hub keeps them; paused, so that they do not evaluate while the pages are timed)."""
    import json
    import secrets

    from lucid_hub.db.models import WindowedQuery
    from lucid_hub.rules.model import OPERATOR

    text = "".join(f"RULE <http://example.org/rules/{n}>\nON INSERT {{ GRAPH <{GRAPH}> {{ ?s <http://example.org/p> "
                   f"\"{n}\" }} }}\nDO INSERT {{ GRAPH <http://example.org/alerts/{n}> {{ ?s <http://example.org/seen> "
                   f"true }} }} WHERE {{}}\n" for n in range(rules))
    if rules:
        hub.rules.add(text, OPERATOR, "bench")
    now = datetime.now(UTC)
    with hub.db.session() as session:
        session.add_all([WindowedQuery(
            id=secrets.token_hex(8), name=f"w{n}", account=f"partner-{n % 50}", endpoint_id=f"lc-{n % 50}",
            groups="partners", token_id=f"jti-{n}", query="SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }",
            graphs=json.dumps([GRAPH]), range_spec="10s", step_spec="1s", with_state=False, view="changes",
            dataset="{}", source=None, state="paused", reason="", next_end_at=now, next_end_position=0,
            sequence=n, callback=None, secret=None, callback_seq=-1, callback_attempts=0, callback_next_at=None,
            callback_error="", created_at=now, updated_at=now) for n in range(windows)])


def _timed(client: FlaskClient, path: str, runs: int) -> tuple[float, float, int]:
    status = 0

    def get() -> None:
        nonlocal status
        status = client.get(path).status_code

    return (*_percentiles(get, runs), status)


def _percentiles(work: Callable[[], object], runs: int) -> tuple[float, float]:
    """p50 and p95 in milliseconds of `runs` calls of `work`."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)]


def _live_updates(app: Flask, hub: Runtime, patches: int, runs: int) -> float:
    """Each live stream's update (what a page's Server-Sent Events compute every second while
    the archive changes); the slowest p95."""
    from lucid_hub.web import console
    from lucid_hub.web.console import pages

    page = [s["id"] for s in hub.hub.subscriptions(limit=console.PAGE)]
    updates: dict[str, Callable[[], object]] = {
        "overview": lambda: pages._overview_update(hub),  # (its figures, and its attention list's version)
        "graph": lambda: console.graph_figures(GRAPH, patches),
        f"subscribers ({len(page)})": lambda: console.subscription_figures(hub.hub.subscriptions(ids=page)),
        "mirrors": lambda: console.mirror_figures(hub.mirror_registry.list(), {})}
    return _each(app, "live update:", updates, runs)


def _each(app: Flask, label: str, works: dict[str, Callable[[], object]], runs: int) -> float:
    """Each work's p50 and p95, printed; the slowest p95."""
    worst = 0.0
    with app.app_context():
        for name, work in works.items():
            p50, p95 = _percentiles(work, runs)
            worst = max(worst, p95)
            click.echo(f"  {label:12} {name:13} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms")
    return worst


def _page_checks(app: Flask, runs: int) -> float:
    """What each live page's stream computes every half second while it is open (the signature
    of what the page shows); the slowest p95."""
    from lucid_hub.web.console import capabilities, offers

    checks: dict[str, Callable[[], object]] = {**capabilities.SIGNATURES, "rule-offers": lambda: offers._offers().all()}
    return _each(app, "live check:", checks, runs)


def _change_latency(client: FlaskClient, hub: Runtime, runs: int) -> float:
    """Seconds from a change the queries page shows (a window paused or resumed) to its stream's
    "changed" event, `runs` times; the slowest."""
    import threading

    from sqlalchemy import update

    from lucid_hub.db.models import WindowedQuery

    shown = re.search(r'shown=([0-9a-f]+)', client.get("/admin/ui/queries").get_data(as_text=True))
    assert shown is not None
    told: list[float] = []
    opened, heard, done = threading.Event(), threading.Event(), threading.Event()

    def listen() -> None:  # (the stream read in the thread that asked for it: Flask's context is its own)
        answer = client.get(f"/admin/ui/queries/events?shown={shown.group(1)}", buffered=False)
        for chunk in answer.response:
            opened.set()
            if b"event: changed" in chunk:
                told.append(time.perf_counter())
                heard.set()
            if done.is_set():
                break
        answer.close()

    threading.Thread(target=listen, daemon=True).start()
    if not opened.wait(10):
        raise click.ClickException("the queries page's stream did not open in 10 s")
    latencies = []
    for n in range(runs):
        heard.clear()
        with hub.db.session() as session:
            session.execute(update(WindowedQuery).where(WindowedQuery.name == "w0")
                            .values(state="active" if n % 2 == 0 else "paused"))
        changed = time.perf_counter()
        if not heard.wait(10):
            raise click.ClickException("the queries page's stream told of no change in 10 s")
        latencies.append(told[-1] - changed)
    done.set()
    p50, worst = statistics.median(latencies), max(latencies)
    click.echo(f"  live update: a change to its event on the queries page: p50 {p50 * 1000:.0f} ms, "
               f"slowest {worst * 1000:.0f} ms of {runs} (goal <= {LIVE_GOAL_S:.0f} s)")
    return worst


def run(patches: int, subscriptions: int, runs: int, rules: int = 100, windows: int = 100) -> None:
    from lucid_hub.auth.admins import AdminAccounts
    from lucid_hub.config import Settings
    from lucid_hub.runtime import Runtime
    from lucid_hub.web import create_app

    with tempfile.TemporaryDirectory(prefix="lucid-bench-console-") as tmp:
        settings = Settings.from_env({"LUCID_DATA_DIR": str(Path(tmp) / "data"), "LUCID_DEV_MODE": "true",
                                      "LUCID_LOG_LEVEL": "WARNING"})
        runtime = Runtime.open(settings)
        try:
            app = create_app(settings, runtime)
            runtime.start()
            click.echo(f"== console pages, a graph of {patches:,} patches and {subscriptions:,} subscriptions, "
                       f"{runs} renders each (in process)")
            started = time.perf_counter()
            ids = _seed(runtime, patches, subscriptions)
            _seed_rules_and_windows(runtime, rules, windows)
            click.echo(f"  seeded in {time.perf_counter() - started:.1f} s ({rules} rules, {windows} windows)")
            AdminAccounts(runtime.db).create("bench", "bench password 1234")
            client = app.test_client()
            page = client.get("/admin/ui/login")
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.get_data(as_text=True))
            client.post("/admin/ui/login", data={"username": "bench", "password": "bench password 1234",
                                                 **({"csrf": csrf.group(1)} if csrf else {})})
            base, _, _ = _timed(client, "/healthz", runs)
            click.echo(f"  baseline GET /healthz: p50 {base:.2f} ms")
            graph = quote(GRAPH, safe="")
            pages = {"overview": "/admin/ui/overview", "graphs": "/admin/ui/graphs",
                     "graph (newest page)": f"/admin/ui/graph?graph={graph}",
                     "graph (oldest page)": f"/admin/ui/graph?graph={graph}&before=60",
                     "patch": f"/admin/ui/patch?id={quote(ids[patches // 2], safe='')}",
                     "subscribers": "/admin/ui/subscriptions", "subscribers (last page)":
                         f"/admin/ui/subscriptions?offset={max(0, subscriptions - 50)}",
                     "mirrors": "/admin/ui/mirrors", "clients": "/admin/ui/clients",
                     "queries and windows": "/admin/ui/queries", "rules": "/admin/ui/rules",
                     "rule offers": "/admin/ui/rule-offers", "inboxes": "/admin/ui/inboxes",
                     "this hub": "/admin/ui/hub"}
            worst = 0.0
            for name, path in pages.items():
                p50, p95, status = _timed(client, path, runs)
                worst = max(worst, p95)
                if status != 200:
                    raise click.ClickException(f"{name} answered {status}")
                click.echo(f"  {name:26} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  (x{p50 / base:,.0f} the baseline)")
            worst = max(worst, _live_updates(app, runtime, patches, runs), _page_checks(app, runs))
            verdict = "met" if worst <= GOAL_MS else "MISSED"
            click.echo(f"  goal: every page <= {GOAL_MS:.0f} ms   {verdict} (slowest p95 {worst:.1f} ms)")
            slowest = _change_latency(client, runtime, min(runs, 10))
            verdict = "met" if slowest <= LIVE_GOAL_S else "MISSED"
            click.echo(f"  goal: live updates <= {LIVE_GOAL_S:.0f} s after the event   {verdict} "
                       f"(slowest {slowest * 1000:.0f} ms)")
        finally:
            runtime.close()
