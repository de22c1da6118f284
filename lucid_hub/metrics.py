"""Prometheus metrics of one lucid-hub process: what happens (counters, latency histograms),
and what the database says at scrape time (subscription lag, mirrors by state).

One registry per process part (a `Runtime`, a delivery worker), never prometheus_client's
global one: tests and benchmarks run several hubs in one process. Labels never carry graph
IRIs, callback URLs or mirror ids (a mirror id is part of its secret callback URL).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds: from a sub-millisecond in-memory publish to a bulk snapshot of minutes.
_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# Seconds from a patch's creation at its publisher to its application here (clock skew included).
_LAG = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 86400)

DELIVERY_OUTCOMES = ("delivered", "error", "gone", "denied")


class Metrics:
    """The instruments one process part records into, and its registry."""

    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # `_created` series: noise on every scrape
        self.registry = CollectorRegistry(auto_describe=True)
        self._watched: list[Callable[[], Iterable[Metric]]] = []
        r = self.registry
        self.publish_seconds = Histogram(
            "lucid_publish_seconds", "Time to make one change of an owned graph a signed, archived patch "
            "(diff, sign, archive, store).", buckets=_LATENCY, registry=r)
        self.publish_group = Histogram(
            "lucid_publish_group_patches", "Patches of one graph committed together (one database transaction "
            "and one store update: group commit).", buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r)
        self.patches = Counter(
            "lucid_patches", "Patches archived: published here, or mirrored from another hub.", ["origin"], registry=r)
        self.deliveries = Counter(
            "lucid_deliveries", "WebSub delivery attempts of one patch to one subscriber, by outcome "
            "(delivered: 2xx; error: other answer or none, retried; gone: 410; denied: access withdrawn).",
            ["outcome"], registry=r)
        self.delivery_retries = Counter(
            "lucid_delivery_retries", "Delivery rounds that retried a subscription after a failed attempt.",
            registry=r)
        self.delivery_seconds = Histogram(
            "lucid_delivery_seconds", "Time of one delivery POST, until the subscriber's answer.",
            buckets=_LATENCY, registry=r)
        self.mirror_apply_seconds = Histogram(
            "lucid_mirror_apply_seconds", "Time to verify and apply one patch delivered to a mirror.",
            buckets=_LATENCY, registry=r)
        self.mirror_lag_seconds = Histogram(
            "lucid_mirror_lag_seconds", "Time from a patch's creation at its publisher to its application to "
            "the mirror here (deliveries and catch-up).", buckets=_LAG, registry=r)
        self.http_requests = Counter(
            "lucid_http_requests", "HTTP requests answered, by route and status.", ["method", "route", "status"],
            registry=r)
        self.http_seconds = Histogram(
            "lucid_http_request_seconds", "Time to answer an HTTP request, by route.", ["route"],
            buckets=_LATENCY, registry=r)
        self.rule_firings = Counter(
            "lucid_rule_firings", "Rules that fired (their condition held), by outcome: patched, unchanged, sent, "
            "failed, stopped (cascade depth limit), skipped (owner lost access), rolled-back (patches undone).",
            ["outcome"], registry=r)
        self.rule_seconds = Histogram(
            "lucid_rule_seconds", "Time to evaluate one rule's event, condition and action for one patch.",
            buckets=_LATENCY, registry=r)
        self.rules_rested = Counter(
            "lucid_rules_rested", "Rule evaluations not run because their owner's rules overran the time budget "
            "just before (each fails at once; the owner's lane rests 1, 2, 4 ... 60 s).", registry=r)
        for outcome in ("patched", "failed", "rolled-back"):
            self.rule_firings.labels(outcome)
        for outcome in DELIVERY_OUTCOMES:  # present from the start, so rates work from the first scrape
            self.deliveries.labels(outcome)
        for origin in ("published", "mirrored"):
            self.patches.labels(origin)

    def watch(self, collect: Callable[[], Iterable[Metric]]) -> None:
        """Add metrics computed at scrape time (database state, other components' counts)."""
        self._watched.append(collect)
        self.registry.register(_Callback(collect))

    def render(self) -> bytes:
        """The exposition: this process's values, or, under `serve` with several processes,
        every process's (prometheus_client's multiprocess files) and the scrape-time ones."""
        if not os.environ.get(MULTIPROC_ENV):
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        for collect in self._watched:
            registry.register(_Callback(collect))
        return generate_latest(registry)


MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def use_multiprocess_metrics() -> str:
    """Before gunicorn forks several hub processes: their counters and histograms go to files
    in a fresh directory, and whichever process is scraped reports the sum. Returns it."""
    from prometheus_client import values

    directory = tempfile.mkdtemp(prefix="lucid-hub-metrics-")
    os.environ[MULTIPROC_ENV] = directory
    # prometheus_client picks its value class from the environment when it is imported,
    # which was before this call: pick again (metrics are made in the workers, after it).
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    return directory


def mark_process_dead(pid: int) -> None:
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


class _Callback(Collector):
    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return self._collect()

    def describe(self) -> Iterable[Metric]:
        return ()  # computed at scrape time: nothing to check for clashes at registration


def canonicalization_metrics(failures: int) -> list[Metric]:
    family = CounterMetricFamily("lucid_canonicalization_failures", "Canonicalisations stopped at their time "
                                 "or memory budget (pathological blank-node structures refused).")
    family.add_metric([], failures)
    return [family]


def cache_metrics(msgs: int, size: int, limit: int) -> list[Metric]:
    """The MSG cache of the process that serves the metrics (lucid_hub.memory)."""
    out: list[Metric] = []
    for name, meaning, value in (
            ("lucid_msg_cache_msgs", "MSGs of current graph versions held in memory.", msgs),
            ("lucid_msg_cache_bytes", "Estimated bytes those MSGs take.", size),
            ("lucid_msg_cache_limit_bytes", "The cache's bound (LUCID_CACHE_BYTES, or a share of the container's "
             "memory limit).", limit)):
        family = GaugeMetricFamily(name, meaning)
        family.add_metric([], value)
        out.append(family)
    return out


def subscription_metrics(subscriptions: list[dict[str, object]]) -> list[Metric]:
    """Per WebSub subscription (labelled by id only: the admin API maps ids to subscribers)."""
    lag = GaugeMetricFamily("lucid_subscription_lag", "Patches of the graph not yet delivered to the subscription.",
                            labels=["subscription", "state"])
    delivered = CounterMetricFamily("lucid_subscription_delivered", "Patches delivered to the subscription.",
                                    labels=["subscription"])
    failures = CounterMetricFamily("lucid_subscription_failures", "Failed delivery attempts.",
                                   labels=["subscription"])
    last = GaugeMetricFamily("lucid_subscription_last_success_timestamp_seconds", "Time of the last delivery.",
                             labels=["subscription"])
    for s in subscriptions:
        sid = str(s["id"])
        lag.add_metric([sid, str(s["state"])], float(s["lag"]))  # type: ignore[arg-type]
        delivered.add_metric([sid], float(s["delivered"]))  # type: ignore[arg-type]
        failures.add_metric([sid], float(s["failures"]))  # type: ignore[arg-type]
        if s["last_success_at"]:
            last.add_metric([sid], datetime.fromisoformat(str(s["last_success_at"])).timestamp())
    return [lag, delivered, failures, last]


def mirror_metrics(mirrors: list[dict[str, object]]) -> list[Metric]:
    """Mirrors in aggregate: their ids are part of their callback URLs, not for this page."""
    from collections import Counter as Tally

    states = GaugeMetricFamily("lucid_mirrors", "Mirrors of other hubs' graphs, by state.", labels=["state"])
    for state, count in sorted(Tally(str(m["state"]) for m in mirrors).items()):
        states.add_metric([state], count)
    out: list[Metric] = [states]
    for key, meaning in (("applied", "Patches verified and applied to mirrors."),
                         ("quarantined", "Delivered patches mirrors refused to apply."),
                         ("hmac_failures", "Deliveries with a wrong HMAC, ignored.")):
        family = CounterMetricFamily(f"lucid_mirror_{key}", meaning)
        family.add_metric([], sum(int(m[key]) for m in mirrors))  # type: ignore[call-overload]
        out.append(family)
    return out


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return  # scrapes every few seconds are not news


def serve_metrics(host: str, port: int, metrics: Metrics, healthy: Callable[[], bool]) -> WSGIServer:
    """/metrics and /healthz on a port of their own (LUCID_METRICS_PORT), in a daemon thread:
    for processes without an HTTP API (workers), and so that a hub's metrics need not be
    reachable where its API is (an Ingress routes the API port only)."""
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO")
        if path == "/healthz":
            ok = healthy()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"ok\n" if ok else b"not healthy\n"]
        if path == "/metrics":  # every process's counts under a multi-process `serve`
            start_response("200 OK", [("Content-Type", CONTENT_TYPE)])
            return [metrics.render()]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: /metrics or /healthz\n"]

    server = make_server(host, port, app, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    logging.getLogger(__name__).info("metrics on http://%s:%d/metrics", host, port)
    return server
