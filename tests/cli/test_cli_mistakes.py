"""A user's mistakes on the command line get one line naming the option, file or setting
(exit 2 for usage, 1 otherwise), never an internal error or a traceback; read-only commands
make no data directory; `serve` checks what would stop it before it starts; and every
data-directory command works beside the hub that serves that directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from lucid_hub.demo.ports import free_port, wait_for_port
from lucid_hub.demo.processes import HubProcess

G = "https://acme.example/graphs/kpi"
V1 = '<https://acme.example/kpi/1> <https://acme.example/value> "1" .\n'


def one_line(result: Any, code: int) -> str:
    assert result.code == code, (result.code, result.err)
    assert result.err.count("\n") == 1 and result.err.startswith("lucid-hub: "), result.err
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err
    return str(result.err)


def test_values_that_are_not_iris_urls_or_files_are_usage_errors_naming_the_option(run_cli: Any,
                                                                                   tmp_path: Path) -> None:
    """The reproductions: `publish --graph kpi` and a missing file were "internal error" (70)."""
    (tmp_path / "v1.nt").write_text(V1)
    env = {"LUCID_DATA_DIR": str(tmp_path / "data")}
    assert "'--graph': 'kpi' is not an absolute IRI" in one_line(run_cli("publish", "v1.nt", "--graph", "kpi",
                                                                         env=env), 2)
    assert "'missing.nt' does not exist" in one_line(run_cli("publish", "missing.nt", "--graph", G, env=env), 2)
    assert "'--hub': 'hub.acme' is not an http(s) URL" in one_line(
        run_cli("publish", "v1.nt", "--graph", G, "--hub", "hub.acme", env=env), 2)
    for args in (("log", "--graph", "kpi"), ("mirror", "add", "--hub", "x", "--graph", G, "--client-id", "c",
                                             "--client-secret", "s"),
                 ("subscribe", "--hub", "http://h", "--query", "nope.rq"), ("canon", "nope.nt"),
                 ("rules", "show", "not an iri"), ("verify", "v1.nt", "--jwks", "nope.json")):
        one_line(run_cli(*args, env=env), 2)
    assert not (tmp_path / "data").exists()


def test_a_database_that_refuses_is_one_line_naming_the_setting_and_its_reason(run_cli: Any,
                                                                            tmp_path: Path) -> None:
    """SQLAlchemy's error (a server that is not there) is the database's reason in one line,
    not an internal error; the commands that open no database do not import SQLAlchemy."""
    env = {"LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/hub"}
    said = one_line(run_cli("clients", "list", env=env), 1)
    assert said.startswith("lucid-hub: error: the database (LUCID_DATABASE_URL") and "127.0.0.1" in said, said
    probe = "import sys, lucid_hub.cli; print('sqlalchemy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout == "False\n"


def test_read_only_commands_make_no_data_directory_and_writing_ones_say_when_they_do(run_cli: Any,
                                                                                     tmp_path: Path) -> None:
    """A mistyped LUCID_DATA_DIR silently made a 280 KB database, even for `log`; a client
    created there was one the running hub never heard of."""
    wrong = tmp_path / "nonexistent" / "x" / "y"
    env = {"LUCID_DATA_DIR": str(wrong)}
    for args in (("log", "--graph", G), ("clients", "list"), ("mirror", "list")):
        assert f"no hub's data at {wrong} (LUCID_DATA_DIR)" in one_line(run_cli(*args, env=env), 1)
    assert not (tmp_path / "nonexistent").exists()
    created = run_cli("clients", "create", "--name", "partner", env=env)
    assert created.code == 0 and json.loads(created.out)["client_secret"]
    assert created.err == f"lucid-hub: made a new hub's data directory: {wrong} (LUCID_DATA_DIR)\n"
    again = run_cli("clients", "create", "--name", "another", env=env)
    assert again.code == 0 and again.err == ""  # said once: the directory is there now
    assert sorted(c["name"] for c in json.loads(run_cli("clients", "list", env=env).out)) == ["another", "partner"]


def _serve(tmp_path: Path, port: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lucid_hub.cli", "serve", "--port", str(port)], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **env}, cwd=tmp_path, check=False)


@pytest.mark.slow
def test_serve_says_in_one_line_what_stops_it_before_it_starts(tmp_path: Path) -> None:
    """A port in use printed "serving on ...", five gunicorn errors and exit 1; access
    conditions that do not load printed a traceback and "Worker failed to boot"."""
    with HubProcess("first", tmp_path / "first") as running:
        taken = _serve(tmp_path, running.port, {"LUCID_DATA_DIR": str(tmp_path / "second")})
    assert taken.returncode == 1 and "serving on" not in taken.stdout + taken.stderr
    assert taken.stderr.strip().splitlines() == [
        f"lucid-hub: error: cannot listen on 127.0.0.1:{running.port}: Address already in use (another hub there?); "
        "choose another port with --port or LUCID_PORT"]
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.ttl").write_text('@prefix eccauth: <https://w3id.org/eccauth#> .\n'
                                    '<urn:c> a eccauth:AccessCondition ; eccauth:requiresGroup "g" .\n')
    bad = _serve(tmp_path, free_port(), {"LUCID_DATA_DIR": str(tmp_path / "third"), "LUCID_POLICIES_DIR": str(policies)})
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and "serving on" not in bad.stdout
    assert len(bad.stderr.strip().splitlines()) == 1 and str(policies / "p.ttl") in bad.stderr
    missing = _serve(tmp_path, free_port(), {"LUCID_DATA_DIR": str(tmp_path / "third"),
                                             "LUCID_POLICIES_DIR": str(tmp_path / "policie")})
    assert missing.returncode == 1 and missing.stderr.strip().splitlines() == [
        f"lucid-hub: error: LUCID_POLICIES_DIR {tmp_path / 'policie'} is not a directory (a misspelt one would start "
        "a hub without access conditions)"]
    database = _serve(tmp_path, free_port(), {"LUCID_DATA_DIR": str(tmp_path / "fourth"),
                                              "LUCID_DATABASE_URL": "postgresql+psycopg://lucid:s3cr3t@127.0.0.1:1/x"})
    assert database.returncode == 1 and len(database.stderr.strip().splitlines()) == 1
    assert "LUCID_DATABASE_URL" in database.stderr and "s3cr3t" not in database.stderr  # the password masked


@pytest.mark.slow
def test_serve_port_sets_the_public_url_unless_it_is_configured(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "LUCID_DATA_DIR": str(tmp_path / "data")}
    env.pop("LUCID_PUBLIC_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "lucid_hub.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_port(port)
        discovery = requests.get(f"http://127.0.0.1:{port}/.well-known/oauth-authorization-server", timeout=30)
        assert discovery.json()["issuer"] == f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    assert f"public URL http://127.0.0.1:{port}" in out
    assert "alembic" not in out  # what the schema migrations found at start is not news


@pytest.fixture
def served(tmp_path: Path) -> Iterator[HubProcess]:
    """A hub serving `tmp_path/data` as `lucid-hub serve` runs it."""
    with HubProcess("acme", tmp_path / "data") as hub:
        yield hub


@pytest.mark.slow
def test_every_data_directory_command_works_beside_the_hub_that_serves_it(served: HubProcess, run_cli: Any,
                                                                          tmp_path: Path) -> None:
    """`rules add` on the data directory failed while the hub ran ("Resource temporarily
    unavailable ... store/LOCK"); `publish` too. Each goes through the running hub now, and
    what it does is what that hub sees."""
    env = {"LUCID_DATA_DIR": str(served.data), "LUCID_PUBLIC_URL": served.url}
    (tmp_path / "v1.nt").write_text(V1)
    published = run_cli("publish", "v1.nt", "--graph", G, "--author", "alice", env=env)
    assert published.code == 0 and "published urn:sha256:" in published.out, published.err
    assert served.call("GET", "/graphs", params={"graph": G}, headers={"Accept": "application/n-triples"}).text == V1
    (tmp_path / "r.rules").write_text(f"RULE <urn:acme:rules:seen>\nON INSERT {{ GRAPH <{G}> {{ ?s ?p ?o }} }}\n"
                                      f"DO INSERT {{ GRAPH <{G}-seen> {{ ?s <urn:seen> true }} }} WHERE {{}}\n")
    assert run_cli("rules", "add", "r.rules", env=env).code == 0
    assert [r["iri"] for r in served.call("GET", "/rules").json()["rules"]] == ["urn:acme:rules:seen"]
    listed = run_cli("rules", "list", env=env)
    assert listed.code == 0 and json.loads(listed.out)[0]["iri"] == "urn:acme:rules:seen"
    shown = run_cli("rules", "show", "urn:acme:rules:seen", env=env)
    assert shown.code == 0 and "RULE <urn:acme:rules:seen>" in shown.out
    (tmp_path / "p.rdfp").write_text('TX .\nA <https://acme.example/kpi/2> <https://acme.example/value> "2" .\nTC .\n')
    tried = run_cli("rules", "test", "r.rules", "--patch", "p.rdfp", "--graph", G, env=env)
    assert tried.code == 0 and json.loads(tried.out.splitlines()[0])["rule"] == "urn:acme:rules:seen", tried.err
    created = run_cli("clients", "create", "--name", "partner", "--scope", "graphs:read", env=env)
    assert created.code == 0, created.err
    client = json.loads(created.out)
    token = requests.post(f"{served.url}/oauth/token", data={"grant_type": "client_credentials"},
                          auth=(client["client_id"], client["client_secret"]), timeout=30)
    assert token.status_code == 200  # the running hub knows the client
    assert client["client_id"] in {c["client_id"] for c in json.loads(run_cli("clients", "list", env=env).out)}
    assert json.loads(run_cli("mirror", "list", env=env).out) == []
    assert run_cli("clients", "delete", client["client_id"], env=env).code == 0
    assert run_cli("rules", "remove", "urn:acme:rules:seen", env=env).code == 0
    assert served.call("GET", "/rules").json()["rules"] == []
    history = run_cli("log", "--graph", G, env=env)
    assert history.code == 0 and "alice, as stated by lucid-hub operator (command line)" in history.out


@pytest.mark.slow
def test_mirror_add_and_subscribe_check_the_graph_at_the_publisher_first(served: HubProcess, run_cli: Any,
                                                                          tmp_path: Path) -> None:
    """A misspelt graph: `mirror add` exited 0 and the mirror turned `revoked` later;
    `subscribe --graph <typo>` printed `# 0` and waited forever."""
    served.publish(G, V1)
    # the partner may read both IRIs (so only the graph's absence can refuse the typo)
    served.call("POST", "/admin/conditions", json={"iri": "urn:c:partner", "requiresGroup": ["partners"],
                                                    "readGraph": [G, G + "s"]})
    client_id, secret = served.partner_client("partner", "partners", "http://127.0.0.1/callback/")
    env = {"LUCID_DATA_DIR": str(tmp_path / "partner"), "LUCID_DEV_MODE": "1"}
    assert run_cli("db", "upgrade", env=env).code == 0
    typo = run_cli("mirror", "add", "--hub", f"{served.url}/hub", "--graph", G + "s", "--client-id", client_id,
                   "--client-secret", secret, env=env)
    assert f"has no graph <{G}s>" in one_line(typo, 1)
    assert json.loads(run_cli("mirror", "list", env=env).out) == []
    (tmp_path / "q.rq").write_text("SELECT * WHERE { ?s ?p ?o }")
    creds = {"LUCID_CLIENT_ID": client_id, "LUCID_CLIENT_SECRET": secret}
    waiting = run_cli("subscribe", "--hub", served.url, "--query", "q.rq", "--graph", G + "s", "--count", "1",
                      env=creds)
    assert f"has no graph <{G}s>" in one_line(waiting, 1)
    ok = run_cli("subscribe", "--hub", served.url, "--query", "q.rq", "--graph", G, "--count", "1", env=creds)
    assert ok.code == 0 and "# 0" in ok.out


@pytest.mark.slow
def test_a_refused_address_names_the_setting_that_allows_it(served: HubProcess, run_cli: Any, tmp_path: Path) -> None:
    """Two hubs on one machine: `mirror add` said the address was non-public in urllib3's
    retry text. The refusal is one line of its own, naming what to set (and on which hub)."""
    client_id, secret = served.partner_client("partner", "partners", "http://127.0.0.1/callback/")
    env = {"LUCID_DATA_DIR": str(tmp_path / "partner")}
    assert run_cli("db", "upgrade", env=env).code == 0
    refused = one_line(run_cli("mirror", "add", "--hub", f"{served.url}/hub", "--graph", G, "--client-id", client_id,
                               "--client-secret", secret, env=env), 1)
    assert "non-public address (127.0.0.1)" in refused and "LUCID_CALLBACK_ALLOW_CIDRS" in refused
    assert "HTTPConnectionPool" not in refused and "Max retries" not in refused
