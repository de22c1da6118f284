"""`lucid-hub demo`, the README's main job: two companies' hubs, the whole chain, a report.

ACME (publisher) and Globex (partner) run as two `lucid-hub serve` processes on free
loopback ports, each with its own data directory (embedded defaults: SQLite, the embedded
patch log, keys generated at first start). ACME registers Globex's client and an access
condition and publishes its supply-chain graph; Globex mirrors it; ACME changes it (blank-node
structures included); a tampered delivery reaches Globex; ACME withdraws the permission and
publishes once more. The report says what was published, delivered, verified, applied and
quarantined, whether the mirror is isomorphic to the source, and the publish-to-mirror
latency. Any step that does not behave as promised ends the demo with a non-zero exit.
"""

from __future__ import annotations

import hashlib
import hmac
import statistics
import tempfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pyoxigraph as ox
import requests

from lucid_hub.demo.processes import EventStream, HubProcess, wait_until
from lucid_hub.errors import LucidError
from lucid_hub.rdf.canon import Canonicalizer

GRAPH = "https://acme.example/graphs/supply-chain"
GROUP = "partner-globex"
CONDITION = "urn:acme:conditions:globex-reads-supply-chain"

# Each change is a list of (old, new) replacements on the previous version's Turtle.
CHANGES: list[tuple[str, list[tuple[str, str]]]] = [
    ("PO 1002 confirmed; shipment 77 departed; week 47 KPIs", [
        ('sc:status "open"', 'sc:status "confirmed"'),
        ('sc:event [ sc:kind "picked" ; sc:at "2026-11-16T08:10:00Z"^^xsd:dateTime ] .',
         'sc:event [ sc:kind "picked" ; sc:at "2026-11-16T08:10:00Z"^^xsd:dateTime ] ,\n'
         '             [ sc:kind "departed" ; sc:at "2026-11-16T14:45:00Z"^^xsd:dateTime ] .'),
        ('"0.93"^^xsd:decimal ; sc:week "2026-W46"', '"0.95"^^xsd:decimal ; sc:week "2026-W47"'),
        ('"12.5"^^xsd:decimal ; sc:week "2026-W46"', '"11.75"^^xsd:decimal ; sc:week "2026-W47"'),
    ]),
    ("plant B moved; shipment rerouted; PO 1001 line reduced", [
        ('sc:street "Rue du Port 4"', 'sc:street "Avenue de Colmar 18"'),
        ("( ex:plantA ex:hubMannheim ex:globexPlant )", "( ex:plantA ex:hubKarlsruhe ex:globexPlant )"),
        ("sc:quantity 1200", "sc:quantity 1150"),
    ]),
    ("PO 1002 cancelled", [
        ('ex:po-1002 a sc:PurchaseOrder ; sc:buyer ex:globex ; sc:supplier ex:acme ;\n'
         '    sc:status "confirmed" ; sc:orderedOn "2026-11-09"^^xsd:date ;\n'
         '    sc:line [ sc:part ex:bracket-7 ; sc:quantity 800 ; sc:unitPrice "0.84"^^xsd:decimal ] .\n', ""),
    ]),
]
AFTER_WITHDRAWAL = ("week 48 KPIs", [('sc:week "2026-W47"', 'sc:week "2026-W48"')])


class DemoFailed(LucidError):
    """A step of the demo did not behave as promised."""


def _changed(turtle: str, replacements: list[tuple[str, str]]) -> str:
    for old, new in replacements:
        if old not in turtle:
            raise DemoFailed(f"the demo's change script does not apply: {old[:60]!r}")
        turtle = turtle.replace(old, new)
    return turtle


def run(workdir: Path | None = None, echo: Callable[[str], None] = print) -> None:
    """Run the demonstration; raises DemoFailed if any step does not behave as promised."""
    with tempfile.TemporaryDirectory(prefix="lucid-demo-") as tmp:
        base = workdir or Path(tmp)
        acme = HubProcess("ACME", base / "acme")
        globex = HubProcess("Globex", base / "globex")
        with Canonicalizer() as canon:
            try:
                acme.start()
                globex.start()
                _run(acme, globex, canon, echo)
            finally:
                globex.stop()
                acme.stop()
        where = str(base) if workdir else "a temporary directory (use --dir to keep them)"
        echo(f"demo complete: both hubs' data directories and logs were in {where}")


def _run(acme: HubProcess, globex: HubProcess, canon: Canonicalizer, echo: Callable[[str], None]) -> None:
    started = time.perf_counter()
    echo(f"ACME (publisher) at {acme.url}, Globex (partner) at {globex.url}: two processes, embedded defaults")
    client_id, secret = acme.partner_client("Globex hub", GROUP, f"{globex.url}/callback/")
    acme.grant_read(CONDITION, GROUP, GRAPH)
    echo(f"ACME:   registered Globex's client {client_id} and the condition {CONDITION}")
    turtle = (resources.files("lucid_hub") / "samples" / "supply-chain.ttl").read_text(encoding="utf-8")
    published = [acme.publish(GRAPH, turtle)]
    echo(f"ACME:   published <{GRAPH}>: {published[0][:27]}…")

    mirror = globex.mirror(f"{acme.url}/hub", GRAPH, client_id, secret)
    echo(f"Globex: mirroring it (keys pinned from {mirror['keys_pinned_from']})")
    wait_until(lambda: globex.mirrors()[0]["state"] == "active" and globex.mirrors()[0]["head"] == published[0],
               60, "Globex's mirror to clone the graph")
    echo("Globex: subscription verified, graph cloned and verified")

    arrivals = EventStream(globex, GRAPH)
    latencies: list[float] = []
    try:
        for message, replacements in CHANGES:
            turtle = _changed(turtle, replacements)
            sent = time.perf_counter()  # (before the publish: the mirror may apply it before ACME's answer arrives)
            patch_id = acme.publish(GRAPH, turtle)
            published.append(patch_id)
            if not arrivals.wait([patch_id], 30):
                raise DemoFailed(f"Globex did not apply {patch_id} within 30 s")
            latencies.append(arrivals.times[patch_id] - sent)
            echo(f"ACME:   {message}: {patch_id[:27]}… -> Globex verified and applied it in "
                 f"{latencies[-1] * 1000:.0f} ms")
    finally:
        arrivals.close()

    head = published[-1]
    _check_isomorphic(acme, globex, head, canon)
    echo("Globex: mirror isomorphic to ACME's graph (canonical forms equal)")

    quarantined_reason = _tamper(acme, globex, head)
    echo(f"Globex: a tampered delivery was quarantined, not applied: {quarantined_reason}")

    acme.withdraw(CONDITION)
    turtle = _changed(turtle, AFTER_WITHDRAWAL[1])
    late = acme.publish(GRAPH, turtle)
    published.append(late)
    echo(f"ACME:   withdrew the condition, then published {AFTER_WITHDRAWAL[0]}: {late[:27]}…")
    wait_until(lambda: globex.mirrors()[0]["state"] == "revoked", 30, "Globex to be told of the withdrawal")
    state = globex.mirrors()[0]
    if state["head"] != head:
        raise DemoFailed("Globex applied a patch after its access was withdrawn")
    echo(f"Globex: told \"{state['last_error'][:100]}…\"; the mirror stays at the last permitted version")

    subscription = acme.subscriptions()[0]
    report = [
        ("patches published", f"{len(published)} ({len(published) - 1} while Globex had access, 1 after)"),
        ("delivered by ACME's hub", f"{subscription['delivered']} (subscription now {subscription['state']})"),
        ("verified and applied at Globex", f"{state['applied']} (clone {1}, deliveries {state['applied'] - 1})"),
        ("quarantined at Globex", f"{state['quarantined']} (the tampered delivery)"),
        ("HMAC mismatches ignored", str(state["hmac_failures"])),
        ("mirror isomorphic to source", "yes"),
        ("publish-to-mirror latency", f"p50 {statistics.median(latencies) * 1000:.0f} ms, "
                                      f"max {max(latencies) * 1000:.0f} ms ({len(latencies)} patches)"),
        ("demo time", f"{time.perf_counter() - started:.1f} s"),
    ]
    if state["applied"] != len(published) - 1 or state["quarantined"] != 1 or state["hmac_failures"] != 1:
        raise DemoFailed(f"unexpected counts at Globex: {state}")
    echo("report")
    for name, value in report:
        echo(f"  {name:<32}{value}")


def _check_isomorphic(acme: HubProcess, globex: HubProcess, version: str, canon: Canonicalizer) -> None:
    def canonical(text: str) -> str:
        return str(canon.canonicalize([str(q.triple) for q in ox.parse(text, format=ox.RdfFormat.N_TRIPLES)]))

    if canonical(globex.content(GRAPH)) != canonical(acme.content(GRAPH, version)):
        raise DemoFailed("Globex's mirror is not isomorphic to ACME's graph")


def _tamper(acme: HubProcess, globex: HubProcess, head: str) -> str:
    """Deliver ACME's last patch to Globex's callback twice, altered in flight: once with a
    wrong HMAC (ignored) and once as an attacker who knows the HMAC secret would (caught by
    the patch id and signature)."""
    from lucid_hub.config import Settings
    from lucid_hub.db.models import Mirror
    from lucid_hub.db.session import Database

    body = acme.call("GET", f"/patches/{head}", headers={"Accept": "application/rdf-patch"}).content
    # an order line's quantity, changed in flight
    altered = body.replace(b'"800"', b'"8000"', 1)
    if altered == body:
        raise DemoFailed("the demo's tampering found nothing to alter")
    database = Database(Settings.from_env(globex.env).db_url)  # the partner's operator can read it
    try:
        with database.session() as session:
            row = session.query(Mirror).one()
            mirror_id, key = row.id, row.hmac_secret
    finally:
        database.dispose()
    url = f"{globex.url}/callback/{mirror_id}"
    for secret in ("a guessed secret", key):
        signature = "sha256=" + hmac.new(secret.encode(), altered, hashlib.sha256).hexdigest()
        answer = requests.post(url, data=altered, timeout=30, headers={
            "Content-Type": "application/rdf-patch", "X-Hub-Signature": signature})
        if answer.status_code != 202:
            raise DemoFailed(f"Globex answered {answer.status_code} to a tampered delivery (expected 202)")
    quarantined = globex.call("GET", f"/admin/mirrors/{mirror_id}/quarantine").json()["quarantined"]
    if len(quarantined) != 1 or globex.mirrors()[0]["head"] != head:
        raise DemoFailed("the tampered delivery was not quarantined")
    return str(quarantined[0]["reason"])[:100]
