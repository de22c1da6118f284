"""`lucid-hub bench fanout`: WebSub deliveries per second and publish-to-delivered latency.

A real hub runs in a child process (`lucid-hub serve`, dev mode so that callbacks may be on
loopback), with the SQL log and then with Kafka (a local tansu broker). N subscriber
callbacks (distinct URLs on a threaded HTTP server in this process) subscribe through
`/hub`; small patches are published one after another and every delivery's arrival time is
recorded against the time its publish returned. Throughput comes from a burst (patches
published back to back); latency from a second phase published at a steady rate
(PACED_RATE deliveries/s in all), as a partner network would see it.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import click
import requests

from lucid_bench.loopback import kafka_broker
from lucid_hub.demo.ports import free_port, wait_for_port
from lucid_hub.demo.processes import HubProcess, wait_until

GRAPH = "http://example.org/graphs/bench-fanout"
PACED_RATE = 200.0  # deliveries/s of the latency phase (patches/s = this / subscribers)


class Receiver:
    """Callback endpoints /cb/0 … /cb/N-1: confirms verifications, timestamps deliveries."""

    def __init__(self) -> None:
        self.port = free_port()
        self.arrivals: list[tuple[str, float]] = []
        self.lock = threading.Lock()
        self.done = threading.Condition(self.lock)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                params = parse_qs(urlsplit(self.path).query)
                body = params.get("hub.challenge", [""])[0].encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                arrived = time.perf_counter()
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.arrivals.append((self.headers.get("X-Lucid-Patch-Id", ""), arrived))
                    receiver.done.notify_all()
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, n: int) -> str:
        return f"http://127.0.0.1:{self.port}/cb/{n}"

    def wait_for(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.done:
            while len(self.arrivals) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.done.wait(left)
        return True

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join(timeout=10)


@contextmanager
def _hub(data: Path, extra: dict[str, str], workers: int, callback_prefix: str) -> Iterator[HubProcess]:
    """`lucid-hub serve` and, with `workers`, that many `lucid-hub worker` processes that do
    all the delivering (serve then only publishes)."""
    # All subscribers are one client on one callback host (the bench's): no subscription cap.
    env = {"LUCID_DELIVER_IN_PROCESS": "0" if workers else "1", "LUCID_MAX_SUBSCRIPTIONS_PER_CLIENT": "1000000",
           **extra}
    with HubProcess("bench", data, env, callback_prefixes=[callback_prefix]) as hub:  # migrated once up
        procs = [subprocess.Popen([sys.executable, "-m", "lucid_hub.cli", "worker", "--name", f"bench-{n}"],
                                  env=hub.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for n in range(workers)]
        try:
            yield hub
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(timeout=60)


def _percentiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (values[0] * 1000, values[0] * 1000) if values else (0.0, 0.0)
    q = statistics.quantiles(values, n=100, method="inclusive")
    return q[49] * 1000, q[98] * 1000


def drive(put: Callable[[int], str], receiver: Receiver, subscribers: int, patches: int) -> dict[str, float]:
    """Throughput: `patches` published back to back, deliveries/s until the last arrives.
    Latency: more published at a steady rate the hub sustains (PACED_RATE deliveries/s)."""
    start = time.perf_counter()
    for i in range(patches):
        put(i + 1)
    published_in = time.perf_counter() - start
    complete = receiver.wait_for(subscribers * patches, 600)
    end = max((t for _, t in receiver.arrivals), default=time.perf_counter())
    burst = len(receiver.arrivals)
    paced = max(10, min(100, patches))
    interval = subscribers / PACED_RATE
    published: dict[str, float] = {}
    next_at = time.perf_counter()
    for i in range(paced):
        time.sleep(max(0.0, next_at - time.perf_counter()))  # pacing the load, not synchronising
        published[put(patches + i + 1)] = time.perf_counter()
        next_at += interval
    complete = receiver.wait_for(burst + subscribers * paced, 600) and complete
    latencies = [t - published[p] for p, t in receiver.arrivals if p in published]
    p50, p99 = _percentiles(latencies)
    return {"deliveries": burst, "expected": subscribers * patches, "complete": complete,
            "rate": burst / max(end - start, 1e-9), "publish_rate": patches / max(published_in, 1e-9),
            "p50_ms": p50, "p99_ms": p99}


def measure(subscribers: int, patches: int, extra_env: dict[str, str], work: Path,
            workers: int = 0) -> dict[str, float]:
    receiver = Receiver()
    data = work / f"hub-{subscribers}-{len(extra_env)}"
    try:
        with _hub(data, extra_env, workers, f"http://127.0.0.1:{receiver.port}/") as hub:
            nt = {"Content-Type": "application/n-triples"}

            def put(value: int) -> str:
                response = hub.call("PUT", "/graphs", params={"graph": GRAPH}, headers=nt,
                                    data=f'<http://ex/kpi> <http://ex/value> "{value}" .\n')
                return str(response.json()["patch"])

            put(0)
            for n in range(subscribers):
                hub.call("POST", "/hub", expect=(202,), data={
                    "hub.mode": "subscribe", "hub.topic": GRAPH, "hub.callback": receiver.url(n)})
            wait_until(lambda: sum(s["state"] == "active" for s in hub.subscriptions()) == subscribers, 120,
                       "the subscriptions to be verified")
            return drive(put, receiver, subscribers, patches)
    finally:
        receiver.close()


_BASELINE_MODULE = """
from celery import Celery
from flask import Flask
from flask_websub.hub import Hub, SQLite3HubStorage
import os

app = Flask("baseline")
celery = Celery("baseline", broker=os.environ["BASELINE_BROKER"])
celery.conf.worker_hijack_root_logger = False
hub = Hub(SQLite3HubStorage(os.environ["BASELINE_DB"]), celery, REQUEST_TIMEOUT=10)
app.register_blueprint(hub.build_blueprint(url_prefix="/hub"))
"""


def check_baseline() -> None:
    """Fail before any run when the baseline cannot run."""
    import importlib.util

    missing = [name for name in ("flask_websub", "celery", "redis") if importlib.util.find_spec(name) is None]
    if missing:
        raise click.ClickException(f"the baseline needs {', '.join(missing)}: pip install -e '.[bench]'")


def measure_baseline(subscribers: int, patches: int, work: Path, broker: str) -> dict[str, float] | None:
    """The same fan-out through flask-websub's hub, its Celery worker on a local Redis."""
    import base64
    import importlib

    receiver = Receiver()
    folder = work / f"baseline-{subscribers}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "websub_baseline.py").write_text(_BASELINE_MODULE)
    env = {**os.environ, "BASELINE_BROKER": broker, "BASELINE_DB": str(folder / "hub.sqlite3"),
           "PYTHONPATH": str(folder)}
    os.environ.update({k: env[k] for k in ("BASELINE_BROKER", "BASELINE_DB")})
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", "from werkzeug.serving import run_simple; "
                               "from websub_baseline import app; "
                               f"run_simple('127.0.0.1', {port}, app, threaded=True)"],
                              env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "websub_baseline.celery", "worker",
                               "--concurrency", "2", "--loglevel", "ERROR", "--without-gossip", "--without-mingle"],
                              env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sys.path.insert(0, str(folder))
    try:
        wait_for_port(port, 60)
        import itertools

        import flask_websub.hub

        # flask-websub names its Celery tasks after a process-wide counter of Hub instances;
        # the worker (a fresh process) has instance 0, so this process's must be 0 again too.
        flask_websub.hub.Hub.counter = itertools.count()
        module = importlib.import_module("websub_baseline")
        topic = "http://example.org/graphs/bench-fanout"
        for n in range(subscribers):
            requests.post(f"http://127.0.0.1:{port}/hub", timeout=60, data={
                "hub.mode": "subscribe", "hub.topic": topic, "hub.callback": receiver.url(n)})
        deadline = time.monotonic() + 120
        while len(list(module.hub.storage.get_callbacks(topic))) < subscribers:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)  # polling the baseline's storage for a state, with a deadline
        link = f'<http://127.0.0.1:{port}/hub>; rel="hub", <{topic}>; rel="self"'

        def put(value: int) -> str:
            patch = f"baseline-{value}"
            body = f'<http://ex/kpi> <http://ex/value> "{value}" .\n'.encode()
            module.hub.send_change_notification.delay(topic, {
                "headers": {"Link": link, "Content-Type": "application/rdf-patch", "X-Lucid-Patch-Id": patch},
                "content": base64.b64encode(body).decode("ascii")})
            return patch

        return drive(put, receiver, subscribers, patches)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("websub_baseline", None)
        for proc in (worker, server):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        receiver.close()


def _line(subscribers: int, patches: int, r: dict[str, float]) -> str:
    note = "" if r["complete"] else f"  INCOMPLETE: {r['deliveries']:,} of {r['expected']:,}"
    return (f"  {subscribers:>5} subscribers x {patches:>4} patches: {r['rate']:8,.0f} deliveries/s (burst; "
            f"{r['publish_rate']:4,.0f} patches/s published)  "
            f"publish->delivered at {PACED_RATE:.0f} deliveries/s: p50 {r['p50_ms']:7.1f} ms  "
            f"p99 {r['p99_ms']:8.1f} ms{note}")


def run(subscriber_counts: list[int], deliveries: int, kafka: bool, baseline: str = "", workers: int = 0,
        database: str = "") -> None:
    ours: dict[int, dict[str, float]] = {}
    if baseline:
        check_baseline()
    with tempfile.TemporaryDirectory(prefix="lucid-bench-fanout-") as tmp:
        work = Path(tmp)
        base_env = {"LUCID_DATABASE_URL": database} if database else {}
        logs: list[tuple[str, dict[str, str]]] = [("sql log", base_env)]
        with contextlib_kafka(kafka) as bootstrap:
            if bootstrap:
                logs.append(("kafka", {**base_env, "LUCID_KAFKA_BOOTSTRAP": bootstrap,
                                       "LUCID_KAFKA_TOPIC": "bench-fanout"}))
            setup = (f", {workers} delivery worker process{'es' if workers > 1 else ''}" if workers else
                     ", delivering in the serve process") + (f", database {database.split('@')[-1]}" if database
                                                             else ", SQLite")
            for name, env in logs:
                click.echo(f"== {name}{setup}")
                for subscribers in subscriber_counts:
                    patches = max(5, deliveries // subscribers)
                    if database:
                        _reset(database)
                    r = measure(subscribers, patches, env, work, workers)
                    ours.setdefault(subscribers, r)
                    click.echo(_line(subscribers, patches, r))
                    click.echo(json.dumps({"log": name, "subscribers": subscribers, **r}), err=True)
        if baseline:
            click.echo(f"== baseline: flask-websub's hub, Celery worker (2 processes), broker {baseline}")
            for subscribers in subscriber_counts:
                patches = max(5, deliveries // subscribers)
                b = measure_baseline(subscribers, patches, work, baseline)
                if b is None:
                    click.echo(f"  {subscribers:>5} subscribers: the baseline did not confirm its subscriptions")
                    continue
                click.echo(_line(subscribers, patches, b)
                           + f"   -> lucid-hub (sql log) {ours[subscribers]['rate'] / max(b['rate'], 1e-9):.1f}x")


def _reset(database: str) -> None:
    """An empty database for each run (the hub migrates it)."""
    from sqlalchemy import MetaData, create_engine

    engine = create_engine(database)
    try:
        metadata = MetaData()
        metadata.reflect(engine)
        metadata.drop_all(engine)
    finally:
        engine.dispose()


@contextmanager
def contextlib_kafka(wanted: bool) -> Iterator[str | None]:
    if not wanted:
        yield None
        return
    try:
        with kafka_broker() as bootstrap:
            yield bootstrap
    except ImportError:
        yield None
