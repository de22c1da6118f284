"""Issue 20, hub processes as pods: three `lucid-hub serve` processes with separate data
directories (each its own store, as pods with their own volumes) on one PostgreSQL. Real
processes on loopback."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from lucid_hub.tools.hubproc import HubProcess, wait_until

G = "https://acme.example/graphs/orders"

pytestmark = pytest.mark.slow


def fresh(hub: HubProcess, method: str, path: str, **kwargs: object) -> requests.Response:
    with requests.Session() as http:
        http.trust_env = False
        return http.request(method, f"{hub.url}{path}", headers={**hub.http.headers, **kwargs.pop("headers", {})},
                            timeout=60, **kwargs)  # type: ignore[arg-type]


def test_publishes_through_every_pod_keep_one_chain_and_none_fails_for_a_concurrent_one(
        tmp_path: Path, postgres_url: str) -> None:
    from tests.conftest import _reset_postgres

    _reset_postgres(postgres_url)
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

        patches: list[dict[str, str]] = []
        page: str | None = f"/patches?graph={G}"
        while page:  # (pages of 100)
            answer = pods[1].call("GET", page.removeprefix(pods[1].url), headers={"Accept": "application/json"}).json()
            patches += answer["patches"]
            page = answer["next"]
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
