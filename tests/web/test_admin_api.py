"""The admin API over HTTP, and the authorisation matrix: every endpoint against no token,
the wrong scope, a denied graph, and an allowed request."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from tests.conftest import RunningHub

G = "http://example.org/graphs/kpi"
OTHER = "http://example.org/graphs/secret"
NT = {"Content-Type": "application/n-triples"}
TRIPLE = '<http://ex/a> <http://ex/p> "1" .\n'
TTL = "@prefix eccauth: <https://vocab.eccenca.com/auth/> .\n"


def condition(iri: str = "urn:c:partner", **fields: Any) -> dict[str, Any]:
    return {"iri": iri, "requiresGroup": ["partner"], "readGraph": [G], **fields}


def test_a_policy_change_takes_effect_for_the_next_request(hub: RunningHub) -> None:
    hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=TRIPLE, headers=NT, timeout=30)
    partner = hub.session(hub.token("Globex", ("partner",), ("graphs:read",)))
    denied = partner.get(f"{hub.url}/graphs", params={"graph": G}, timeout=30)
    assert denied.status_code == 403 and "no access condition grants" in denied.text
    request_id = denied.headers["X-Request-Id"]
    assert request_id in denied.text

    created = hub.http.post(f"{hub.url}/admin/conditions", json=condition(label="Partners read KPIs"), timeout=30)
    assert created.status_code == 201 and created.json()["conditions"][0]["label"] == "Partners read KPIs"
    assert partner.get(f"{hub.url}/graphs", params={"graph": G}, timeout=30).status_code == 200
    assert partner.get(f"{hub.url}/graphs", params={"graph": OTHER}, timeout=30).status_code == 403

    updated = hub.http.put(f"{hub.url}/admin/conditions", params={"iri": "urn:c:partner"}, timeout=30,
                           json=condition(readGraph=[OTHER]))
    assert updated.status_code == 200
    assert partner.get(f"{hub.url}/graphs", params={"graph": G}, timeout=30).status_code == 403
    assert hub.http.delete(f"{hub.url}/admin/conditions", params={"iri": "urn:c:partner"}, timeout=30).status_code == 204
    assert hub.http.get(f"{hub.url}/admin/conditions", params={"iri": "urn:c:partner"}, timeout=30).status_code == 404

    # why was the first request denied?
    why = hub.http.get(f"{hub.url}/admin/explain", params={"request": request_id}, timeout=30).json()
    assert why["allowed"] is False and why["graph"] == G and why["party"]["groups"] == ["partner"]
    # the audit trail: who changed what, each change verified
    changes = hub.http.get(f"{hub.url}/admin/history", timeout=30).json()["changes"]
    assert [c["message"].split()[0] for c in changes] == ["loaded", "created", "updated", "deleted"]
    assert all(c["verified"] for c in changes) and changes[1]["author"].startswith("test admin (lc-")


def test_conditions_in_turtle_and_explanations(hub: RunningHub) -> None:
    turtle = TTL + f'<urn:c:t> a eccauth:AccessCondition ; eccauth:requiresGroup "partner" ; eccauth:writeGraph <{G}> .'
    created = hub.http.post(f"{hub.url}/admin/conditions", data=turtle, headers={"Content-Type": "text/turtle"},
                            timeout=30)
    assert created.status_code == 201
    listed = hub.http.get(f"{hub.url}/admin/conditions", headers={"Accept": "text/turtle"}, timeout=30)
    assert listed.headers["Content-Type"].startswith("text/turtle") and "<urn:c:t>" in listed.text
    who = hub.http.get(f"{hub.url}/admin/explain", params={"graph": G}, timeout=30).json()
    assert [c["condition"] for c in who["conditions"]] == ["urn:c:t", "urn:lucid:conditions:hub-admins"]
    client, _ = hub.client("Partner", ("partner",))
    what = hub.http.get(f"{hub.url}/admin/explain", params={"client": client.client_id}, timeout=30).json()
    assert what["write"] == [G] and what["conditions"] == ["urn:c:t"]
    decision = hub.http.get(f"{hub.url}/admin/explain", params={"client": client.client_id, "graph": OTHER},
                            timeout=30).json()
    assert decision["allowed"] is False
    assert hub.http.get(f"{hub.url}/admin/explain", timeout=30).status_code == 400
    assert hub.http.get(f"{hub.url}/admin/explain", params={"request": "nope"}, timeout=30).status_code == 404


@pytest.mark.parametrize(("body", "content_type", "status", "message"), [
    ('{"iri": "urn:c:1", "readGraphs": ["http://ex/g"]}', "application/json", 400, "unknown property"),
    ('{"iri": "not an iri", "readGraph": ["http://ex/g"]}', "application/json", 400, "not an absolute IRI"),
    ('{"iri": "urn:c:1", "requiresGroup": ["x"]}', "application/json", 400, "grants nothing"),
    ('{"iri": "urn:c:1", "readGraph": [', "application/json", 400, "not JSON"),
    (TTL + "<urn:c:1> a eccauth:AccessCondition ; eccauth:bogus 1 .", "text/turtle", 400, "unknown property"),
    ("<urn:c:1>", "text/plain", 400, "application/json or text/turtle"),
    ('{"iri": "urn:lucid:conditions:hub-admins", "readGraph": ["http://ex/g"]}', "application/json", 409, "exists"),
])
def test_bad_conditions_are_refused_and_nothing_changes(hub: RunningHub, body: str, content_type: str, status: int,
                                                        message: str) -> None:
    before = hub.http.get(f"{hub.url}/admin/history", timeout=30).json()["changes"]
    response = hub.http.post(f"{hub.url}/admin/conditions", data=body.encode(), headers={"Content-Type": content_type},
                             timeout=30)
    assert response.status_code == status and message in response.text, response.text
    assert hub.http.get(f"{hub.url}/admin/history", timeout=30).json()["changes"] == before


def test_oversized_admin_bodies_are_refused(hub: RunningHub) -> None:
    big = {"iri": "urn:c:big", "readGraph": [f"http://ex/g{i}" for i in range(12_000)]}
    response = hub.http.post(f"{hub.url}/admin/conditions", json=big, timeout=30)
    assert response.status_code == 413  # LUCID_MAX_BODY_BYTES of the test hub


def test_clients_through_the_admin_api(hub: RunningHub) -> None:
    created = hub.http.post(f"{hub.url}/admin/clients", timeout=30,
                            json={"name": "Initech hub", "groups": ["partner-initech"], "scopes": ["graphs:read"],
                                  "callback_prefixes": ["https://hub.initech.example/callbacks/"]})
    assert created.status_code == 201 and created.headers["Cache-Control"] == "no-store"
    body = created.json()
    token = requests.post(f"{hub.url}/oauth/token", data={"grant_type": "client_credentials"},
                          auth=(body["client_id"], body["client_secret"]), timeout=30)
    assert token.status_code == 200
    listed = hub.http.get(f"{hub.url}/admin/clients", timeout=30)
    assert body["client_id"] in listed.text and body["client_secret"] not in listed.text
    assert "secret" not in listed.text
    for bad in ({"name": "x", "scopes": ["root"]}, {"groups": ["g"]}, {"name": "x", "callback_prefixes": ["ftp://x"]},
                ["x"]):
        assert hub.http.post(f"{hub.url}/admin/clients", json=bad, timeout=30).status_code == 400
    not_json = hub.http.post(f"{hub.url}/admin/clients", data=b"{name", timeout=30,
                             headers={"Content-Type": "application/json"})
    assert not_json.status_code == 400 and "not JSON" in not_json.text
    assert hub.http.delete(f"{hub.url}/admin/clients/{body['client_id']}", timeout=30).status_code == 204
    assert hub.http.delete(f"{hub.url}/admin/clients/{body['client_id']}", timeout=30).status_code == 404


# --- the authorisation matrix -------------------------------------------------------------

def _endpoints(hub: RunningHub, graph: str, patch_id: str) -> list[tuple[str, str, dict[str, Any], str]]:
    """(method, path, request kwargs, the scope it needs)."""
    from urllib.parse import quote

    q = f"?graph={quote(graph, safe='')}"
    update = f"INSERT DATA {{ GRAPH <{graph}> {{ <http://ex/b> <http://ex/p> 2 }} }}"
    return [
        ("GET", f"/graphs{q}", {}, "graphs:read"),
        ("PUT", f"/graphs{q}", {"data": TRIPLE, "headers": NT}, "graphs:write"),
        ("POST", f"/graphs{q}", {"data": TRIPLE, "headers": NT}, "graphs:write"),
        ("DELETE", f"/graphs{q}", {}, "graphs:write"),
        ("GET", f"/patches{q}", {}, "graphs:read"),
        ("GET", f"/patches/{patch_id}", {}, "graphs:read"),
        ("POST", f"/patches{q}", {"data": b"TX .\n", "headers": {"Content-Type": "application/rdf-patch"}},
         "graphs:write"),
        ("POST", "/sparql", {"data": update, "headers": {"Content-Type": "application/sparql-update"}},
         "graphs:write"),
        ("GET", "/admin/conditions", {}, "admin"),
        ("POST", "/admin/conditions", {"json": condition("urn:c:matrix")}, "admin"),
        ("PUT", "/admin/conditions?iri=urn:c:none", {"json": condition("urn:c:none")}, "admin"),
        ("DELETE", "/admin/conditions?iri=urn:c:none", {}, "admin"),
        ("GET", f"/admin/explain{q}", {}, "admin"),
        ("GET", "/admin/history", {}, "admin"),
        ("GET", "/admin/clients", {}, "admin"),
        ("POST", "/admin/clients", {"json": {"name": "m"}}, "admin"),
        ("DELETE", "/admin/clients/lc-none", {}, "admin"),
        ("GET", "/admin/subscriptions", {}, "admin"),
        ("DELETE", "/admin/subscriptions/999999", {}, "admin"),
        ("POST", "/admin/subscriptions/999999/redeliver", {}, "admin"),
        ("GET", f"/mirrors/events{q}", {}, "graphs:read"),
        ("GET", "/admin/mirrors", {}, "admin"),
        ("POST", "/admin/mirrors", {"json": {}}, "admin"),
        ("POST", "/admin/mirrors/none/trust", {"json": {}}, "admin"),
        ("GET", "/admin/mirrors/none/quarantine", {}, "admin"),
        ("DELETE", "/admin/mirrors?id=none", {}, "admin"),
    ]


def test_every_endpoint_against_no_token_wrong_scope_denied_graph_and_allowed(hub: RunningHub) -> None:
    allowed_graph, denied_graph = G, OTHER
    first = hub.http.put(f"{hub.url}/graphs", params={"graph": allowed_graph}, data=TRIPLE, headers=NT, timeout=30)
    hub.http.put(f"{hub.url}/graphs", params={"graph": denied_graph}, data=TRIPLE, headers=NT, timeout=30)
    patch_id = first.json()["patch"]
    denied_patch = hub.runtime.archive.head(denied_graph)
    hub.http.post(f"{hub.url}/admin/conditions", json=condition("urn:c:rw", writeGraph=[allowed_graph]), timeout=30)
    partner = ("partner",)
    no_scope = hub.session(hub.token("scopeless", partner, ("hub:subscribe",)))
    reader_writer = hub.session(hub.token("rw", partner, ("graphs:read", "graphs:write")))
    admin = hub.http

    def call(session: Any, method: str, path: str, kwargs: dict[str, Any]) -> requests.Response:
        return session.request(method, f"{hub.url}{path}", timeout=30, **kwargs)  # type: ignore[no-any-return]

    for method, path, kwargs, scope in _endpoints(hub, allowed_graph, patch_id):
        anonymous = call(requests, method, path, kwargs)
        assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"].startswith("Bearer"), path
        wrong = call(no_scope, method, path, kwargs)
        assert wrong.status_code == 403 and f'scope="{scope}"' in wrong.headers.get("WWW-Authenticate", ""), path
        caller = admin if scope == "admin" else reader_writer
        allowed = call(caller, method, path, kwargs)
        assert allowed.status_code not in (401, 403, 500), (method, path, allowed.status_code, allowed.text)
    # a graph the conditions do not grant: 403 with the reason, for every graph endpoint
    for method, path, kwargs, scope in _endpoints(hub, denied_graph, denied_patch or ""):
        if scope == "admin":
            continue
        denied = call(reader_writer, method, path, kwargs)
        assert denied.status_code == 403 and "no access condition grants" in denied.text, (method, path, denied.text)
    # the policy graph is the hub's own: not through the graph API, not even for admins
    own = admin.get(f"{hub.url}/graphs", params={"graph": "urn:lucid-hub:policies"}, timeout=30)
    assert own.status_code == 403 and "admin API" in own.text
    # public: health, keys, metadata
    for path in ("/healthz", "/readyz", "/.well-known/jwks.json", "/.well-known/oauth-authorization-server"):
        assert requests.get(f"{hub.url}{path}", timeout=30).status_code == 200, path


def test_bench_auth_runs_and_reports_both_goals(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("bench", "auth", "--conditions", "50", "--graphs", "1000", "--clients", "5", "--requests", "2000")
    assert result.code == 0, result.err
    assert "naive baseline" in result.out and "goal p50 <= 0.2 ms" in result.out
    assert "goal change takes effect for the next request  met" in result.out
    assert run_cli("bench", "auth", "--graphs", "10").code == 1
