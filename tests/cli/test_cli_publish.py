"""`lucid-hub publish`, `log` and `db upgrade` as users run them."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from lucid_hub.demo.ports import free_port, wait_for_port

G = "http://example.org/graphs/kpi"
V1 = '<http://ex/kpi1> <http://ex/value> "12.50"^^<http://www.w3.org/2001/XMLSchema#decimal> .\n'
V2 = V1 + '<http://ex/kpi2> <http://ex/value> "3" .\n'


def one_line_error(result) -> str:  # type: ignore[no-untyped-def]
    assert result.code != 0 and result.err.count("\n") == 1 and "Traceback" not in result.err, result.err
    return str(result.err)


def test_publish_into_the_data_directory_and_read_the_log(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "v1.nt").write_text(V1)
    (tmp_path / "v2.nt").write_text(V2)
    env = {"LUCID_DATA_DIR": str(tmp_path / "data")}
    assert run_cli("db", "upgrade", env=env).code == 0
    first = run_cli("publish", "v1.nt", "--graph", G, "--message", "Q3", "--author", "alice", env=env)
    assert first.code == 0 and "published urn:sha256:" in first.out
    assert "no changes" in run_cli("publish", "v1.nt", "--graph", G, env=env).out
    assert run_cli("publish", "v2.nt", "--graph", G, env=env).code == 0
    history = run_cli("log", "--graph", G, env=env)
    lines = history.out.splitlines()
    assert len(lines) == 2 and "prev=-" in lines[0] and "alice" in lines[0] and "Q3" in lines[0]
    assert lines[0].split()[0] in lines[1] and "+1" in lines[1]


def test_publish_bad_input_gives_one_line(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = {"LUCID_DATA_DIR": str(tmp_path / "data")}
    (tmp_path / "bad.nt").write_text(V1 + "<http://ex/s> <http://ex/p> \"x .\n")
    assert "line 2" in one_line_error(run_cli("publish", "bad.nt", "--graph", G, env=env))
    (tmp_path / "v1.nt").write_text(V1)
    one_line_error(run_cli("publish", "v1.nt", "--graph", "not an iri", env=env))
    one_line_error(run_cli("publish", "missing.nt", "--graph", G, env=env))
    assert "no hub's data at" in one_line_error(run_cli("log", "--graph", G, env=env))  # (and none was made)
    assert not (tmp_path / "data").exists()
    (tmp_path / "reserved.nt").write_text('<urn:lucid-hub:bnode:a.0> <http://ex/p> "x" .\n')
    assert "reserved" in one_line_error(run_cli("publish", "reserved.nt", "--graph", G, env=env))


def test_publish_to_a_running_hub_and_refuse_its_data_directory(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "v1.nt").write_text(V1)
    (tmp_path / "v2.nt").write_text(V1 + '<http://ex/s2> <http://ex/p> "2" .\n')
    port = free_port()
    env = {"LUCID_DATA_DIR": str(tmp_path / "data")}
    import json
    import os

    created = run_cli("clients", "create", "--name", "publisher job", "--group", "lucid-hub-admins",
                      "--scope", "graphs:write", env=env)
    assert created.code == 0, created.err
    client = json.loads(created.out)
    assert client["scopes"] == ["graphs:write"] and client["client_secret"]
    creds = {"LUCID_CLIENT_ID": client["client_id"], "LUCID_CLIENT_SECRET": client["client_secret"]}
    proc = subprocess.Popen([sys.executable, "-m", "lucid_hub.cli", "serve", "--port", str(port)],
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        hub = f"http://127.0.0.1:{port}"
        assert "needs an access token" in one_line_error(run_cli("publish", "v1.nt", "--graph", G, "--hub", hub))
        wrong = {**creds, "LUCID_CLIENT_SECRET": "wrong"}
        assert "refused the client credentials (401)" in one_line_error(
            run_cli("publish", "v1.nt", "--graph", G, "--hub", hub, env=wrong))
        out = run_cli("publish", "v1.nt", "--graph", G, "--hub", hub, env=creds)
        assert out.code == 0 and "published urn:sha256:" in out.out
        log = run_cli("log", "--graph", G, env=env)
        assert f"publisher job ({client['client_id']})" in log.out  # the author is the client
        beside = run_cli("publish", "v2.nt", "--graph", G, env=env)  # into the data directory: through its hub
        assert beside.code == 0 and "published urn:sha256:" in beside.out, beside.err
        assert "lucid-hub operator (command line)" in run_cli("log", "--graph", G, env=env).out
        assert "cannot reach" in one_line_error(run_cli("publish", "v1.nt", "--graph", G, "--hub",
                                                        f"http://127.0.0.1:{free_port()}", env=creds))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
