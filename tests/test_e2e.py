"""End to end: a publisher hub and a partner hub as two `lucid-hub serve` processes on
loopback, with the embedded SQL log and with Kafka (the tansu broker fixture). The mirror
stays isomorphic through random publishes with blank nodes, catches up after the partner is
killed, and a delivery altered in flight by a loopback proxy is never applied."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyoxigraph as ox
import pytest
import requests

from lucid_hub.hubproc import HubProcess, wait_until
from lucid_hub.loopback import free_port
from lucid_hub.rdf.canon import Canonicalizer

G = "https://acme.example/graphs/orders"
GROUP = "partner-globex"


def random_version(rng: random.Random) -> str:
    """A version of the orders graph: ground triples, blank-node lines and an RDF list."""
    lines = ["@prefix ex: <https://acme.example/id/> ."]
    for order in rng.sample(range(12), rng.randint(2, 6)):
        lines.append(f'ex:po-{order} ex:status "{rng.choice(["open", "confirmed", "shipped"])}" ;')
        parts = ", ".join(f'[ ex:part ex:p{rng.randint(0, 4)} ; ex:qty {rng.randint(1, 3) * 100} ]'
                          for _ in range(rng.randint(1, 3)))
        lines.append(f"    ex:line {parts} ;")
        lines.append(f"    ex:route ( {' '.join(f'ex:hub{rng.randint(0, 3)}' for _ in range(rng.randint(1, 3)))} ) .")
    return "\n".join(lines) + "\n"


def canonical(text: str, canon: Canonicalizer) -> str:
    return str(canon.canonicalize([str(q.triple) for q in ox.parse(text, format=ox.RdfFormat.N_TRIPLES)]))


@pytest.fixture(params=["sql-log", "kafka"])
def publisher_env(request: pytest.FixtureRequest) -> dict[str, str]:
    if request.param == "kafka":
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        return {"LUCID_KAFKA_BOOTSTRAP": bootstrap, "LUCID_KAFKA_TOPIC": f"e2e-{free_port()}"}
    return {}


def connect(acme: HubProcess, globex: HubProcess) -> None:
    client_id, secret = acme.partner_client("Globex hub", GROUP, f"{globex.env['LUCID_PUBLIC_URL']}/callback/")
    acme.grant_read("urn:c:globex-orders", GROUP, G)
    globex.mirror(f"{acme.url}/hub", G, client_id, secret)


def published_head(hub: HubProcess) -> str:
    return str(hub.call("GET", "/graphs", params={"graph": G}).headers["ETag"].strip('"'))


def head_of(hub: HubProcess) -> str | None:
    mirrors = hub.mirrors()
    return mirrors[0]["head"] if mirrors else None


@pytest.mark.slow
def test_a_mirror_stays_isomorphic_and_catches_up_after_being_killed(
        tmp_path: Path, publisher_env: dict[str, str], canonicalizer: Canonicalizer) -> None:
    rng = random.Random(7)
    with HubProcess("ACME", tmp_path / "acme", {**publisher_env, "LUCID_DELIVERY_BACKOFF_BASE": "0.1",
                                                 "LUCID_DELIVERY_BACKOFF_MAX": "0.5"}) as acme:
        globex = HubProcess("Globex", tmp_path / "globex").start()
        try:
            acme.publish(G, random_version(rng))
            connect(acme, globex)
            for _ in range(8):
                acme.publish(G, random_version(rng))
            head = published_head(acme)
            wait_until(lambda: head_of(globex) == head, 60, "the mirror to follow")
            assert canonical(globex.content(G), canonicalizer) == canonical(acme.content(G), canonicalizer)

            globex.stop(kill=True)  # SIGKILL mid-stream: no clean-up
            for _ in range(10):
                acme.publish(G, random_version(rng))
            globex.start()  # catches up from ACME's archive at start (and by gap filling)
            head = published_head(acme)
            wait_until(lambda: head_of(globex) == head, 60, "the restarted mirror to catch up")
            assert canonical(globex.content(G), canonicalizer) == canonical(acme.content(G), canonicalizer)
            mirror = globex.mirrors()[0]
            assert mirror["quarantined"] == 0 and mirror["length"] == len(acme.call(
                "GET", "/patches", params={"graph": G}, headers={"Accept": "application/json"}).json()["patches"])
        finally:
            globex.stop()


class TamperingProxy:
    """Forwards requests to a hub; the POST bodies it is told to alter, it alters."""

    def __init__(self, target: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.alter_next = threading.Event()
        self.altered = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                if method == "POST" and proxy.alter_next.is_set() and b'"' in body:
                    proxy.alter_next.clear()
                    proxy.altered += 1
                    body = body.replace(b'"', b'"X', 1)  # one literal changed in flight
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                answer = requests.request(method, f"{target}{self.path}", data=body, headers=headers, timeout=30)
                self.send_response(answer.status_code)
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def do_GET(self) -> None:
                self._forward("GET")

            def do_POST(self) -> None:
                self._forward("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join(10)


@pytest.fixture
def globex_behind_a_proxy(tmp_path: Path) -> Iterator[tuple[HubProcess, TamperingProxy]]:
    globex = HubProcess("Globex", tmp_path / "globex")
    proxy = TamperingProxy(globex.url)
    globex.env["LUCID_PUBLIC_URL"] = proxy.url  # its callbacks are reached through the proxy
    globex.start()
    try:
        yield globex, proxy
    finally:
        globex.stop()
        proxy.close()


@pytest.mark.slow
def test_a_delivery_altered_in_flight_is_not_applied_and_the_gap_is_filled(
        tmp_path: Path, globex_behind_a_proxy: tuple[HubProcess, TamperingProxy],
        canonicalizer: Canonicalizer) -> None:
    globex, proxy = globex_behind_a_proxy
    rng = random.Random(11)
    with HubProcess("ACME", tmp_path / "acme") as acme:
        first = acme.publish(G, random_version(rng))
        connect(acme, globex)
        wait_until(lambda: head_of(globex) == first and globex.mirrors()[0]["state"] == "active", 60, "the clone")
        proxy.alter_next.set()
        altered = acme.publish(G, random_version(rng))  # its delivery is altered: HMAC mismatch
        wait_until(lambda: globex.mirrors()[0]["hmac_failures"] == 1, 30, "the altered delivery")
        assert proxy.altered == 1 and head_of(globex) == first  # not applied
        latest = acme.publish(G, random_version(rng))  # follows the patch Globex never applied
        wait_until(lambda: head_of(globex) == latest, 30, "the gap to be filled from the archive")
        assert [r["id"] for r in acme.call("GET", "/patches", params={"graph": G},
                                           headers={"Accept": "application/json"}).json()["patches"]][1] == altered
        assert canonical(globex.content(G), canonicalizer) == canonical(acme.content(G), canonicalizer)
        assert globex.mirrors()[0]["quarantined"] == 0  # ignored (HMAC), not quarantined

        # access withdrawn: nothing more is applied and the mirror is told
        acme.withdraw("urn:c:globex-orders")
        acme.publish(G, random_version(rng))
        wait_until(lambda: globex.mirrors()[0]["state"] == "revoked", 30, "the denial")
        assert head_of(globex) == latest
