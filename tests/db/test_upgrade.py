"""Data outlives versions: two hubs of the previous release (ACME publishing, Globex mirroring,
tests/upgrade/release-*, made by tests/upgrade/make_fixture.py with that release's code) are
upgraded in place with this one: `lucid-hub db upgrade`, then serve. Their graphs are kept
exactly, their archives keep every patch's bytes and id and verify patch by patch, the
mirror keeps following, and queries work on the migrated data."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pyoxigraph as ox
import requests

from lucid_hub.demo.processes import HubProcess, wait_until
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.signing import TrustedKeys, verify_patch_bytes
from tests.conftest import whole_canonical

RELEASE = Path(__file__).resolve().parents[1] / "upgrade" / "release-7af9ae9"
ACME_GRAPH = "https://acme.example/graphs/kpi"


def canonical(text: str) -> str:
    return whole_canonical([str(q) for q in ox.parse(text.encode(), format=ox.RdfFormat.N_TRIPLES)])


def archive(hub: HubProcess, graph: str) -> list[dict[str, Any]]:
    page = hub.call("GET", "/patches", params={"graph": graph}, headers={"Accept": "application/json"}).json()
    patches = list(page["patches"])
    while page["next"]:
        page = hub.http.get(page["next"], headers={"Accept": "application/json"}, timeout=60).json()
        patches += page["patches"]
    return patches


def test_a_previous_release_upgrades_in_place_and_its_mirror_keeps_following(
        tmp_path: Path, run_cli, canonicalizer: Canonicalizer) -> None:  # type: ignore[no-untyped-def]
    import hashlib

    expected = json.loads((RELEASE / "expected.json").read_text())
    data = tmp_path / "release"
    shutil.copytree(RELEASE, data)
    for name in ("acme", "globex"):  # as an operator upgrades: the schema first
        upgraded = run_cli("db", "upgrade", env={"LUCID_DATA_DIR": str(data / name)})
        assert upgraded.code == 0, upgraded.err
    acme, globex = HubProcess("acme", data / "acme"), HubProcess("globex", data / "globex")
    # The two hubs run at other loopback ports than when the release made them: the addresses
    # each recorded of the other follow (test plumbing, not part of the upgrade).
    old_acme, old_globex = expected["acme"]["url"], expected["globex"]["url"]
    with sqlite3.connect(data / "globex" / "lucid-hub.db") as db:
        db.execute("UPDATE mirrors SET hub_url = replace(hub_url, ?, ?), publisher_url = replace(publisher_url, ?, ?)",
                   (old_acme, acme.url, old_acme, acme.url))
    with sqlite3.connect(data / "acme" / "lucid-hub.db") as db:
        db.execute("UPDATE subscriptions SET callback = replace(callback, ?, ?)", (old_globex, globex.url))
        db.execute("UPDATE oauth_clients SET callback_prefixes = replace(callback_prefixes, ?, ?)",
                   (old_globex, globex.url))
    with acme, globex:
        # the graphs, exactly as the release held them (the stores were rebuilt from the archives)
        for graph, text in expected["acme"]["graphs"].items():
            assert canonical(acme.content(graph)) == canonical(text)
        for graph, text in expected["globex"]["graphs"].items():
            assert canonical(globex.content(graph)) == canonical(text)
        # every patch keeps its bytes and id, and verifies with the publisher's keys, chained
        trusted = TrustedKeys(requests.get(f"{acme.url}/.well-known/jwks.json", timeout=30).json())
        patches = archive(acme, ACME_GRAPH)
        assert [{"id": p["id"], "sha256": hashlib.sha256(p["body"].encode()).hexdigest()} for p in patches] == \
            expected["acme"]["patches"]
        previous = None
        for p in patches:
            patch = verify_patch_bytes(p["body"].encode(), trusted, canonicalizer)
            assert patch.id == p["id"] and patch.prev == previous
            previous = patch.id
        assert [p["id"] for p in archive(globex, ACME_GRAPH)] == [p["id"] for p in patches]  # the mirror's copy
        # the mirror keeps following: a patch of the new release reaches it and applies
        new = acme.publish(ACME_GRAPH, "@prefix ex: <http://example.org/> .\n"
                                       'ex:kpi1 ex:value "13.00"^^<http://www.w3.org/2001/XMLSchema#decimal> .\n')
        wait_until(lambda: globex.mirrors()[0]["head"] == new, 60, "the mirror to apply the new patch")
        assert canonical(globex.content(ACME_GRAPH)) == canonical(acme.content(ACME_GRAPH))
        assert verify_patch_bytes(archive(globex, ACME_GRAPH)[-1]["body"].encode(), trusted, canonicalizer).prev == \
            previous
        # queries on migrated data compare values
        answer = globex.call("GET", "/sparql", params={
            "query": "SELECT ?v WHERE { ?s <http://example.org/total> ?v FILTER(?v >= 100) }"}).json()
        assert [b["v"]["value"] for b in answer["results"]["bindings"]] == ["100"]
