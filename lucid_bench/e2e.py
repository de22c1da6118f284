"""`lucid-hub bench e2e`: publisher to mirror, end to end, with real hub processes.

1. Latency: small patches published at a steady rate; publish-to-applied at each mirror
   (its `/mirrors/events` stream), p50/p99, with 1 and with 10 mirrors (partner hubs).
2. Catch-up: a mirror stopped while the publisher makes N patches, then started: patches
   applied per second until it is at the publisher's head.
3. Apply: one patch adding 100k triples (blank nodes included) verified and applied by a
   mirror's code path (`verify_patch_bytes` + archive + store) in this process, against
   loading the same triples straight into a pyoxigraph store in the same run.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import click

from lucid_hub.demo.processes import EventStream, HubProcess, wait_until

GRAPH = "https://acme.example/graphs/bench-e2e"
GROUP = "bench-partners"


def _version(i: int) -> str:
    return (f'<https://acme.example/kpi> <https://acme.example/value> "{i}" .\n'
            f'<https://acme.example/kpi> <https://acme.example/measured> '
            f'[ <https://acme.example/week> "{i % 52}" ] .\n')


def _connect(acme: HubProcess, partner: HubProcess) -> None:
    client_id, secret = acme.partner_client(partner.name, GROUP, f"{partner.url}/callback/")
    partner.mirror(f"{acme.url}/hub", GRAPH, client_id, secret)


def _percentiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (values[0] * 1000,) * 2 if values else (0.0, 0.0)
    q = statistics.quantiles(values, n=100, method="inclusive")
    return q[49] * 1000, q[98] * 1000


def latency(work: Path, mirrors: int, patches: int, rate: float) -> None:
    with HubProcess("ACME", work / f"acme-{mirrors}") as acme:
        acme.publish(GRAPH, _version(0))
        acme.grant_read("urn:bench:partners-read", GROUP, GRAPH)
        partners = [HubProcess(f"partner-{n}", work / f"partner-{mirrors}-{n}").start() for n in range(mirrors)]
        try:
            for partner in partners:
                _connect(acme, partner)
            head = acme.publish(GRAPH, _version(1))
            for partner in partners:
                wait_until(lambda p=partner: bool(p.mirrors()) and p.mirrors()[0]["head"] == head  # type: ignore[misc]
                           and p.mirrors()[0]["state"] == "active", 120, f"{partner.name} to clone")
            streams = [EventStream(p, GRAPH) for p in partners]
            sent: dict[str, float] = {}
            next_at = time.perf_counter()
            for i in range(patches):
                time.sleep(max(0.0, next_at - time.perf_counter()))  # pacing the load, not synchronising
                started = time.perf_counter()  # (before the publish: a mirror can apply it before ACME answers)
                sent[acme.publish(GRAPH, _version(i + 2))] = started
                next_at += 1 / rate
            complete = all(s.wait(list(sent), 120) for s in streams)
            for stream in streams:
                stream.close()
            latencies = [s.times[p] - t for s in streams for p, t in sent.items() if p in s.times]
            p50, p99 = _percentiles(latencies)
            note = "" if complete else "  INCOMPLETE"
            click.echo(f"  {mirrors:>3} mirror{'s' if mirrors > 1 else ' '}, {patches} patches at {rate:.0f}/s: "
                       f"publish->applied p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  ({len(latencies)} applications){note}")
        finally:
            for partner in partners:
                partner.stop()


def catch_up(work: Path, missed: int) -> None:
    with HubProcess("ACME", work / "acme-catchup") as acme:
        acme.publish(GRAPH, _version(0))
        acme.grant_read("urn:bench:partners-read", GROUP, GRAPH)
        partner = HubProcess("partner", work / "partner-catchup").start()
        try:
            _connect(acme, partner)
            first = acme.publish(GRAPH, _version(1))
            wait_until(lambda: partner.mirrors()[0]["head"] == first, 120, "the clone")
        finally:
            partner.stop()
        started = time.perf_counter()
        head = ""
        for i in range(missed):
            head = acme.publish(GRAPH, _version(i + 2))
        click.echo(f"  published {missed:,} patches while the mirror was down "
                   f"({missed / (time.perf_counter() - started):,.0f}/s)")
        started = time.perf_counter()
        partner.start()
        up = time.perf_counter()
        wait_until(lambda: partner.mirrors()[0]["head"] == head, 3600, "the mirror to catch up")
        done = time.perf_counter()
        applied = partner.mirrors()[0]["length"] - 2
        click.echo(f"  catch-up: {applied:,} patches in {done - up:.1f} s after the hub was up "
                   f"({applied / (done - up):,.0f} patches/s; {done - started:.1f} s including its start)")
        partner.stop()


def apply_throughput(work: Path, triples: int) -> None:
    import pyoxigraph as ox

    from lucid_hub.config import Settings
    from lucid_hub.diff.local import diff_graph
    from lucid_hub.rdf.canon import Canonicalizer
    from lucid_hub.rdf.rdfpatch import write_rdf_patch
    from lucid_hub.runtime import Runtime
    from lucid_hub.signing import KeyRing, TrustedKeys, sign_patch, verify_patch_bytes

    lines = []
    for i in range(triples // 4):
        s = f"<https://acme.example/item/{i}>"
        lines.append(f'{s} <https://acme.example/qty> "{i % 997}"^^<http://www.w3.org/2001/XMLSchema#integer> .')
        lines.append(f'{s} <https://acme.example/label> "item {i}" .')
        lines.append(f"{s} <https://acme.example/at> _:b{i} .")
        lines.append(f'_:b{i} <https://acme.example/site> "plant {i % 7}" .')
    text = "\n".join(lines) + "\n"
    quads = list(ox.parse(text, format=ox.RdfFormat.N_TRIPLES))
    with Canonicalizer() as canon:
        key = KeyRing(work / "apply-keys").ensure()
        change = diff_graph([], quads, GRAPH, canon)
        # As a hub makes it: format 2 (the new graph holds no occurrence of any MSG yet).
        raw = write_rdf_patch(sign_patch(change.to_patch(None, held=lambda _digest: ()), key))
        trusted = TrustedKeys(KeyRing(work / "apply-keys").jwks())

        started = time.perf_counter()
        store = ox.Store(str(work / "raw-store"))
        store.bulk_load(text.encode(), format=ox.RdfFormat.N_TRIPLES, to_graph=ox.NamedNode(GRAPH))
        store.flush()
        raw_seconds = time.perf_counter() - started
        del store

        runtime = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(work / "apply-hub")}))
        try:
            started = time.perf_counter()
            patch = verify_patch_bytes(raw, trusted, canon)
            verified = time.perf_counter() - started
            runtime.publisher.archive_verified(patch)
            mirror_seconds = time.perf_counter() - started
        finally:
            runtime.close()
    click.echo(f"  {triples:,}-triple patch ({len(raw) / 1e6:.1f} MB): pyoxigraph bulk load {raw_seconds:.2f} s "
               f"({triples / raw_seconds:,.0f} triples/s); mirror verify+apply {mirror_seconds:.2f} s "
               f"({triples / mirror_seconds:,.0f} triples/s; verification {verified:.2f} s) "
               f"-> {raw_seconds / mirror_seconds:.2f}x the raw load's speed")


def run(mirror_counts: list[int], patches: int, rate: float, missed: int, triples: int) -> None:
    with tempfile.TemporaryDirectory(prefix="lucid-bench-e2e-") as tmp:
        work = Path(tmp)
        click.echo("== publish -> applied at the mirrors (each mirror a partner hub process)")
        for count in mirror_counts:
            latency(work, count, patches, rate)
        if missed:
            click.echo("== catch-up")
            catch_up(work, missed)
        if triples:
            click.echo("== applying one large patch")
            apply_throughput(work, triples)
