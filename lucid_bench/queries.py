"""`lucid-hub bench queries`: continuous query subscriptions at 10, 100 and 1,000.

A hub (the real app on a loopback port, in this process so that its counters can be read)
holds an orders graph (2,000 orders of 100 partners) and a prices graph. Subscriptions are a
realistic mix, each for one partner: 70% "my orders" (a constant buyer), 10% a join of the
two graphs, 10% OPTIONAL, 10% an aggregate. Their notifications arrive over WebSockets (the
SE protocol, several subscriptions per socket). Each patch sets a new status on one order of
a random partner: it touches about 1% of the subscriptions.

Figures: publish-to-notification latency at the client (from just before the SPARQL update
is sent to the notification's arrival) at a steady rate, notifications/s with patches sent
as fast as one client can, subscriptions evaluated per patch, the service's processing time
per patch, and the baseline in the same run: the naive strategy (every subscription on the
graph evaluated again after every patch and its results diffed, as SEPA's reference broker
does), timed on the same worker and data. Memory per idle subscription: the growth of this
process's and the worker's resident memory over subscriptions nobody's patches touch, per
subscription.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import psutil
import requests

from lucid_bench.arrivals import Arrivals
from lucid_hub.demo.ports import free_port

EX = "http://example.org/bench/"
ORDERS = EX + "graph/orders"
PRICES = EX + "graph/prices"
PARTNERS = 100
ORDER_COUNT = 2000
ITEMS = 200
PER_SOCKET = 100  # subscriptions one WebSocket carries

KINDS = {
    "mine": "SELECT ?o ?s WHERE { GRAPH <%(o)s> { ?o <%(x)sstatus> ?s ; <%(x)sbuyer> <%(p)s> } }",
    "join": "SELECT ?o ?s ?price WHERE { GRAPH <%(o)s> { ?o <%(x)sstatus> ?s ; <%(x)sbuyer> <%(p)s> ; "
            "<%(x)sitem> ?i } GRAPH <%(r)s> { ?i <%(x)sprice> ?price } }",
    "optional": "SELECT ?o ?s ?note WHERE { GRAPH <%(o)s> { ?o <%(x)sstatus> ?s ; <%(x)sbuyer> <%(p)s> "
                "OPTIONAL { ?o <%(x)snote> ?note } } }",
    "count": "SELECT ?s (COUNT(?o) AS ?n) WHERE { GRAPH <%(o)s> { ?o <%(x)sstatus> ?s ; <%(x)sbuyer> <%(p)s> } } "
             "GROUP BY ?s",
}
MIX = ["mine"] * 7 + ["join", "optional", "count"]


def _orders() -> str:
    lines = []
    for i in range(ORDER_COUNT):
        o = f"<{EX}order/{i}>"
        lines += [f'{o} <{EX}status> "open" .', f"{o} <{EX}buyer> <{EX}partner/{i % PARTNERS}> .",
                  f"{o} <{EX}item> <{EX}item/{i % ITEMS}> ."]
        if i % 3 == 0:
            lines.append(f'{o} <{EX}note> "note {i}" .')
    return "\n".join(lines) + "\n"


def _prices() -> str:
    xsd = "http://www.w3.org/2001/XMLSchema#integer"
    return "".join(f'<{EX}item/{i}> <{EX}price> "{10 + i}"^^<{xsd}> .\n' for i in range(ITEMS))


def query(n: int, partner: str | None = None) -> str:
    """The n-th subscription's query (its partner: n mod 100, unless given)."""
    return KINDS[MIX[n % len(MIX)]] % {"o": ORDERS, "r": PRICES, "x": EX,
                                       "p": partner or f"{EX}partner/{n % PARTNERS}"}


@dataclass
class Receiver(Arrivals):
    """WebSockets carrying the subscriptions; when each status value was first notified."""

    url: str
    token: str
    arrived: dict[str, float] = field(default_factory=dict)
    notifications: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)
    sockets: list[Any] = field(default_factory=list)

    def subscribe(self, texts: list[str]) -> list[str]:
        from simple_websocket import Client

        spuids = []
        for start in range(0, len(texts), PER_SOCKET):
            ws = Client.connect(self.url.replace("http", "ws", 1) + "/subscribe",
                                headers={"Authorization": f"Bearer {self.token}"})
            self.sockets.append(ws)
            for text in texts[start:start + PER_SOCKET]:
                ws.send(json.dumps({"subscribe": {"sparql": text, "named-graph-uri": [ORDERS, PRICES]}}))
                first = json.loads(ws.receive(timeout=120))
                if "notification" not in first:
                    raise click.ClickException(f"subscribing failed: {first}")
                spuids.append(first["notification"]["spuid"])
            threading.Thread(target=self._listen, args=(ws,), daemon=True).start()
        return spuids

    def _listen(self, ws: Any) -> None:
        from simple_websocket import ConnectionClosed

        try:
            while True:
                raw = ws.receive()
                if raw is None:
                    return
                at = time.perf_counter()
                note = json.loads(raw).get("notification")
                if note is None:
                    continue
                with self.changed:
                    self.notifications += 1
                    for row in note["addedResults"].get("results", {}).get("bindings", []):
                        status = row.get("s", {}).get("value", "")
                        if status.startswith("st-"):
                            self.arrived.setdefault(status, at)
                    self.changed.notify_all()
        except ConnectionClosed:
            return

    def close(self) -> None:
        for ws in self.sockets:
            ws.close()


@contextmanager
def _hub(data: Path, env: dict[str, str] | None = None) -> Iterator[tuple[str, Any, str]]:
    """The hub on a loopback port (in this process, served by its front as `serve` serves it),
    its runtime and an admin token."""
    from lucid_hub.config import Settings
    from lucid_hub.runtime import Runtime
    from lucid_hub.web.front import build_front
    from lucid_hub.web.serving import Served

    port = free_port()
    settings = Settings.from_env({"LUCID_DATA_DIR": str(data), "LUCID_PUBLIC_URL": f"http://127.0.0.1:{port}",
                                  "LUCID_QUERY_SUBSCRIPTIONS_PER_PARTY": "100000", **(env or {})})
    runtime = Runtime.open(settings)
    server = Served(build_front(settings, runtime), settings, "127.0.0.1", port)
    runtime.start()
    server.start()
    scopes = ["graphs:read", "graphs:write", "hub:subscribe", "admin"]
    record, _secret = runtime.clients.create("bench admin", groups=["lucid-hub-admins"], scopes=scopes)
    try:
        yield f"http://127.0.0.1:{port}", runtime, str(runtime.tokens.issue(record, " ".join(scopes)))
    finally:
        server.stop()
        runtime.close()


class Publisher:
    """Status changes of random orders, each with a new status value `st-N`, made through the
    hub's publisher: the path every write endpoint ends in (a SPARQL update's guarded
    evaluation, ~50 ms of its own, is measured by `bench sparql`, not here)."""

    def __init__(self, runtime: Any, seed: int) -> None:
        self.runtime = runtime
        self.status = {i: "open" for i in range(ORDER_COUNT)}
        self.random = random.Random(seed)  # noqa: S311 (a reproducible workload)
        self.count = 0
        self.order_of: dict[str, int] = {}

    def next(self) -> tuple[str, float]:
        """Publish one change; (its status value, the time just before it was published)."""
        from lucid_hub.publish.update import edit_change
        from lucid_hub.store.sparql import GraphEdit

        order = self.random.randrange(ORDER_COUNT)
        self.count += 1
        new, old = f"st-{self.count}", self.status[order]
        self.status[order] = new
        self.order_of[new] = order
        o = f"<{EX}order/{order}>"
        publisher = self.runtime.publisher
        sent = time.perf_counter()
        edit = GraphEdit(publisher.store.version(ORDERS), [f'{o} <{EX}status> "{old}"'], [f'{o} <{EX}status> "{new}"'])
        publisher.publish(ORDERS, lambda view: edit_change(ORDERS, edit, view, publisher.canonicalizer),
                          author="bench", message="")
        return new, sent

    def watched(self, status: str, count: int) -> bool:
        """Whether one of the first `count` subscriptions follows the order of this status
        (subscription n is for partner n mod 100; order i belongs to partner i mod 100)."""
        return self.order_of[status] % PARTNERS < min(count, PARTNERS)


def _rss(runtime: Any) -> int:
    """This process's and the query worker's resident memory (bytes)."""
    total = psutil.Process().memory_info().rss
    worker = runtime.queries.evaluation.engine._worker
    if worker is not None and worker.alive():
        total += psutil.Process(worker.proc.pid).memory_info().rss
    return int(total)


def _ms(values: list[float]) -> str:
    if len(values) < 2:
        return "n/a (fewer than 2 samples)"
    q = statistics.quantiles(values, n=100, method="inclusive")
    return f"p50 {q[49] * 1000:.1f} ms, p99 {q[98] * 1000:.1f} ms ({len(values)} samples)"


def _naive(runtime: Any, spuids: list[str]) -> float:
    """Seconds the naive strategy spends on one patch: every subscription evaluated again and
    its results diffed (on the worker and data the service uses, holding its lock)."""
    from lucid_hub.queries import results as rs

    service = runtime.queries.evaluation
    started = time.perf_counter()
    with service.engine.lock:
        for sid in spuids:
            live = service._live[sid]
            rs.diff(live.results, rs.Results.of(service.engine.evaluate(sid)))
    return time.perf_counter() - started


def run(counts: list[int], patches: int, rate: float, idle: int, seed: int) -> None:
    from lucid_bench.mqtt_channel import broker

    with broker() as mqtt_url:
        if mqtt_url is None:
            click.echo("(no mosquitto on this machine: the MQTT channel is not measured)")
        _run(counts, patches, rate, idle, seed, mqtt_url)


def _mqtt(url: str, runtime: Any, token: str, mqtt_url: str, count: int, patches: int, rate: float,
          publisher: Publisher, websocket: list[float]) -> None:
    """The same subscriptions with their notifications on MQTT: latency at the steady rate,
    against the WebSocket's (`websocket`, this run's)."""
    from lucid_bench.mqtt_channel import MqttReader

    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {token}"
    reader = MqttReader(mqtt_url)
    spuids = []
    for n in range(count):
        made = http.post(f"{url}/subscriptions", json={"sparql": query(n), "named-graph-uri": [ORDERS, PRICES],
                                                         "mqtt": True}, timeout=60)
        if made.status_code != 201:
            raise click.ClickException(f"subscribing with mqtt failed: {made.status_code} {made.text[:200]}")
        spuids.append(made.json()["notification"]["spuid"])
    sent: dict[str, float] = {}
    for _ in range(patches):
        status, at = publisher.next()
        sent[status] = at
        time.sleep(max(0.0, 1 / rate - (time.perf_counter() - at)))  # the publishing rate
    runtime.queries.evaluation.drain()
    reader.wait_for([s for s in sent if publisher.watched(s, count)])
    latencies = [reader.arrived[s] - sent[s] for s in sent if s in reader.arrived]
    missing = sum(1 for s in sent if publisher.watched(s, count) and s not in reader.arrived)
    reader.close()
    for spuid in spuids:
        http.delete(f"{url}/subscriptions/{spuid}", timeout=60)
    line = f"  MQTT (Mosquitto, paho-mqtt reader) at {rate:g} patches/s: {_ms(latencies)}"
    if len(latencies) > 1 and len(websocket) > 1:
        q = statistics.quantiles(latencies, n=100, method="inclusive")[98]
        w = statistics.quantiles(websocket, n=100, method="inclusive")[98]
        line += f"; p99 / WebSocket p99: {q / w:.2f}x; goal p99 <= 50 ms: {'met' if q <= 0.05 else 'missed'}"
    click.echo(line + (f"; {missing} expected notifications did not arrive" if missing else ""))


def _run(counts: list[int], patches: int, rate: float, idle: int, seed: int, mqtt_url: str | None) -> None:
    echo = click.echo
    env = {"LUCID_MQTT_URL": mqtt_url} if mqtt_url else {}
    for count in counts:
        with tempfile.TemporaryDirectory(prefix="lucid-bench-queries-") as tmp, _hub(Path(tmp) / "hub", env) as (
                url, runtime, token):
            http = requests.Session()
            http.headers["Authorization"] = f"Bearer {token}"
            for graph, body in ((ORDERS, _orders()), (PRICES, _prices())):
                answer = http.put(f"{url}/graphs", params={"graph": graph}, data=body.encode(),
                                  headers={"Content-Type": "application/n-triples"}, timeout=120)
                if answer.status_code not in (200, 201):
                    raise click.ClickException(f"loading {graph} failed: {answer.status_code} {answer.text[:300]}")
            receiver = Receiver(url, token)
            started = time.perf_counter()
            spuids = receiver.subscribe([query(n) for n in range(count)])
            took = time.perf_counter() - started
            echo(f"== {count:,} subscriptions ({count / took:,.0f} subscribed/s over {len(receiver.sockets)} sockets)")
            service = runtime.queries.evaluation
            publisher = Publisher(runtime, seed)

            # steady rate: latency at the client
            sent: dict[str, float] = {}
            before_eval, before_changes, before_busy = service.evaluations, service.changes, service.busy
            before_deltas = service.deltas
            for _ in range(patches):
                status, at = publisher.next()
                sent[status] = at
                time.sleep(max(0.0, 1 / rate - (time.perf_counter() - at)))  # the publishing rate
            service.drain()
            receiver.wait_for([s for s in sent if publisher.watched(s, count)])
            latencies = [receiver.arrived[s] - sent[s] for s in sent if s in receiver.arrived]
            missing = sum(1 for s in sent if publisher.watched(s, count) and s not in receiver.arrived)
            evaluations = service.evaluations - before_eval
            changes = service.changes - before_changes
            busy = service.busy - before_busy
            echo(f"  publish-to-notification at {rate:g} patches/s: {_ms(latencies)}"
                 + (f"; {missing} expected notifications did not arrive" if missing else ""))
            derived = service.deltas - before_deltas
            echo(f"  per patch: {evaluations / max(1, changes):.2f} of {count:,} evaluated, "
                 f"{derived / max(1, changes):.2f} derived from the patch ({changes} patches); "
                 f"service time per patch {busy / max(1, changes) * 1000:.2f} ms")

            # as fast as one client can publish: notifications per second
            first_notes = receiver.notifications
            burst_start = time.perf_counter()
            for _ in range(patches):
                publisher.next()
            service.drain()
            burst = time.perf_counter() - burst_start
            got = receiver.notifications - first_notes
            echo(f"  burst of {patches} patches: {patches / burst:,.0f} patches/s, {got / burst:,.0f} notifications/s")

            # the naive strategy on the same worker and data, per patch
            naive = statistics.median(_naive(runtime, spuids) for _ in range(3))
            ours = busy / max(1, changes)
            echo(f"  naive (every subscription evaluated and diffed per patch): {naive * 1000:.1f} ms per patch; "
                 f"ours {ours * 1000:.2f} ms: {naive / ours if ours else float('inf'):.1f}x cheaper")
            receiver.close()
            if mqtt_url is not None:
                _mqtt(url, runtime, token, mqtt_url, count, patches, rate, publisher, latencies)

            if idle and count == counts[-1]:
                # idle subscriptions: a partner no order has, so no patch touches them
                before = _rss(runtime)
                texts = [query(n, f"{EX}partner/idle-{n}") for n in range(idle)]
                idle_receiver = Receiver(url, token)
                idle_receiver.subscribe(texts)
                idle_receiver.close()
                after = _rss(runtime)
                echo(f"  memory per idle subscription ({idle:,}, hub process + worker): "
                     f"{(after - before) / idle / 1024:.1f} KB")

