"""`lucid-hub bench windows`: C-SPARQL windows at a steady stream of triples.

A hub (the real app on a loopback port, in this process so that its evaluations can be
timed) receives patches of `--batch` triples (trades: a broker does a transaction with an
amount) at `--rate` triples per second, through its publisher. `--windows` C-SPARQL queries
are registered over HTTP, as their users send them: half sliding time windows
(`[RANGE 10s STEP 1s]`, the total per broker joined with a static graph of brokers), half
triple windows (`[RANGE TRIPLES 1000] COMPUTED EVERY 1s`, the count and sum of amounts);
each with a filter of its own, so no two queries are alike (their windows' contents are).

Figures: each window's evaluation time (reading its patches, evaluating, storing the
element: what one step costs one window), and how long after a step is due its last window
is stored (all windows end together, and one evaluator works through them); the baseline in
the same run: the same two queries alone (one window of each kind), so the ratio says what
100 windows cost each one.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from lucid_bench.queries import _hub

EX = "http://example.org/bench/"
MARKET = EX + "graph/market"
BROKERS = EX + "graph/brokers"
BROKER_COUNT = 50
GRACE = 2.0


def _sliding(name: str, n: int) -> str:
    """Each window its own query (a partner watching its brokers): no two results alike."""
    return (f"REGISTER QUERY {name} AS PREFIX ex: <{EX}> SELECT ?broker (SUM(?a) AS ?total) "  # noqa: S608 (SPARQL)
            f"FROM <{BROKERS}> FROM STREAM <{MARKET}> [RANGE 10s STEP 1s] "
            "WHERE { ?broker ex:from \"CH\" ; ex:does ?tx . ?tx ex:with ?a "
            f"FILTER (?broker != <{EX}broker/{n % BROKER_COUNT}>) }} GROUP BY ?broker")


def _physical(name: str, n: int) -> str:
    return (f"REGISTER QUERY {name} COMPUTED EVERY 1s AS PREFIX ex: <{EX}> "  # noqa: S608 (SPARQL, not SQL)
            "SELECT (COUNT(?tx) AS ?n) (SUM(?a) AS ?sum) "
            f"FROM STREAM <{MARKET}> [RANGE TRIPLES 1000] WHERE {{ ?tx ex:with ?a FILTER (?a > {n}) }}")


class Feed(threading.Thread):
    """Patches of trades at a steady rate, through the hub's publisher."""

    def __init__(self, runtime: Any, rate: float, batch: int) -> None:
        super().__init__(daemon=True)
        self.runtime, self.rate, self.batch = runtime, rate, batch
        self.stop = threading.Event()
        self.sent = 0
        self.behind = 0.0

    def run(self) -> None:
        from lucid_hub.publish.update import edit_change
        from lucid_hub.store.sparql import GraphEdit

        publisher = self.runtime.publisher
        interval = self.batch / self.rate
        start = time.perf_counter()
        n = 0
        while not self.stop.is_set():
            due = start + n * interval
            wait = due - time.perf_counter()
            if wait > 0:
                self.stop.wait(wait)
            else:
                self.behind = max(self.behind, -wait)
            lines = []
            for k in range(self.batch // 2):
                tx = f"<{EX}tx/{self.sent + k}>"
                lines += [f"<{EX}broker/{(self.sent + k) % BROKER_COUNT}> <{EX}does> {tx}",
                          f'{tx} <{EX}with> "{(self.sent + k) % 997}"^^<http://www.w3.org/2001/XMLSchema#integer>']
            edit = GraphEdit(publisher.store.version(MARKET), [], lines)
            publisher.publish(MARKET, lambda view, e=edit: edit_change(MARKET, e, view, publisher.canonicalizer),
                              author="bench", message="")
            self.sent += len(lines) // 2
            n += 1


def _ms(values: list[float]) -> str:
    if len(values) < 2:
        return "n/a (fewer than 2 samples)"
    q = statistics.quantiles(values, n=100, method="inclusive")
    return f"p50 {q[49] * 1000:.1f} ms, p99 {q[98] * 1000:.1f} ms ({len(values)} samples)"


def _phase(windows: int, rate: float, batch: int, seconds: float) -> tuple[list[float], list[float], float]:
    """One hub, `windows` windows, the feed for `seconds`: (evaluation times, lags of each
    step's last element after it was due, how far the feed fell behind)."""
    import requests

    with tempfile.TemporaryDirectory() as tmp, _hub(Path(tmp) / "data", {
            "LUCID_QUERY_SUBSCRIPTIONS_PER_PARTY": str(windows + 10)}) as (url, runtime, token):
        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {token}"
        brokers = "".join(f'<{EX}broker/{b}> <{EX}from> "{"CH" if b % 2 else "IT"}" .\n' for b in range(BROKER_COUNT))
        for graph, body in ((BROKERS, brokers), (MARKET, f"<{EX}market> <{EX}opened> \"yes\" .\n")):
            answer = http.put(f"{url}/graphs", params={"graph": graph}, data=body.encode(),
                              headers={"Content-Type": "application/n-triples"}, timeout=60)
            answer.raise_for_status()
        for n in range(windows):
            text = _sliding(f"w{n}", n) if n % 2 == 0 else _physical(f"w{n}", n)
            made = http.post(f"{url}/windows", data=text, headers={"Content-Type": "text/plain"}, timeout=60)
            if made.status_code != 201:
                raise click.ClickException(f"registering window {n}: {made.status_code} {made.text[:200]}")
        content = runtime.windows.content
        timings: list[float] = []
        original = content.element

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                timings.append(time.perf_counter() - started)

        content.element = timed
        feed = Feed(runtime, rate, batch)
        feed.start()
        time.sleep(seconds)  # the workload's length (a benchmark runs for a while; no test waits here)
        feed.stop.set()
        feed.join()
        content.element = original
        lags = _lags(runtime)
        return timings, lags, feed.behind


def _lags(runtime: Any) -> list[float]:
    """For each time step: how long after it was due (end + grace) its last element was stored."""
    import json

    from sqlalchemy import select

    from lucid_hub.db.models import WindowedResult

    last: dict[str, float] = {}
    with runtime.db.session() as session:
        for body, created in session.execute(select(WindowedResult.body, WindowedResult.created_at)):
            end = json.loads(body)["windowEnd"]
            if isinstance(end, str):
                stored = created.timestamp() if created.tzinfo else created.replace(
                    tzinfo=datetime.now().astimezone().tzinfo).timestamp()
                last[end] = max(last.get(end, 0.0), stored)
    return [stored - (datetime.fromisoformat(end).timestamp() + GRACE) for end, stored in last.items()]


def run(windows: int, rate: float, batch: int, seconds: float) -> None:
    click.echo(f"windows: {windows} C-SPARQL windows (half [RANGE 10s STEP 1s] joined with a static graph, half "
               f"[RANGE TRIPLES 1000] every 1s), {rate:,.0f} triples/s in patches of {batch}, {seconds:.0f} s")
    base_times, base_lags, _ = _phase(2, rate, batch, seconds)
    click.echo(f"  baseline, 2 windows: evaluation {_ms(base_times)}; step done after due {_ms(base_lags)}")
    times, lags, behind = _phase(windows, rate, batch, seconds)
    click.echo(f"  {windows} windows: evaluation {_ms(times)}; step done after due {_ms(lags)}")
    if len(times) > 1 and len(base_times) > 1:
        p99 = statistics.quantiles(times, n=100, method="inclusive")[98]
        base = statistics.quantiles(base_times, n=100, method="inclusive")[98]
        click.echo(f"  evaluation p99 at {windows} windows / alone: {p99 / base:.2f}x; goal p99 <= 50 ms: "
                   f"{'met' if p99 <= 0.05 else 'missed'}")
    click.echo(f"  the feed fell behind its schedule by at most {behind * 1000:.0f} ms")
