"""Event-condition-action rules at run time (issue 18): the rules graph and its API, immediate
cascades (priority, depth first, bounds, depth limit and rollback), deferred rules (at least
once, idempotent, retried), access, bad input, and the CLI. Real hubs on loopback ports; the
rules' SPARQL runs in the rules' guard worker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from lucid_hub.policy.model import Condition
from lucid_hub.rules.model import RULES_GRAPH
from lucid_hub.signing import TrustedKeys
from tests.conftest import Callback, RunningHub, running_hub

EX = "http://example.org/"
DELIVERIES = "https://supplier.example/graphs/deliveries"
ORDERS = "https://acme.example/graphs/orders"
ALERTS = "https://acme.example/graphs/alerts"
XSD_DATE = "http://www.w3.org/2001/XMLSchema#date"
TRUE = '"true"^^<http://www.w3.org/2001/XMLSchema#boolean>'
TEXT = {"Content-Type": "text/plain; charset=utf-8"}
NT = {"Content-Type": "application/n-triples"}

AT_RISK = f"""PREFIX ex: <{EX}>
RULE <urn:acme:rules:order-at-risk>
PRIORITY 10
IMMEDIATE
ON INSERT {{ GRAPH <{DELIVERIES}> {{ ?d ex:date ?date }} }}
IF {{ GRAPH <{ORDERS}> {{ ?o ex:delivery ?d ; ex:promised ?p }} FILTER (?date > ?p) }}
DO INSERT {{ GRAPH <{ORDERS}> {{ ?o ex:status ex:AtRisk }} }} WHERE {{}}
"""


@pytest.fixture
def rhub(tmp_path: Path) -> Iterator[RunningHub]:
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", {"LUCID_DEV_MODE": "1"}) as running:
        yield running


def put(hub: RunningHub, graph: str, nt: str, http: Any = None) -> str:
    answer = (http or hub.http).put(f"{hub.url}/graphs", params={"graph": graph}, data=nt.encode(), headers=NT,
                                    timeout=30)
    assert answer.status_code in (200, 201), answer.text
    return str(answer.json()["patch"])


def post(hub: RunningHub, graph: str, nt: str) -> str:
    answer = hub.http.post(f"{hub.url}/graphs", params={"graph": graph}, data=nt.encode(), headers=NT, timeout=30)
    assert answer.status_code in (200, 201), answer.text
    return str(answer.json()["patch"])


def add_rules(hub: RunningHub, text: str, http: Any = None, status: int = 201) -> dict[str, Any]:
    answer = (http or hub.http).post(f"{hub.url}/rules", data=text.encode(), headers=TEXT, timeout=30)
    assert answer.status_code == status, answer.text
    return dict(answer.json())


def statements(hub: RunningHub, graph: str) -> set[str]:
    if hub.runtime.archive.current_head(graph) is None:
        return set()
    return set(hub.runtime.publisher.content(graph)[1])


def firings(hub: RunningHub, rule: str | None = None) -> list[dict[str, Any]]:
    answer = hub.http.get(f"{hub.url}/rules/firings", params={"rule": rule} if rule else {}, timeout=30)
    assert answer.status_code == 200, answer.text
    return list(reversed(answer.json()["firings"]))  # oldest first


def date(value: str) -> str:
    return f'"{value}"^^<{XSD_DATE}>'


ORDERS_NT = (f"<{EX}o1> <{EX}delivery> <{EX}d1> .\n<{EX}o1> <{EX}promised> {date('2026-01-05')} .\n"
             f"<{EX}o2> <{EX}delivery> <{EX}d2> .\n<{EX}o2> <{EX}promised> {date('2026-03-01')} .\n")


def test_a_late_delivery_marks_the_order_at_risk_in_a_patch_authored_by_the_rule(hub: RunningHub) -> None:
    put(hub, ORDERS, ORDERS_NT)
    added = add_rules(hub, AT_RISK)
    assert [r["iri"] for r in added["rules"]] == ["urn:acme:rules:order-at-risk"]
    assert added["rules"][0]["reads"] == sorted([DELIVERIES, ORDERS])
    trigger = put(hub, DELIVERIES, f"<{EX}d1> <{EX}date> {date('2026-01-09')} .\n"
                                   f"<{EX}d2> <{EX}date> {date('2026-02-01')} .\n")
    # o1's delivery is late, o2's is not: only o1 is at risk
    assert f"<{EX}o1> <{EX}status> <{EX}AtRisk>" in statements(hub, ORDERS)
    assert f"<{EX}o2> <{EX}status> <{EX}AtRisk>" not in statements(hub, ORDERS)
    history = hub.runtime.archive.history(ORDERS)
    made = history[-1]
    assert made.author == "rule <urn:acme:rules:order-at-risk>"
    assert trigger in made.message and DELIVERIES in made.message
    # the rule's patch is signed by the hub and chained like any other
    keys = TrustedKeys(hub.runtime.keys.jwks())
    from lucid_hub.signing import verify_patch_bytes
    assert verify_patch_bytes(made.body, keys, hub.runtime.canonicalizer).prev == history[-2].id
    (firing,) = firings(hub)
    assert firing | {"firedAt": None} == {
        "rule": "urn:acme:rules:order-at-risk", "trigger": trigger, "graph": DELIVERIES, "coupling": "immediate",
        "depth": 1, "instances": 2, "kept": 1, "outcome": "patched", "reason": None, "patches": [made.id],
        "attempts": 1, "firedAt": None}
    # the rules graph is changed by signed patches only, with its audit trail
    (change,) = hub.runtime.archive.history(RULES_GRAPH)
    assert change.author.startswith("test admin") and "order-at-risk" in change.message
    assert verify_patch_bytes(change.body, keys, hub.runtime.canonicalizer).id == change.id
    trail = hub.http.get(f"{hub.url}/admin/rules/history", timeout=30).json()["changes"]
    assert [(c["patch"], c["verified"]) for c in trail] == [(change.id, True)]


def test_each_all_delete_update_and_what_a_condition_sees(rhub: RunningHub) -> None:
    hub = rhub
    put(hub, ORDERS, f"<{EX}o1> <{EX}qty> \"1\" .\n")
    add_rules(hub, f"""PREFIX ex: <{EX}>
RULE <urn:r:each>
ON INSERT {{ GRAPH <{DELIVERIES}> {{ ?d ex:item ?i }} }}
DO INSERT {{ GRAPH <{ALERTS}> {{ ?d ex:seen ?i }} }} WHERE {{}}
RULE <urn:r:all>
FOR ALL
ON INSERT {{ GRAPH <{DELIVERIES}> {{ ?d ex:item ?i }} }}
IF SELECT (COUNT(*) AS ?n) WHERE {{ GRAPH <urn:lucid-hub:inserted:{DELIVERIES}> {{ ?d ex:item ?i }} }}
DO INSERT {{ GRAPH <{ALERTS}> {{ ex:batch ex:items ?n }} }} WHERE {{}}
RULE <urn:r:gone>
ON DELETE {{ GRAPH <{DELIVERIES}> {{ ?d ex:item ?i }} }}
IF ASK {{ GRAPH <urn:lucid-hub:before:{DELIVERIES}> {{ ?d ex:item ?i }}
          FILTER NOT EXISTS {{ GRAPH <{DELIVERIES}> {{ ?d ex:item ?i }} }} }}
DO INSERT {{ GRAPH <{ALERTS}> {{ ?d ex:lost ?i }} }} WHERE {{}}
RULE <urn:r:moved>
ON UPDATE {{ GRAPH <{DELIVERIES}> {{ ?d ex:date ?new }} }}
IF {{ GRAPH <urn:lucid-hub:deleted:{DELIVERIES}> {{ ?d ex:date ?old }} }}
DO INSERT {{ GRAPH <{ALERTS}> {{ ?d ex:movedFrom ?old ; ex:movedTo ?new }} }} WHERE {{}}
""")
    put(hub, DELIVERIES, f'<{EX}d1> <{EX}item> "a" .\n<{EX}d1> <{EX}item> "b" .\n<{EX}d1> <{EX}date> "1" .\n')
    alerts = statements(hub, ALERTS)
    assert {f'<{EX}d1> <{EX}seen> "a"', f'<{EX}d1> <{EX}seen> "b"'} <= alerts  # FOR EACH: one per instance
    assert f'<{EX}batch> <{EX}items> "2"^^<http://www.w3.org/2001/XMLSchema#integer>' in alerts  # FOR ALL: once
    put(hub, DELIVERIES, f'<{EX}d1> <{EX}item> "a" .\n<{EX}d1> <{EX}date> "2" .\n')  # "b" removed, date moved
    alerts = statements(hub, ALERTS)
    assert f'<{EX}d1> <{EX}lost> "b"' in alerts and f'<{EX}d1> <{EX}lost> "a"' not in alerts
    assert {f'<{EX}d1> <{EX}movedFrom> "1"', f'<{EX}d1> <{EX}movedTo> "2"'} <= alerts
    all_firings = firings(hub, "urn:r:all")
    assert [(f["instances"], f["kept"], f["outcome"]) for f in all_firings] == [(2, 1, "patched")]


CHAIN = f"""PREFIX ex: <{EX}>
RULE <urn:r:first>
PRIORITY 5
ON INSERT {{ GRAPH <{DELIVERIES}> {{ ?d ex:late true }} }}
DO INSERT {{ GRAPH <{ORDERS}> {{ ?d ex:flag ex:one }} }} WHERE {{}}
RULE <urn:r:second>
PRIORITY 1
ON INSERT {{ GRAPH <{DELIVERIES}> {{ ?d ex:late true }} }}
IF ASK {{ GRAPH <{ALERTS}> {{ ?d ex:flag ex:two }} }}
DO INSERT {{ GRAPH <{ORDERS}> {{ ?d ex:saw ex:two }} }} WHERE {{}}
RULE <urn:r:cascade>
ON INSERT {{ GRAPH <{ORDERS}> {{ ?d ex:flag ex:one }} }}
DO INSERT {{ GRAPH <{ALERTS}> {{ ?d ex:flag ex:two }} }} WHERE {{}}
"""


def test_cascades_run_depth_first_in_priority_order(rhub: RunningHub) -> None:
    hub = rhub
    add_rules(hub, CHAIN)
    trigger = put(hub, DELIVERIES, f"<{EX}d1> <{EX}late> {TRUE} .\n")
    # first (priority 5) fires; its patch fires cascade before second (priority 1) looks:
    # so second's condition sees cascade's patch
    assert f"<{EX}d1> <{EX}saw> <{EX}two>" in statements(hub, ORDERS)
    order = [(f["rule"], f["depth"], f["outcome"]) for f in firings(hub)]
    assert order == [("urn:r:first", 1, "patched"), ("urn:r:cascade", 2, "patched"), ("urn:r:second", 1, "patched")]
    assert hub.runtime.archive.history(ALERTS)[-1].message.startswith("fired by patch urn:sha256:")
    assert trigger not in hub.runtime.archive.history(ALERTS)[-1].message  # fired by first's patch


def test_a_cascade_deeper_than_the_limit_is_rolled_back_and_the_trigger_stays(tmp_path: Path) -> None:
    with running_hub(tmp_path / "d", f"sqlite:///{tmp_path / 'h.db'}", {"LUCID_RULES_MAX_DEPTH": "1"}) as hub:
        add_rules(hub, CHAIN)
        before = len(hub.runtime.archive.history(ORDERS)) if hub.runtime.archive.current_head(ORDERS) else 0
        trigger = put(hub, DELIVERIES, f"<{EX}d1> <{EX}late> {TRUE} .\n")
        assert hub.runtime.archive.head(DELIVERIES) == trigger  # published whatever the rules did
        assert statements(hub, ORDERS) == set() and statements(hub, ALERTS) == set()
        history = hub.runtime.archive.history(ORDERS)
        assert len(history) - before == 2  # first's patch, then its compensation
        assert history[-1].author == "rule engine" and history[-1].message.startswith(f"rolled back {history[-2].id}")
        outcomes = {f["rule"]: (f["outcome"], f["reason"]) for f in firings(hub)}
        assert outcomes["urn:r:first"][0] == "rolled-back"
        assert outcomes["urn:r:cascade"][0] == "stopped" and "LUCID_RULES_MAX_DEPTH" in outcomes["urn:r:cascade"][1]
        metrics = hub.http.get(f"{hub.url}/metrics", timeout=30).text
        assert 'lucid_rule_firings_total{outcome="rolled-back"} 1.0' in metrics
        assert 'lucid_rule_firings_total{outcome="stopped"} 1.0' in metrics
        # unrelated graphs publish as ever
        put(hub, "https://acme.example/graphs/other", f"<{EX}x> <{EX}y> <{EX}z> .\n")


LOOP = f"""PREFIX ex: <{EX}>
RULE <urn:r:ping>
ON INSERT {{ GRAPH <{ORDERS}> {{ ?x ex:ping ?n }} }}
DO INSERT {{ GRAPH <{ALERTS}> {{ ?x ex:pong ?n }} }} WHERE {{}}
RULE <urn:r:pong>
ON INSERT {{ GRAPH <{ALERTS}> {{ ?x ex:pong ?n }} }}
DO INSERT {{ GRAPH <{ORDERS}> {{ ?x ex:ping ?m }} }} WHERE {{ BIND (?n + 1 AS ?m) }}
"""


def test_a_set_that_can_fire_forever_is_refused_with_its_cycle_unless_bounded(rhub: RunningHub) -> None:
    hub = rhub
    answer = hub.http.post(f"{hub.url}/rules", data=LOOP.encode(), headers=TEXT, timeout=30)
    assert answer.status_code == 400
    assert "fire forever" in answer.text and "urn:r:ping" in answer.text and "BOUND" in answer.text
    explained = hub.http.post(f"{hub.url}/rules/explain", data=LOOP.encode(), headers=TEXT, timeout=30).json()
    assert explained["terminates"] is False and explained["unbounded"] == [["urn:r:ping", "urn:r:pong"]]
    assert hub.runtime.archive.current_head(RULES_GRAPH) is None  # nothing stored
    bounded = LOOP.replace("RULE <urn:r:ping>", "RULE <urn:r:ping>\nBOUND 3").replace(
        "RULE <urn:r:pong>", "RULE <urn:r:pong>\nBOUND 3")
    add_rules(hub, bounded)
    assert hub.http.get(f"{hub.url}/rules/explain", timeout=30).json()["terminates"] is True
    put(hub, ORDERS, f'<{EX}a> <{EX}ping> "1"^^<http://www.w3.org/2001/XMLSchema#integer> .\n')
    pings = sorted(s for s in statements(hub, ORDERS) if "ping" in s)
    assert len(pings) == 4  # the trigger's and three of pong's: BOUND 3 stopped the cycle
    outcomes = [f["outcome"] for f in firings(hub, "urn:r:ping")]
    assert outcomes == ["patched"] * 3 + ["bounded"]


def test_deferred_rules_fire_after_commit_once_each_and_failing_webhooks_are_retried(
        rhub: RunningHub, callback: Callback) -> None:
    hub = rhub
    add_rules(hub, f"""PREFIX ex: <{EX}>
RULE <urn:r:later>
DEFERRED
ON INSERT {{ GRAPH <{DELIVERIES}> {{ ?d ex:date ?date }} }}
DO INSERT {{ GRAPH <{ALERTS}> {{ ?d ex:checked true }} }} WHERE {{}}
RULE <urn:r:hook>
DEFERRED
ON INSERT {{ GRAPH <{DELIVERIES}> {{ ?d ex:date ?date }} }}
DO WEBHOOK <{callback.url}>
""")
    callback.statuses.extend([500])
    trigger = put(hub, DELIVERIES, f"<{EX}d1> <{EX}date> {date('2026-01-09')} .\n")
    engine = hub.runtime.rules
    engine.run_deferred()  # the leader's thread does this too; called here to know when it ran
    callback.wait(lambda: any(f["rule"] == "urn:r:later" for f in firings(hub)))
    assert f"<{EX}d1> <{EX}checked> {TRUE}" in statements(hub, ALERTS)
    # the webhook's first attempt failed (500): recorded, retried later with backoff
    from sqlalchemy import update

    from lucid_hub.db.models import RuleCursor
    with hub.runtime.db.session() as session:  # the retry is due now (instead of after its backoff)
        session.execute(update(RuleCursor).values(retry_at=None))
    engine.run_deferred()
    callback.wait(lambda: len(callback.deliveries) == 1)
    headers, body = callback.deliveries[0]
    message = json.loads(body)
    assert message["patch"] == trigger and message["rows"] == [{"d": f"<{EX}d1>", "date": date("2026-01-09")}]
    # a receiver verifies the detached JWS over the body's digest with the hub's JWKS, here
    # with `cryptography` alone (not the hub's code)
    import base64
    import hashlib

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    def b64(part: str) -> bytes:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))

    protected, empty, signature = headers["X-Lucid-Signature"].split(".")
    assert empty == ""  # detached
    (jwk,) = [k for k in requests.get(f"{hub.url}/.well-known/jwks.json", timeout=30).json()["keys"]
              if k["kid"] == json.loads(b64(protected))["kid"]]
    payload = base64.urlsafe_b64encode(("sha256:" + hashlib.sha256(body).hexdigest()).encode()).rstrip(b"=")
    Ed25519PublicKey.from_public_bytes(b64(jwk["x"])).verify(b64(signature), protected.encode() + b"." + payload)
    hook = [f for f in firings(hub) if f["rule"] == "urn:r:hook"]
    assert [(f["outcome"], f["attempts"]) for f in hook] == [("sent", 2)]
    # at least once, never twice: running again (or after a restart) finds nothing new
    assert engine.run_deferred() == 0
    assert len([f for f in firings(hub) if f["rule"] == "urn:r:later"]) == 1


def test_a_notify_rule_posts_an_activity_an_ldn_inbox_accepts(rhub: RunningHub, callback: Callback) -> None:
    from lucid_hub.streams.activities import activities, parse_notification

    hub = rhub
    add_rules(hub, f"""PREFIX ex: <{EX}>
RULE <urn:r:tell>
ON INSERT {{ GRAPH <{DELIVERIES}> {{ ?d ex:date ?date }} }}
DO NOTIFY <{callback.url}>
""")
    assert hub.http.get(f"{hub.url}/rules", params={"iri": "urn:r:tell"}, timeout=30).json()["coupling"] == "deferred"
    callback.statuses.extend([201])  # an LDN receiver answers 201 Created
    trigger = put(hub, DELIVERIES, f"<{EX}d1> <{EX}date> {date('2026-01-09')} .\n")
    hub.runtime.rules.run_deferred()
    callback.wait(lambda: len(callback.deliveries) == 1)
    headers, body = callback.deliveries[0]
    assert headers["Content-Type"] == "application/ld+json"
    # what a lucid-hub inbox (or any LDN receiver reading AS 2.0) makes of it
    triples = parse_notification(body, "application/ld+json", callback.url, 10_000, 65_536)
    (activity,) = activities(triples)
    kinds = {t.object.value for t in triples if t.subject == activity and t.predicate.value.endswith("#type")}
    assert [k.split("://", 1)[1] for k in kinds] == ["www.w3.org/ns/activitystreams#Announce"]
    objects = {t.object.value for t in triples if t.subject == activity and t.predicate.value.endswith("#object")}
    assert objects == {f"{hub.url}/patches/{trigger}"}
    assert [(f["outcome"], f["attempts"]) for f in firings(hub, "urn:r:tell")] == [("sent", 1)]


def test_who_may_define_rules_and_what_they_may_read(rhub: RunningHub) -> None:
    hub = rhub
    hub.runtime.policies.create([Condition(iri="urn:c:w", requiresGroup=("writers",), readGraph=(DELIVERIES,),
                                           writeGraph=(ORDERS,))], "test")
    writer = hub.session(hub.token("writer", ("writers",)))
    reader = hub.session(hub.token("reader", ("readers",), ("graphs:read",)))
    put(hub, ORDERS, ORDERS_NT)
    # a reader may not define rules; a writer may, for graphs it may write, reading what it may read
    assert reader.post(f"{hub.url}/rules", data=AT_RISK.encode(), headers=TEXT, timeout=30).status_code == 403
    refused = writer.post(f"{hub.url}/rules", data=AT_RISK.replace(f"GRAPH <{ORDERS}> {{ ?o ex:delivery",
                                                                   f"GRAPH <{ALERTS}> {{ ?o ex:delivery").encode(),
                          headers=TEXT, timeout=30)
    assert refused.status_code == 403 and ALERTS in refused.text and "may not read" in refused.text
    add_rules(hub, AT_RISK, http=writer)
    assert [r["iri"] for r in writer.get(f"{hub.url}/rules", timeout=30).json()["rules"]] == [
        "urn:acme:rules:order-at-risk"]
    # another writer sees none of it and may not remove it
    hub.runtime.policies.create([Condition(iri="urn:c:w2", requiresGroup=("others",), writeGraph=(ORDERS,))], "t")
    other = hub.session(hub.token("other", ("others",)))
    assert other.get(f"{hub.url}/rules", timeout=30).json()["rules"] == []
    assert other.delete(f"{hub.url}/rules", params={"iri": "urn:acme:rules:order-at-risk"},
                        timeout=30).status_code == 403
    # the owner loses read access to the deliveries: the rule is skipped, with the reason
    hub.runtime.policies.delete("urn:c:w", "test")
    hub.runtime.policies.create([Condition(iri="urn:c:w3", requiresGroup=("writers",), writeGraph=(ORDERS,))], "t")
    put(hub, DELIVERIES, f"<{EX}d1> <{EX}date> {date('2026-01-09')} .\n")
    assert f"<{EX}o1> <{EX}status> <{EX}AtRisk>" not in statements(hub, ORDERS)
    (firing,) = firings(hub)
    assert firing["outcome"] == "skipped" and f"may no longer read <{DELIVERIES}>" in firing["reason"]


def test_bad_rule_requests_get_a_clear_4xx_and_change_nothing(rhub: RunningHub) -> None:
    hub = rhub
    url = f"{hub.url}/rules"
    cases = [
        ("RULE <urn:x> ON INSERT { GRAPH <urn:g> { ?s ?p } } DO INSERT DATA {}", TEXT, 400, "ON is not valid SPARQL"),
        ("PREFIX ex: <x:>\nnot a rule", TEXT, 400, "one or more rules"),
        ("x" * (64 * 1024 + 1), TEXT, 413, "at most 65,536 bytes"),
        (AT_RISK, {"Content-Type": "application/json"}, 415, "text/plain"),
        (AT_RISK.replace("IF {", "IF { SERVICE <http://evil.example/> { ?a ?b ?c } "), TEXT, 400, "SERVICE"),
        (AT_RISK.replace(f"GRAPH <{ORDERS}> {{ ?o ex:status", "GRAPH <urn:lucid-hub:policies> { ?o ex:status"),
         TEXT, 400, "hub's own graph"),
        (AT_RISK.replace("IMMEDIATE\n", "IMMEDIATE\n").replace(
            f"DO INSERT {{ GRAPH <{ORDERS}> {{ ?o ex:status ex:AtRisk }} }} WHERE {{}}", "DO WEBHOOK <http://x/>"),
         TEXT, 400, "DEFERRED"),
        (AT_RISK.replace("DO INSERT", "DO WEBHOOK <file:///etc/passwd> #"), TEXT, 400, "http(s) URL"),
    ]
    for body, headers, status, reason in cases:
        answer = hub.http.post(url, data=body.encode("utf-8"), headers=headers, timeout=30)
        assert answer.status_code == status, (reason, answer.status_code, answer.text)
        assert reason in answer.text, (reason, answer.text)
    bad_utf8 = hub.http.post(url, data=b"RULE <urn:x> \xff", headers=TEXT, timeout=30)
    assert bad_utf8.status_code == 400 and "UTF-8" in bad_utf8.text
    assert requests.post(url, data=AT_RISK.encode(), headers=TEXT, timeout=30).status_code == 401
    assert hub.http.delete(url, params={"iri": "urn:nope"}, timeout=30).status_code == 404
    assert hub.http.get(f"{url}/firings", params={"rule": "urn:nope"}, timeout=30).status_code == 404
    assert hub.http.get(f"{url}/firings", params={"limit": "x"}, timeout=30).status_code == 400
    assert hub.runtime.archive.current_head(RULES_GRAPH) is None  # nothing half-written
    # replayed: the same rules again change nothing (200, no new version)
    add_rules(hub, AT_RISK)
    head = hub.runtime.archive.current_head(RULES_GRAPH)
    add_rules(hub, AT_RISK, status=200)
    assert hub.runtime.archive.current_head(RULES_GRAPH) == head
    # the admin API serves the same
    assert [r["iri"] for r in hub.http.get(f"{hub.url}/admin/rules", timeout=30).json()["rules"]] == [
        "urn:acme:rules:order-at-risk"]
    assert hub.http.get(f"{hub.url}/rules", params={"iri": "urn:acme:rules:order-at-risk"},
                        headers={"Accept": "text/plain"}, timeout=30).text.startswith("PREFIX ex:")


def _cli(run_cli: Any, *args: str, env: dict[str, str]) -> tuple[int, str, str]:
    result = run_cli(*args, env=env)
    return result.code, result.out, result.err


def test_rule_commands_on_the_data_directory(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "data"
    env = {"LUCID_DATA_DIR": str(data), "LUCID_DATABASE_URL": f"sqlite:///{tmp_path / 'hub.db'}"}
    rules = tmp_path / "rules.txt"
    rules.write_text(AT_RISK)
    code, out, err = _cli(run_cli, "rules", "add", str(rules), env=env)
    assert code == 0, err
    assert json.loads(out) == {"added": ["urn:acme:rules:order-at-risk"]}
    code, out, _err = _cli(run_cli, "rules", "list", env=env)
    assert [r["iri"] for r in json.loads(out)] == ["urn:acme:rules:order-at-risk"]
    code, out, _err = _cli(run_cli, "rules", "show", "urn:acme:rules:order-at-risk", env=env)
    assert code == 0 and out.startswith("PREFIX ex:") and '"firings": []' in out
    # test: the rules on a patch, against the graphs as they are, writing nothing
    with running_hub(data, env["LUCID_DATABASE_URL"]) as hub:
        put(hub, ORDERS, ORDERS_NT)
    patch = tmp_path / "p.rdfp"
    patch.write_text(f"TX .\nA <{EX}d1> <{EX}date> {date('2026-01-09')} .\nTC .\n")
    code, out, err = _cli(run_cli, "rules", "test", str(rules), "--patch", str(patch), "--graph", DELIVERIES, env=env)
    assert code == 0, err
    (line,) = [json.loads(x) for x in out.splitlines()]
    assert line["rule"] == "urn:acme:rules:order-at-risk" and line["kept"] == 1
    assert line["edits"] == {ORDERS: {"removed": [], "added": [f"<{EX}o1> <{EX}status> <{EX}AtRisk>"]}}
    code, out, err = _cli(run_cli, "rules", "list", env=env)
    with running_hub(data, env["LUCID_DATABASE_URL"]) as hub:
        assert hub.runtime.archive.current_head(DELIVERIES) is None  # nothing written
        assert f"<{EX}o1> <{EX}status> <{EX}AtRisk>" not in statements(hub, ORDERS)
    code, out, err = _cli(run_cli, "rules", "remove", "urn:acme:rules:order-at-risk", env=env)
    assert code == 0 and "removed" in out
    code, out, err = _cli(run_cli, "rules", "remove", "urn:acme:rules:order-at-risk", env=env)
    assert code == 1 and err.count("\n") == 1 and "no rule" in err
    loop = tmp_path / "loop.txt"
    loop.write_text(LOOP)
    code, out, err = _cli(run_cli, "rules", "add", str(loop), env=env)
    assert code == 1 and err.count("\n") == 1 and "fire forever" in err
    code, out, err = _cli(run_cli, "rules", "test", str(rules), "--patch", str(patch), env=env)
    assert code == 1 and err.count("\n") == 1 and "names no graph" in err
    code, out, err = _cli(run_cli, "rules", "list", "--hub", "http://127.0.0.1:9", env=env)
    assert code == 1 and "--token" in err
    # the same commands on a running hub, with a token
    with running_hub(data, env["LUCID_DATABASE_URL"]) as hub:
        token = hub.token("rule admin", ("lucid-hub-admins",), ("graphs:read", "graphs:write", "admin"))
        remote = ["--hub", hub.url, "--token", token]
        code, out, err = _cli(run_cli, "rules", "add", str(rules), *remote, env=env)
        assert code == 0 and json.loads(out) == {"added": ["urn:acme:rules:order-at-risk"]}, err
        assert hub.runtime.rules.get("urn:acme:rules:order-at-risk").owner.account != "operator"
        code, out, err = _cli(run_cli, "rules", "show", "urn:acme:rules:order-at-risk", *remote, env=env)
        assert code == 0 and out.startswith("PREFIX ex:"), err
        code, out, err = _cli(run_cli, "rules", "add", str(loop), *remote, env=env)
        assert code == 1 and err.count("\n") == 1 and "answered 400" in err and "fire forever" in err
        code, out, err = _cli(run_cli, "rules", "remove", "urn:acme:rules:order-at-risk", *remote, env=env)
        assert code == 0, err
        code, out, err = _cli(run_cli, "rules", "list", "--hub", hub.url, "--token", "not-a-token", env=env)
        assert code == 1 and "answered 401" in err


# --- across companies: a rule on hub B reacts to hub A's patch; C mirrors B's result ----------

DEV = {"LUCID_DEV_MODE": "1", "LUCID_LEASE_MIN": "120"}


def mirror_graph(publisher: RunningHub, partner: RunningHub, graph: str, name: str) -> None:
    """`partner` mirrors `graph` of `publisher` (a client there, a condition letting it read)."""
    record, secret = publisher.runtime.clients.create(
        f"{name} hub", groups=[f"partner-{name}"], scopes=["hub:subscribe", "graphs:read"],
        callback_prefixes=[f"{partner.url}/callback/"])
    body = {"iri": f"urn:c:{name}-reads", "requiresGroup": [f"partner-{name}"], "readGraph": [graph]}
    assert publisher.http.post(f"{publisher.url}/admin/conditions", json=body, timeout=30).status_code == 201
    answer = partner.http.post(f"{partner.url}/admin/mirrors", timeout=30, json={
        "hub": f"{publisher.url}/hub", "graph": graph, "client_id": record.client_id, "client_secret": secret})
    assert answer.status_code == 201, answer.text


def until(what: Any, timeout: float = 30) -> None:
    """Until `what` holds, looked at every 50 ms (a condition on another hub, not a sleep)."""
    import time
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_a_partners_patch_fires_our_rule_and_its_patch_reaches_our_customer(tmp_path: Path) -> None:
    from lucid_hub.signing import verify_patch_bytes

    with running_hub(tmp_path / "a", f"sqlite:///{tmp_path / 'a.db'}", DEV) as supplier, \
            running_hub(tmp_path / "b", f"sqlite:///{tmp_path / 'b.db'}", DEV) as acme, \
            running_hub(tmp_path / "c", f"sqlite:///{tmp_path / 'c.db'}", DEV) as customer:
        put(supplier, DELIVERIES, f"<{EX}d9> <{EX}date> {date('2026-01-01')} .\n")
        put(acme, ORDERS, ORDERS_NT)
        mirror_graph(supplier, acme, DELIVERIES, "acme")
        mirror_graph(acme, customer, ORDERS, "customer")
        until(lambda: acme.runtime.archive.current_head(DELIVERIES) == supplier.runtime.archive.head(DELIVERIES))
        until(lambda: customer.runtime.archive.current_head(ORDERS) == acme.runtime.archive.head(ORDERS))
        # a rule may react to the mirror, never write it
        into_mirror = AT_RISK.replace(f"GRAPH <{ORDERS}> {{ ?o ex:status", f"GRAPH <{DELIVERIES}> {{ ?o ex:status")
        refused = acme.http.post(f"{acme.url}/rules", data=into_mirror.encode(), headers=TEXT, timeout=30)
        assert refused.status_code == 403 and "mirror" in refused.text
        add_rules(acme, AT_RISK)
        trigger = post(supplier, DELIVERIES, f"<{EX}d1> <{EX}date> {date('2026-01-09')} .\n")
        until(lambda: any(f["trigger"] == trigger for f in firings(acme)))
        (firing,) = [f for f in firings(acme) if f["trigger"] == trigger]
        assert firing["outcome"] == "patched" and firing["graph"] == DELIVERIES
        (derived,) = firing["patches"]
        until(lambda: customer.runtime.archive.current_head(ORDERS) == derived)
        assert f"<{EX}o1> <{EX}status> <{EX}AtRisk>" in statements(customer, ORDERS)
        # every hop verifies: A's patch at B with A's keys, B's patch at C with B's keys, and
        # the derived patch names the partner's patch that caused it
        a_keys, b_keys = TrustedKeys(supplier.runtime.keys.jwks()), TrustedKeys(acme.runtime.keys.jwks())
        (at_b,) = [r for r in acme.runtime.archive.history(DELIVERIES) if r.id == trigger]
        assert verify_patch_bytes(at_b.body, a_keys, acme.runtime.canonicalizer).id == trigger
        (at_c,) = [r for r in customer.runtime.archive.history(ORDERS) if r.id == derived]
        assert verify_patch_bytes(at_c.body, b_keys, customer.runtime.canonicalizer).id == derived
        assert at_c.author == "rule <urn:acme:rules:order-at-risk>" and trigger in at_c.message


# --- a crash inside a cascade ----------------------------------------------------------------

def _crash_in_cascade(tmp_path: Path) -> tuple[Path, str]:
    """A hub that dies (as a kill would) right after the first rule of CHAIN archived its patch;
    the data directory and the triggering patch's id."""
    from lucid_hub.config import Settings
    from lucid_hub.demo.ports import free_port
    from lucid_hub.rules.model import OPERATOR
    from lucid_hub.runtime import Runtime
    from tests.publish.test_publish_recovery import bearer, start_hub

    data = tmp_path / "data"
    runtime = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(data)}))
    try:
        runtime.rules.add(CHAIN, OPERATOR, "test")
    finally:
        runtime.close()
    port = free_port()
    proc = start_hub(data, port, "in-rule-cascade")
    auth = bearer(data, port)
    with pytest.raises(requests.ConnectionError):
        requests.put(f"http://127.0.0.1:{port}/graphs", params={"graph": DELIVERIES}, timeout=30,
                     data=f"<{EX}d1> <{EX}late> {TRUE} .\n".encode(), headers={**NT, **auth})
    assert proc.wait(timeout=30) == 137
    runtime = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(data)}), repair=False)
    try:
        trigger = runtime.archive.head(DELIVERIES)
        assert runtime.archive.pending_reactions() == [(trigger, DELIVERIES)]
        # the first rule's patch and the one it fired (depth 2) were made; the second rule never ran
        assert [r.author for r in runtime.archive.history(ORDERS)] == ["rule <urn:r:first>"]
        assert [r.author for r in runtime.archive.history(ALERTS)] == ["rule <urn:r:cascade>"]
    finally:
        runtime.close()
    return data, trigger


def test_a_cascade_a_crash_interrupted_is_rolled_back_and_run_again_at_start(tmp_path: Path) -> None:
    from lucid_hub.config import Settings
    from lucid_hub.runtime import Runtime

    data, trigger = _crash_in_cascade(tmp_path)
    runtime = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(data)}))  # repairs, then recovers
    try:
        assert runtime.archive.pending_reactions() == []
        orders = runtime.archive.history(ORDERS)
        assert [r.author for r in orders] == ["rule <urn:r:first>", "rule engine", "rule <urn:r:first>",
                                              "rule <urn:r:second>"]
        assert "interrupted by a crash" in orders[1].message and orders[1].message.startswith(
            f"rolled back {orders[0].id}")
        assert [r.author for r in runtime.archive.history(ALERTS)] == ["rule <urn:r:cascade>", "rule engine",
                                                                       "rule <urn:r:cascade>"]
        # the graphs are as one uninterrupted cascade leaves them
        assert set(runtime.publisher.content(ORDERS)[1]) == {f"<{EX}d1> <{EX}flag> <{EX}one>",
                                                            f"<{EX}d1> <{EX}saw> <{EX}two>"}
        assert set(runtime.publisher.content(ALERTS)[1]) == {f"<{EX}d1> <{EX}flag> <{EX}two>"}
        outcomes = {(f["rule"], f["trigger"] == trigger or f["depth"] > 1, f["outcome"])
                    for f in runtime.rules.history()}
        assert {("urn:r:first", True, "patched"), ("urn:r:cascade", True, "patched"),
                ("urn:r:second", True, "patched")} <= outcomes
    finally:
        runtime.close()


def test_an_interrupted_cascade_whose_graphs_moved_on_is_reported_not_run_again(tmp_path: Path) -> None:
    import pyoxigraph as ox

    from lucid_hub.config import Settings
    from lucid_hub.rdf.msg import graph_msgs
    from lucid_hub.runtime import Runtime

    data, trigger = _crash_in_cascade(tmp_path)
    settings = Settings.from_env({"LUCID_DATA_DIR": str(data)})
    runtime = Runtime.open(settings, repair=False)  # another process of the hub went on meanwhile
    try:
        runtime.publisher.merge(ORDERS, graph_msgs(list(ox.parse(f"<{EX}x> <{EX}y> <{EX}z> .\n",
                                                                 format=ox.RdfFormat.N_TRIPLES)),
                                                   runtime.canonicalizer), author="someone", message="")
    finally:
        runtime.close()
    runtime = Runtime.open(settings)
    try:
        assert runtime.archive.pending_reactions() == []
        assert [r.author for r in runtime.archive.history(ORDERS)] == ["rule <urn:r:first>", "someone"]
        failed = [f for f in runtime.rules.history() if f["trigger"] == trigger]
        assert {f["rule"] for f in failed} == {"urn:r:first", "urn:r:second"}
        assert all(f["outcome"] == "failed" and f"<{ORDERS}> has changed since" in f["reason"] for f in failed)
    finally:
        runtime.close()


def test_trying_rules_on_a_patch_over_http_is_for_admins_and_refuses_bad_input(rhub: RunningHub) -> None:
    """`POST /admin/rules/test` (what `rules test` uses beside a running hub): the firings,
    nothing written; a non-admin is refused (a trial reads every graph); malformed, oversized
    and unparsable bodies get a 4xx with the reason."""
    hub = rhub
    put(hub, ORDERS, ORDERS_NT)
    patch = f'TX .\nA <{EX}d1> <{EX}date> {date("2026-01-09")} .\nTC .\n'
    url = f"{hub.url}/admin/rules/test"
    before = statements(hub, ORDERS)
    tried = hub.http.post(url, json={"rules": AT_RISK, "graph": DELIVERIES, "patch": patch}, timeout=30)
    assert tried.status_code == 200, tried.text
    (firing,) = tried.json()["firings"]
    assert firing["rule"] == "urn:acme:rules:order-at-risk" and firing["instances"] == 1
    assert statements(hub, ORDERS) == before and hub.runtime.rules.rules() == []  # nothing written or kept
    hub.runtime.policies.create([Condition(iri="urn:c:w", requiresGroup=("writers",), writeGraph=(ORDERS,))], "t")
    writer = hub.session(hub.token("writer", ("writers",)))
    for path in ("/admin/rules/test", "/rules/test"):
        assert writer.post(f"{hub.url}{path}", json={"rules": AT_RISK, "graph": DELIVERIES, "patch": patch},
                           timeout=30).status_code == 403
    cases = [(b"{not json", 400, "JSON"), (b'["rules"]', 400, "JSON object"),
             (json.dumps({"rules": AT_RISK, "graph": DELIVERIES}).encode(), 400, "strings"),
             (json.dumps({"rules": "x" * 70_000, "graph": DELIVERIES, "patch": patch}).encode(), 413, "bytes"),
             (json.dumps({"rules": AT_RISK, "graph": DELIVERIES, "patch": "A <x> ."}).encode(), 400, ""),
             (json.dumps({"rules": "RULE nonsense", "graph": DELIVERIES, "patch": patch}).encode(), 400, "")]
    for body, status_code, says in cases:
        answer = hub.http.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=30)
        assert answer.status_code == status_code and says in answer.text, (body[:40], answer.status_code, answer.text)
    assert requests.post(url, json={}, timeout=30).status_code == 401
