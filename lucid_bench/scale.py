"""`lucid-hub bench scale`: hub replicas on one PostgreSQL.

For 1, 2, 3 ... `lucid-hub serve` processes with data directories of their own (standing for
pods with volumes of their own) on one database: graph reads (GET), SPARQL queries and
small publishes per second, load spread over the replicas by client processes (a load
generator's, so that their Python does not share an interpreter with the benchmark); how
long every replica's store takes to reach the archive's head after the publishing stops
(the replica lag under load); and the start of a replica with its volume kept (a
StatefulSet's restart) against one with an empty one (a stateless pod rebuilding its store
from the archive). The one-replica run is the baseline of the ratios.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import click
import requests

from lucid_bench.clients import timed_clients
from lucid_hub.demo.processes import HubProcess, wait_until

GRAPH = "http://example.org/graphs/bench-scale"
SEED_TRIPLES = 1_000

# A load client in its own process: `count` requests of one kind to one replica; starts on
# "go" from stdin (start-up is not timed); the token comes over stdin, not the command line.
_CLIENT = """
import http.client, sys
host, port, kind, count, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
graph = sys.argv[6]
auth = sys.stdin.readline().strip()
conn = http.client.HTTPConnection(host, port, timeout=120)
sys.stdin.readline()
query = "SELECT (COUNT(*) AS ?n) WHERE { GRAPH <" + graph + "> { ?s ?p ?o } }"
for i in range(count):
    if kind == "get":
        conn.request("GET", "/graphs?graph=" + graph, headers={
            "Accept": "application/n-triples", "Authorization": auth})
    elif kind == "sparql":
        conn.request("POST", "/sparql", body=query.encode(), headers={
            "Content-Type": "application/sparql-query", "Accept": "application/sparql-results+json",
            "Authorization": auth})
    else:
        body = "".join(f'<http://example.org/s/{n}-{i}> <http://example.org/p{k}> "v {i}.{k}" .\\n' for k in range(10))
        conn.request("POST", "/graphs?graph=" + graph + "/" + str(n), body=body.encode(), headers={
            "Content-Type": "application/n-triples", "Authorization": auth})
    r = conn.getresponse(); answer = r.read()
    if r.status >= 300:
        sys.exit(f"{kind} failed: {r.status} {answer[:200].decode(errors='replace').strip()}")
"""


def _load(pods: list[HubProcess], kind: str, total: int, clients: int) -> float:
    """Requests per second of `clients` client processes, client n on replica n mod N."""
    count = max(1, total // clients)
    targets = [pods[n % len(pods)] for n in range(clients)]
    elapsed = timed_clients(_CLIENT, [["127.0.0.1", str(pod.port), kind, str(count), str(n), GRAPH]
                                      for n, pod in enumerate(targets)],
                            [str(pod.http.headers["Authorization"]) for pod in targets], kind)
    return count * clients / elapsed


def _ready(pod: HubProcess) -> bool:
    try:
        return requests.get(f"{pod.url}/readyz", timeout=10).status_code == 200
    except requests.RequestException:
        return False


def _reset(database: str) -> None:
    from lucid_bench.fanout import _reset as reset

    reset(database)


def _started(pod: HubProcess) -> float:
    """Seconds from starting a replica until it is ready (its store at the archive's head)."""
    begin = time.perf_counter()
    pod.start(timeout=600)
    wait_until(lambda: _ready(pod), 600, f"{pod.name} to be ready")
    return time.perf_counter() - begin


def _handover(database: str, pods: list[HubProcess]) -> float:
    """Seconds from killing the leader until another replica holds the lease."""
    from sqlalchemy import create_engine, text

    engine = create_engine(database)

    def holder() -> str | None:
        with engine.connect() as c:
            row = c.execute(text("SELECT holder, expires_at FROM leases WHERE name = 'hub'")).one_or_none()
        return str(row.holder) if row is not None and row.expires_at > time.time() else None

    try:
        names = {(pod.data / "replica-id").read_text().strip(): pod for pod in pods}
        leader = names[str(holder())]
        leader.stop(kill=True)
        killed = time.perf_counter()
        wait_until(lambda: holder() not in (None, next(k for k, v in names.items() if v is leader)), 60,
                   "another replica to lead")
        took = time.perf_counter() - killed
        leader.start(timeout=120)  # back, as its pod would be
        return took
    finally:
        engine.dispose()


def run(counts: list[int], database: str, reads: int, publishes: int, clients: int) -> None:
    base: dict[str, float] = {}
    click.echo(f"== {clients} client processes; reads: GET of a {SEED_TRIPLES:,}-triple graph; "
               f"publishes: 10-triple merges, client n to graph n; database {database.split('@')[-1]}")
    click.echo(f"  {'replicas':>8} {'GET/s':>8} {'SPARQL/s':>9} {'publish/s':>10} {'caught up after':>16}")
    for n in counts:
        _reset(database)
        with tempfile.TemporaryDirectory(prefix="lucid-bench-scale-") as tmp:
            # Readiness with no lag allowed: "ready" is "the store is at the archive's head".
            env = {"LUCID_DATABASE_URL": database, "LUCID_READY_MAX_LAG": "0", "LUCID_LOG_LEVEL": "WARNING"}
            pods = [HubProcess(f"replica-{i}", Path(tmp) / f"replica-{i}", env) for i in range(n)]
            try:
                for pod in pods:
                    pod.start(timeout=120)
                seed = "".join(f"<http://example.org/s/{i}> <http://example.org/p> \"{i}\" .\n"
                               for i in range(SEED_TRIPLES))
                pods[0].call("PUT", "/graphs", params={"graph": GRAPH}, data=seed.encode(),
                             headers={"Content-Type": "application/n-triples"})
                figures = {"get": _load(pods, "get", reads, clients), "sparql": _load(pods, "sparql", reads, clients),
                           "post": _load(pods, "post", publishes, clients)}
                stopped = time.perf_counter()
                wait_until(lambda replicas=tuple(pods): all(_ready(p) for p in replicas), 120,  # type: ignore[misc]
                           "every replica's store at the head")
                figures["lag"] = time.perf_counter() - stopped
                base = base or figures
                ratios = "  ".join(f"x{figures[k] / base[k]:.2f}" for k in ("get", "sparql", "post"))
                click.echo(f"  {n:>8} {figures['get']:>8,.0f} {figures['sparql']:>9,.0f} {figures['post']:>10,.0f} "
                           f"{figures['lag'] * 1000:>13,.0f} ms   ({ratios} of one replica)")
                if n == counts[-1] and n > 1:
                    took = _handover(database, pods)
                    click.echo(f"  leader killed (kill -9): another replica leads after {took:.1f} s (lease 10 s)")
                if n == counts[-1]:
                    archived = publishes + 1
                    pods[0].stop()
                    kept = _started(pods[0])
                    fresh = HubProcess("replica-new", Path(tmp) / "replica-new", env)
                    pods.append(fresh)
                    empty = _started(fresh)
                    click.echo(f"  start of a replica with {archived:,} patches archived: volume kept "
                               f"{kept:.1f} s, empty volume (store rebuilt from the archive) {empty:.1f} s")
            finally:
                for pod in pods:
                    pod.stop()
