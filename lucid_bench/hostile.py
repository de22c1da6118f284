"""`lucid-hub bench hostile`: what a hostile partner costs a well-behaved one, as ratios of
two figures measured in one run (the goal: the well-behaved party's p99 under the attack is
at most 2x its p99 without it).

- Mirrors: two in-process hubs on loopback; the partner mirrors a graph of the publisher and
  its p99 from publish to applied (seen on the partner's own patch stream) is measured alone,
  then while the partner also mirrors a graph through a hostile publisher
  (lucid_bench.attackers: endless, repeating, 100 MB, trickling, dribbling archive pages).
- Heavy windows: one hub; a party's continuous query's p99 from update to notification (its
  SSE stream), alone, then while another party sends three `PUT /windows/…` at a time whose
  query overruns the budget (LUCID_QUERY_BUDGET=1 here); and the same with three
  `POST /subscriptions` at a time (a new continuous query's first evaluation).
- Heavy rules: one hub; an admin's publishes to a graph with a light immediate rule of its
  own, alone, then while a partner publishes to its own graph, three at a time (five a second
  each), each firing its immediate rule whose condition overruns the budget
  (LUCID_RULES_BUDGET=1 here).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import requests

from lucid_bench.attackers import ATTACKS, HostilePublisher
from lucid_bench.queries import _hub
from lucid_hub.policy.model import Condition

G = "https://acme.example/graphs/kpi"
ROUND = {"LUCID_DEV_MODE": "1", "LUCID_LEASE_MIN": "120", "LUCID_MIRROR_ROUND_SECONDS": "3",
         "LUCID_MIRROR_ROUND_PAGES": "20", "LUCID_PAGE_SIZE": "3"}
TTL = {"Content-Type": "text/turtle"}


def _until(what: Callable[[], bool], timeout: float = 60) -> None:
    """Until `what` holds (a condition on a hub, looked at every 50 ms)."""
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise click.ClickException("the benchmark's hubs did not reach the expected state in time")
        time.sleep(0.05)


def _p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[98]


class _Events:
    """An SSE stream's event ids and when each arrived."""

    def __init__(self, http: requests.Session, url: str, params: dict[str, str]) -> None:
        self.seen: dict[str, float] = {}
        self.changed = threading.Condition()
        self.response = http.get(url, params=params, stream=True, timeout=(10, 600))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        with contextlib.suppress(requests.RequestException, AttributeError):
            for line in self.response.iter_lines():
                if line.startswith(b"data: "):
                    data = json.loads(line[6:])
                    key = str(data.get("id") or data.get("notification", {}).get("sequence"))
                    with self.changed:
                        self.seen[key] = time.perf_counter()
                        self.changed.notify_all()

    def at(self, key: str) -> float:
        with self.changed:
            if not self.changed.wait_for(lambda: key in self.seen, 60):
                raise click.ClickException(f"the event {key} never came")
            return self.seen[key]

    def close(self) -> None:
        self.response.close()


def _session(token: str) -> requests.Session:
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {token}"
    return http


def mirrors(samples: int, attacks: list[str]) -> list[tuple[str, float, float]]:
    """(attack, unloaded p99, attacked p99) of the well-behaved mirror, in seconds."""
    figures = []
    with tempfile.TemporaryDirectory(prefix="lucid-bench-hostile-") as tmp, \
            _hub(Path(tmp) / "acme", ROUND) as (acme_url, acme, acme_token), \
            _hub(Path(tmp) / "globex", ROUND) as (globex_url, _globex, globex_token):
        acme_http, globex_http = _session(acme_token), _session(globex_token)
        client, secret = acme.clients.create("Globex hub", groups=["partner-globex"],
                                             scopes=["hub:subscribe", "graphs:read"],
                                             callback_prefixes=[f"{globex_url}/callback/"])
        graphs = [G, *(f"{G}-{attack}" for attack in attacks)]
        acme_http.post(f"{acme_url}/admin/conditions", timeout=30, json={
            "iri": "urn:c:globex", "requiresGroup": ["partner-globex"], "readGraph": graphs}).raise_for_status()
        counter = iter(range(1 << 30))

        def publish(graph: str) -> str:
            body = f'<https://acme.example/kpi/otif> <https://acme.example/kpi/value> "{next(counter)}" .'
            answer = acme_http.put(f"{acme_url}/graphs", params={"graph": graph}, data=body, headers=TTL, timeout=30)
            answer.raise_for_status()
            return str(answer.json()["patch"])

        def mirror(hub_url: str, graph: str) -> str:
            answer = globex_http.post(f"{globex_url}/admin/mirrors", timeout=30, json={
                "hub": f"{hub_url}/hub", "graph": graph, "client_id": client.client_id, "client_secret": secret})
            answer.raise_for_status()
            return str(answer.json()["id"])

        def head(graph: str) -> object:
            listed = globex_http.get(f"{globex_url}/admin/mirrors", timeout=30).json()["mirrors"]
            return next((m["head"] for m in listed if m["graph"] == graph), None)

        for graph in graphs:
            for _ in range(4):
                publish(graph)
        mirror(acme_url, G)
        _until(lambda: head(G) == acme.archive.head(G))
        events = _Events(globex_http, f"{globex_url}/patches/events", {"graph": G})

        def following() -> float:
            took = []
            for _ in range(samples):
                began = time.perf_counter()
                took.append(events.at(publish(G)) - began)
            return _p99(took)

        try:
            for attack in attacks:
                unloaded = following()
                hostile = HostilePublisher(acme_url, attack)
                try:
                    mirror_id = mirror(hostile.url, f"{G}-{attack}")
                    _until(lambda h=hostile: h.pages > 0)  # type: ignore[misc]
                    attacked = following()
                    globex_http.delete(f"{globex_url}/admin/mirrors", params={"id": mirror_id}, timeout=30)
                finally:
                    hostile.close()
                figures.append((f"mirror beside a publisher whose pages are {attack}", unloaded, attacked))
                click.echo(f"{figures[-1][0]}: p99 {unloaded * 1000:.1f} ms alone, {attacked * 1000:.1f} ms beside "
                           f"it: {attacked / unloaded:.2f}x (goal <= 2); hostile pages read {hostile.pages}")
        finally:
            events.close()
    return figures


def heavy_windows(samples: int, attack: str = "windows") -> tuple[str, float, float]:
    """(name, unloaded p99, attacked p99) of a party's notifications beside another's heavy
    windowed queries (`windows`) or new continuous queries (`subscriptions`)."""
    orders = "http://ex.org/g/orders"
    ex = "http://ex.org/"
    with tempfile.TemporaryDirectory(prefix="lucid-bench-hostile-") as tmp, \
            _hub(Path(tmp) / "hub", {"LUCID_QUERY_BUDGET": "1"}) as (url, runtime, token):
        admin = _session(token)
        admin.put(f"{url}/graphs", params={"graph": orders}, headers={"Content-Type": "application/n-triples"},
                  data=f'<{ex}o1> <{ex}status> "open" .\n<{ex}o1> <{ex}buyer> <{ex}p1> .\n', timeout=30)
        admin.post(f"{url}/admin/conditions", timeout=30, json={
            "iri": "urn:c:buyers", "requiresGroup": ["buyers"], "readGraph": [orders]}).raise_for_status()
        parties = []
        for name in ("good", "hostile"):
            record, _secret = runtime.clients.create(name, groups=["buyers"], scopes=["graphs:read"])
            parties.append(_session(str(runtime.tokens.issue(record, "graphs:read"))))
        good, hostile = parties
        query = f"SELECT ?s WHERE {{ <{ex}o1> <{ex}status> ?s }}"
        spuid = good.post(f"{url}/subscriptions", json={"sparql": query}, timeout=30).json()["notification"]["spuid"]
        events = _Events(good, f"{url}/subscriptions/{spuid}/events", {})
        events.at("0")
        value, sequence = ["open"], [0]

        def notified() -> float:
            took = []
            for _ in range(samples):
                new = "packed" if value[0] != "packed" else "open"
                began = time.perf_counter()
                admin.post(f"{url}/sparql", headers={"Content-Type": "application/sparql-update"}, timeout=30,
                           data=f'DELETE DATA {{ GRAPH <{orders}> {{ <{ex}o1> <{ex}status> "{value[0]}" }} }} ; '
                                f'INSERT DATA {{ GRAPH <{orders}> {{ <{ex}o1> <{ex}status> "{new}" }} }}')
                value[0] = new
                sequence[0] += 1
                took.append(events.at(str(sequence[0])) - began)
            return _p99(took)

        values = " ".join(str(i) for i in range(300))
        heavy = "SELECT (COUNT(*) AS ?n) WHERE { " + " ".join(f"VALUES ?v{k} {{ {values} }}" for k in range(4)) + " }"
        stop, answers = threading.Event(), []

        reading = heavy.replace("WHERE { ", f"WHERE {{ GRAPH <{orders}> {{ ?s ?p ?o }} ")  # (it must read a graph)

        def hostile_request(n: int) -> requests.Response:
            if attack == "windows":
                return hostile.put(f"{url}/windows/heavy{n}", timeout=60, json={
                    "sparql": heavy, "graphs": [orders], "range": 1, "step": 1})
            return hostile.post(f"{url}/subscriptions", timeout=60, json={"sparql": reading})

        def flood(n: int) -> None:
            while not stop.is_set():
                answers.append(hostile_request(n).status_code)

        try:
            unloaded = notified()
            threads = [threading.Thread(target=flood, args=(n,), daemon=True) for n in range(3)]
            for thread in threads:
                thread.start()
            try:
                attacked = notified()
            finally:
                stop.set()
                for thread in threads:
                    thread.join(60)
        finally:
            events.close()
        what = "windows" if attack == "windows" else "new continuous queries"
        name = f"notifications beside a party's heavy {what} (3 at a time)"
        click.echo(f"{name}: p99 {unloaded * 1000:.1f} ms alone, {attacked * 1000:.1f} ms beside them: "
                   f"{attacked / unloaded:.2f}x (goal <= 2); the hostile party's {len(answers)} requests: "
                   f"{answers.count(422)} overran (422), {answers.count(429)} refused at once (429)")
        return name, unloaded, attacked


RULES_ENV = {"LUCID_RULES_BUDGET": "1", "LUCID_DEV_MODE": "1"}
_EX = "http://ex.org/"
_NT = {"Content-Type": "application/n-triples"}
_TEXT = {"Content-Type": "text/plain; charset=utf-8"}
_VALUES = " ".join(str(i) for i in range(300))
_HEAVY_CONDITION = "{ SELECT (COUNT(*) AS ?n) WHERE { " + " ".join(f"VALUES ?v{k} {{ {_VALUES} }}" for k in range(4)) \
    + " } } FILTER (?n > 0)"


@dataclass
class RulesAttack:
    """What `rules_attack` measured: the admin's publish p99 alone and beside the partner's
    heavy rule, each publish it made, and the partner's answers (status, seconds)."""

    unloaded: float
    attacked: float
    published: list[str]
    answers: list[tuple[int, float]]


def rules_attack(url: str, runtime: Any, admin: requests.Session, samples: int) -> RulesAttack:
    """The heavy-rules scenario on a running hub (RULES_ENV): a partner's immediate rule whose
    condition overruns the budget, fired by its own publishes three at a time, beside an
    admin's publishes to another graph whose light immediate rule (never met) fires at each."""
    mine, kpi = "https://partner.example/graphs/mine", "https://acme.example/graphs/kpi"
    runtime.policies.create([Condition("urn:c:partner", requiresGroup=("partners",), readGraph=(mine,),
                                       writeGraph=(mine,))], "bench")
    record, _secret = runtime.clients.create("partner", groups=["partners"], scopes=["graphs:read", "graphs:write"])
    partner = _session(str(runtime.tokens.issue(record, "graphs:read graphs:write")))
    partner.put(f"{url}/graphs", params={"graph": mine}, data=f'<{_EX}a> <{_EX}v> "0" .\n', headers=_NT,
                timeout=30).raise_for_status()
    for http, name, graph, condition in ((partner, "urn:partner:heavy", mine, _HEAVY_CONDITION),
                                         (admin, "urn:acme:light", kpi, 'FILTER (?v = "never")')):
        rule = (f"RULE <{name}> IMMEDIATE ON INSERT {{ GRAPH <{graph}> {{ ?s <{_EX}v> ?v }} }} IF {{ {condition} }} "
                f"DO INSERT {{ GRAPH <{graph}> {{ ?s <{_EX}seen> true }} }} WHERE {{}}")
        added = http.post(f"{url}/rules", data=rule.encode(), headers=_TEXT, timeout=30)
        if added.status_code != 201 and added.status_code != 200:
            raise RuntimeError(f"adding {name} was answered {added.status_code}: {added.text[:500]}")
    published: list[str] = []

    def publishes() -> float:
        took = []
        for _ in range(samples):
            began = time.perf_counter()
            answer = admin.post(f"{url}/graphs", params={"graph": kpi}, headers=_NT, timeout=60,
                                data=f'<{_EX}k> <{_EX}v> "{len(published)}" .\n')
            took.append(time.perf_counter() - began)
            answer.raise_for_status()
            published.append(answer.json()["patch"])
        return _p99(took)

    stop, answers = threading.Event(), []

    def attack(n: int) -> None:
        # Five publishes a second each, fifteen in all: each fires the heavy rule unless its lane
        # rests. (As fast as they can go, three publishers cost another's publishes about 2x on
        # their own, rule or not, on a 2-core machine: the shared database and processor, which
        # `bench publish` measures; here it is the rule that is measured.)
        sent = 0
        while not stop.wait(0.2 if sent else 0):
            sent += 1
            answer = partner.post(f"{url}/graphs", params={"graph": mine}, headers=_NT, timeout=60,
                                  data=f'<{_EX}s{n}-{sent}> <{_EX}v> "{sent}" .\n')
            answers.append((answer.status_code, answer.elapsed.total_seconds()))

    unloaded = publishes()
    threads = [threading.Thread(target=attack, args=(n,), daemon=True) for n in range(3)]
    for thread in threads:
        thread.start()
    try:
        _until(lambda: len(answers) >= 3)  # each attacker's first heavy firing has overrun
        attacked = publishes()
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    return RulesAttack(unloaded, attacked, published, answers)


def heavy_rules(samples: int) -> tuple[str, float, float]:
    """(name, unloaded p99, attacked p99) of an admin's publishes beside a partner's heavy rule."""
    with tempfile.TemporaryDirectory(prefix="lucid-bench-hostile-") as tmp, \
            _hub(Path(tmp) / "hub", RULES_ENV) as (url, runtime, token):
        found = rules_attack(url, runtime, _session(token), samples)
    name = "publishes beside a party's heavy immediate rule (3 at a time)"
    click.echo(f"{name}: p99 {found.unloaded * 1000:.1f} ms alone, {found.attacked * 1000:.1f} ms beside it: "
               f"{found.attacked / found.unloaded:.2f}x (goal <= 2); the partner's {len(found.answers)} publishes, "
               f"median {statistics.median(s for _c, s in found.answers) * 1000:.0f} ms")
    return name, found.unloaded, found.attacked


def run(samples: int, attacks: list[str]) -> list[tuple[str, float, float]]:
    unknown = set(attacks) - set(ATTACKS)
    if unknown:
        raise click.BadParameter(f"unknown attacks: {', '.join(sorted(unknown))} (known: {', '.join(ATTACKS)})")
    figures = mirrors(samples, attacks) if attacks else []
    figures.append(heavy_windows(samples))
    figures.append(heavy_windows(samples, "subscriptions"))
    figures.append(heavy_rules(samples))
    worst = max(figures, key=lambda f: f[2] / f[1])
    click.echo(f"worst: {worst[0]}, {worst[2] / worst[1]:.2f}x")
    return figures

