"""The default graph (LUCID_DEFAULT_GRAPH): SPARQL's default graph stands for one graph per
party (or per hub) in updates, queries and subscriptions, so that a SEPA producer that
writes the default graph works unchanged; without the setting the hub keeps having none."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websocket

from lucid_hub.config import Settings
from lucid_hub.errors import ConfigError
from tests.conftest import RunningHub, running_hub

BASE = "https://hub.test/graphs/"
CONDITIONS = """@prefix eccauth: <https://vocab.eccenca.com/auth/> .
<urn:test:apps> a eccauth:AccessCondition ;
    eccauth:requiresGroup "urn:test:apps" ;
    eccauth:grantReadGraphPattern "https://hub.test/graphs/*" ;
    eccauth:grantWriteGraphPattern "https://hub.test/graphs/*" .
"""
UPDATE = {"Content-Type": "application/sparql-update"}


@pytest.fixture
def default_hub(tmp_path: Path, db_url: str) -> Iterator[RunningHub]:
    with running_hub(tmp_path / "data", db_url, {"LUCID_DEFAULT_GRAPH": BASE + "{account}/default"}) as hub:
        answer = hub.http.post(f"{hub.url}/admin/conditions", data=CONDITIONS, headers={"Content-Type": "text/turtle"})
        assert answer.status_code in (200, 201), answer.text
        yield hub


def app(hub: RunningHub, name: str) -> Any:
    return hub.session(hub.token(name, ("urn:test:apps",), ("graphs:read", "graphs:write", "hub:subscribe")))


def select(http: Any, hub: RunningHub, text: str) -> list[dict[str, str]]:
    answer = http.post(f"{hub.url}/sparql", data=text.encode(), headers={"Content-Type": "application/sparql-query",
                                                                         "Accept": "application/sparql-results+json"})
    assert answer.status_code == 200, answer.text
    return [{k: v["value"] for k, v in row.items()} for row in answer.json()["results"]["bindings"]]


def test_each_partys_default_graph_takes_updates_and_answers_queries(default_hub: RunningHub) -> None:
    hub = default_hub
    alice, bob = app(hub, "alice"), app(hub, "bob")
    # SEPA's producers write the default graph: INSERT DATA without GRAPH
    made = alice.post(f"{hub.url}/sparql", data=b'INSERT DATA { <urn:x:s> <urn:x:p> "a1" }', headers=UPDATE)
    assert made.status_code == 200, made.text
    [patch] = made.json()["patches"]
    assert patch["graph"].startswith(BASE) and patch["graph"].endswith("/default")
    alice_graph = patch["graph"]
    assert bob.post(f"{hub.url}/sparql", data=b'INSERT DATA { <urn:x:s> <urn:x:p> "b1" }',
                    headers=UPDATE).status_code == 200
    # DELETE/INSERT WHERE without WITH works on the default graph, as WITH <it>
    moved = alice.post(f"{hub.url}/sparql", headers=UPDATE, data=(
        b'DELETE { ?s <urn:x:p> ?o } INSERT { ?s <urn:x:p> "a2" } WHERE { ?s <urn:x:p> ?o }'))
    assert moved.status_code == 200, moved.text
    # queries without a dataset read the party's default graph: each party its own
    assert select(alice, hub, "SELECT ?o WHERE { ?s <urn:x:p> ?o }") == [{"o": "a2"}]
    assert select(bob, hub, "SELECT ?o WHERE { ?s <urn:x:p> ?o }") == [{"o": "b1"}]
    # the other graphs stay named graphs of the dataset, and FROM still chooses
    assert {r["o"] for r in select(alice, hub, "SELECT ?o WHERE { GRAPH ?g { ?s <urn:x:p> ?o } }")} == {"a2", "b1"}
    assert select(alice, hub, f"SELECT ?o FROM <{alice_graph}> WHERE {{ ?s <urn:x:p> ?o }}") == [{"o": "a2"}]
    # CLEAR DEFAULT clears it (and only it)
    assert alice.post(f"{hub.url}/sparql", data=b"CLEAR DEFAULT", headers=UPDATE).status_code == 200
    assert select(alice, hub, "SELECT ?o WHERE { ?s <urn:x:p> ?o }") == []
    assert select(bob, hub, "SELECT ?o WHERE { ?s <urn:x:p> ?o }") == [{"o": "b1"}]


def test_a_subscription_without_a_dataset_follows_the_default_graph(default_hub: RunningHub) -> None:
    hub = default_hub
    token = hub.token("carol", ("urn:test:apps",), ("graphs:read", "graphs:write", "hub:subscribe"))
    carol = hub.session(token)
    ws = websocket.create_connection(hub.url.replace("http://", "ws://") + "/subscribe", timeout=30)
    try:
        ws.send(json.dumps({"subscribe": {"sparql": "SELECT ?o WHERE { ?s <urn:x:p> ?o }", "alias": "mine",
                                          "authorization": f"Bearer {token}"}}))
        first = json.loads(ws.recv())
        assert "notification" in first, first
        assert first["notification"]["sequence"] == 0 and first["notification"]["addedResults"]["results"][
            "bindings"] == []
        assert carol.post(f"{hub.url}/sparql", data=b'INSERT DATA { <urn:x:s> <urn:x:p> "c1" }',
                          headers=UPDATE).status_code == 200
        added = json.loads(ws.recv())["notification"]["addedResults"]["results"]["bindings"]
        assert [b["o"]["value"] for b in added] == ["c1"]
    finally:
        ws.close()


def test_without_the_setting_the_default_graph_is_refused_as_before(hub: RunningHub) -> None:
    refused = hub.http.post(f"{hub.url}/sparql", data=b'INSERT DATA { <urn:x:s> <urn:x:p> "1" }', headers=UPDATE)
    assert refused.status_code == 400 and "no default graph" in refused.text


def test_a_default_graph_the_party_may_not_write_is_403_and_writes_nothing(default_hub: RunningHub) -> None:
    hub = default_hub
    reader = hub.session(hub.token("reader", (), ("graphs:read", "graphs:write")))
    refused = reader.post(f"{hub.url}/sparql", data=b'INSERT DATA { <urn:x:s> <urn:x:p> "r" }', headers=UPDATE)
    assert refused.status_code == 403, refused.text
    assert not any(g.iri.startswith(BASE) for g in hub.runtime.archive.graphs())


@pytest.mark.parametrize("value", ["not an iri", "urn:lucid-hub:system", "https://x/{account} y"])
def test_a_bad_default_graph_setting_stops_the_start(value: str) -> None:
    with pytest.raises(ConfigError, match="LUCID_DEFAULT_GRAPH"):
        Settings.from_env({"LUCID_DEFAULT_GRAPH": value})
