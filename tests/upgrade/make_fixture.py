"""Makes the data of a release for the upgrade test (tests/db/test_upgrade.py): two hubs, ACME
publishing a graph and Globex mirroring it and publishing one of its own, as that release
wrote them (SQLite database, RDF store, keys), and what they held when it stopped.

Run it with the *previous release's* code first on the path, e.g. for release 7af9ae9:

    git worktree add /tmp/release 7af9ae9
    PYTHONPATH=/tmp/release python3 tests/upgrade/make_fixture.py tests/upgrade/release-7af9ae9

The keys in the result are for these tests only.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

ACME_GRAPH = "https://acme.example/graphs/kpi"
GLOBEX_GRAPH = "https://globex.example/graphs/orders"
XSD = "http://www.w3.org/2001/XMLSchema#"
PREFIXES = f"@prefix ex: <http://example.org/> .\n@prefix xsd: <{XSD}> .\n"
VERSIONS = [
    'ex:kpi1 ex:value "12.50"^^xsd:decimal ; ex:unit "days" ; ex:label "Lead time"@en .\n'
    'ex:order7 ex:line [ ex:product ex:p1 ; ex:quantity "01"^^xsd:integer ] , '
    '[ ex:product ex:p1 ; ex:quantity "01"^^xsd:integer ] .\n',
    'ex:kpi1 ex:value "12.5"^^xsd:decimal ; ex:unit "days" ; ex:label "Lead time"@en ; '
    'ex:at "2026-01-15T09:30:00.000Z"^^xsd:dateTime .\n'
    'ex:order7 ex:line [ ex:product ex:p1 ; ex:quantity "01"^^xsd:integer ] , '
    '[ ex:product ex:p2 ; ex:quantity "3"^^xsd:integer ] .\n',
]


def main(out: Path) -> None:
    import os

    from lucid_hub.hubproc import HubProcess, wait_until

    import lucid_hub

    out = out.resolve()
    # The hubs run `python -m lucid_hub.cli`, which finds lucid_hub in the working directory
    # first: work in the release's own tree, or the hubs would run whatever code is here.
    os.chdir(Path(lucid_hub.__file__).resolve().parent.parent)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    acme = HubProcess("acme", out / "acme").start()
    globex = HubProcess("globex", out / "globex").start()
    try:
        for turtle in VERSIONS:
            acme.publish(ACME_GRAPH, PREFIXES + turtle)
        acme.call("POST", "/sparql", data=f'PREFIX ex: <http://example.org/> INSERT DATA {{ GRAPH <{ACME_GRAPH}> '
                                           f'{{ ex:kpi2 ex:value "0.90"^^<{XSD}decimal> }} }}',
                  headers={"Content-Type": "application/sparql-update"})
        client_id, secret = acme.partner_client("Globex hub", "partner-globex", f"{globex.url}/callback/")
        acme.grant_read("urn:lucid:conditions:globex-kpi", "partner-globex", ACME_GRAPH)
        globex.mirror(f"{acme.url}/hub", ACME_GRAPH, client_id, secret)
        head = acme.call("GET", "/graphs", params={"graph": ACME_GRAPH}).headers["ETag"].strip('"')
        wait_until(lambda: globex.mirrors()[0]["head"] == head, 60, "the mirror to catch up")
        # one more, delivered to the mirror by WebSub
        acme.publish(ACME_GRAPH, PREFIXES + VERSIONS[1] + 'ex:kpi3 ex:value "+7"^^xsd:integer .\n')
        head = acme.call("GET", "/graphs", params={"graph": ACME_GRAPH}).headers["ETag"].strip('"')
        wait_until(lambda: globex.mirrors()[0]["head"] == head, 60, "the delivery")
        globex.publish(GLOBEX_GRAPH, PREFIXES + 'ex:o1 ex:status "open" ; ex:total "100.00"^^xsd:decimal .\n')
        wait_until(lambda: acme.subscriptions()[0]["lag"] == 0, 60, "the delivery to be recorded")
        expected = {
            "release": lucid_hub.__file__,
            "acme": {"url": acme.url, "graphs": {ACME_GRAPH: acme.content(ACME_GRAPH)},
                     "patches": _patches(acme, ACME_GRAPH)},
            "globex": {"url": globex.url, "graphs": {ACME_GRAPH: globex.content(ACME_GRAPH),
                                                      GLOBEX_GRAPH: globex.content(GLOBEX_GRAPH)},
                       "patches": _patches(globex, GLOBEX_GRAPH)},
        }
    finally:
        globex.stop()
        acme.stop()
    for name in ("acme", "globex"):
        for junk in (out / name).glob("store*/LOG*"):
            junk.unlink()
        for junk in ("serve.log",):
            (out / name / junk).unlink(missing_ok=True)
        shutil.rmtree(out / name / "snapshots", ignore_errors=True)
    (out / "expected.json").write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")


def _patches(hub: object, graph: str) -> list[dict[str, str]]:
    """Each archived patch's id and the SHA-256 of its bytes, in chain order."""
    out: list[dict[str, str]] = []
    page = hub.call("GET", "/patches", params={"graph": graph},  # type: ignore[attr-defined]
                    headers={"Accept": "application/json"}).json()
    while True:
        out += [{"id": p["id"], "sha256": hashlib.sha256(p["body"].encode()).hexdigest()} for p in page["patches"]]
        if not page["next"]:
            return out
        page = hub.http.get(page["next"], headers={"Accept": "application/json"}, timeout=60).json()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main(Path(sys.argv[1]))
