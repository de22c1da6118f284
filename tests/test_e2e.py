"""End to end: a publisher hub and a partner hub as two `lucid-hub serve` processes on
loopback, with the embedded SQL log and with Kafka (the tansu broker fixture). The mirror
stays isomorphic through random publishes with blank nodes, catches up after the partner is
killed, and a delivery altered in flight by a loopback proxy is never applied."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pyoxigraph as ox
import pytest
import requests

from lucid_hub.demo.ports import free_port
from lucid_hub.demo.processes import HubProcess, wait_until
from lucid_hub.rdf.canon import Canonicalizer
from tests.proxy import LoopbackProxy

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
    return str(hub.call("GET", "/graphs", params={"graph": G}, headers={"Accept": "application/n-triples"}
                        ).headers["ETag"].strip('"'))


def state(acme: HubProcess, globex: HubProcess) -> str:
    """What to say when a mirror does not follow: the publisher's head and subscriptions, the
    mirror as its hub reports it (state, head, last error), and the end of both hubs' logs."""
    subscriptions = str(acme.subscriptions())[:1500]
    return (f"publisher's head {published_head(acme)}\nsubscriptions {subscriptions}\nmirror {globex.mirrors()}\n"
            f"publisher's log\n{acme.log_tail(40)}\nmirror's log\n{globex.log_tail(40)}")


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
            wait_until(lambda: head_of(globex) == head, 60, "the mirror to follow", lambda: state(acme, globex))
            assert canonical(globex.content(G), canonicalizer) == canonical(acme.content(G), canonicalizer)

            globex.stop(kill=True)  # SIGKILL mid-stream: no clean-up
            for _ in range(10):
                acme.publish(G, random_version(rng))
            globex.start()  # catches up from ACME's archive at start (and by gap filling)
            head = published_head(acme)
            wait_until(lambda: head_of(globex) == head, 60, "the restarted mirror to catch up",
                       lambda: state(acme, globex))
            assert canonical(globex.content(G), canonicalizer) == canonical(acme.content(G), canonicalizer)
            mirror = globex.mirrors()[0]
            assert mirror["quarantined"] == 0 and mirror["length"] == len(acme.call(
                "GET", "/patches", params={"graph": G}, headers={"Accept": "application/json"}).json()["patches"])
        finally:
            globex.stop()


@pytest.fixture
def globex_behind_a_proxy(tmp_path: Path) -> Iterator[tuple[HubProcess, LoopbackProxy]]:
    globex = HubProcess("Globex", tmp_path / "globex")
    proxy = LoopbackProxy(globex.url)
    globex.env["LUCID_PUBLIC_URL"] = proxy.url  # its callbacks are reached through the proxy
    globex.start()
    try:
        yield globex, proxy
    finally:
        globex.stop()
        proxy.close()


@pytest.mark.slow
def test_a_delivery_altered_in_flight_is_not_applied_and_the_gap_is_filled(
        tmp_path: Path, globex_behind_a_proxy: tuple[HubProcess, LoopbackProxy],
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


@pytest.mark.slow
def test_after_the_publishers_key_rotation_a_mirror_quarantines_until_the_new_key_is_trusted(
        tmp_path: Path, run_cli, canonicalizer: Canonicalizer) -> None:  # type: ignore[no-untyped-def]
    import json

    rng = random.Random(11)
    acme = HubProcess("ACME", tmp_path / "acme").start()
    globex = HubProcess("Globex", tmp_path / "globex").start()
    partner_env = {"LUCID_DATA_DIR": str(tmp_path / "globex"), "LUCID_DEV_MODE": "1"}  # acme is on loopback
    try:
        acme.publish(G, random_version(rng))
        connect(acme, globex)
        before = acme.publish(G, random_version(rng))
        wait_until(lambda: head_of(globex) == before, 60, "the mirror to follow")
        old_kid = globex.mirrors()[0]["keys"]

        acme.stop()  # the publisher rotates its key: the hub signs with the key it loads at start
        assert run_cli("keys", "rotate", "--dir", tmp_path / "acme" / "keys").code == 0
        acme.start()
        after = acme.publish(G, random_version(rng))
        wait_until(lambda: globex.mirrors()[0]["quarantined"] == 1, 60, "the unknown key's patch to be quarantined")
        assert head_of(globex) == before  # nothing unverified applied

        jwks = requests.get(f"{acme.url}/.well-known/jwks.json", timeout=30).json()
        assert [k["kid"] for k in jwks["keys"]][1:] == old_kid  # the retired key stays published
        (tmp_path / "only-new.json").write_text(json.dumps({"keys": jwks["keys"][:1]}))
        dropped = run_cli("mirror", "trust", G, "--jwks", tmp_path / "only-new.json", env=partner_env)
        assert dropped.code == 1 and "--replace" in dropped.err and len(dropped.err.strip().splitlines()) == 1
        mirror_id = globex.mirrors()[0]["id"]
        for body, reason in (({"jwks": str(tmp_path / "only-new.json")}, "http(s) URL"), ({}, "is required"),
                             ({"jwks": f"{acme.url}/x", "replace": "yes"}, "true or false"),
                             ({"jwks": f"{acme.url}/no-keys-here"}, "HTTP 404")):
            answer = globex.call("POST", f"/admin/mirrors/{mirror_id}/trust", json=body, expect=(400,))
            assert reason in answer.text, answer.text
        globex.call("POST", "/admin/mirrors/no-such-mirror/trust", json={"jwks": f"{acme.url}/x"}, expect=(404,))
        assert globex.mirrors()[0]["keys"] == old_kid  # every refusal left the pin alone

        trusted = run_cli("mirror", "trust", G, "--jwks", f"{acme.url}/.well-known/jwks.json", env=partner_env)
        assert trusted.code == 0, trusted.err
        assert json.loads(trusted.out)["keys"] == [k["kid"] for k in jwks["keys"]]
        wait_until(lambda: head_of(globex) == after, 60, "the quarantined patch to be fetched again and applied")
        assert canonical(globex.content(G), canonicalizer) == canonical(acme.content(G), canonicalizer)
    finally:
        globex.stop()
        acme.stop()
