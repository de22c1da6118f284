"""`lucid-hub bench streams`: a graph's history read by standard clients.

A hub runs as its own process (`lucid-hub serve`, gunicorn when installed, as deployed) and
holds a graph of `--triples` ground triples (entities of ten properties each), changed by
`--patches` patches of five entity changes each.

Replication: a client in this process reads the whole history two ways and materialises the
graph, checked equal to the hub's:
- LDES: the event stream, its view's root, every page (N-Quads), each entity's latest
  version (what an LDES client does); once cold (the hub builds the stream from its
  archive) and once warm;
- the baseline, in the same run: the patch archive's pages (`/patches`, JSON, 100 patches a
  page) with every patch's rows applied in order (what a mirror does, without verifying).
Figures: pages, members or patches, seconds, members/s; the ratio LDES / archive.

Fan-out: N Server-Sent Events clients on `/streams/events` (one selector thread reads all
sockets), patches published at `--rate`: publish-to-received latency (from just before the
publish request to the event's arrival at each client) p50/p99, then a burst for events/s.
The baseline in the same run is one client.
"""

from __future__ import annotations

import gc
import random
import re
import selectors
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from urllib.parse import quote, urlsplit

import click
import pyoxigraph as ox
import requests

from lucid_hub.demo.processes import HubProcess

EX = "http://example.org/bench/"
GRAPH = EX + "graph/assets"
PROPERTIES = 10
CHANGES = 5  # entity changes per patch
DCT = "http://purl.org/dc/terms/"
LH = "https://w3id.org/lucid-hub#"
PROV = "http://www.w3.org/ns/prov#"
TREE = "https://w3id.org/tree#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
DELETE = "https://www.w3.org/ns/activitystreams#Delete"


def _triple(entity: int, prop: int, value: int) -> str:
    return f'<{EX}e/{entity}> <{EX}p{prop}> "v{entity}-{prop}-{value}" .'


class History:
    """The graph and its patches: sent to the hub, and what the hub must hold after them."""

    def __init__(self, triples: int, seed: int) -> None:
        self.entities = max(1, triples // PROPERTIES)
        self.values = {(e, p): 0 for e in range(self.entities) for p in range(PROPERTIES)}
        self.random = random.Random(seed)  # noqa: S311 (a reproducible workload)

    def initial(self) -> bytes:
        return "\n".join(_triple(e, p, 0) for (e, p) in self.values).encode() + b"\n"

    def patch(self, head: str) -> bytes:
        rows = [f"H prev <{head}> .", "TX ."]
        removed, added = [], []
        for entity in self.random.sample(range(self.entities), min(CHANGES, self.entities)):
            prop = self.random.randrange(PROPERTIES)
            old = self.values[(entity, prop)]
            self.values[(entity, prop)] = old + 1
            removed.append("D " + _triple(entity, prop, old))
            added.append("A " + _triple(entity, prop, old + 1))
        return "\n".join([*rows, *removed, *added, "TC ."]).encode() + b"\n"


def _publish(hub: HubProcess, body: bytes) -> str:
    answer = hub.http.post(f"{hub.url}/patches", params={"graph": GRAPH}, data=body, timeout=60,
                           headers={"Content-Type": "application/rdf-patch"})
    if answer.status_code != 201:
        raise click.ClickException(f"publishing failed ({answer.status_code}): {answer.text[:300]}")
    return str(answer.json()["patch"])


def _expected(hub: HubProcess) -> set[str]:
    text = hub.http.get(f"{hub.url}/graphs", params={"graph": GRAPH}, timeout=300,
                        headers={"Accept": "application/n-triples"}).text
    return {str(q.triple) for q in ox.parse(text, format=ox.RdfFormat.N_TRIPLES)}


# --- replication ----------------------------------------------------------------------------

def replicate_ldes(http: requests.Session, base: str, view: str | None = None) -> tuple[set[str], int, int, float]:
    """(graph, pages, members, seconds): the event stream read like an LDES client — from its
    `tree:view` (the whole history) or from the view named, following every relation."""
    started = time.perf_counter()
    accept = {"Accept": "application/trig"}  # the stream's default: each payload once, in its graph
    q = quote(GRAPH, safe="")
    if view is None:
        description = http.get(f"{base}/streams?graph={q}", headers=accept, timeout=300)
        first = next(t.object.value for t in ox.parse(description.content, format=ox.RdfFormat.TRIG)
                     if t.predicate.value == TREE + "view")
    else:
        first = f"{base}/streams/views/{view}?graph={q}"
    latest: dict[str, tuple[str, int, bool, list[str]]] = {}
    todo, seen, members = [first], {first}, 0
    while todo:
        url = todo.pop()
        answer = http.get(url, headers=accept, timeout=300)
        payload: dict[str, list[str]] = {}
        meta: dict[str, dict[str, str]] = {}
        listed: set[str] = set()
        for t in ox.parse(answer.content, format=ox.RdfFormat.TRIG, base_iri=url):
            if isinstance(t.graph_name, ox.NamedNode):
                payload.setdefault(t.graph_name.value, []).append(str(t.triple))
            elif t.predicate.value == TREE + "member":
                listed.add(t.object.value)
            elif t.predicate.value == TREE + "node" and t.object.value not in seen:
                seen.add(t.object.value)
                todo.append(t.object.value)
            elif t.predicate.value in (DCT + "isVersionOf", PROV + "generatedAtTime", LH + "streamPosition",
                                       RDF_TYPE):
                meta.setdefault(t.subject.value, {})[t.predicate.value] = t.object.value
        for member in listed:
            fields = meta[member]
            members += 1
            key = (fields[PROV + "generatedAtTime"], int(fields[LH + "streamPosition"]))
            entity = fields[DCT + "isVersionOf"]
            held = latest.get(entity)
            if held is None or key > held[:2]:
                latest[entity] = (*key, fields.get(RDF_TYPE) == DELETE, payload.get(member, []))
    graph = {t for _s, _p, deleted, triples in latest.values() if not deleted for t in triples}
    return graph, len(seen) + (view is None), members, time.perf_counter() - started


def replicate_archive(http: requests.Session, base: str) -> tuple[set[str], int, int, float]:
    """(graph, pages, patches, seconds): the archive's pages, each patch's rows applied."""
    started = time.perf_counter()
    graph: set[str] = set()
    url: str | None = f"{base}/patches?graph={quote(GRAPH, safe='')}"
    pages = patches = 0
    while url:
        page = http.get(url, headers={"Accept": "application/json"}, timeout=300).json()
        pages += 1
        for item in page["patches"]:
            patches += 1
            rows: dict[str, list[str]] = {"D": [], "A": []}
            for line in item["body"].split("\n"):
                if line[:2] in ("D ", "A "):
                    rows[line[0]].append(line[2:])
            for op, apply in (("D", graph.difference_update), ("A", graph.update)):
                if rows[op]:
                    quads = ox.parse("\n".join(rows[op]), format=ox.RdfFormat.N_QUADS)
                    apply(str(q.triple) for q in quads)
        url = page.get("next")
    return graph, pages, patches, time.perf_counter() - started


# --- fan-out ----------------------------------------------------------------------------------

_EVENT_ID = re.compile(rb"\nid: (\d+)\n")


class Listeners:
    """N SSE connections read by one selector thread; each event's arrival time per client."""

    def __init__(self, base: str, path: str, count: int, token: str) -> None:
        parts = urlsplit(base)
        self.address = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.request = (f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAccept: text/event-stream\r\n"
                        f"Authorization: Bearer {token}\r\nConnection: keep-alive\r\n\r\n").encode()
        self.selector = selectors.DefaultSelector()
        self.buffers: dict[socket.socket, bytes] = {}
        self.arrivals: dict[int, list[float]] = {}
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.stopped = False
        for _ in range(count):
            sock = socket.create_connection(self.address, timeout=60)
            sock.sendall(self.request)
            opening = b""
            while b": lucid-hub" not in opening:  # listening from now on
                chunk = sock.recv(65536)
                if not chunk:
                    raise click.ClickException(f"the event stream closed: {opening[:300]!r}")
                opening += chunk
            if b" 200 " not in opening.split(b"\r\n", 1)[0]:
                raise click.ClickException(f"the event stream refused: {opening[:300]!r}")
            sock.setblocking(False)
            self.buffers[sock] = b""
            self.selector.register(sock, selectors.EVENT_READ)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.stopped:
            for key, _mask in self.selector.select(timeout=0.2):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                now = time.perf_counter()
                try:
                    chunk = sock.recv(262144)
                except BlockingIOError:
                    continue
                if not chunk:
                    self.selector.unregister(sock)
                    continue
                buffer = self.buffers[sock] + chunk
                found = list(_EVENT_ID.finditer(buffer))
                if found:
                    with self.changed:
                        for match in found:
                            self.arrivals.setdefault(int(match.group(1)), []).append(now)
                        self.changed.notify_all()
                    buffer = buffer[found[-1].end():]
                self.buffers[sock] = buffer[-4096:]

    def wait(self, position: int, count: int, timeout: float = 120) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while len(self.arrivals.get(position, ())) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
        return True

    def close(self) -> None:
        self.stopped = True
        self.thread.join(timeout=5)
        for sock in self.buffers:
            sock.close()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fan_out(hub: HubProcess, history: History, count: int, events: int, rate: float, burst: int,
            token: str) -> dict[str, float]:
    """Latency at `rate` and events/s in a burst, with `count` clients on the event stream."""
    path = f"/streams/events?graph={quote(GRAPH, safe='')}"
    listeners = Listeners(hub.url, path, count, token)
    try:
        head = hub.call("GET", "/graphs", params={"graph": GRAPH}, headers={"Accept": "application/n-triples"}
                        ).headers["ETag"].strip('"')
        head = _publish(hub, history.patch(head))  # a first patch: the stream is built and warm
        position = _archive_length(hub)
        if not listeners.wait(position, count):
            raise click.ClickException(f"not every client received patch {position} within 120 s")
        sent: dict[int, float] = {}
        latencies: list[float] = []
        publishing: list[float] = []  # the publish request's own round trip
        for _ in range(events):
            began = time.perf_counter()
            body = history.patch(head)
            at = time.perf_counter()
            head = _publish(hub, body)
            publishing.append(time.perf_counter() - at)
            position += 1
            sent[position] = at
            if not listeners.wait(position, count):
                raise click.ClickException(f"not every client received patch {position} within 120 s")
            time.sleep(max(0.0, 1 / rate - (time.perf_counter() - began)))  # the steady rate, not a sync
        with listeners.lock:
            for seq, at in sent.items():
                latencies += [arrival - at for arrival in listeners.arrivals[seq]]
        started = time.perf_counter()
        for _ in range(burst):
            head = _publish(hub, history.patch(head))
            position += 1
        if not listeners.wait(position, count, timeout=600):
            raise click.ClickException("the burst was not received by every client within 600 s")
        with listeners.lock:
            done = max(listeners.arrivals[position])
        elapsed = done - started
        return {"p50": statistics.median(latencies) * 1000, "p99": _percentile(latencies, 0.99) * 1000,
                "publish_p50": statistics.median(publishing) * 1000,
                "publish_p99": _percentile(publishing, 0.99) * 1000,
                "events_per_s": count * burst / elapsed, "patches_per_s": burst / elapsed}
    finally:
        listeners.close()


def _archive_length(hub: HubProcess) -> int:
    answer = hub.call("GET", "/patches", params={"graph": GRAPH, "size": 1}, headers={"Accept": "application/json"})
    return int(answer.json()["patches"][0]["seq"])


# --- the run ----------------------------------------------------------------------------------

def run(triples: int, patches: int, clients: list[int], events: int, rate: float, burst: int, seed: int) -> None:
    history = History(triples, seed)
    with tempfile.TemporaryDirectory(prefix="lucid-bench-streams-") as tmp:
        env = {"LUCID_WEB_THREADS": str(min(4096, max([*clients, 1]) + 32)), "LUCID_LOG_LEVEL": "WARNING"}
        with HubProcess("bench", Path(tmp) / "hub", env) as hub:
            token = str(hub.http.headers["Authorization"]).split(" ", 1)[1]
            click.echo(f"history: {triples:,} triples ({history.entities:,} entities), then {patches:,} patches "
                       f"of {CHANGES} entity changes")
            started = time.perf_counter()
            hub.call("PUT", "/graphs", params={"graph": GRAPH}, data=history.initial(),
                     headers={"Content-Type": "application/n-triples"})
            head = hub.call("GET", "/graphs", params={"graph": GRAPH}, headers={"Accept": "application/n-triples"}
                            ).headers["ETag"].strip('"')
            for _ in range(patches):
                head = _publish(hub, history.patch(head))
            click.echo(f"  published in {time.perf_counter() - started:.1f} s")
            expected = _expected(hub)
            http = requests.Session()
            http.trust_env = False
            http.headers["Authorization"] = f"Bearer {token}"
            click.echo("\nreplication (a client reading the whole history and materialising the graph):")
            results = {}
            ways: list[tuple[str, Callable[[], tuple[set[str], int, int, float]]]] = [
                ("LDES, cold", partial(replicate_ldes, http, hub.url)),
                ("LDES, warm", partial(replicate_ldes, http, hub.url)),
                ("LDES latest view", partial(replicate_ldes, http, hub.url, "latest")),
                ("archive pages (baseline)", partial(replicate_archive, http, hub.url))]
            for name, how in ways:
                graph, pages, items, seconds = how()
                if graph != expected:
                    raise click.ClickException(f"{name}: the replica differs from the hub's graph "
                                               f"({len(graph ^ expected)} triples)")
                results[name] = seconds
                unit = "patches" if "archive" in name else "members"
                click.echo(f"  {name:<26} {pages:>5} pages {items:>7,} {unit:<8} {seconds:6.2f} s "
                           f"{items / seconds:>9,.0f} {unit}/s   (replica = hub's graph, {len(graph):,} triples)")
            base = results["archive pages (baseline)"]
            click.echo(f"  ratio LDES / archive: cold {results['LDES, cold'] / base:.2f}x, "
                       f"warm {results['LDES, warm'] / base:.2f}x, latest view "
                       f"{results['LDES latest view'] / base:.2f}x (goal <= 2x)")
            gc.collect()  # what the client holds stays out of its collector's way: its pauses
            gc.freeze()  # would delay the arrival times it measures
            click.echo(f"\nfan-out: /streams/events, {events} patches at {rate:g}/s, then a burst of {burst}:")
            baseline: dict[str, float] | None = None
            for count in [1, *clients]:
                figures = fan_out(hub, history, count, events, rate, burst, token)
                baseline = baseline or figures
                click.echo(f"  {count:>5} clients: p50 {figures['p50']:6.1f} ms  p99 {figures['p99']:6.1f} ms  "
                           f"(publish request p50 {figures['publish_p50']:.1f}, p99 {figures['publish_p99']:.1f})  "
                           f"burst {figures['events_per_s']:>9,.0f} events/s ({figures['patches_per_s']:.0f} "
                           f"patches/s)  p99 / one client's p50: {figures['p99'] / baseline['p50']:.1f}x")
            click.echo("  goal: p99 <= 50 ms at 100 clients")

