"""`lucid-hub bench …`: the benchmarks (figures and ratios against a baseline run in the same
process; docs/BENCHMARKS.md)."""

from __future__ import annotations

from pathlib import Path

import click

from lucid_hub.cli.base import (
    cli,
)
from lucid_hub.errors import InputError


@cli.group()
def bench() -> None:
    """Benchmarks (figures and ratios against a baseline run in the same process)."""


@bench.command("canon")
@click.option("--triples", default=1_000_000, show_default=True, help="Size of the large graph.")
@click.option("--blank-triples", default=100_000, show_default=True,
              help="Size of the graph whose subjects are all blank nodes.")
@click.option("--baseline-triples", default=20_000, show_default=True,
              help="Subset of the large graph the rdflib baseline runs on.")
@click.option("--blank-baseline-triples", default=700, show_default=True,
              help="Subset of the blank-node graph the rdflib baseline runs on (rdflib's "
                   "canonicalisation is superlinear there: 5,000 triples took 707 s).")
@click.option("--change", default=0.01, show_default=True, help="Fraction of triples changed.")
@click.option("--seed", default=1, show_default=True)
def bench_canon(triples: int, blank_triples: int, baseline_triples: int, blank_baseline_triples: int,
                change: float, seed: int) -> None:
    """MSG hashing and diff of generated graphs, against rdflib's canonicalisation."""
    from lucid_bench.canon import run

    run(triples=triples, blank_triples=blank_triples, baseline_triples=baseline_triples,
        blank_baseline_triples=blank_baseline_triples, change=change, seed=seed)


@bench.command("apply")
@click.option("--triples", default=100_000, show_default=True, help="Size of the large add-only patch.")
@click.option("--patches", default=2_000, show_default=True, help="Small patches of the catch-up run.")
@click.option("--seed", default=1, show_default=True)
def bench_apply(triples: int, patches: int, seed: int) -> None:
    """Verify and apply of a large patch (embedded, and into Oxigraph server) against the stores'
    own bulk paths; catch-up of small patches into Oxigraph server."""
    from lucid_bench.apply import run

    run(triples=triples, patches=patches, seed=seed)


@bench.command("publish")
@click.option("--updates", default=1000, show_default=True, help="Small updates per log backend.")
@click.option("--clients", default=4, show_default=True, help="Concurrent clients for the throughput run.")
@click.option("--bulk-triples", default=1_000_000, show_default=True, help="0 skips the bulk run.")
@click.option("--change", default=0.01, show_default=True, help="Fraction changed in the re-publish.")
@click.option("--kafka/--no-kafka", default=True, show_default=True, help="Also run with the Kafka log.")
@click.option("--graphs", default=1, show_default=True, type=click.IntRange(1, 1000),
              help="Graphs the throughput clients publish to (client n to graph n mod GRAPHS).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Hub processes (serve --workers).")
@click.option("--core/--no-core", default=True, show_default=True,
              help="Also publish in this process without HTTP, with and without group commit.")
def bench_publish(updates: int, clients: int, bulk_triples: int, change: float, kafka: bool, graphs: int,
                  workers: int, core: bool) -> None:
    """Publishing latency, throughput and bulk re-publish, against direct pyoxigraph writes."""
    from lucid_bench.publish import run

    run(updates=updates, clients=clients, bulk_triples=bulk_triples, change=change, kafka=kafka, graphs=graphs,
        workers=workers, core=core)


@bench.command("auth")
@click.option("--conditions", default=1000, show_default=True)
@click.option("--graphs", default=10_000, show_default=True)
@click.option("--clients", default=200, show_default=True)
@click.option("--requests", "request_count", default=100_000, show_default=True)
@click.option("--seed", default=1, show_default=True)
def bench_auth(conditions: int, graphs: int, clients: int, request_count: int, seed: int) -> None:
    """Token validation plus access decision per request, against naive evaluation."""
    from lucid_bench.auth import run

    if min(conditions, clients, request_count) < 1 or graphs < 100:
        raise InputError("--conditions, --clients and --requests must be positive, --graphs at least 100")
    run(conditions, graphs, clients, request_count, seed)


@bench.command("sparql")
@click.option("--triples", default=100_000, show_default=True, help="Size of the queried graph.")
@click.option("--queries", default=200, show_default=True, help="Runs of each query.")
@click.option("--updates", default="1000,4000,16000", show_default=True,
              help="Comma-separated INSERT DATA sizes (triples).")
@click.option("--baseline-limit", default=4000, show_default=True,
              help="Largest update the previous release's rdflib translation is timed for (it grows as N squared).")
def bench_sparql(triples: int, queries: int, updates: str, baseline_limit: int) -> None:
    """Guarded SPARQL queries and updates over HTTP, against in-process pyoxigraph and rdflib."""
    from lucid_bench.sparql import run

    sizes = _counts(updates, "--updates")
    if triples < 2 or queries < 2 or any(n < 1 for n in sizes):
        raise InputError("--triples and --queries must be at least 2, --updates positive")
    run(triples=triples, queries=queries, updates=sizes, baseline_limit=baseline_limit)


@bench.command("e2e")
@click.option("--mirrors", default="1,10", show_default=True, help="Comma-separated mirror counts (partner hubs).")
@click.option("--patches", default=100, show_default=True, help="Patches per latency run.")
@click.option("--rate", default=10.0, show_default=True, help="Patches per second in the latency runs.")
@click.option("--missed", default=10_000, show_default=True, help="Patches a stopped mirror catches up on (0: skip).")
@click.option("--triples", default=100_000, show_default=True, help="Triples of the large patch (0: skip).")
def bench_e2e(mirrors: str, patches: int, rate: float, missed: int, triples: int) -> None:
    """Publisher to mirrors: latency, catch-up rate, large-patch apply against pyoxigraph's load."""
    from lucid_bench.e2e import run

    counts = _counts(mirrors, "--mirrors")
    if any(n < 1 for n in counts) or patches < 1 or rate <= 0 or missed < 0 or triples < 0:
        raise InputError("--mirrors, --patches and --rate must be positive, --missed and --triples at least 0")
    run(counts, patches, rate, missed, triples)


@bench.command("fanout")
@click.option("--subscribers", default="1,10,100,1000", show_default=True, help="Comma-separated counts.")
@click.option("--deliveries", default=2000, show_default=True,
              help="Deliveries per run (patches = this / subscribers).")
@click.option("--kafka/--no-kafka", default=True, show_default=True, help="Also run with the Kafka log.")
@click.option("--baseline", default="", help="Broker URL (e.g. redis://127.0.0.1:6379/15) to run flask-websub's "
              "hub with its Celery worker as the baseline (needs flask-websub, celery, redis).")
@click.option("--workers", default=0, show_default=True,
              help="Delivery worker processes beside serve (0: serve delivers in process).")
@click.option("--database", default="", help="Database URL for the hub (default: SQLite in its data directory); "
              "its tables are dropped before each run.")
def bench_fanout(subscribers: str, deliveries: int, kafka: bool, baseline: str, workers: int, database: str) -> None:
    """WebSub fan-out: deliveries/s and publish-to-delivered latency to loopback callbacks."""
    from lucid_bench.fanout import run

    counts = _counts(subscribers, "--subscribers")
    if any(n < 1 for n in counts) or deliveries < 1 or workers < 0:
        raise InputError("--subscribers and --deliveries must be positive, --workers at least 0")
    run(counts, deliveries, kafka, baseline, workers, database)


@bench.command("scale")
@click.option("--replicas", default="1,2,3", show_default=True, help="Comma-separated counts of serve processes.")
@click.option("--database", default="postgresql+psycopg://postgres@127.0.0.1:5432/bench_scale", show_default=True,
              help="PostgreSQL URL shared by the replicas; its tables are dropped before each run.")
@click.option("--reads", default=2000, show_default=True, help="Graph GETs, and SPARQL queries, per run.")
@click.option("--publishes", default=2000, show_default=True, help="Small publishes per run.")
@click.option("--clients", default=4, show_default=True, help="Load client processes.")
def bench_scale(replicas: str, database: str, reads: int, publishes: int, clients: int) -> None:
    """Hub replicas on one database: reads, queries and publishes per second, lag, start times."""
    from lucid_bench.scale import run

    counts = _counts(replicas, "--replicas")
    if any(n < 1 for n in counts) or min(reads, publishes, clients) < 1:
        raise InputError("--replicas, --reads, --publishes and --clients must be positive")
    if not database.startswith("postgresql"):
        raise InputError("--database must be a PostgreSQL URL: replicas share the archive there")
    run(counts, database, reads, publishes, clients)


@bench.command("console")
@click.option("--patches", default=10_000, show_default=True, help="Patches in the graph.")
@click.option("--subscriptions", default=1_000, show_default=True, help="Subscriptions to it.")
@click.option("--runs", default=20, show_default=True, help="Renders of each page.")
@click.option("--rules", default=100, show_default=True, help="Rules in the rule set.")
@click.option("--windows", default=100, show_default=True, help="Windowed queries.")
def bench_console(patches: int, subscriptions: int, runs: int, rules: int, windows: int) -> None:
    """The console's pages: render times with a long history, many subscribers, rules and
    windows (goal 300 ms)."""
    from lucid_bench.console import run

    if min(patches, subscriptions, runs) < 1 or min(rules, windows) < 0:
        raise InputError("--patches, --subscriptions and --runs must be positive, --rules and --windows 0 or more")
    run(patches, subscriptions, runs, rules, windows)


@bench.command("tls")
@click.option("--deliveries", default=3000, show_default=True, help="POSTs per run.")
@click.option("--in-flight", default=16, show_default=True, help="POSTs in flight at once.")
def bench_tls(deliveries: int, in_flight: int) -> None:
    """Deliveries to an https callback: HTTP/1.1 (aiohttp) against HTTP/2 (httpcore)."""
    import importlib.util

    if deliveries < 1 or in_flight < 1:
        raise InputError("--deliveries and --in-flight must be positive")
    missing = [name for name in ("hypercorn", "trustme") if importlib.util.find_spec(name) is None]
    if missing:
        raise InputError(f"bench tls needs {' and '.join(missing)} (pip install -e '.[bench]')")
    from lucid_bench.tls import run

    click.echo(f"== {deliveries} deliveries to an https callback on loopback, {in_flight} in flight")
    run(deliveries, in_flight)


@bench.command("hostile")
@click.option("--samples", default=100, show_default=True, help="Measurements of the well-behaved party per phase.")
@click.option("--attacks", default="empty,repeat,huge,trickle,dribble", show_default=True,
              help="Hostile publishers' archive pages to mirror beside a good one (comma-separated; empty: none).")
def bench_hostile(samples: int, attacks: str) -> None:
    """A well-behaved party's p99 beside a hostile partner, against its p99 alone."""
    if samples < 10:
        raise InputError("--samples must be 10 or more (a p99 of fewer is the maximum)")
    from lucid_bench.hostile import run

    run(samples, [a for a in attacks.split(",") if a])


@bench.command("push")
@click.option("--connections", default=10_000, show_default=True, help="Push channels (SSE clients) to hold open.")
@click.option("--events", default=20, show_default=True, help="Events to fan out to every client, one at a time.")
@click.option("--samples", default=200, show_default=True, help="Requests per p99, with and without the channels.")
def bench_push(connections: int, events: int, samples: int) -> None:
    """Memory, request latency and fan-out latency with thousands of open push channels."""
    if connections < 1 or events < 1 or samples < 10:
        raise InputError("--connections and --events must be 1 or more, --samples 10 or more")
    from lucid_bench.push import run

    run(connections, events, samples)


@bench.command("queries")
@click.option("--subscriptions", default="10,100,1000", show_default=True, help="Comma-separated counts.")
@click.option("--patches", default=200, show_default=True, help="Patches per phase (steady rate, then a burst).")
@click.option("--rate", default=20.0, show_default=True, help="Patches per second in the latency phase.")
@click.option("--idle", default=1000, show_default=True,
              help="Idle subscriptions added after the last count to measure memory per subscription (0: skip).")
@click.option("--seed", default=1, show_default=True)
def bench_queries(subscriptions: str, patches: int, rate: float, idle: int, seed: int) -> None:
    """Continuous query subscriptions: latency, notifications/s, evaluations per patch, memory,
    against the naive strategy (re-run every subscription after every patch)."""
    from lucid_bench.queries import run

    counts = _counts(subscriptions, "--subscriptions")
    if any(n < 1 for n in counts) or patches < 1 or rate <= 0 or idle < 0:
        raise InputError("--subscriptions, --patches and --rate must be positive, --idle at least 0")
    run(counts, patches, rate, idle, seed)


@bench.command("streams")
@click.option("--triples", default=100_000, show_default=True, help="Triples of the graph before its patches.")
@click.option("--patches", default=1000, show_default=True, help="Patches after it (five entity changes each).")
@click.option("--clients", default="100,1000", show_default=True, help="Comma-separated SSE client counts.")
@click.option("--events", default=50, show_default=True, help="Patches per fan-out latency phase.")
@click.option("--rate", default=10.0, show_default=True, help="Patches per second in the latency phase.")
@click.option("--burst", default=50, show_default=True, help="Patches published as fast as possible for events/s.")
@click.option("--seed", default=1, show_default=True)
def bench_streams(triples: int, patches: int, clients: str, events: int, rate: float, burst: int, seed: int) -> None:
    """Streams as Linked Data: replicating a history over LDES against the patch archive, and
    Server-Sent Events fan-out latency and events/s against one client."""
    from lucid_bench.streams import run

    counts = _counts(clients, "--clients")
    if triples < 10 or patches < 1 or events < 1 or burst < 1 or rate <= 0 or any(n < 1 for n in counts):
        raise InputError("--triples must be at least 10; --patches, --events, --burst, --rate and --clients positive")
    run(triples, patches, counts, events, rate, burst, seed)


@bench.command("windows")
@click.option("--windows", default=100, show_default=True, help="C-SPARQL windows registered.")
@click.option("--rate", default=1000.0, show_default=True, help="Triples per second into the stream.")
@click.option("--batch", default=100, show_default=True, help="Triples per patch.")
@click.option("--seconds", default=20.0, show_default=True, help="How long each phase streams.")
def bench_windows(windows: int, rate: float, batch: int, seconds: float) -> None:
    """C-SPARQL windows: each window's evaluation time and each step's completion at a steady
    stream, against the same queries alone."""
    from lucid_bench.windows import run

    if windows < 2 or rate <= 0 or batch < 2 or seconds < 3:
        raise InputError("--windows and --batch must be at least 2, --rate positive, --seconds at least 3")
    run(windows, rate, batch, seconds)


@bench.command("rules")
@click.option("--rules", "counts", default="10,100,1000", show_default=True,
              help="Comma-separated counts of non-matching rules (the set grows through them).")
@click.option("--publishes", default=500, show_default=True, help="Small patches published per run.")
@click.option("--patches", default=20, show_default=True,
              help="Partner patches in the across-companies run (three hub processes; 0: skip).")
@click.option("--rate", default=2.0, show_default=True, help="Partner patches per second.")
def bench_rules(counts: str, publishes: int, patches: int, rate: float) -> None:
    """Rules: added publish latency and throughput with 0-1,000 rules (one matching immediate
    rule, the rest not matching), and partner patch -> derived patch at a third hub."""
    from lucid_bench.rules import run

    numbers = sorted(_counts(counts, "--rules"))
    if any(n < 1 for n in numbers) or publishes < 2 or patches < 0 or rate <= 0:
        raise InputError("--rules and --rate must be positive, --publishes at least 2, --patches at least 0")
    run(numbers, publishes, patches, rate)


@bench.command("diff")
@click.option("--sizes", default="1000000,10000000", show_default=True,
              help="Comma-separated snapshot sizes in triples; the scaling factor is last / first.")
@click.option("--work", type=click.Path(path_type=Path, file_okay=False), default=Path("bench-data"),
              show_default=True, help="Directory for the generated snapshots (kept and reused).")
@click.option("--master", default="local[2]", show_default=True, help="Spark master of the Spark runs.")
@click.option("--engines", default="local,spark", show_default=True, help="Engines to run besides sort+comm.")
@click.option("--floor/--no-floor", default=True, show_default=True,
              help="Also time Spark's floor: the lines read and grouped, no RDF parsing.")
def bench_diff(sizes: str, work: Path, master: str, engines: str, floor: bool) -> None:
    """Snapshot diffs: Spark and local engines against LC_ALL=C sort + comm on the same files."""
    from lucid_bench.diff import run

    numbers = _counts(sizes, "--sizes")
    chosen = [e.strip() for e in engines.split(",") if e.strip()]
    if any(e not in ("local", "spark") for e in chosen) or any(n <= 0 for n in numbers):
        raise InputError("--engines takes local and/or spark; --sizes positive numbers")
    run(numbers, work, master, chosen, floor)


def _counts(text: str, option: str) -> list[int]:
    """A benchmark option's comma-separated numbers (1_000_000 spelling allowed)."""
    try:
        return [int(n.replace("_", "")) for n in text.split(",") if n.strip()]
    except ValueError:
        raise InputError(f"{option} {text!r}: expected comma-separated numbers") from None
