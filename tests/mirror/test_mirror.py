"""Mirrors: a partner hub subscribes to a publisher hub's graph, verifies every delivery and
keeps an exact copy; gaps are filled from the archive; whatever cannot be verified is
quarantined. Two real hubs on loopback HTTP ports, each with its own database and store."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyoxigraph as ox
import pytest
import requests
from sqlalchemy import select

from lucid_hub.db.models import Mirror
from lucid_hub.diff.local import diff_graph
from lucid_hub.rdf.rdfpatch import write_rdf_patch
from lucid_hub.signing import sign_patch
from tests.conftest import RunningHub, running_hub

G = "https://acme.example/graphs/kpi"
TTL = {"Content-Type": "text/turtle"}
DEV = {"LUCID_DEV_MODE": "1", "LUCID_LEASE_MIN": "120"}


def wait(what: Callable[[], bool], timeout: float = 30, show: Callable[[], object] = lambda: "") -> None:
    """Until `what` holds, re-checked every 50 ms (a condition on another hub, not a sleep)."""
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached in time {show()}")
        time.sleep(0.05)


@pytest.fixture
def hubs(tmp_path: Path) -> Iterator[tuple[RunningHub, RunningHub]]:
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", DEV) as publisher, \
            running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}", DEV) as partner:
        yield publisher, partner


def publish(hub: RunningHub, turtle: str) -> str:
    body = "@prefix ex: <https://acme.example/kpi/> .\n" + turtle
    answer = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, headers=TTL, data=body.encode(), timeout=30)
    assert answer.status_code in (200, 201), answer.text
    return str(answer.json()["patch"])


def version(i: int) -> str:
    """A version of the KPI graph with blank-node structures that change with `i`."""
    return (f'ex:otif ex:value "{i}" ; ex:measuredAt [ ex:site ex:plantA ; ex:week "W{i}" ] .\n'
            f'ex:lead ex:value "{i % 3}" ; ex:parts ( ex:a ex:b{i % 2} ) .\n')


def partner_client(publisher: RunningHub, partner: RunningHub, grant: bool = True) -> tuple[str, str]:
    record, secret = publisher.runtime.clients.create(
        "Globex hub", groups=["partner-globex"], scopes=["hub:subscribe", "graphs:read"],
        callback_prefixes=[f"{partner.url}/callback/"])
    if grant:
        body = {"iri": "urn:c:globex-reads-kpi", "requiresGroup": ["partner-globex"], "readGraph": [G]}
        assert publisher.http.post(f"{publisher.url}/admin/conditions", json=body, timeout=30).status_code == 201
    return record.client_id, secret


def add_mirror(publisher: RunningHub, partner: RunningHub, **extra: str) -> dict[str, object]:
    client_id, secret = partner_client(publisher, partner)
    answer = partner.http.post(f"{partner.url}/admin/mirrors", timeout=30, json={
        "hub": f"{publisher.url}/hub", "graph": G, "client_id": client_id, "client_secret": secret, **extra})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def mirror(partner: RunningHub) -> dict[str, object]:
    listed = partner.http.get(f"{partner.url}/admin/mirrors", timeout=30).json()["mirrors"]
    assert len(listed) == 1
    return dict(listed[0])


def canonical(hub: RunningHub) -> str:
    text = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"Accept": "application/n-triples"},
                        timeout=30).text
    quads = [str(q.triple) for q in ox.parse(text, format=ox.RdfFormat.N_TRIPLES)]
    return str(hub.runtime.canonicalizer.canonicalize(quads))


def test_a_mirror_clones_follows_and_stays_isomorphic(hubs: tuple[RunningHub, RunningHub]) -> None:
    publisher, partner = hubs
    for i in range(4):  # history before the mirror exists: the clone replays it (pages of 3)
        publish(publisher, version(i))
    added = add_mirror(publisher, partner)
    assert added["state"] == "new" and "client_secret" not in added and added["keys"]
    wait(lambda: mirror(partner)["state"] == "active" and mirror(partner)["head"] == publisher.runtime.archive.head(G))
    assert canonical(partner) == canonical(publisher)

    events: list[str] = []
    stream = partner.http.get(f"{partner.url}/mirrors/events", params={"graph": G}, stream=True, timeout=30)
    assert stream.status_code == 200 and stream.headers["Content-Type"].startswith("text/event-stream")
    lines = stream.iter_lines(decode_unicode=True)
    assert next(lines).startswith(":")  # the stream's opening comment: it is listening now

    def read_events() -> None:
        for line in lines:
            if line.startswith("data: "):
                events.append(json.loads(line[6:])["id"])
                if len(events) == 3:
                    return

    reader = threading.Thread(target=read_events, daemon=True)
    reader.start()
    ids = [publish(publisher, version(i)) for i in range(4, 7)]
    wait(lambda: mirror(partner)["head"] == ids[-1])
    assert canonical(partner) == canonical(publisher)
    reader.join(30)
    stream.close()
    assert events == ids  # applied patches, announced in chain order
    listed = mirror(partner)
    assert listed["applied"] == 7 and listed["quarantined"] == 0 and listed["length"] == 7
    # the mirror's archive holds the publisher's patches byte for byte (ids and signatures)
    assert partner.runtime.archive.patch(ids[-1]).body == publisher.runtime.archive.patch(ids[-1]).body
    # the mirror is queried through /sparql like any graph the caller may read
    count = partner.http.get(f"{partner.url}/sparql", timeout=30, params={
        "query": f"SELECT (COUNT(*) AS ?n) WHERE {{ GRAPH <{G}> {{ ?s ?p ?o }} }}"}).json()
    published = len(canonical(publisher).strip().splitlines())
    assert int(count["results"]["bindings"][0]["n"]["value"]) == published
    # a mirrored graph changes only through its publisher
    local = partner.http.put(f"{partner.url}/graphs", params={"graph": G}, headers=TTL, timeout=30,
                             data=b"<https://x/s> <https://x/p> <https://x/o> .")
    assert local.status_code == 409 and "mirror" in local.text


def _deliver(partner: RunningHub, body: bytes, secret: str | None = None) -> requests.Response:
    with partner.runtime.db.session() as session:
        row = session.query(Mirror).one()
        mirror_id, key = row.id, secret or row.hmac_secret
    signature = "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
    return requests.post(f"{partner.url}/callback/{mirror_id}", data=body, timeout=30,
                         headers={"Content-Type": "application/rdf-patch", "X-Hub-Signature": signature})


def test_a_gap_is_filled_from_the_publishers_archive(tmp_path: Path) -> None:
    # The publisher does not deliver (no delivery process): the test delivers by hand.
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}",
                     {**DEV, "LUCID_DELIVER_IN_PROCESS": "false"}) as publisher, \
            running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}", DEV) as partner:
        first = publish(publisher, version(0))
        add_mirror(publisher, partner)
        wait(lambda: mirror(partner)["head"] == first)
        ids = [publish(publisher, version(i)) for i in range(1, 6)]
        latest = publisher.runtime.archive.patch(ids[-1]).body
        assert _deliver(partner, latest).status_code == 204  # four patches are missing before it
        assert mirror(partner)["head"] == ids[-1] and mirror(partner)["quarantined"] == 0
        assert [r.id for r in partner.runtime.archive.history(G)] == [first, *ids]
        assert canonical(partner) == canonical(publisher)
        # delivered again (a retry, a crash): already applied, ignored
        assert _deliver(partner, latest).status_code == 204 and mirror(partner)["applied"] == 6


def test_what_cannot_be_verified_is_quarantined_never_applied(hubs: tuple[RunningHub, RunningHub]) -> None:
    publisher, partner = hubs
    first = publish(publisher, version(0))
    add_mirror(publisher, partner)
    wait(lambda: mirror(partner)["head"] == first and mirror(partner)["state"] == "active")
    second = publish(publisher, version(1))
    wait(lambda: mirror(partner)["head"] == second)
    good = publisher.runtime.archive.patch(second).body

    # a wrong HMAC: answered 2xx (WebSub), ignored and counted
    assert _deliver(partner, good.replace(b"W1", b"W9"), secret="not-the-secret").status_code == 202
    assert mirror(partner)["hmac_failures"] == 1 and mirror(partner)["quarantined"] == 0
    # altered in flight with the right HMAC: the id no longer matches the bytes
    assert _deliver(partner, good.replace(b'"W1"', b'"W9"')).status_code == 202
    # signed with a key the partner does not trust (its own hub key)
    old = [ox.Quad(ox.NamedNode("https://x/s"), ox.NamedNode("https://x/p"), ox.Literal("1"))]
    change = diff_graph([], old, G, partner.runtime.canonicalizer)
    foreign = write_rdf_patch(sign_patch(change.to_patch(second), partner.runtime.keys.active()))
    assert _deliver(partner, foreign).status_code == 202
    # not signed at all
    assert _deliver(partner, write_rdf_patch(change.to_patch(second))).status_code == 202
    # correctly signed by the publisher, but a fork: it follows the first patch, not the head
    fork = write_rdf_patch(sign_patch(change.to_patch(first), publisher.runtime.keys.active()))
    assert _deliver(partner, fork).status_code == 202
    quarantined = partner.http.get(f"{partner.url}/admin/mirrors/{mirror(partner)['id']}/quarantine",
                                   timeout=30).json()["quarantined"]
    reasons = [q["reason"] for q in quarantined]
    assert len(reasons) == 4, reasons
    assert all("not verified" in r for r in reasons[:3]) and "not signed" in reasons[2]
    assert "unknown prev" in reasons[3]
    assert mirror(partner)["head"] == second and mirror(partner)["applied"] == 2  # nothing applied
    assert canonical(partner) == canonical(publisher)


def test_withdrawn_access_revokes_the_mirror_and_purges_when_configured(tmp_path: Path) -> None:
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", DEV) as publisher, \
            running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}",
                        {**DEV, "LUCID_MIRROR_ON_REVOKE": "purge"}) as partner:
        first = publish(publisher, version(0))
        add_mirror(publisher, partner)
        wait(lambda: mirror(partner)["head"] == first and mirror(partner)["state"] == "active")
        assert publisher.http.delete(f"{publisher.url}/admin/conditions", params={"iri": "urn:c:globex-reads-kpi"},
                                     timeout=30).status_code == 204
        publish(publisher, version(1))  # its delivery finds the access withdrawn
        wait(lambda: mirror(partner)["state"] == "revoked")
        assert "access withdrawn" in str(mirror(partner)["last_error"])
        assert mirror(partner)["head"] is None  # purged
        assert partner.http.get(f"{partner.url}/graphs", params={"graph": G}, timeout=30).status_code == 404


def test_verification_requests_we_did_not_ask_for_are_refused(hubs: tuple[RunningHub, RunningHub]) -> None:
    publisher, partner = hubs
    publish(publisher, version(0))
    add_mirror(publisher, partner)
    wait(lambda: mirror(partner)["state"] == "active")
    mirror_id = mirror(partner)["id"]
    base = f"{partner.url}/callback"
    asks = [(f"{base}/unknown", {"hub.mode": "subscribe", "hub.topic": G, "hub.challenge": "c"}),
            (f"{base}/{mirror_id}", {"hub.mode": "subscribe", "hub.topic": "https://other/g", "hub.challenge": "c"}),
            (f"{base}/{mirror_id}", {"hub.mode": "unsubscribe", "hub.topic": G, "hub.challenge": "c"})]
    for url, params in asks:
        assert requests.get(url, params=params, timeout=30).status_code == 404
    assert requests.post(f"{base}/unknown", data=b"x", timeout=30).status_code == 410
    # a forged denial (anyone can send this GET): the publisher still grants access, so ignored
    forged = requests.get(f"{base}/{mirror_id}", timeout=30,
                          params={"hub.mode": "denied", "hub.topic": G, "hub.reason": "forged"})
    assert forged.status_code == 200 and mirror(partner)["state"] == "active"
    # the metrics page counts mirrors by state without naming them (ids are callback secrets)
    metrics = requests.get(f"{partner.url}/metrics", timeout=30).text
    assert 'lucid_mirrors{state="active"} 1' in metrics and str(mirror_id) not in metrics


def test_the_admin_api_refuses_bad_mirror_requests(hubs: tuple[RunningHub, RunningHub]) -> None:
    publisher, partner = hubs
    url = f"{partner.url}/admin/mirrors"
    assert requests.get(url, timeout=30).status_code == 401
    reader = partner.session(partner.token("reader", (), ("graphs:read",)))
    assert reader.get(url, timeout=30).status_code == 403
    bad = partner.http.post(url, data=b"{not json", headers={"Content-Type": "application/json"}, timeout=30)
    assert bad.status_code == 400 and "JSON" in bad.text
    listed = partner.http.post(url, json=[{"hub": f"{publisher.url}/hub"}], timeout=30)
    assert listed.status_code == 400 and "must be a JSON object" in listed.text and "client_id" in listed.text
    assert partner.http.post(url, json={"hub": f"{publisher.url}/hub", "graph": G}, timeout=30).status_code == 400
    client_id, secret = partner_client(publisher, partner, grant=False)
    wrong = partner.http.post(url, json={"hub": f"{publisher.url}/hub", "graph": G, "client_id": client_id,
                                         "client_secret": "wrong"}, timeout=30)
    assert wrong.status_code == 400 and "refused the client" in wrong.text
    unreachable = partner.http.post(url, json={"hub": "http://127.0.0.1:9/hub", "graph": G, "client_id": client_id,
                                               "client_secret": secret}, timeout=30)
    assert unreachable.status_code == 400 and "cannot" in unreachable.text
    body = {"hub": f"{publisher.url}/hub", "graph": G, "client_id": client_id, "client_secret": secret}
    ungranted = partner.http.post(url, json=body, timeout=30)  # a mirror that would be denied at once: not made
    assert ungranted.status_code == 400 and "does not let this client read" in ungranted.text
    misspelt = partner.http.post(url, json={**body, "graph": G + "-typo"}, timeout=30)
    assert misspelt.status_code == 400, misspelt.text
    granted = {"iri": "urn:c:globex-reads-kpi", "requiresGroup": ["partner-globex"], "readGraph": [G, G + "-typo"]}
    assert publisher.http.post(f"{publisher.url}/admin/conditions", json=granted, timeout=30).status_code == 201
    publish(publisher, version(0))
    misspelt = partner.http.post(url, json={**body, "graph": G + "-typo"}, timeout=30)
    assert misspelt.status_code == 400 and f"has no graph <{G}-typo>" in misspelt.text
    assert partner.http.post(url, json=body, timeout=30).status_code == 201
    again = partner.http.post(url, json=body, timeout=30)
    assert again.status_code == 409 and "mirrored already" in again.text
    assert partner.http.delete(url, params={"id": "nope"}, timeout=30).status_code == 404
    assert partner.http.delete(url, params={"graph": G}, timeout=30).status_code == 202
    wait(lambda: partner.http.get(url, timeout=30).json()["mirrors"] == [], 60,
         show=lambda: partner.http.get(url, timeout=30).json()["mirrors"])


def test_a_publisher_cannot_steer_a_mirror_to_other_addresses(hubs: tuple[RunningHub, RunningHub],
                                                              callback: Any) -> None:
    """The URLs a mirror follows are the publisher's to choose: an archive page's "next" may
    not leave the publisher's origin (else the mirror would fetch any URL, token attached)."""
    from tests.proxy import LoopbackProxy

    publisher, partner = hubs
    for i in range(5):  # two pages of the archive (page size 3)
        publish(publisher, version(i))
    proxy = LoopbackProxy(publisher.url)
    try:
        proxy.next_link = callback.url  # another server on this machine, standing for an internal one
        client_id, secret = partner_client(publisher, partner)
        answer = partner.http.post(f"{partner.url}/admin/mirrors", timeout=30, json={
            "hub": f"{proxy.url}/hub", "graph": G, "client_id": client_id, "client_secret": secret})
        assert answer.status_code == 201, answer.text
        wait(lambda: "links outside its archive" in str(mirror(partner)["last_error"]), show=lambda: mirror(partner))
        assert callback.verifications == [] and callback.deliveries == []  # never called
        assert mirror(partner)["length"] == 3  # the first page, verified, is kept
    finally:
        proxy.close()


def test_mirrors_reach_private_addresses_only_where_the_operator_allows(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    refused = run_cli("mirror", "add", "--hub", "http://10.9.8.7/hub", "--graph", G, "--client-id", "x",
                      "--client-secret", "y", env={"LUCID_DATA_DIR": str(tmp_path / "hub")})
    assert refused.code == 1 and "non-public address (10.9.8.7)" in refused.err and "CALLBACK_ALLOW_CIDRS" in refused.err


def test_mirror_commands_work_on_the_data_directory(hubs: tuple[RunningHub, RunningHub], tmp_path: Path,
                                                    run_cli) -> None:  # type: ignore[no-untyped-def]
    publisher, partner = hubs
    publish(publisher, version(0))
    client_id, secret = partner_client(publisher, partner)
    data = tmp_path / "offline-hub"
    env = {"LUCID_DATA_DIR": str(data), "LUCID_DEV_MODE": "1"}  # the publisher is on loopback
    graph_url = f"{publisher.url}/graphs?graph={G}"
    added = run_cli("mirror", "add", "--from", graph_url, "--client-id", client_id,
                    "--client-secret", secret, env=env)
    assert added.code == 0, added.err
    shown = json.loads(added.out)
    assert shown["graph"] == G and shown["hub"] == f"{publisher.url}/hub" and shown["state"] == "new"
    assert "trust on first use" in shown["keys_pinned_from"]
    listed = run_cli("mirror", "list", env=env)
    assert listed.code == 0 and json.loads(listed.out)[0]["id"] == shown["id"]
    missing = run_cli("mirror", "add", "--graph", G, "--client-id", "x", "--client-secret", "y", env=env)
    assert missing.code == 1 and "--hub" in missing.err and len(missing.err.strip().splitlines()) == 1
    bad_keys = run_cli("mirror", "add", "--hub", f"{publisher.url}/hub", "--graph", "https://acme.example/other",
                       "--client-id", client_id, "--client-secret", secret,
                       "--trust-jwks", str(tmp_path / "none.json"), env=env)
    assert bad_keys.code == 1 and "cannot read the publisher's keys" in bad_keys.err
    assert run_cli("mirror", "remove", G, env=env).code == 0
    assert json.loads(run_cli("mirror", "list", env=env).out)[0]["state"] == "removing"
    assert run_cli("mirror", "remove", "nope", env=env).code == 1


def test_a_mirror_reclones_when_the_publishers_archive_lost_its_head(tmp_path: Path) -> None:
    """The publisher was restored from an older backup (same keys, a different chain): the
    mirror's head is unknown there, so it drops its copy and clones the chain again."""
    import shutil

    from sqlalchemy import update

    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", DEV) as publisher, \
            running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}", DEV) as partner:
        for i in range(3):
            publish(publisher, version(i))
        add_mirror(publisher, partner)
        wait(lambda: mirror(partner)["length"] == 3)
        old_head = mirror(partner)["head"]
        restored = tmp_path / "acme-restored"
        shutil.copytree(tmp_path / "acme" / "keys", restored / "keys")  # the same signing key
        with running_hub(restored, f"sqlite:///{tmp_path / 'restored.db'}", DEV) as again:
            new_ids = [publish(again, version(i)) for i in (5, 6)]
            with partner.runtime.db.session() as session:  # the publisher's new address
                session.execute(update(Mirror).values(hub_url=f"{again.url}/hub", publisher_url=again.url))
            client_id, secret = partner_client(again, partner)  # not known there: registered again
            with partner.runtime.db.session() as session:
                session.execute(update(Mirror).values(client_id=client_id, client_secret=secret))
            mirror_id = str(mirror(partner)["id"])
            assert partner.runtime.mirrors.catch_up(mirror_id) == 2
            assert mirror(partner)["head"] == new_ids[-1] != old_head and mirror(partner)["length"] == 2
            assert canonical(partner) == canonical(again)


def test_applied_patches_reach_the_partners_own_kafka_topic(tmp_path: Path, kafka_bootstrap: str) -> None:
    """Local fan-out on Kafka: the partner hub's patch log is a topic; mirrored patches are on it."""
    topic = f"globex-{time.monotonic_ns()}"
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", DEV) as publisher, \
            running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}",
                        {**DEV, "LUCID_KAFKA_BOOTSTRAP": kafka_bootstrap, "LUCID_KAFKA_TOPIC": topic}) as partner:
        ids = [publish(publisher, version(0))]
        add_mirror(publisher, partner)
        wait(lambda: mirror(partner)["head"] == ids[-1])
        ids.append(publish(publisher, version(1)))
        wait(lambda: mirror(partner)["head"] == ids[-1])
        partner.runtime.publisher.relay.move()  # `serve` runs this relay in a thread; the test drives it
        consumer = partner.runtime.log.consumer("local-consumers")
        got: list[str] = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            got += [r.patch_id for r in consumer.poll(100, 0.5) if r.graph == G]
        consumer.close()
        assert got == ids


def test_continuous_and_windowed_queries_follow_a_mirrored_graph(hubs: tuple[RunningHub, RunningHub]) -> None:
    """Issue 16 on a partner's hub: a query subscription and a windowed query over a graph
    the partner mirrors see the publisher's patches as they are applied to the mirror."""
    publisher, partner = hubs
    publish(publisher, version(0))
    add_mirror(publisher, partner)
    wait(lambda: mirror(partner)["state"] == "active" and mirror(partner)["head"] == publisher.runtime.archive.head(G))
    query = "SELECT ?v WHERE { <https://acme.example/kpi/otif> <https://acme.example/kpi/value> ?v }"
    first = partner.http.post(f"{partner.url}/subscriptions", json={"sparql": query}, timeout=30)
    assert first.status_code == 201, first.text
    note = first.json()["notification"]
    assert [b["v"]["value"] for b in note["addedResults"]["results"]["bindings"]] == ["0"]
    changes = ("SELECT (COUNT(*) AS ?n) WHERE { ?c <https://w3id.org/lucid-hub#change> "
               "<https://w3id.org/lucid-hub#Added> }")
    registered = partner.http.put(f"{partner.url}/windows/kpi", json={"sparql": changes, "graphs": [G], "range": 1,
                                                                     "step": 1}, timeout=30)
    assert registered.status_code == 201, registered.text
    patch = publish(publisher, version(1))
    wait(lambda: mirror(partner)["head"] == patch)
    partner.runtime.queries.evaluation.drain()
    found = partner.http.get(f"{partner.url}/subscriptions/{note['spuid']}/notifications", params={"after": 0},
                             timeout=30).json()["notifications"]
    assert len(found) == 1 and found[0]["notification"]["patches"] == [patch]
    assert [b["v"]["value"] for b in found[0]["notification"]["addedResults"]["results"]["bindings"]] == ["1"]
    assert [b["v"]["value"] for b in found[0]["notification"]["removedResults"]["results"]["bindings"]] == ["0"]
    partner.runtime.windows.evaluate_due()
    [element] = partner.http.get(f"{partner.url}/windows/kpi/results", timeout=30).json()["results"]
    assert element["patches"] == [patch] and int(element["results"]["results"]["bindings"][0]["n"]["value"]) > 0
    assert partner.http.get(f"{partner.url}/windows/kpi/results/0/replay", timeout=30).json() == element


def test_a_mirror_sends_receipts_the_publisher_shows_who_applied_what(hubs: tuple[RunningHub, RunningHub]) -> None:
    publisher, partner = hubs
    for i in range(3):
        publish(publisher, version(i))
    add_mirror(publisher, partner)
    client_id = mirror(partner)["client_id"]

    def receipts() -> list[dict[str, object]]:
        answer = publisher.http.get(f"{publisher.url}/admin/receipts", params={"graph": G}, timeout=30)
        assert answer.status_code == 200, answer.text
        return list(answer.json()["receipts"])

    head = publisher.runtime.archive.head(G)
    wait(lambda: [r["patch"] for r in receipts()] == [head], show=receipts)
    (got,) = receipts()
    assert got["sender"] == client_id and got["position"] == 3 and got["behind"] == 0
    assert inbox_size(publisher) == 1  # the clone applied three patches: one receipt covers them
    # one receipt per new head, however many patches it covers; never one twice
    newest = [publish(publisher, version(i)) for i in range(3, 6)][-1]
    wait(lambda: [r["patch"] for r in receipts()] == [newest], show=receipts)
    (got,) = receipts()
    assert got["position"] == 6 and got["behind"] == 0
    assert 2 <= inbox_size(publisher) <= 4  # the first head, those between as deliveries came, the newest
    # the receipt itself: an AS Announce by the mirror's hub of the publisher's patch
    notification = publisher.http.get(str(got["notification"]), headers={"Accept": "application/n-triples"},
                                      timeout=30).text
    assert "activitystreams#Announce" in notification and f"{publisher.url}/patches/{newest}" in notification
    assert partner.url in notification
    assert publisher.http.get(f"{publisher.url}/admin/receipts", timeout=30).status_code == 400  # graph= needed


def inbox_size(hub: RunningHub) -> int:
    from lucid_hub.db.models import Notification

    with hub.runtime.db.session() as session:
        return len(list(session.scalars(select(Notification.seq).where(Notification.graph == G))))


def test_a_read_whose_connection_the_other_hub_dropped_is_tried_once_more() -> None:
    """A server that closes a connection just as it is used (an idle keep-alive connection
    reused at the moment it times out) resets the request; reads to other hubs go out once
    more (lucid_hub.outbound), writes never do."""
    import socketserver

    from lucid_hub import outbound

    seen: list[bytes] = []

    class Flaky(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            seen.append(self.request.recv(65536).split(b" ", 1)[0])
            if len(seen) == 1:
                return  # closes without an answer
            self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        http = outbound.session(outbound.AddressPolicy(dev_mode=True, allowed=[]), "test")
        url = f"http://127.0.0.1:{server.server_address[1]}/patches"
        assert http.get(url, timeout=10).text == "ok" and seen == [b"GET", b"GET"]
        seen.clear()
        with pytest.raises(requests.ConnectionError):
            http.post(url, data=b"x", timeout=10)
        assert seen == [b"POST"]
    finally:
        server.shutdown()
