"""Real triple stores for the tests: Oxigraph server (the `oxigraph` command from PyPI) and
Virtuoso Open Source (Debian's `virtuoso-opensource`), each started on loopback in a
temporary directory, each a skip with its reason where the machine cannot run it."""

from __future__ import annotations

import configparser
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

VIRTUOSO_INI = Path("/etc/virtuoso-opensource-7/virtuoso.ini")


@dataclass
class RunningStore:
    """A store's endpoints, and its process (to stop and start it again)."""

    kind: str
    query_url: str
    update_url: str
    gsp_url: str
    process: subprocess.Popen[bytes]
    command: list[str]
    cwd: Path

    auth: dict[str, str] = field(default_factory=dict)  # settings of its authenticated endpoints

    def env(self, **extra: str) -> dict[str, str]:
        """The hub settings that keep graphs in this store (with credentials where it takes them)."""
        return {"LUCID_STORE_QUERY_URL": self.query_url, "LUCID_STORE_UPDATE_URL": self.update_url,
                "LUCID_STORE_GSP_URL": self.gsp_url, **self.auth, **extra}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def start(self) -> None:
        self.process = subprocess.Popen(self.command, cwd=self.cwd, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        wait_for(self.query_url, self.process)

    def clear(self) -> None:
        """Every graph a test wrote gone (between tests sharing the store; Virtuoso's own
        system graphs stay)."""
        found = requests.post(self.query_url, timeout=60, headers={"Accept": "application/sparql-results+json"},
                              data={"query": "SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } }"})
        assert found.status_code == 200, found.text
        graphs = [row["g"]["value"] for row in found.json()["results"]["bindings"]]
        mine = [g for g in graphs if g.startswith("urn:") or ".example" in g or "example." in g]
        if mine:
            dropped = requests.post(self.update_url, timeout=60, data={
                "update": " ;\n".join(f"DROP SILENT GRAPH <{g}>" for g in mine)})
            assert dropped.status_code < 300, dropped.text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(query_url: str, process: subprocess.Popen[bytes], seconds: float = 60.0) -> None:
    """Until the store answers a query (polling a server that is starting: nothing to wait on)."""
    deadline = time.monotonic() + seconds
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the store exited with {process.returncode} before it answered")
        try:
            answer = requests.post(query_url, data={"query": "ASK {}"}, timeout=5,
                                   headers={"Accept": "application/sparql-results+json"})
            if answer.status_code == 200:
                return
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the store at {query_url} did not answer within {seconds} s")
        time.sleep(0.1)


def oxigraph_server(tmp: Path) -> Iterator[RunningStore]:
    command = shutil.which("oxigraph", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                             os.environ.get("PATH", "")]))
    if command is None:
        pytest.skip("Oxigraph server is not installed (the `oxigraph` command from PyPI: pip install oxigraph)")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [command, "serve", "--location", str(tmp / "oxigraph"), "--bind", f"127.0.0.1:{port}"]
    store = RunningStore("oxigraph", f"{base}/query", f"{base}/update", f"{base}/store",
                         subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                         argv, tmp)
    try:
        wait_for(store.query_url, store.process)
        yield store
    finally:
        store.stop()


def virtuoso(tmp: Path) -> Iterator[RunningStore]:
    server, isql = shutil.which("virtuoso-t"), shutil.which("isql-vt")
    if server is None or isql is None or not VIRTUOSO_INI.is_file():
        pytest.skip("Virtuoso Open Source is not installed (Debian: apt-get install -y virtuoso-opensource)")
    db = tmp / "virtuoso"
    db.mkdir()
    ini = configparser.RawConfigParser(strict=False, inline_comment_prefixes=(";",))
    ini.optionxform = str  # type: ignore[assignment,method-assign]
    ini.read(VIRTUOSO_INI)
    for section in ("Database", "TempDatabase"):
        for key in ("DatabaseFile", "ErrorLogFile", "LockFile", "TransactionFile", "xa_persistent_file"):
            if ini.has_option(section, key):
                ini.set(section, key, str(db / Path(ini.get(section, key)).name))
    sql_port, http_port = free_port(), free_port()
    ini.set("Parameters", "ServerPort", f"127.0.0.1:{sql_port}")
    ini.set("Parameters", "DirsAllowed", f"., {db}, /usr/share/virtuoso-opensource-7/vad")
    ini.set("HTTPServer", "ServerPort", f"127.0.0.1:{http_port}")
    ini.set("HTTPServer", "ServerRoot", "/var/lib/virtuoso-opensource-7/vsp")
    config = db / "virtuoso.ini"
    with config.open("w") as handle:
        ini.write(handle)
    argv = [server, "+foreground", "+configfile", str(config)]
    base = f"http://127.0.0.1:{http_port}"
    store = RunningStore("virtuoso", f"{base}/sparql", f"{base}/sparql", f"{base}/sparql-graph-crud",
                         subprocess.Popen(argv, cwd=db, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL), argv, db)
    try:
        wait_for(store.query_url, store.process, 120)
        granted = subprocess.run([isql, str(sql_port), "dba", "dba",
                                  "exec=grant SPARQL_UPDATE to \"SPARQL\";"], capture_output=True, timeout=60)
        assert granted.returncode == 0, granted.stdout + granted.stderr
        # Updates as Virtuoso is deployed: /sparql-auth with Digest credentials (its `dba` here).
        password = db / "password"
        password.write_text("dba\n")
        store.auth = {"LUCID_STORE_UPDATE_URL": f"{base}/sparql-auth", "LUCID_STORE_GSP_URL": f"{base}/sparql-graph-crud-auth",
                      "LUCID_STORE_USER": "dba", "LUCID_STORE_PASSWORD_FILE": str(password), "LUCID_STORE_AUTH": "digest"}
        yield store
    finally:
        store.stop()
