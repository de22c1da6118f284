"""`lucid-hub serve` with several gunicorn worker processes (LUCID_WEB_WORKERS): each a hub on
its own copy of the store, one data directory and database; what one process does, every
other one honours (the chain, access conditions, denials, mirrors, event streams, Kafka order,
metrics). Real processes on loopback, the SQL log and a real Kafka-protocol broker."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import requests
from sqlalchemy import create_engine, func, select

from lucid_hub.client.tokens import client_credentials_token
from lucid_hub.db.models import PatchRecord
from lucid_hub.demo.ports import free_port
from lucid_hub.demo.processes import EventStream, HubProcess, wait_until
from tests.test_operations import samples, value

G = "https://acme.example/graphs/orders"

pytestmark = pytest.mark.slow


def fresh(method: str, url: str, **kwargs: object) -> requests.Response:
    """A request on a new connection: gunicorn's processes take turns accepting them."""
    with requests.Session() as http:
        http.trust_env = False
        return http.request(method, url, timeout=30, **kwargs)  # type: ignore[arg-type]


def started(hub: HubProcess, workers: int) -> HubProcess:
    """Until every worker process has opened its copy of the store."""
    slots = [hub.data / "store", *(hub.data / f"store-{n}" for n in range(1, workers))]
    wait_until(lambda: all(s.exists() for s in slots), 60, "every worker's store copy")
    assert hub.proc is not None
    wait_until(lambda: len(psutil.Process(hub.proc.pid).children()) == workers, 30, "the worker processes")
    return hub


def post_until_accepted(hub: HubProcess, body: str) -> str:
    """A POST of new triples; 409 (another process moved the head) is retried, as a client would."""
    for _ in range(30):
        answer = fresh("POST", f"{hub.url}/graphs", params={"graph": G}, data=body.encode(),
                       headers={**hub.http.headers, "Content-Type": "application/n-triples"})
        if answer.status_code != 409:
            break
    assert answer.status_code in (200, 201), answer.text
    return str(answer.json()["patch"])


def test_worker_processes_keep_one_chain_one_policy_and_one_count(tmp_path: Path) -> None:
    metrics_port = free_port()
    hub = HubProcess("ACME", tmp_path / "acme", {"LUCID_WEB_WORKERS": "2",
                                                 "LUCID_METRICS_PORT": str(metrics_port)}).start()
    try:
        started(hub, 2)
        first = hub.publish(G, '<https://acme.example/id/po-0> <https://acme.example/status> "open" .')

        # One chain, whichever process took each change.
        bodies = [f'<https://acme.example/id/po-{n}-{i}> <https://acme.example/status> "open" .\n'
                  for n in range(4) for i in range(8)]
        with ThreadPoolExecutor(4) as pool:
            accepted = list(pool.map(lambda body: post_until_accepted(hub, body), bodies))
        chain = hub.call("GET", "/patches", params={"graph": G}, headers={"Accept": "application/json"}).json()
        patches = chain["patches"]
        assert [p["prev"] for p in patches] == [None] + [p["id"] for p in patches[:-1]]
        assert [p["id"] for p in patches] == [first, *[p["id"] for p in patches[1:]]]
        assert sorted(accepted) == sorted(p["id"] for p in patches[1:])
        for _ in range(6):  # every process serves the whole graph (its store caught up from the archive)
            content = fresh("GET", f"{hub.url}/graphs", params={"graph": G},
                            headers={**hub.http.headers, "Accept": "application/n-triples"}).text
            assert len(content.strip().splitlines()) == 33
            count = fresh("POST", f"{hub.url}/sparql", data="SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }",
                          headers={**hub.http.headers, "Content-Type": "application/sparql-query",
                                   "Accept": "application/sparql-results+json"}).json()
            assert count["results"]["bindings"][0]["n"]["value"] == "33"

        # Access conditions: a grant or a withdrawal in one process holds in all within a second or so.
        client_id, secret = hub.partner_client("Globex hub", "partner", "https://hub.globex.example/callback/")
        partner = {"Authorization": f"Bearer {client_credentials_token(hub.url, client_id, secret)}"}

        def all_answer(status: int) -> bool:
            return all(fresh("GET", f"{hub.url}/graphs", params={"graph": G}, headers=partner).status_code == status
                       for _ in range(12))

        assert all_answer(403)
        hub.grant_read("urn:c:globex", "partner", G)
        wait_until(lambda: all_answer(200), 15, "every process to honour the grant")
        hub.withdraw("urn:c:globex")
        wait_until(lambda: all_answer(403), 15, "every process to honour the withdrawal")
        denied = fresh("GET", f"{hub.url}/graphs", params={"graph": G}, headers=partner)
        request_id = denied.headers["X-Request-Id"]
        for _ in range(8):  # any process explains any process's denial
            why = fresh("GET", f"{hub.url}/admin/explain", params={"request": request_id}, headers=hub.http.headers)
            assert why.status_code == 200 and why.json()["request_id"] == request_id

        # Metrics: the leader's port reports every process's counts.
        engine = create_engine(f"sqlite:///{hub.data / 'lucid-hub.db'}")
        with engine.connect() as conn:
            archived = conn.execute(select(func.count()).select_from(PatchRecord)).scalar()
        engine.dispose()
        scraped = samples(requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text)
        assert value(scraped, "lucid_patches_total", origin="published") == archived
        assert value(scraped, "lucid_publish_seconds_count") == archived
        assert sum(max(value(scraped, "lucid_http_requests_total", method="POST", route="/graphs", status=status), 0)
                   for status in ("200", "201")) == len(accepted)  # 409s retried are counted as 409
    finally:
        hub.stop()


def test_a_mirror_hub_with_worker_processes_subscribes_once_and_streams_every_patch(tmp_path: Path) -> None:
    acme = HubProcess("ACME", tmp_path / "acme").start()
    globex = HubProcess("Globex", tmp_path / "globex", {"LUCID_WEB_WORKERS": "2"}).start()
    stream: EventStream | None = None
    try:
        started(globex, 2)
        first = acme.publish(G, '<https://acme.example/id/po-0> <https://acme.example/status> "open" .')
        client_id, secret = acme.partner_client("Globex hub", "partner", f"{globex.url}/callback/")
        acme.grant_read("urn:c:globex", "partner", G)
        globex.mirror(f"{acme.url}/hub", G, client_id, secret)
        wait_until(lambda: [s["state"] for s in acme.subscriptions()] == ["active"], 30, "the subscription")
        wait_until(lambda: globex.mirrors()[0]["head"] == first, 30, "the clone")
        stream = EventStream(globex, G)  # from now on
        heads = [acme.publish(G, f'<https://acme.example/id/po-{n}> <https://acme.example/status> "open" .')
                 for n in range(1, 9)]
        assert stream.wait(heads, 30), f"the stream got {len(stream.times)} of {len(heads)} patches"
        assert sorted(stream.times, key=stream.times.__getitem__) == heads  # in chain order
        assert len(acme.subscriptions()) == 1  # only the leader keeps the mirror
        assert globex.mirrors()[0]["head"] == heads[-1]
        refused = fresh("PUT", f"{globex.url}/graphs", params={"graph": G}, data=b"<a:b> <a:c> <a:d> .",
                        headers={**globex.http.headers, "Content-Type": "application/n-triples"})
        assert refused.status_code == 409, refused.text  # a mirror is read-only in every process
    finally:
        if stream is not None:
            stream.close()
        globex.stop()
        acme.stop()


def test_worker_processes_append_each_patch_to_kafka_once_in_chain_order(tmp_path: Path,
                                                                        kafka_bootstrap: str) -> None:
    from lucid_hub.log.kafka import KafkaPatchLog

    topic = f"workers-{free_port()}"
    hub = HubProcess("ACME", tmp_path / "acme", {"LUCID_WEB_WORKERS": "2", "LUCID_KAFKA_BOOTSTRAP": kafka_bootstrap,
                                                 "LUCID_KAFKA_TOPIC": topic}).start()
    try:
        started(hub, 2)
        hub.publish(G, '<https://acme.example/id/po-0> <https://acme.example/status> "open" .')
        bodies = [f'<https://acme.example/id/po-{n}> <https://acme.example/status> "open" .\n' for n in range(1, 17)]
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda body: post_until_accepted(hub, body), bodies))
        chain = [p["id"] for p in hub.call("GET", "/patches", params={"graph": G},
                                             headers={"Accept": "application/json"}).json()["patches"]]
        log = KafkaPatchLog(kafka_bootstrap, topic)
        consumer = log.consumer(f"check-{free_port()}")
        seen: list[str] = []
        try:
            wait_until(lambda: bool(seen.extend(r.patch_id for r in consumer.poll(100, 0.2) if r.graph == G))
                       or len(seen) >= len(chain), 60, "the patches in the topic")
            seen += [r.patch_id for r in consumer.poll(100, 1.0) if r.graph == G]
        finally:
            consumer.close()
            log.close()
        assert seen == chain  # each once, in chain order (one relay: the leader's)
    finally:
        hub.stop()


def test_an_idle_keep_alive_connection_outlives_a_pause(tmp_path: Path) -> None:
    """gunicorn closed idle keep-alive connections after 2 s, so a client (or a load balancer
    keeping connections for 60 s) that reused one at that moment had its request reset. The
    hub keeps them 75 s: a connection idle for 3 s still answers."""
    import http.client
    import time

    with HubProcess("ACME", tmp_path / "acme") as hub:
        connection = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=30)
        connection.request("GET", "/healthz")
        first = connection.getresponse()
        assert first.status == 200 and first.read() and not first.will_close
        time.sleep(3)  # the idle time under test, not a synchronisation
        connection.request("GET", "/healthz")  # on the same socket: it raises if the hub closed it
        assert connection.getresponse().status == 200
        connection.close()
