"""`lucid-hub bench rules`: what rules cost the publish path, and how fast a rule reacts
across companies.

1. Publish cost: small patches (one triple added) published in this process, with no rules,
   then with one matching immediate rule, then with 10, 100 and 1,000 rules that do not match
   (most on other graphs, some on the same graph with other predicates), and with no rules
   again, all in one run: latency p50/p99, patches/s, and the ratio to the no-rule runs.
2. Across companies: hub A publishes a delivery date, hub B mirrors it and its rule marks an
   order at risk in B's own graph, hub C mirrors B's orders: time from A's publish to the
   derived patch applied at C (three hub processes on loopback).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import click

EX = "https://bench.example/"
GRAPH = f"{EX}graphs/deliveries"
ORDERS = f"{EX}graphs/orders"
BASELINE = f"{EX}graphs/no-rules"
RULES_PER_FILE = 150  # a rule file is at most 64 KiB


def _percentiles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=100, method="inclusive")
    return q[49] * 1000, q[98] * 1000


def _non_matching(start: int, count: int) -> list[str]:
    """Rules that a delivery-date patch does not fire: nine in ten on other graphs, the rest on
    the same graph with other predicates."""
    rules = []
    for i in range(start, start + count):
        graph = GRAPH if i % 10 == 0 else f"{EX}graphs/other-{i}"
        rules.append(f"RULE <{EX}rules/n{i}>\nON INSERT {{ GRAPH <{graph}> {{ ?s <{EX}p{i}> ?o }} }}\n"
                     f"DO INSERT {{ GRAPH <{EX}graphs/out-{i}> {{ ?s <{EX}seen> ?o }} }} WHERE {{}}\n")
    return rules


MATCHING = (f"RULE <{EX}rules/match>\nON INSERT {{ GRAPH <{GRAPH}> {{ ?d <{EX}date> ?date }} }}\n"
            f"IF {{ GRAPH <{ORDERS}> {{ ?o <{EX}delivery> ?d ; <{EX}promised> ?p }} FILTER (?date > ?p) }}\n"
            f"DO INSERT {{ GRAPH <{ORDERS}> {{ ?o <{EX}status> <{EX}AtRisk> }} }} WHERE {{}}\n")


def _day(n: int) -> str:
    return f'"{n}"^^<http://www.w3.org/2001/XMLSchema#integer>'


def _orders(n: int) -> str:
    return "".join(f"<{EX}o{i}> <{EX}delivery> <{EX}d{i}> .\n<{EX}o{i}> <{EX}promised> {_day(i % 28 + 1)} .\n"
                   for i in range(n))


def _publish_run(rt: Any, label: str, publishes: int, serial: list[int]) -> tuple[list[float], list[float]]:
    """Latencies of small patches to the deliveries graph (where rules are) and, interleaved
    with them, to a graph no rule names (the same publishing without rules, in the same run)."""
    import pyoxigraph as ox

    from lucid_hub.rdf.msg import graph_msgs

    ruled: list[float] = []
    plain: list[float] = []
    for _ in range(publishes):
        i = serial[0]
        serial[0] += 1
        # delivery d(i mod 500) moves to day 20..40: late for some orders, not for others
        text = f'<{EX}d{i % 500}> <{EX}date> {_day(20 + i % 21)} .\n<{EX}d{i % 500}> <{EX}seq> "{i}" .\n'
        msgs = graph_msgs(list(ox.parse(text, format=ox.RdfFormat.N_TRIPLES)), rt.canonicalizer)
        pair = ((GRAPH, ruled), (BASELINE, plain))
        for graph, times in (pair if i % 2 else reversed(pair)):  # either first in turn
            started = time.perf_counter()
            rt.publisher.merge(graph, msgs, author="bench", message=label)
            times.append(time.perf_counter() - started)
    return ruled, plain


def publish_cost(work: Path, counts: list[int], publishes: int) -> None:
    import pyoxigraph as ox

    from lucid_hub.config import Settings
    from lucid_hub.rdf.msg import graph_msgs
    from lucid_hub.rules.model import OPERATOR
    from lucid_hub.runtime import Runtime

    rt = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(work / "hub"),
                                         "LUCID_DATABASE_URL": f"sqlite:///{work / 'hub.db'}"}))
    serial = [0]
    results: list[tuple[str, tuple[list[float], list[float]]]] = []
    try:
        orders = graph_msgs(list(ox.parse(_orders(500), format=ox.RdfFormat.N_TRIPLES)), rt.canonicalizer)
        rt.publisher.replace(ORDERS, orders, author="bench", message="orders")
        _publish_run(rt, "warm-up", max(20, publishes // 10), serial)
        results.append(("no rules", _publish_run(rt, "no rules", publishes, serial)))
        rt.rules.add(MATCHING, OPERATOR, "bench")
        results.append(("1 matching immediate rule", _publish_run(rt, "matching", publishes, serial)))
        rt.rules.remove(f"{EX}rules/match", OPERATOR, "bench")
        added = 0
        for count in counts:
            started = time.perf_counter()
            new = _non_matching(added, count - added)
            for i in range(0, len(new), RULES_PER_FILE):
                rt.rules.add("".join(new[i:i + RULES_PER_FILE]), OPERATOR, "bench")
            added = count
            click.echo(f"  (rule set grown to {count:,} rules in {time.perf_counter() - started:.1f} s)")
            results.append((f"{count:,} non-matching rules", _publish_run(rt, f"{count} rules", publishes, serial)))
    finally:
        rt.close()
    click.echo("  (each run: the ruled graph's publishes against a graph no rule names, interleaved)")
    for label, (ruled, plain) in results:
        p50, p99 = _percentiles(ruled)
        base50, base99 = _percentiles(plain)
        rate, base_rate = len(ruled) / sum(ruled), len(plain) / sum(plain)
        click.echo(f"  {label:<27} p50 {p50:6.2f} ms (+{p50 - base50:5.2f}, x{p50 / base50:.2f})  "
                   f"p99 {p99:6.2f} ms (x{p99 / base99:.2f})  {rate:5.0f} patches/s (x{rate / base_rate:.2f})")


def across_companies(work: Path, patches: int, rate: float) -> None:
    from lucid_hub.demo.processes import EventStream, HubProcess, wait_until

    text = {"Content-Type": "text/plain; charset=utf-8"}
    with HubProcess("supplier", work / "a") as supplier, HubProcess("acme", work / "b") as acme, \
            HubProcess("customer", work / "c") as customer:
        supplier.publish(GRAPH, f"<{EX}d0> <{EX}date> {_day(1)} .\n")
        acme.publish(ORDERS, _orders(50))
        supplier.grant_read("urn:bench:acme-reads", "acme", GRAPH)
        acme.grant_read("urn:bench:customer-reads", "customer", ORDERS)
        client_id, secret = supplier.partner_client("acme", "acme", f"{acme.url}/callback/")
        acme.mirror(f"{supplier.url}/hub", GRAPH, client_id, secret)
        client_id, secret = acme.partner_client("customer", "customer", f"{customer.url}/callback/")
        customer.mirror(f"{acme.url}/hub", ORDERS, client_id, secret)
        for hub in (acme, customer):
            wait_until(lambda h=hub: bool(h.mirrors()) and h.mirrors()[0]["state"] == "active"  # type: ignore[misc]
                       and h.mirrors()[0]["head"] is not None, 120, f"{hub.name} to clone")
        acme.call("POST", "/rules", data=MATCHING.encode(), headers=text)
        stream = EventStream(customer, ORDERS)
        latencies = []
        next_at = time.perf_counter()
        try:
            for i in range(patches):
                time.sleep(max(0.0, next_at - time.perf_counter()))  # pacing the load, not synchronising
                next_at += 1 / rate
                started = time.perf_counter()
                # d{i} (order o{i} promised day i % 28 + 1) arrives on day 40: late, so the rule fires
                trigger = supplier.publish(GRAPH, f"<{EX}d0> <{EX}date> {_day(1)} .\n<{EX}d{i % 50}> <{EX}date> "
                                                  f"{_day(40 + i)} .\n")

                def derived(trigger: str = trigger) -> str | None:
                    found = acme.call("GET", "/rules/firings", params={"limit": 20}).json()["firings"]
                    for firing in found:
                        if firing["trigger"] == trigger and firing["patches"]:
                            return str(firing["patches"][0])
                    return None

                wait_until(lambda: derived() is not None, 60, "acme's rule to fire")
                patch = derived()
                assert patch is not None
                if stream.wait([patch], 60):
                    latencies.append(stream.times[patch] - started)
        finally:
            stream.close()
    p50, p99 = _percentiles(latencies) if len(latencies) > 1 else (latencies[0] * 1000,) * 2
    click.echo(f"  {len(latencies)} of {patches} partner patches at {rate:g}/s: A's publish -> B's rule patch "
               f"applied at C p50 {p50:.1f} ms  p99 {p99:.1f} ms")


def run(counts: list[int], publishes: int, patches: int, rate: float) -> None:
    with tempfile.TemporaryDirectory(prefix="lucid-bench-rules-") as tmp:
        work = Path(tmp)
        click.echo(f"== publish cost ({publishes} small patches per run, one process, SQLite)")
        publish_cost(work, counts, publishes)
        if patches:
            click.echo("== across companies: supplier A -> acme B (mirror + rule) -> customer C (mirror)")
            across_companies(work, patches, rate)
