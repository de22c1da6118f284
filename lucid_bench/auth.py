"""`lucid-hub bench auth`: what authorisation costs a request — token validation plus the
access decision — with many conditions and graphs.

Real parts: the hub's TokenService (Ed25519 RFC 9068 tokens, revocation check) and the
PolicyEngine. Baseline in the same run: the same decisions evaluated naively (every
condition tested for every request, no compiled per-party access, no caches).
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path

import click

from lucid_hub.auth.clients import ClientRegistry
from lucid_hub.auth.tokens import TokenService
from lucid_hub.db.session import Database
from lucid_hub.policy.decisions import PolicyEngine, applies, grants
from lucid_hub.policy.model import Condition
from lucid_hub.signing import KeyRing

BASE = "https://acme.example/graphs/"


def _conditions(rng: random.Random, count: int, graphs: int, groups: int) -> list[Condition]:
    out = []
    for i in range(count):
        required = tuple(sorted({f"group-{rng.randrange(groups)}" for _ in range(rng.choice((1, 1, 2)))}))
        if i % 10 == 0:  # a tenth grant a prefix
            out.append(Condition(f"urn:bench:c{i}", requiresGroup=required,
                                 grantReadGraphPattern=(f"{BASE}{rng.randrange(graphs // 100)}/*",)))
        else:
            read = tuple(f"{BASE}{rng.randrange(graphs // 100)}/{rng.randrange(100)}" for _ in range(10))
            out.append(Condition(f"urn:bench:c{i}", requiresGroup=required, readGraph=read))
    return out


def _percentiles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=100, method="inclusive")
    return q[49] * 1000, q[98] * 1000


def run(conditions: int, graphs: int, clients: int, requests: int, seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 (benchmark data, not secrets)
    with tempfile.TemporaryDirectory(prefix="lucid-bench-auth-") as tmp:
        db = Database(f"sqlite:///{Path(tmp) / 'bench.db'}")
        db.upgrade()
        keys = KeyRing(Path(tmp) / "keys")
        keys.create()
        tokens = TokenService(db, keys, "https://hub.acme.example")
        registry = ClientRegistry(db)
        tokens_list = []
        for i in range(clients):
            groups = sorted({f"group-{rng.randrange(100)}" for _ in range(3)})
            record, _secret = registry.create(f"client {i}", groups=groups, scopes=["graphs:read"])
            tokens_list.append(tokens.issue(record, "graphs:read"))
        policy = _conditions(rng, conditions, graphs, 100)
        engine = PolicyEngine(policy)
        graph_names = [f"{BASE}{rng.randrange(graphs // 100)}/{rng.randrange(100)}" for _ in range(graphs)]
        work = [(rng.choice(tokens_list), rng.choice(graph_names)) for _ in range(requests)]

        def request(token: str, graph: str) -> bool:
            caller = tokens.validate(token)
            return engine.decide(caller.party, graph, "read").allowed

        cold = []
        for token in tokens_list:  # first sight of each token: signature, claims, party compiled
            t0 = time.perf_counter()
            request(token, graph_names[0])
            cold.append(time.perf_counter() - t0)
        for token, graph in work:  # warm the decision cache
            request(token, graph)
        warm = []
        allowed = 0
        for token, graph in work:
            t0 = time.perf_counter()
            allowed += request(token, graph)
            warm.append(time.perf_counter() - t0)

        naive = []
        parties = {t: tokens.validate(t).party for t in tokens_list}
        for token, graph in work[: max(1, requests // 20)]:
            t0 = time.perf_counter()
            caller = tokens.validate(token)
            party = parties[token]
            any(applies(c, party) and grants(c, graph, "read") for c in policy)
            naive.append(time.perf_counter() - t0)
        assert caller is not None

        # a policy change takes effect for the next request
        token, graph = next((t, g) for t, g in work if not request(t, g))
        party = tokens.validate(token).party
        t0 = time.perf_counter()
        engine.replace([*policy, Condition("urn:bench:new", requiresGroup=tuple(sorted(party.groups))[:1],
                                           readGraph=(graph,))])
        changed = request(token, graph)
        change_s = time.perf_counter() - t0

    cold_p50, cold_p99 = _percentiles(cold)
    warm_p50, warm_p99 = _percentiles(warm)
    naive_p50, _ = _percentiles(naive)
    click.echo(f"== {conditions:,} access conditions, {graphs:,} graphs, {clients} clients, "
               f"{requests:,} requests ({allowed / requests:.0%} allowed)")
    click.echo(f"  first request of a token   p50 {cold_p50:.3f} ms  p99 {cold_p99:.3f} ms  "
               "(Ed25519 signature, claims, party compiled)")
    click.echo(f"  warm: validate + decide    p50 {warm_p50 * 1000:.1f} µs  p99 {warm_p99 * 1000:.1f} µs")
    click.echo(f"  naive baseline             p50 {naive_p50 * 1000:.1f} µs  (every condition tested per request)")
    click.echo(f"  warm path vs baseline      {naive_p50 / warm_p50:.1f}x faster")
    click.echo(f"  policy change -> next decision {change_s * 1000:.2f} ms, decision changed: {changed}")
    click.echo(f"  goal p50 <= 0.2 ms (warm)  {'met' if warm_p50 <= 0.2 else 'MISSED'} ({warm_p50:.4f} ms)")
    click.echo(f"  goal change takes effect for the next request  {'met' if changed else 'MISSED'}")
