"""Clients that register themselves: RFC 7591 (a registration, then authlib's OAuth client
takes a token with the new credentials), SEPA's registration and token request as sepy sends
them from the hub's JSAP over TLS, sepa-js configured from the JSAP, and the attacks: no or
a wrong initial access token, a second registration of one identity, grants the hub does not
issue, registration switched off, a flood."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from lucid_hub.config import Settings
from lucid_hub.errors import ConfigError
from tests.conftest import RunningHub, free_port, running_hub
from tests.queries.test_queries import sepa_js  # noqa: F401 (a session fixture)

INITIAL = "initial-access-token-for-partners"
PARTNERS = """@prefix eccauth: <https://vocab.eccenca.com/auth/> .
<urn:test:registered> a eccauth:AccessCondition ;
    eccauth:requiresGroup "urn:test:registered" ;
    eccauth:grantReadGraphPattern "https://hub.test/graphs/*" ;
    eccauth:grantWriteGraphPattern "https://hub.test/graphs/*" .
"""
ENV = {"LUCID_DCR": "token", "LUCID_DCR_TOKEN": INITIAL, "LUCID_DCR_GROUPS": "urn:test:registered",
       "LUCID_DCR_SCOPES": "graphs:read graphs:write hub:subscribe", "LUCID_DCR_RATE": "12",
       "LUCID_DEFAULT_GRAPH": "https://hub.test/graphs/{account}/default"}


@pytest.fixture
def dcr_hub(tmp_path: Path, db_url: str) -> Iterator[RunningHub]:
    with running_hub(tmp_path / "data", db_url, ENV) as hub:
        answer = hub.http.post(f"{hub.url}/admin/conditions", data=PARTNERS, headers={"Content-Type": "text/turtle"})
        assert answer.status_code in (200, 201), answer.text
        yield hub


def register(hub: RunningHub, metadata: dict[str, Any], token: str | None = INITIAL) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.post(f"{hub.url}/oauth/register", json=metadata, headers=headers, timeout=30)


def test_rfc7591_registration_then_a_standard_oauth_client_takes_a_token(dcr_hub: RunningHub) -> None:
    from authlib.integrations.requests_client import OAuth2Session

    hub = dcr_hub
    assert requests.get(f"{hub.url}/.well-known/oauth-authorization-server",
                        timeout=30).json()["registration_endpoint"] == f"{hub.url}/oauth/register"
    made = register(hub, {"client_name": "acme-dashboard", "grant_types": ["client_credentials"],
                          "scope": "graphs:read admin", "token_endpoint_auth_method": "client_secret_basic"})
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["client_id"].startswith("lc-") and body["client_secret"] and body["client_secret_expires_at"] == 0
    assert body["scope"] == "graphs:read"  # admin is never registered for
    assert made.headers["Cache-Control"] == "no-store"
    session = OAuth2Session(body["client_id"], body["client_secret"], scope="graphs:read")
    token = session.fetch_token(f"{hub.url}/oauth/token", grant_type="client_credentials")
    claims = hub.runtime.tokens.validate(token["access_token"])
    assert claims.groups == frozenset({"urn:test:registered"}) and claims.scopes == frozenset({"graphs:read"})
    # the same identity once only; nothing else is made
    again = register(hub, {"client_name": "acme-dashboard"})
    assert again.status_code == 409 and "registered before" in again.text
    # six registrations of one identity at once: one is made
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(6) as pool:
        statuses = sorted(pool.map(lambda _n: register(hub, {"client_name": "racer"}).status_code, range(6)))
    assert statuses == [201, 409, 409, 409, 409, 409]


def test_registrations_without_the_initial_token_or_with_other_grants_are_refused(dcr_hub: RunningHub) -> None:
    hub = dcr_hub
    before = len(hub.runtime.clients.list())
    cases = [
        (register(hub, {"client_name": "x"}, token=None), 401, "initial access token"),
        (register(hub, {"client_name": "x"}, token="wrong-token-wrong-token"), 401, "not this hub's"),
        (register(hub, {"client_name": "x", "grant_types": ["authorization_code"]}), 400, "grant_types"),
        (register(hub, {"client_name": "x", "response_types": ["code"]}), 400, "response_types"),
        (register(hub, {"grant_types": ["client_credentials"]}), 400, "client_name"),
        (register(hub, {"client_name": "x", "scope": "admin"}), 400, "none of the scopes"),
        (requests.post(f"{hub.url}/oauth/register", data=b"{not json", timeout=30,
                       headers={"Authorization": f"Bearer {INITIAL}", "Content-Type": "application/json"}), 400, ""),
        (requests.post(f"{hub.url}/oauth/sepa/register", json={"register": {}}, timeout=30,
                       headers={"Authorization": f"Bearer {INITIAL}"}), 400, "client_identity"),
        (requests.post(f"{hub.url}/oauth/sepa/token", timeout=30, auth=("lc-nobody", "wrong")), 401, "wrong secret"),
    ]
    for answer, code, says in cases:
        assert answer.status_code == code and says in answer.text, (code, answer.status_code, answer.text[:300])
    assert len(hub.runtime.clients.list()) == before
    # a flood from one address: 12 a minute, then 429 with Retry-After
    statuses = [register(hub, {"client_name": f"flood-{n}"}).status_code for n in range(8)]
    assert statuses[-1] == 429


def test_registration_is_off_unless_the_operator_switches_it_on(hub: RunningHub) -> None:
    refused = requests.post(f"{hub.url}/oauth/register", json={"client_name": "x"}, timeout=30)
    assert refused.status_code == 403 and "LUCID_DCR" in refused.text
    assert "registration_endpoint" not in requests.get(f"{hub.url}/.well-known/oauth-authorization-server",
                                                       timeout=30).json()


@pytest.mark.parametrize("env, says", [
    ({"LUCID_DCR": "maybe"}, "LUCID_DCR must be"),
    ({"LUCID_DCR": "token"}, "initial access token"),
    ({"LUCID_DCR": "token", "LUCID_DCR_TOKEN": "short"}, "at least 16"),
    ({"LUCID_DCR": "open", "LUCID_DCR_SCOPES": "admin"}, "LUCID_DCR_SCOPES"),
    ({"LUCID_JSAP_FILE": "/nonexistent/jsap.json"}, "LUCID_JSAP_FILE"),
])
def test_bad_registration_settings_stop_the_start(tmp_path: Path, env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says), running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'h.db'}",
                                                              env):
        pass


def test_sepy_registers_takes_a_token_and_writes_from_the_jsap_over_tls(tmp_path: Path) -> None:
    """sepy, SEPA's Python client, unchanged: given the hub's JSAP it registers with SEPA's own
    registration, requests a token, and writes the default graph (TLS terminated in front of
    the hub, as an ingress does; sepy does not check certificates)."""
    from sepy.SAPObject import SAPObject
    from sepy.SEPA import SEPA

    from tests.secured_kafka import make_certificates, stunnel_binary, tls_front

    if stunnel_binary() is None:
        pytest.skip("stunnel4 (the TLS front) is not installed on this machine")
    certs = make_certificates(tmp_path, ("localhost",))
    tls, port = free_port(), free_port()
    env = {**ENV, "LUCID_DCR": "open", "LUCID_PUBLIC_URL": f"https://localhost:{tls}"}
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", env, port=port) as hub, \
            tls_front(tls, port, certs, tmp_path, require_client_cert=False):
        answer = hub.http.post(f"http://127.0.0.1:{port}/admin/conditions", data=PARTNERS,
                               headers={"Content-Type": "text/turtle"})
        assert answer.status_code in (200, 201), answer.text
        jsap = requests.get(f"https://localhost:{tls}/jsap", verify=str(certs.ca), timeout=30).json()
        assert jsap["oauth"]["enable"] is True and jsap["sparql11protocol"]["port"] == tls
        client = SEPA(SAPObject(jsap), client_id="sensor-app-1")
        client.sparql_update('INSERT DATA { <urn:x:room1> <urn:x:temperature> "21.5" }')
        found = client.sparql_query("SELECT ?t WHERE { <urn:x:room1> <urn:x:temperature> ?t }")
        assert [b["t"]["value"] for b in found["results"]["bindings"]] == ["21.5"]
        [registered] = [c for c in hub.runtime.clients.list() if c.name == "registered: sensor-app-1"]
        [graph] = [g.iri for g in hub.runtime.archive.graphs() if g.iri.startswith("https://hub.test/graphs/")]
        assert graph == f"https://hub.test/graphs/{registered.client_id}/default"
        # the same identity registers once: a second sepy with it is refused
        with pytest.raises(Exception):  # noqa: B017 (sepy raises its own RegistrationFailedException)
            SEPA(SAPObject(jsap), client_id="sensor-app-1").sparql_update('INSERT DATA { <urn:x:a> <urn:x:b> "c" }')


def test_sepa_js_subscribes_from_the_hubs_jsap(tmp_path: Path, sepa_js: Path) -> None:  # noqa: F811
    jsap_file = tmp_path / "app.jsap.json"
    jsap_file.write_text(json.dumps({"namespaces": {"ex": "http://ex.org/"}, "queries": {
        "TEMPERATURES": {"sparql": "SELECT ?room ?t WHERE { ?room <urn:x:temperature> ?t }"}}}), encoding="utf-8")
    env = {**ENV, "LUCID_JSAP_FILE": str(jsap_file)}
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", env) as hub:
        answer = hub.http.post(f"{hub.url}/admin/conditions", data=PARTNERS, headers={"Content-Type": "text/turtle"})
        assert answer.status_code in (200, 201), answer.text
        jsap = requests.get(f"{hub.url}/jsap", timeout=30).json()
        assert jsap["namespaces"]["ex"] == "http://ex.org/" and "TEMPERATURES" in jsap["queries"]
        token = hub.token("app", ("urn:test:registered",), ("graphs:read", "graphs:write", "hub:subscribe"))
        script = Path(__file__).resolve().parents[1] / "js" / "sepa_jsap.js"
        proc = subprocess.Popen(["node", str(script), hub.url, token, "TEMPERATURES"], stdout=subprocess.PIPE,
                                text=True, env={**os.environ, "NODE_PATH": str(sepa_js)})
        lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(json.loads(line)) for line in proc.stdout or []],
                         daemon=True).start()
        try:
            first = lines.get(timeout=30)
            assert first["kind"] == "notification" and first["value"]["sequence"] == 0, first
            app = hub.session(token)
            assert app.post(f"{hub.url}/sparql", data=b'INSERT DATA { <urn:x:r2> <urn:x:temperature> "19" }',
                            headers={"Content-Type": "application/sparql-update"}).status_code == 200
            second = lines.get(timeout=30)
            assert second["kind"] == "notification", second
            added = second["value"]["addedResults"]["results"]["bindings"]
            assert [b["t"]["value"] for b in added] == ["19"]
            assert proc.wait(timeout=30) == 0
        finally:
            proc.kill()


def test_the_jsap_file_may_not_override_the_hubs_endpoints(tmp_path: Path) -> None:
    jsap_file = tmp_path / "bad.json"
    jsap_file.write_text(json.dumps({"sparql11protocol": {"port": 1}}), encoding="utf-8")
    with pytest.raises(ConfigError, match="is the hub's to say"):
        from lucid_hub.web.jsap import application_part

        application_part(Settings.from_env({"LUCID_JSAP_FILE": str(jsap_file)}))
