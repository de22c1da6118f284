"""Access conditions on any attribute, as LUCID describes them: sub-properties of
eccauth:requiresAttribute (declared in the policy, naming the token claim they test) and
eccauth:requiresAttribute "claim=value" itself, matched against a client's attributes (in the
hub's tokens) and an external issuer's claims; attributes nobody can give itself; decided at
every request and at every notification of a stored subscription."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from lucid_hub.errors import InputError, PolicyError
from lucid_hub.policy.model import parse_turtle
from tests.auth.test_oauth import (
    Issuer,
    issuer,  # noqa: F401 (a fixture)
)
from tests.conftest import RunningHub, running_hub

KPI, DE = "https://data.example.com/kpi", "https://data.example.com/de"
CONDITIONS = """@prefix eccauth: <https://vocab.eccenca.com/auth/> .
@prefix ex: <http://example.org/vocab#> .
@prefix lh: <https://w3id.org/lucid-hub#> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .

ex:requiresTier rdfs:subPropertyOf eccauth:requiresAttribute ; rdfs:label "partner tier" .
ex:partnerCountry rdfs:subPropertyOf eccauth:requiresAttribute ; lh:claim "country" .

<urn:test:gold> a eccauth:AccessCondition ; ex:requiresTier "gold" ; eccauth:readGraph <https://data.example.com/kpi> .
<urn:test:german-silver> a eccauth:AccessCondition ; ex:partnerCountry "DE" ;
    eccauth:requiresAttribute "tier=silver" ; eccauth:readGraph <https://data.example.com/de> .
"""
NT = {"Content-Type": "application/n-triples"}


@pytest.fixture
def tiered_hub(tmp_path: Path, db_url: str, issuer: Issuer) -> Iterator[RunningHub]:  # noqa: F811
    trusted = json.dumps([{"issuer": issuer.url, "jwks_uri": issuer.jwks_uri, "audience": "lucid-hub",
                           "groups_claim": "realm_access.roles", "attribute_claims": ["tier", "country"],
                           "jwks_refresh_seconds": 0}])
    with running_hub(tmp_path / "data", db_url, {"LUCID_TRUSTED_ISSUERS": trusted}) as hub:
        for graph in (KPI, DE):
            assert hub.http.put(f"{hub.url}/graphs", params={"graph": graph}, data=b'<http://ex/a> <http://ex/b> "1" .\n',
                                headers=NT).status_code == 201
        added = hub.http.post(f"{hub.url}/admin/conditions", data=CONDITIONS, headers={"Content-Type": "text/turtle"})
        assert added.status_code in (200, 201), added.text
        yield hub


def reader(hub: RunningHub, *attributes: str) -> Any:
    record, _secret = hub.runtime.clients.create(f"partner {' '.join(attributes)}", attributes=list(attributes),
                                                 scopes=["graphs:read", "hub:subscribe"])
    return hub.session(str(hub.runtime.tokens.issue(record, "graphs:read hub:subscribe")))


def status(http: Any, hub: RunningHub, graph: str) -> int:
    return int(http.get(f"{hub.url}/graphs", params={"graph": graph}, timeout=30).status_code)


def test_declared_attribute_properties_are_read_as_claims() -> None:
    [german, gold] = sorted(parse_turtle(CONDITIONS, "test"), key=lambda c: c.iri)
    assert gold.requiresAttribute == ("tier=gold",)
    assert german.requiresAttribute == ("country=DE", "tier=silver")
    # undeclared, a bad claim name, an attribute property with a stray property: refused with the reason
    with pytest.raises(PolicyError, match="unknown property"):
        parse_turtle(CONDITIONS.replace("ex:requiresTier rdfs:subPropertyOf", "ex:other rdfs:subPropertyOf"), "t")
    with pytest.raises(PolicyError, match="claim=value"):
        parse_turtle(CONDITIONS.replace('"tier=silver"', '"silver"'), "t")
    with pytest.raises(PolicyError, match="takes rdfs:subPropertyOf"):
        parse_turtle(CONDITIONS.replace('rdfs:label "partner tier"', 'eccauth:readGraph <http://x/g>'), "t")


def test_a_clients_attributes_decide_what_it_reads(tiered_hub: RunningHub) -> None:
    hub = tiered_hub
    gold, silver_de, silver_fr, plain = (reader(hub, "tier=gold"), reader(hub, "tier=silver", "country=DE"),
                                         reader(hub, "tier=silver", "country=FR"), reader(hub))
    assert (status(gold, hub, KPI), status(gold, hub, DE)) == (200, 403)
    assert (status(silver_de, hub, KPI), status(silver_de, hub, DE)) == (403, 200)
    assert status(silver_fr, hub, DE) == 403  # every requirement must hold
    assert status(plain, hub, KPI) == 403
    listed = hub.http.get(f"{hub.url}/admin/conditions", timeout=30).json()
    assert {c["iri"]: c["requiresAttribute"] for c in listed["conditions"]}["urn:test:gold"] == ["tier=gold"]
    # nobody gives itself an attribute as a group, and reserved claims are not attributes
    with pytest.raises(InputError, match="hub's to give"):
        hub.runtime.clients.create("forger", groups=["urn:lucid-hub:attribute:tier=gold"])
    with pytest.raises(InputError, match="sets itself"):
        hub.runtime.clients.create("forger", attributes=["sub=someone"])
    with pytest.raises(InputError, match="claim=value"):
        hub.runtime.clients.create("forger", attributes=["gold"])


def test_an_external_issuers_claims_are_attributes_when_the_operator_says_so(tiered_hub: RunningHub,
                                                                              issuer: Issuer) -> None:  # noqa: F811
    hub = tiered_hub

    def get(token: str, graph: str) -> int:
        return requests.get(f"{hub.url}/graphs", params={"graph": graph}, timeout=30,
                            headers={"Authorization": f"Bearer {token}"}).status_code

    assert get(issuer.token(tier="gold"), KPI) == 200
    assert get(issuer.token(tier="silver", country="DE"), DE) == 200
    assert get(issuer.token(tier=["bronze", "gold"]), KPI) == 200  # a list: each value holds
    assert get(issuer.token(tier="silver"), KPI) == 403
    # a group that looks like an attribute is dropped: only the claims the operator named count
    forged = issuer.token(realm_access={"roles": ["urn:lucid-hub:attribute:tier=gold"]})
    assert get(forged, KPI) == 403
    assert get(issuer.token(level="gold"), KPI) == 403  # a claim not named in attribute_claims


def test_a_stored_subscription_keeps_its_attributes_at_every_notification(tiered_hub: RunningHub) -> None:
    hub = tiered_hub
    gold = reader(hub, "tier=gold")
    made = gold.post(f"{hub.url}/subscriptions", json={
        "sparql": f"SELECT ?o WHERE {{ GRAPH <{KPI}> {{ <http://ex/a> <http://ex/b> ?o }} }}"}, timeout=30)
    assert made.status_code == 201, made.text
    spuid = made.json()["notification"]["spuid"]
    assert hub.http.post(f"{hub.url}/sparql", headers={"Content-Type": "application/sparql-update"}, data=(
        f'INSERT DATA {{ GRAPH <{KPI}> {{ <http://ex/a> <http://ex/b> "2" }} }}').encode()).status_code == 200
    hub.runtime.queries.evaluation.drain()
    found = gold.get(f"{hub.url}/subscriptions/{spuid}/notifications", params={"after": 0}, timeout=30).json()
    assert found["state"] == "active" and [n["notification"]["sequence"] for n in found["notifications"]] == [1]
