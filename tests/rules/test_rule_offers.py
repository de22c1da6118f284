"""Rules across hubs (RDFTL's rules placed at the peers where their events happen): a hub
offers a rule to a partner as a signed LDN Offer, the partner's admin accepts or rejects it,
the accepted rule runs at the partner and its action reaches the offering hub as the
partner's signed patch (a graph the offering hub mirrors); termination is analysed across
both hubs' rules, a cycle through two companies refused with both rules named; a withdrawn
offer stops the rule. Hostile offers (forged, replayed, from a stranger, oversized) change
nothing. Two real hubs on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from lucid_hub.signing import TrustedKeys, sign_text, verify_patch_bytes
from tests.conftest import RunningHub, running_hub
from tests.rules.test_rules import DEV, EX, TEXT, add_rules, firings, mirror_graph, put, statements, until

ORDERS = "https://globex.example/graphs/orders"  # globex's: where the offered rule's events happen
FOR_ACME = "https://globex.example/graphs/for-acme"  # globex's, mirrored by acme: what the rule writes
PLAN = "https://acme.example/graphs/plan"  # acme's
SHIPPED = f"""PREFIX ex: <{EX}>
RULE <https://acme.example/rules/tell-acme-what-shipped>
ON INSERT {{ GRAPH <{ORDERS}> {{ ?o ex:status ex:Shipped }} }}
DO INSERT {{ GRAPH <{FOR_ACME}> {{ ?o ex:shippedFor <https://acme.example/> }} }} WHERE {{}}
"""
# acme's own rule: what globex tells of becomes acme's plan ...
PLANS = f"""PREFIX ex: <{EX}>
RULE <https://acme.example/rules/plan-from-shipments>
ON INSERT {{ GRAPH <{FOR_ACME}> {{ ?o ex:shippedFor ?who }} }}
DO INSERT {{ GRAPH <{PLAN}> {{ ?o ex:planned true }} }} WHERE {{}}
"""
# ... and an offer whose rule reacts to acme's plan (which globex would mirror) by writing for-acme:
# with PLANS, a cycle through both companies.
ECHO = f"""PREFIX ex: <{EX}>
RULE <https://acme.example/rules/echo-plan>
ON INSERT {{ GRAPH <{PLAN}> {{ ?o ex:planned ?x }} }}
DO INSERT {{ GRAPH <{FOR_ACME}> {{ ?o ex:shippedFor <https://acme.example/> }} }} WHERE {{}}
"""


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[RunningHub, RunningHub, dict[str, str]]]:
    """acme (offers rules) and globex (runs them); acme's client at globex, allowed to read
    globex's orders and to write (and read) the graph it keeps for acme, which acme mirrors."""
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", DEV) as acme, \
            running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}", DEV) as globex:
        put(globex, ORDERS, f"<{EX}o1> <{EX}status> <{EX}Open> .\n")
        put(globex, FOR_ACME, f"<{EX}globex> <{EX}keeps> <{EX}for-acme> .\n")
        record, secret = globex.runtime.clients.create(
            "acme's hub", groups=["partner-acme"], scopes=["graphs:read", "graphs:write", "hub:subscribe"],
            callback_prefixes=[f"{acme.url}/callback/"])
        condition = {"iri": "urn:c:acme-rules", "requiresGroup": ["partner-acme"], "readGraph": [ORDERS, FOR_ACME],
                     "writeGraph": [FOR_ACME]}
        assert globex.http.post(f"{globex.url}/admin/conditions", json=condition, timeout=30).status_code == 201
        yield acme, globex, {"client_id": record.client_id, "client_secret": secret}


def offer(acme: RunningHub, globex: RunningHub, client: dict[str, str], text: str, status: int = 201) -> dict[str, Any]:
    answer = acme.http.post(f"{acme.url}/admin/rules/offers/outgoing", timeout=60,
                            json={"hub": globex.url, "rules": text, **client})
    assert answer.status_code == status, answer.text
    return dict(answer.json())


def offers(hub: RunningHub) -> list[dict[str, Any]]:
    answer = hub.http.get(f"{hub.url}/admin/rules/offers", timeout=60)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["offers"])


def test_an_offered_rule_runs_at_the_partner_and_its_patches_reach_the_offering_hub(pair) -> None:  # type: ignore[no-untyped-def]
    acme, globex, client = pair
    mirror_graph(globex, acme, FOR_ACME, "acme-mirror")
    made = offer(acme, globex, client, SHIPPED)
    assert made["direction"] == "out" and made["state"] == "pending" and made["location"].startswith(globex.url)
    # globex sees it pending, from acme's party; nothing runs yet
    (received,) = offers(globex)
    assert (received["direction"], received["state"], received["peer"]) == ("in", "pending", acme.url)
    assert received["rules"] == ["https://acme.example/rules/tell-acme-what-shipped"]
    assert globex.http.get(f"{globex.url}/rules", timeout=30).json()["rules"] == []
    assert "ldp#inbox" in globex.http.get(f"{globex.url}/rules", timeout=30).headers["Link"]  # (discovery)
    # the admin accepts: the rule is globex's now, owned by acme's party
    accepted = globex.http.post(f"{globex.url}/admin/rules/offers/accept", params={"id": received["id"]}, timeout=60)
    assert accepted.status_code == 200 and accepted.json()["state"] == "accepted", accepted.text
    (rule,) = globex.http.get(f"{globex.url}/rules", timeout=30).json()["rules"]
    assert rule["owner"]["endpoint_id"] == client["client_id"] and not rule["owner"]["admin"]
    assert rule["owner"]["groups"] == ["partner-acme"]
    # acme learns it was accepted, with the summaries of globex's rules over graphs it may read
    (ours,) = offers(acme)
    assert ours["state"] == "accepted" and "https://acme.example/rules/tell-acme-what-shipped" in ours["peerRules"]
    # the event happens at globex; the action's patch, signed by globex, reaches acme's mirror
    trigger = put(globex, ORDERS, f"<{EX}o1> <{EX}status> <{EX}Shipped> .\n")
    shipped = f"<{EX}o1> <{EX}shippedFor> <https://acme.example/>"
    until(lambda: shipped in statements(acme, FOR_ACME))
    head = acme.runtime.archive.head(FOR_ACME)
    body = acme.runtime.archive.patch(head).body
    patch = verify_patch_bytes(body, TrustedKeys(globex.runtime.keys.jwks()), acme.runtime.canonicalizer)
    assert patch.author == "rule <https://acme.example/rules/tell-acme-what-shipped>"
    assert trigger in patch.message
    # acme withdraws the offer: globex's rule is gone, and a new shipment fires nothing
    withdrawn = acme.http.post(f"{acme.url}/admin/rules/offers/withdraw", params={"id": ours["id"]}, timeout=60)
    assert withdrawn.status_code == 200 and withdrawn.json()["state"] == "withdrawn", withdrawn.text
    assert globex.http.get(f"{globex.url}/rules", timeout=30).json()["rules"] == []
    assert offers(globex)[0]["state"] == "withdrawn"
    before = globex.runtime.archive.head(FOR_ACME)
    put(globex, ORDERS, f"<{EX}o2> <{EX}status> <{EX}Shipped> .\n")
    assert globex.runtime.archive.head(FOR_ACME) == before
    assert [f["trigger"] for f in firings(globex)] == [trigger]


def test_a_rejected_offer_never_runs_and_the_offering_hub_learns_why(pair) -> None:  # type: ignore[no-untyped-def]
    acme, globex, client = pair
    offer(acme, globex, client, SHIPPED)
    (received,) = offers(globex)
    rejected = globex.http.post(f"{globex.url}/admin/rules/offers/reject", params={"id": received["id"]},
                                json={"reason": "we tell partners by webhook"}, timeout=60)
    assert rejected.status_code == 200 and rejected.json()["state"] == "rejected"
    again = globex.http.post(f"{globex.url}/admin/rules/offers/accept", params={"id": received["id"]}, timeout=60)
    assert again.status_code == 409 and "rejected" in again.text
    (ours,) = offers(acme)
    assert ours["state"] == "rejected" and ours["reason"] == "we tell partners by webhook"
    assert globex.http.get(f"{globex.url}/rules", timeout=30).json()["rules"] == []
    withdraw = acme.http.post(f"{acme.url}/admin/rules/offers/withdraw", params={"id": ours["id"]}, timeout=60)
    assert withdraw.status_code == 409


def test_a_cycle_through_two_companies_is_refused_with_both_rules_named(pair) -> None:  # type: ignore[no-untyped-def]
    acme, globex, client = pair
    # acme runs PLANS; offering ECHO (to run at globex) would close a cycle: acme refuses to offer it
    add_rules(acme, PLANS)
    answer = acme.http.post(f"{acme.url}/admin/rules/offers/outgoing", timeout=60,
                            json={"hub": globex.url, "rules": ECHO, **client})
    text = answer.text
    assert answer.status_code == 400 and "can fire forever" in text and "<https://acme.example/rules/plan-from-shipments>" in text
    assert f"<https://acme.example/rules/echo-plan> runs at {globex.url}" in text
    assert offers(globex) == []  # nothing was sent

    # the other order: the offer first (acme's PLANS removed), accepted at globex (where acme's
    # party may read the plan: a mirror of acme's there, say) ...
    condition = {"iri": "urn:c:acme-plan", "requiresGroup": ["partner-acme"], "readGraph": [PLAN]}
    assert globex.http.post(f"{globex.url}/admin/conditions", json=condition, timeout=30).status_code == 201
    assert acme.http.delete(f"{acme.url}/rules", params={"iri": "https://acme.example/rules/plan-from-shipments"},
                            timeout=30).status_code == 204
    offer(acme, globex, client, ECHO)
    (received,) = offers(globex)
    assert globex.http.post(f"{globex.url}/admin/rules/offers/accept", params={"id": received["id"]},
                            timeout=60).status_code == 200
    offers(acme)  # (acme asks how it stands)
    # ... then acme's own PLANS is refused at acme: its rules and the ones it runs at globex cycle
    cycle = acme.http.post(f"{acme.url}/rules", data=PLANS.encode(), headers=TEXT, timeout=30)
    assert cycle.status_code == 400 and "can fire forever" in cycle.text
    assert "<https://acme.example/rules/plan-from-shipments>" in cycle.text
    assert f"<https://acme.example/rules/echo-plan> runs at {globex.url}" in cycle.text


def test_an_offers_status_tells_the_offering_party_nothing_it_could_not_read(pair) -> None:  # type: ignore[no-untyped-def]
    """The reproduction: the offer's status listed, for acme, globex's own rule over a graph
    acme may read with its IRI, the graph it writes that acme may not read, and the constant
    of its action. Now acme's hub is told that rule under a name that means nothing, with what
    it may not read as unknown terms, so its termination analysis still counts it."""
    acme, globex, client = pair
    prices = "https://globex.example/graphs/prices"
    add_rules(globex, f"""PREFIX ex: <{EX}>
RULE <https://globex.example/rules/price-note>
ON INSERT {{ GRAPH <{ORDERS}> {{ ?o ex:status ex:Shipped }} }}
DO INSERT {{ GRAPH <{prices}> {{ ?o ex:note "EUR 12.50 negotiated with Initech" }} }} WHERE {{}}
""")
    made = offer(acme, globex, client, SHIPPED)
    told = {json.dumps(offers(acme)), json.dumps(made)}
    form = {"grant_type": "client_credentials", **client}
    bearer = requests.post(f"{globex.url}/oauth/token", data=form, timeout=30).json()["access_token"]
    status = requests.get(made["location"], headers={"Authorization": f"Bearer {bearer}"}, timeout=30)  # as acme asks
    assert status.status_code == 200, status.text
    told.add(status.text)
    for text in told:
        assert "price-note" not in text and prices not in text and "Initech" not in text, text
    summaries = status.json()["summaries"]
    shown = [item for item in summaries if item["iri"].startswith("urn:lucid:rule:")]
    assert len(shown) == 1 and shown[0]["on"][0][0] == f"<{ORDERS}>"  # (a graph acme may read, as it is)
    assert shown[0]["inserts"][0][0].startswith("?")  # the graph it may not read: an unknown term


def test_the_partner_refuses_an_offer_that_cycles_with_its_own_rules(pair) -> None:  # type: ignore[no-untyped-def]
    """A cycle only globex can see (its own rule, acme's rule from the offer's summaries and
    the offered rule): refused at globex when its admin accepts, the offer left pending."""
    acme, globex, client = pair
    relay = "https://globex.example/graphs/relay"
    put(globex, relay, f"<{EX}r> <{EX}is> <{EX}relay> .\n")
    add_rules(acme, PLANS)  # acme: for-acme -> plan (told to globex in the offer's summaries)
    add_rules(globex, f"""PREFIX ex: <{EX}>
RULE <https://globex.example/rules/relay>
ON INSERT {{ GRAPH <{relay}> {{ ?o ex:relayed ?x }} }}
DO INSERT {{ GRAPH <{FOR_ACME}> {{ ?o ex:shippedFor ?x }} }} WHERE {{}}
""")  # globex: relay -> for-acme
    offered = f"""PREFIX ex: <{EX}>
RULE <https://acme.example/rules/plan-to-relay>
ON INSERT {{ GRAPH <{PLAN}> {{ ?o ex:planned ?x }} }}
DO INSERT {{ GRAPH <https://globex.example/graphs/relay> {{ ?o ex:relayed ?x }} }} WHERE {{}}
"""  # plan -> relay: acme alone sees no cycle (it does not know globex's relay rule)
    condition = {"iri": "urn:c:acme-relay", "requiresGroup": ["partner-acme"], "readGraph": [relay, PLAN],
                 "writeGraph": [relay]}
    assert globex.http.post(f"{globex.url}/admin/conditions", json=condition, timeout=30).status_code == 201
    offer(acme, globex, client, offered)
    (received,) = offers(globex)
    refused = globex.http.post(f"{globex.url}/admin/rules/offers/accept", params={"id": received["id"]}, timeout=60)
    assert refused.status_code == 400 and "can fire forever" in refused.text, refused.text
    for rule in ("https://globex.example/rules/relay", "https://acme.example/rules/plan-to-relay",
                 "https://acme.example/rules/plan-from-shipments"):
        assert f"<{rule}>" in refused.text
    assert f"<https://acme.example/rules/plan-from-shipments> runs at {acme.url}" in refused.text
    assert offers(globex)[0]["state"] == "pending"
    assert [r["iri"] for r in globex.http.get(f"{globex.url}/rules", timeout=30).json()["rules"]] == [
        "https://globex.example/rules/relay"]


def test_hostile_offers_are_refused_and_change_nothing(pair, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    acme, globex, client = pair
    token = requests.post(f"{globex.url}/oauth/token", auth=(client["client_id"], client["client_secret"]),
                          data={"grant_type": "client_credentials", "scope": "graphs:read graphs:write"},
                          timeout=30).json()["access_token"]
    key = acme.runtime.publisher.commits.key

    def activity(**changes: Any) -> dict[str, Any]:
        base = {"@context": ["https://www.w3.org/ns/activitystreams"], "id": "urn:uuid:7b0c3c1e-5a0f-4a43-9d3e-1f2a3b4c5d6e",
                "type": "Offer", "actor": acme.url, "target": globex.url,
                "object": {"type": "lh:RuleSet", "lh:ruleText": SHIPPED}, "lh:summaries": []}
        return {**base, **changes}

    def send(body: bytes, signature: str | None = None, bearer: str | None = token,
             content_type: str = "application/ld+json") -> requests.Response:
        headers = {"Content-Type": content_type, **({"Authorization": f"Bearer {bearer}"} if bearer else {}),
                   **({"X-Lucid-Signature": signature} if signature else {})}
        return requests.post(f"{globex.url}/rules/offers", data=body, headers=headers, timeout=30)

    good = json.dumps(activity()).encode()
    assert send(good, sign_text(good, key), bearer=None).status_code == 401  # no token
    unsigned = send(good)
    assert unsigned.status_code == 403 and "X-Lucid-Signature" in unsigned.text
    forged = send(good.replace(b"Shipped", b"Cancelled"), sign_text(good, key))  # signed bytes changed
    assert forged.status_code == 403
    stranger = json.dumps(activity(actor="https://evil.example")).encode()
    assert send(stranger, sign_text(stranger, key)).status_code == 403  # not the client's hub
    for body, reason in [(b"{not json", "JSON"), (json.dumps(activity(type="Follow")).encode(), "Offer and Undo"),
                         (json.dumps(activity(id="not-a-uuid")).encode(), "urn:uuid"),
                         (json.dumps(activity(object={"type": "lh:RuleSet", "lh:ruleText": "RULE nonsense"})).encode(),
                          "RULE needs an IRI"),
                         (json.dumps(activity(**{"lh:summaries": [{"iri": "x"}]})).encode(), "summary")]:
        answer = send(body, sign_text(body, key))
        assert answer.status_code == 400 and reason in answer.text, (body[:60], answer.text)
    assert send(b"x" * 300_000, None).status_code == 413
    assert send(good, sign_text(good, key), content_type="text/plain").status_code == 415
    assert offers(globex) == []  # nothing recorded by any of them
    first = send(good, sign_text(good, key))
    assert first.status_code == 201, first.text
    replay = send(good, sign_text(good, key))
    assert replay.status_code == 409 and "replay" in replay.text
    assert len(offers(globex)) == 1
    # a flood: past the party's limit of offers waiting for a decision, 429 and nothing kept
    from lucid_hub.rules import offering

    monkeypatch.setattr(offering, "MAX_PENDING", 3)
    for n in range(3):
        more = json.dumps(activity(id=f"urn:uuid:00000000-0000-4000-8000-00000000000{n}")).encode()
        answer = send(more, sign_text(more, key))
        assert answer.status_code == (201 if n < 2 else 429), answer.text
    assert len(offers(globex)) == 3
    # only admins decide; a party may not accept its own offer
    own = requests.post(f"{globex.url}/rules/offers/accept", params={"id": first.json()["id"]},
                        headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert own.status_code == 403
    # an Undo of somebody else's offer (another party of globex) is refused
    other = globex.token("another partner", scopes=("graphs:read", "graphs:write"))
    undo = json.dumps({"@context": ["https://www.w3.org/ns/activitystreams"], "type": "Undo", "actor": acme.url,
                       "object": f"urn:uuid:{first.json()['id']}"}).encode()
    assert send(undo, sign_text(undo, key), bearer=other).status_code == 403
    assert offers(globex)[0]["state"] == "pending"


def test_admins_decide_in_the_console_and_from_the_command_line(pair, run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import re

    from lucid_hub.auth.admins import AdminAccounts
    from tests.conftest import ADMIN_PASSWORD

    acme, globex, client = pair
    rules_file = tmp_path / "shipped.rules"
    rules_file.write_text(SHIPPED)
    acme_token = acme.http.headers["Authorization"].split()[1]
    globex_token = globex.http.headers["Authorization"].split()[1]
    made = run_cli("rules", "offer", rules_file, "--to", globex.url, "--client-id", client["client_id"],
                   "--hub", acme.url, "--token", acme_token, env={"LUCID_OFFER_CLIENT_SECRET": client["client_secret"]})
    assert made.code == 0, made.err
    offer_id = json.loads(made.out)["id"]
    listed = run_cli("rules", "offers", "--hub", globex.url, "--token", globex_token)
    assert listed.code == 0 and json.loads(listed.out)[0]["state"] == "pending"
    # the console: the overview says an offer waits; the offers page accepts it
    AdminAccounts(globex.runtime.db).create("alice", ADMIN_PASSWORD)
    web = requests.Session()
    csrf = re.search(r'name="csrf" value="([^"]+)"', web.get(f"{globex.url}/admin/ui/login", timeout=30).text)
    assert csrf is not None
    assert web.post(f"{globex.url}/admin/ui/login", timeout=30,
                    data={"username": "alice", "password": ADMIN_PASSWORD, "csrf": csrf.group(1)}).status_code == 200
    overview = web.get(f"{globex.url}/admin/ui/overview", timeout=30).text
    assert "Rule offer waiting" in overview and "tell-acme-what-shipped" in overview
    page = web.get(f"{globex.url}/admin/ui/rule-offers", timeout=30)
    assert page.status_code == 200 and f'id="accept-{offer_id}"' in page.text and acme.url in page.text
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token is not None
    done = web.post(f"{globex.url}/admin/ui/rule-offers/accept", data={"id": offer_id, "csrf": token.group(1)},
                    timeout=60)
    assert done.status_code == 200 and f"offer {offer_id}: accepted" in done.text
    assert "Rule offer waiting" not in web.get(f"{globex.url}/admin/ui/overview", timeout=30).text
    forged = requests.post(f"{globex.url}/admin/ui/rule-offers/reject", data={"id": offer_id}, timeout=30,
                           cookies=web.cookies, allow_redirects=False)
    assert forged.status_code == 403  # no CSRF token
    # deciding again from the command line: one line saying why, non-zero
    again = run_cli("rules", "reject", offer_id, "--hub", globex.url, "--token", globex_token)
    assert again.code != 0 and "accepted already" in again.err and len(again.err.strip().splitlines()) == 1
    withdrawn = run_cli("rules", "withdraw", offer_id, "--hub", acme.url, "--token", acme_token)
    assert withdrawn.code == 0 and withdrawn.out.strip() == f"offer urn:uuid:{offer_id}: withdrawn", withdrawn.err
    assert globex.http.get(f"{globex.url}/rules", timeout=30).json()["rules"] == []


def test_a_third_party_ldn_sender_finds_the_inbox_and_offers_and_a_flooder_holds_up_no_other_party(
        pair, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """py-ldnlib (PyPI) discovers the offers inbox from the rules' Link header and delivers a
    signed Offer as written. One party past its limit of waiting offers (429) does not stop
    another party's offer."""
    from ldnlib import Sender

    from lucid_hub.rules import offering

    acme, globex, client = pair
    key = acme.runtime.publisher.commits.key

    def token_of(client_id: str, secret: str) -> str:
        return str(requests.post(f"{globex.url}/oauth/token", auth=(client_id, secret), timeout=30,
                                 data={"grant_type": "client_credentials", "scope": "graphs:read graphs:write"}
                                 ).json()["access_token"])

    def offer_text(n: int) -> str:
        return json.dumps({"@context": ["https://www.w3.org/ns/activitystreams"],
                           "id": f"urn:uuid:00000000-0000-4000-8000-0000000000{n:02d}", "type": "Offer",
                           "actor": acme.url, "object": {"type": "lh:RuleSet", "lh:ruleText": SHIPPED},
                           "lh:summaries": []})

    flooder = token_of(client["client_id"], client["client_secret"])
    sender = Sender(allow_localhost=True)
    inbox = sender.discover(f"{globex.url}/rules", headers={"Authorization": f"Bearer {flooder}"})
    assert inbox == f"{globex.url}/rules/offers"
    monkeypatch.setattr(offering, "MAX_PENDING", 2)
    for n in range(2):
        text = offer_text(n)
        sender.send(inbox, text, headers={"Authorization": f"Bearer {flooder}",
                                          "X-Lucid-Signature": sign_text(text.encode(), key)})
    assert len(offers(globex)) == 2  # both taken as py-ldnlib sent them (it raises on a refusal)
    over = offer_text(2)
    refused = requests.post(inbox, data=over, timeout=30, headers={
        "Authorization": f"Bearer {flooder}", "Content-Type": "application/ld+json",
        "X-Lucid-Signature": sign_text(over.encode(), key)})
    assert refused.status_code == 429
    # another party of acme's (another client, the same hub) is not held up by the first one's flood
    record, secret = globex.runtime.clients.create(
        "acme's planning", groups=["partner-acme"], scopes=["graphs:read", "graphs:write"],
        callback_prefixes=[f"{acme.url}/planning/"])
    other = offer_text(3)
    sender.send(inbox, other, headers={"Authorization": f"Bearer {token_of(record.client_id, secret)}",
                                       "X-Lucid-Signature": sign_text(other.encode(), key)})
    assert len(offers(globex)) == 3
