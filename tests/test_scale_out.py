"""Issue 20, hub processes as pods: three `lucid-hub serve` processes with separate data
directories (each its own store, as pods with their own volumes) on one PostgreSQL. Real
processes on loopback."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from lucid_hub.demo.processes import HubProcess, wait_until

G = "https://acme.example/graphs/orders"

pytestmark = pytest.mark.slow


def fresh(hub: HubProcess, method: str, path: str, **kwargs: object) -> requests.Response:
    with requests.Session() as http:
        http.trust_env = False
        return http.request(method, f"{hub.url}{path}", headers={**hub.http.headers, **kwargs.pop("headers", {})},
                            timeout=60, **kwargs)  # type: ignore[arg-type]


def whole_chain(pod: HubProcess) -> list[dict[str, str]]:
    """The graph's patches, oldest first, page by page (100 a page)."""
    patches: list[dict[str, str]] = []
    page: str | None = f"/patches?graph={G}"
    while page:
        answer = pod.call("GET", page.removeprefix(pod.url), headers={"Accept": "application/json"}).json()
        patches += answer["patches"]
        page = answer["next"]
    return patches


def test_publishes_through_every_pod_keep_one_chain_and_none_fails_for_a_concurrent_one(
        tmp_path: Path, postgres_url: str) -> None:
    env = {"LUCID_DATABASE_URL": postgres_url}
    pods = [HubProcess(f"pod-{n}", tmp_path / f"pod-{n}", env) for n in range(3)]
    for pod in pods:
        pod.start()
    try:
        first = pods[0].publish(G, '<https://acme.example/id/po-0> <https://acme.example/status> "open" .')
        bodies = [(pods[i % 3], f'<https://acme.example/id/po-{i}> <https://acme.example/status> "open" .\n')
                  for i in range(1, 151)]

        def post(item: tuple[HubProcess, str]) -> requests.Response:
            pod, body = item
            return fresh(pod, "POST", "/graphs", params={"graph": G}, data=body.encode(),
                         headers={"Content-Type": "application/n-triples"})

        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(post, bodies))
        refused = [(a.status_code, a.text[:200]) for a in answers if a.status_code not in (200, 201)]
        assert refused == []  # none failed because another pod published at the same moment

        patches = whole_chain(pods[1])
        assert len(patches) == 151 and patches[0]["id"] == first
        assert [p["prev"] for p in patches] == [None] + [p["id"] for p in patches[:-1]]  # one linear chain
        assert sorted(a.json()["patch"] for a in answers) == sorted(p["id"] for p in patches[1:])

        # A stale precondition is still refused: If-Match names the first version.
        stale = fresh(pods[2], "POST", "/graphs", params={"graph": G}, data=b"<urn:x:s> <urn:x:p> <urn:x:o> .\n",
                      headers={"Content-Type": "application/n-triples", "If-Match": f'"{first}"'})
        assert stale.status_code == 412, stale.text

        head = patches[-1]["id"]

        def served(pod: HubProcess) -> bool:
            answer = fresh(pod, "GET", "/graphs", params={"graph": G}, headers={"Accept": "application/n-triples"})
            return answer.headers.get("ETag") == f'"{head}"' and len(answer.text.strip().splitlines()) == 151

        wait_until(lambda: all(served(pod) for pod in pods), 30, "every pod's store at the head")
        contents = [sorted(fresh(pod, "GET", "/graphs", params={"graph": G},
                                 headers={"Accept": "application/n-triples"}).text.splitlines()) for pod in pods]
        assert contents[0] == contents[1] == contents[2]  # one graph on every replica (ground: equal is isomorphic)

        # Read your writes on another pod: a read looks up the head and catches its store up first.
        for i in range(6):
            writer, reader = pods[i % 3], pods[(i + 1) % 3]
            written = fresh(writer, "POST", "/graphs", params={"graph": G},
                            data=f"<urn:x:ryw{i}> <urn:x:p> <urn:x:o> .\n".encode(),
                            headers={"Content-Type": "application/n-triples"}).json()["patch"]
            read = fresh(reader, "GET", "/graphs", params={"graph": G}, headers={"Accept": "application/n-triples",
                                                                                  "If-Match": f'"{written}"'})
            assert read.status_code == 200 and read.headers["ETag"] == f'"{written}"' and f"<urn:x:ryw{i}>" in read.text
    finally:
        for pod in pods:
            pod.stop()


def test_database_locks_make_writers_on_other_hosts_wait_and_die_with_their_connection(postgres_url: str) -> None:
    import threading

    from sqlalchemy import text

    from lucid_hub.db.session import Database
    from lucid_hub.locks import ADVISORY_CLASS, DatabaseLocks

    db = Database(postgres_url)
    here, there = DatabaseLocks(db.engine), DatabaseLocks(db.engine)  # two hosts' processes
    events: list[str] = []

    def waiting() -> int:
        with db.engine.connect() as c:
            return int(c.execute(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = :c "
                                       "AND NOT granted"), {"c": ADVISORY_CLASS}).scalar_one())

    try:
        held = here.acquire([G, "https://acme.example/graphs/other"])

        def writer() -> None:
            lock = there.acquire([G])
            events.append("there acquired")
            lock.release()

        thread = threading.Thread(target=writer)
        thread.start()
        wait_until(lambda: waiting() == 1, 10, "the second writer to wait for the lock")
        events.append("here released")
        held.release()
        thread.join(10)
        assert events == ["here released", "there acquired"]
        # A writer that dies (its connection gone) leaves no lock behind.
        held = here.acquire([G])
        held.connection.invalidate()
        there.acquire([G]).release()
        assert waiting() == 0
    finally:
        here.dispose()
        there.dispose()
        db.dispose()


def kafka_patches(bootstrap: str, topic: str, expected: int) -> list[tuple[str, str]]:
    """(graph, patch id) of every record of the topic, in each graph's order (a graph's records
    share a partition), once `expected` are there (or after a deadline)."""
    import time

    from lucid_hub.log.kafka import KafkaPatchLog

    log = KafkaPatchLog(bootstrap, topic)
    consumer = log.consumer(f"check-{topic}")
    found: list[tuple[str, str]] = []
    deadline = time.monotonic() + 60
    try:
        while len(found) < expected and time.monotonic() < deadline:
            found += [(r.graph, r.patch_id) for r in consumer.poll(500, 0.5)]
        found += [(r.graph, r.patch_id) for r in consumer.poll(500, 1.0)]  # and nothing more
    finally:
        consumer.close()
        log.close()
    return found


def test_one_leader_relays_once_and_a_killed_leader_is_succeeded_within_the_bound(
        tmp_path: Path, postgres_url: str, kafka_bootstrap: str) -> None:
    import time

    from sqlalchemy import create_engine, text

    topic = f"scale-{tmp_path.name}"
    env = {"LUCID_DATABASE_URL": postgres_url, "LUCID_KAFKA_BOOTSTRAP": kafka_bootstrap, "LUCID_KAFKA_TOPIC": topic,
           "LUCID_LEADER_LEASE_SECONDS": "6"}
    pods = [HubProcess(f"pod-{n}", tmp_path / f"pod-{n}", env) for n in range(3)]
    for pod in pods:
        pod.start()
    engine = create_engine(postgres_url)

    def leader() -> HubProcess | None:
        with engine.connect() as c:
            row = c.execute(text("SELECT holder, expires_at FROM leases WHERE name = 'hub'")).one_or_none()
        if row is None or row.expires_at < time.time():
            return None
        held = [p for p in pods if (p.data / "replica-id").read_text().strip() == row.holder]
        return held[0] if held else None

    def publish_through_all(first: int, count: int, alive: list[HubProcess]) -> list[str]:
        def post(i: int) -> str:
            answer = fresh(alive[i % len(alive)], "POST", "/graphs", params={"graph": G},
                           data=f'<https://acme.example/id/po-{i}> <https://acme.example/status> "open" .\n'.encode(),
                           headers={"Content-Type": "application/n-triples"})
            assert answer.status_code in (200, 201), answer.text
            return str(answer.json()["patch"])

        with ThreadPoolExecutor(9) as pool:
            return list(pool.map(post, range(first, first + count)))

    try:
        wait_until(lambda: leader() is not None, 20, "a leader")
        first = leader()
        assert first is not None
        published = publish_through_all(0, 90, pods)

        # Kill the leader as a crash would; another pod holds the lease within 6 s x 1.33 + a look.
        first.stop(kill=True)
        alive = [p for p in pods if p is not first]
        killed_at = time.monotonic()
        wait_until(lambda: leader() in alive, 20, "another pod to take the leadership")
        handover = time.monotonic() - killed_at
        assert handover <= 6 * 4 / 3 + 2, handover
        published += publish_through_all(90, 60, alive)

        # Exactly once in the log, in the chain's order: one relay at a time, the new one
        # appending what the dead one left in the outbox.
        ids = [p["id"] for p in whole_chain(alive[0])]
        assert sorted(ids) == sorted(published)
        logged = [pid for graph, pid in kafka_patches(kafka_bootstrap, topic, 151) if graph == G]
        assert logged == ids, (len(logged), len(set(logged)), len(ids))

        # A leader stopped cleanly (a rolling update) ends its lease: the next look takes it.
        second = leader()
        assert second is not None
        second.stop()
        stopped_at = time.monotonic()
        last = [p for p in alive if p is not second]
        wait_until(lambda: leader() in last, 20, "the last pod to take the leadership")
        assert time.monotonic() - stopped_at <= 6 / 3 + 2
    finally:
        engine.dispose()
        for pod in pods:
            pod.stop()


def test_a_replica_started_late_catches_up_before_it_is_ready_and_follows_without_reads(
        tmp_path: Path, postgres_url: str) -> None:
    env = {"LUCID_DATABASE_URL": postgres_url}
    first = HubProcess("pod-0", tmp_path / "pod-0", env).start()
    late = HubProcess("pod-1", tmp_path / "pod-1", {**env, "LUCID_READY_MAX_LAG": "0"})
    try:
        for i in range(40):
            fresh(first, "POST", "/graphs", params={"graph": G}, data=f"<urn:x:s{i}> <urn:x:p> <urn:x:o> .\n".encode(),
                  headers={"Content-Type": "application/n-triples"})
        late.start()
        assert fresh(late, "GET", "/readyz").status_code == 200  # its start applied all 40

        def ready() -> tuple[int, str]:
            answer = fresh(late, "GET", "/readyz")
            return answer.status_code, answer.text

        for i in range(40, 60):  # published elsewhere; nobody reads them on the late replica
            fresh(first, "POST", "/graphs", params={"graph": G}, data=f"<urn:x:s{i}> <urn:x:p> <urn:x:o> .\n".encode(),
                  headers={"Content-Type": "application/n-triples"})
        behind = ready()
        assert behind[0] == 200 or "patches behind the archive" in behind[1]
        wait_until(lambda: ready()[0] == 200, 15, "the late replica's store to follow the archive")
    finally:
        late.stop()
        first.stop()


def test_bench_scale_runs(run_cli, postgres_url: str) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("bench", "scale", "--replicas", "1,2", "--reads", "20", "--publishes", "20", "--clients", "2",
                     "--database", postgres_url)
    assert result.code == 0, result.err
    assert "start of a replica with 21 patches archived" in result.out
    rows = [line.split() for line in result.out.splitlines() if line.strip()[:1].isdigit()]
    assert [row[0] for row in rows] == ["1", "2"] and "x1.00" in result.out
    bad = run_cli("bench", "scale", "--database", "sqlite:///x.db")
    assert bad.code == 1 and "PostgreSQL" in bad.err


def test_the_mirrors_run_once_across_replicas_and_a_killed_leader_misses_no_delivery(
        tmp_path: Path, postgres_url: str) -> None:
    from lucid_hub.demo.ports import free_port
    from tests.proxy import LoopbackProxy

    acme = HubProcess("ACME", tmp_path / "acme").start()  # the publisher, a hub of its own
    ports = [free_port() for _ in range(3)]
    service = LoopbackProxy([f"http://127.0.0.1:{port}" for port in ports])  # Globex's Service
    env = {"LUCID_DATABASE_URL": postgres_url, "LUCID_PUBLIC_URL": service.url, "LUCID_LEADER_LEASE_SECONDS": "6"}
    pods = [HubProcess(f"globex-{n}", tmp_path / f"globex-{n}", env) for n in range(3)]
    for pod, port in zip(pods, ports, strict=True):
        pod.port, pod.url = port, f"http://127.0.0.1:{port}"
        pod.env["LUCID_PORT"] = str(port)
        pod.start()
    try:
        graph = "https://acme.example/graphs/kpi"
        client_id, secret = acme.partner_client("Globex hub", "partner", f"{service.url}/callback/")
        acme.grant_read("urn:c:globex", "partner", graph)
        heads = [acme.publish(graph, '<https://acme.example/kpi/0> <https://acme.example/v> "0" .')]
        pods[1].mirror(f"{acme.url}/hub", graph, client_id, secret)  # asked of any replica

        def mirrored(head: str) -> bool:
            mirrors = pods[2].mirrors()
            return bool(mirrors) and mirrors[0]["state"] == "active" and mirrors[0]["head"] == head

        def explain() -> str:  # a timeout says where the delivery stands on both sides
            running = [p for p in [acme, *pods] if p.proc is not None and p.proc.poll() is None]
            return "\n".join([f"publisher's subscriptions: {acme.subscriptions()}",
                              f"mirror rows: {running[-1].mirrors()}",
                              *(f"--- {p.name} log:\n{p.log_tail(25)}" for p in [acme, *pods])])

        wait_until(lambda: mirrored(heads[-1]), 60, "the mirror to clone the graph", explain)
        for i in range(1, 11):
            heads.append(acme.call("POST", "/graphs", params={"graph": graph}, headers={
                "Content-Type": "application/n-triples"}, data=f'<https://acme.example/kpi/{i}> <urn:x:v> "{i}" .\n'
                .encode()).json()["patch"])
        wait_until(lambda: mirrored(heads[-1]), 60, "the mirror to follow", explain)
        metrics = acme.call("GET", "/metrics").text
        subscribes = [line for line in metrics.splitlines()
                      if line.startswith("lucid_http_requests_total{") and 'route="/hub"' in line]
        assert subscribes and all('method="POST"' in line for line in subscribes)
        assert sum(float(line.rsplit(" ", 1)[1]) for line in subscribes) == 1  # one replica subscribed

        from sqlalchemy import create_engine, text

        engine = create_engine(postgres_url)
        with engine.connect() as c:
            holder = c.execute(text("SELECT holder FROM leases")).scalar_one()
        engine.dispose()
        (leader,) = [p for p in pods if (p.data / "replica-id").read_text().strip() == holder]
        leader.stop(kill=True)
        for i in range(11, 21):  # delivered to whichever replica the Service finds alive
            heads.append(acme.call("POST", "/graphs", params={"graph": graph}, headers={
                "Content-Type": "application/n-triples"}, data=f'<https://acme.example/kpi/{i}> <urn:x:v> "{i}" .\n'
                .encode()).json()["patch"])
        alive = [p for p in pods if p is not leader]
        wait_until(lambda: alive[0].mirrors()[0]["head"] == heads[-1], 90, "the mirror to follow after the kill",
                   explain)
        (mirror,) = alive[1].mirrors()
        assert mirror["quarantined"] == 0 and mirror["state"] == "active"
        assert [s["state"] for s in acme.subscriptions()] == ["active"]  # subscribed once, not once a replica
        content = alive[1].content(graph)
        assert all(f"<https://acme.example/kpi/{i}>" in content for i in range(21))
    finally:
        for pod in pods:
            pod.stop()
        acme.stop()
        service.close()
