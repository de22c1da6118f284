"""The overview's "Needs attention" tells the truth: a partner hub that went down is named at
the next refresh after a delivery to it failed (not once its subscription failed for good or
fell 100 patches behind), with its client's name and since when; it clears once the partner
is back and has taken what it missed. Two real hubs on loopback, the partner stopped and
started again at the same address."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import requests

from lucid_hub.auth.admins import AdminAccounts
from tests.conftest import ADMIN_PASSWORD, RunningHub, running_hub
from tests.mirror.test_mirror import DEV, G, _deliver, add_mirror, mirror, publish, version, wait


def signed_in(hub: RunningHub, *, create: bool = True) -> requests.Session:
    """A session of the admin alice (`create`: her account made first; a replica of a hub shares it)."""
    if create:
        AdminAccounts(hub.runtime.db).create("alice", ADMIN_PASSWORD)
    web = requests.Session()
    csrf = re.search(r'name="csrf" value="([^"]+)"', web.get(f"{hub.url}/admin/ui/login", timeout=30).text)
    assert csrf is not None
    answer = web.post(f"{hub.url}/admin/ui/login", timeout=30,
                      data={"username": "alice", "password": ADMIN_PASSWORD, "csrf": csrf.group(1)})
    assert answer.status_code == 200
    return web


def attention(web: requests.Session, hub: RunningHub) -> str:
    page = web.get(f"{hub.url}/admin/ui/overview", timeout=30).text
    found = re.search(r'<section aria-labelledby="attention">(.*?)</section>', page, re.S)
    assert found is not None
    return found.group(1)


def test_a_partner_that_is_down_is_named_at_the_next_refresh_and_cleared_after_it_recovers(tmp_path: Path) -> None:
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", DEV) as publisher:
        web = signed_in(publisher)
        publish(publisher, version(0))
        with running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}", DEV) as partner:
            add_mirror(publisher, partner)
            wait(lambda: mirror(partner)["state"] == "active" and mirror(partner)["head"] == publisher.runtime.archive.head(G))
            port = int(partner.url.rsplit(":", 1)[1])
            assert "Nothing: every subscription delivers" in attention(web, publisher)
        # the partner is down; the next patch cannot be delivered
        head = publish(publisher, version(1))

        def failing() -> bool:
            (sub,) = publisher.runtime.hub.subscriptions()
            return bool(sub["attempts"])

        wait(failing, timeout=60)
        from lucid_hub.web.console.figures import overview_figures

        wait(lambda: overview_figures(publisher.runtime)[0]["failures"] >= 1)  # (failed deliveries, last hour)
        shown = attention(web, publisher)  # (one refresh)
        assert "Deliveries failing" in shown and "Globex hub" in shown and "since" in shown, shown
        assert "Nothing" not in shown
        for page in ("subscriptions", f"graph?graph={G}"):  # subscribers by their client's name first
            assert "<strong>Globex hub</strong>" in web.get(f"{publisher.url}/admin/ui/{page}", timeout=30).text
        # the partner comes back at the same address; it takes what it missed, and the item goes
        with running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}", DEV, port=port) as partner:
            wait(lambda: mirror(partner)["head"] == head, timeout=90)

            def delivered() -> bool:
                (sub,) = publisher.runtime.hub.subscriptions()
                return not sub["attempts"] and not sub["lag"]

            wait(delivered, timeout=90)
            assert "Nothing: every subscription delivers" in attention(web, publisher)


def test_ended_queries_failing_background_work_and_refused_senders_are_named(tmp_path: Path) -> None:
    from tests.streams.test_inbox import PARTNERS, announce, partner
    from tests.streams.test_inbox import G as ORDERS
    from tests.streams.test_inbox import post as post_notification

    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}",
                     {**DEV, "LUCID_INBOX_RATE": "2"}) as hub:
        web = signed_in(hub)
        assert hub.http.post(f"{hub.url}/admin/conditions", data=PARTNERS,
                             headers={"Content-Type": "text/turtle"}).status_code in (200, 201)
        assert hub.http.put(f"{hub.url}/graphs", params={"graph": ORDERS}, data=b'<http://ex/a> <http://ex/p> "1" .\n',
                            headers={"Content-Type": "application/n-triples"}).status_code == 201
        assert "Nothing" in attention(web, hub)
        # a continuous query the hub ended (as it does when access is withdrawn)
        made = hub.http.post(f"{hub.url}/subscriptions", timeout=30, json={
            "sparql": f"SELECT * WHERE {{ GRAPH <{ORDERS}> {{ ?s ?p ?o }} }}"})
        assert made.status_code == 201, made.text
        sid = made.json()["notification"]["spuid"]
        hub.runtime.queries.records.end(sid, f"access to {ORDERS} was withdrawn: the query ended")
        # a partner over its inbox rate
        flood = partner(hub, "flood")
        answers = [post_notification(flood, hub, announce(n)).status_code for n in range(3)]
        assert answers == [201, 201, 429]
        # background work that fails
        def broken() -> None:
            raise RuntimeError("the broker is gone")

        role = hub.runtime.roles.add("test-broken-work", broken, every=0.05)
        wait(lambda: role.failures_in_a_row > 0)
        shown = attention(web, hub)
        assert "Continuous query ended" in shown and f"access to {ORDERS} was withdrawn" in shown, shown
        assert "Inbox refusing a sender" in shown and "1 notifications refused" in shown
        assert "Background work failing: test-broken-work" in shown
        assert "Nothing" not in shown
        listed = web.get(f"{hub.url}/admin/ui/queries", timeout=30).text  # where the items link to
        assert f'data-query="{sid}"' in listed and f"access to {ORDERS} was withdrawn" in listed
        assert "test-broken-work" in web.get(f"{hub.url}/admin/ui/hub", timeout=30).text
        inboxes = web.get(f"{hub.url}/admin/ui/inboxes", timeout=30).text  # the flood's sender, counted
        assert ORDERS in inboxes and re.search(r"<strong>flood</strong><br><span[^>]*>[^<]*</span></td><td>2</td>", inboxes), inboxes[-3000:]


def test_figures_count_published_graphs_only_and_the_week_ends_today(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from lucid_hub.web.console.figures import overview_figures

    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", DEV) as hub:
        body = {"iri": "urn:c:someone-reads", "requiresGroup": ["someone"], "readGraph": [G]}
        assert hub.http.post(f"{hub.url}/admin/conditions", json=body, timeout=30).status_code == 201
        publish(hub, version(0))
        internal = [g.iri for g in hub.runtime.archive.graph_page(0, 100)[0] if g.iri.startswith("urn:lucid-hub:")]
        assert internal  # (the access conditions are a graph of the hub's own)
        figures, charts = overview_figures(hub.runtime)
        assert figures["published"] == 1  # the published graph, not the hub's own
        today = datetime.now(UTC).strftime("%a %d")
        assert charts["week"].span.endswith(f"to {today}")  # (the last bar is today's, labelled so)
        assert charts["week"].total == charts["day"].total >= 1
        web = signed_in(hub)
        page = web.get(f"{hub.url}/admin/ui/overview", timeout=30).text
        recent = page.split('<section aria-labelledby="recent">')[1]
        assert G in recent and not any(iri in recent for iri in internal)


def test_the_rules_page_and_the_hub_page_show_what_runs(tmp_path: Path) -> None:
    from tests.rules.test_rules import CHAIN, DELIVERIES, EX, add_rules, put

    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", DEV) as hub:
        web = signed_in(hub)
        empty = web.get(f"{hub.url}/admin/ui/rules", timeout=30)
        assert empty.status_code == 200 and "No rules" in empty.text
        add_rules(hub, CHAIN)
        trigger = put(hub, DELIVERIES, f'<{EX}d1> <{EX}late> "true"^^<http://www.w3.org/2001/XMLSchema#boolean> .\n')
        page = web.get(f"{hub.url}/admin/ui/rules", timeout=30).text
        for rule in ("urn:r:first", "urn:r:second", "urn:r:cascade"):
            assert f'data-rule="{rule}"' in page
        assert "can raise" in page and "<svg" in page and "no cycle" in page  # first -> cascade
        assert trigger[11:27] in page and "patched" in page  # the latest firings, with their outcomes
        changes = re.search(r'aria-label="Changes of the rule set".*?</table>', page, re.S)
        assert changes and "#1" in changes.group(0)  # the rule set's history: the change that added them
        head = hub.runtime.archive.head("urn:lucid-hub:rules")
        assert head and f"patch?id={requests.utils.quote(head, safe='')}" in changes.group(0)
        assert "Time budget by owner" in page and "within the budget" in page  # (the rules ran within it)
        roles = web.get(f"{hub.url}/admin/ui/hub", timeout=30).text
        assert 'data-role="' in roles and "this process leads" in roles and "patches behind the archive" in roles


def test_a_mirror_its_publisher_stopped_delivering_to_is_named_behind_and_cleared_when_it_follows(
        tmp_path: Path) -> None:
    """The subscriber's side: the publisher holds back deliveries (its subscription not due), so
    the mirror falls behind; the role `mirror-lag` asks the publisher, and two askings apart
    name the mirror on the overview, the leader's and another replica's (which keeps no mirror:
    it reads what the leader found); deliveries again, the next asking clears it. A round that
    fails is named on both as the mirror's upkeep failing, since then, until one goes well."""
    from concurrent.futures import Future
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import update

    from lucid_hub.db.models import Subscription
    from lucid_hub.mirror.lags import BEHIND_FOR

    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", DEV) as publisher:
        publish(publisher, version(0))
        with running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}", DEV) as partner, \
                running_hub(tmp_path / "globex-2", f"sqlite:///{tmp_path / 'globex.db'}", DEV) as replica:
            assert partner.runtime.leader and not replica.runtime.leader
            web, other = signed_in(partner), signed_in(replica, create=False)
            add_mirror(publisher, partner)
            wait(lambda: mirror(partner)["state"] == "active" and mirror(partner)["head"] == publisher.runtime.archive.head(G))
            service = partner.runtime.mirrors
            service.ask_lags()
            (mirror_id,) = [m["id"] for m in partner.runtime.mirror_registry.list()]
            assert service.lags.all()[mirror_id].patches == 0
            assert "Nothing" in attention(web, partner)
            with publisher.runtime.db.session() as session:  # the publisher stops delivering
                session.execute(update(Subscription).values(next_attempt_at=datetime.now(UTC) + timedelta(days=1)))
            head = publish(publisher, version(1))
            patches, more = service.publisher_lag(mirror_id)
            service.lags.forget(mirror_id)
            first = service.lags.record(mirror_id, patches, more, at=1_000.0)  # (that asking, as if back then)
            assert first.patches == 1 and not first.behind
            assert "Mirror behind" not in attention(web, partner)  # one asking: perhaps a delivery in flight
            service.lags.record(mirror_id, first.patches, first.more, at=1_000.0 + BEHIND_FOR / 2)
            assert "Mirror behind" not in attention(web, partner)
            service.ask_lags()  # now: the lag seen since back then
            shown = attention(web, partner)
            assert "Mirror behind its publisher" in shown and f"{G}: 1 patches after its head" in shown, shown
            assert publisher.url in shown and "since" in shown
            assert f"{G}: 1 patches after its head" in attention(other, replica)
            with publisher.runtime.db.session() as session:  # deliveries again
                session.execute(update(Subscription).values(next_attempt_at=datetime.now(UTC)))
            wait(lambda: mirror(partner)["head"] == head, timeout=60)
            service.ask_lags()
            assert "Mirror behind" not in attention(web, partner) and "Mirror behind" not in attention(other, replica)
            assert "Nothing" in attention(web, partner)

            rounds = service.rounds

            def round_ended(went_well: bool) -> None:  # a round's outcome, as the leader's rounds take it
                rounds._not_before[mirror_id] = time.monotonic() + 3600  # the leader's own rounds held off …
                wait(lambda: mirror_id not in rounds._running)  # … and the one under way ended
                outcome: Future[bool] = Future()
                outcome.set_result(went_well)
                rounds._running.add(mirror_id)
                rounds._round_ended(mirror_id, outcome)
                if not went_well:
                    rounds._not_before[mirror_id] = time.monotonic() + 3600

            round_ended(False)
            for page in (attention(web, partner), attention(other, replica)):
                assert "Mirror&#39;s upkeep failing" in page and "since" in page, page
            ready = requests.get(f"{replica.url}/readyz", timeout=30)  # the replica's readiness names it too
            assert ready.status_code == 200 and f"mirror of <{G}> is not following" in ready.text, ready.text
            round_ended(True)
            assert "upkeep failing" not in attention(other, replica)
            assert "not following" not in requests.get(f"{replica.url}/readyz", timeout=30).text
            assert "Nothing" in attention(web, partner)
            # a delivery that does not verify is quarantined; access withdrawn revokes the mirror
            foreign = publisher.runtime.archive.patch(head).body.replace(b'"W1"', b'"W7"')
            assert _deliver(partner, foreign).status_code == 202
            wait(lambda: mirror(partner)["quarantined"] == 1)
            for page in (attention(web, partner), attention(other, replica)):
                assert "Patches quarantined" in page and f"{G}: 1 (not verified" in page, page
            assert publisher.http.delete(f"{publisher.url}/admin/conditions", params={"iri": "urn:c:globex-reads-kpi"},
                                         timeout=30).status_code == 204
            publish(publisher, version(2))  # its delivery finds the access withdrawn
            wait(lambda: mirror(partner)["state"] == "revoked")
            for page in (attention(web, partner), attention(other, replica)):
                assert "Mirror revoked" in page and "access withdrawn" in page, page


def test_every_replica_shows_on_the_hub_page_and_one_behind_failing_or_silent_is_named(tmp_path: Path) -> None:
    """Two replicas of one hub (two data directories, one database): the hub page of either
    lists both, the leader first; a replica behind, with failing work, or gone silent without
    a word is named on the overview; a clean stop takes its report away."""
    from datetime import timedelta

    from sqlalchemy import update

    from lucid_hub.db.models import ReplicaReport
    from lucid_hub.db.times import now
    from lucid_hub.errors import RateLimitedError
    from lucid_hub.replicas import SILENT, Replicas

    db_url = f"sqlite:///{tmp_path / 'hub.db'}"
    env = {**DEV, "LUCID_INBOX_RATE": "2"}
    with running_hub(tmp_path / "one", db_url, env) as hub:
        web = signed_in(hub)
        with running_hub(tmp_path / "two", db_url, env) as second:
            assert hub.runtime.replicas is not None and second.runtime.replicas is not None
            names = {hub.runtime.replicas.name, second.runtime.replicas.name}
            wait(lambda: {r["name"] for r in hub.runtime.replicas.all()} >= names)  # type: ignore[union-attr]
            page = web.get(f"{hub.url}/admin/ui/hub", timeout=30).text
            for name in names:
                assert f'data-replica="{name}"' in page
            assert page.index(f'data-replica="{hub.runtime.replicas.name}"') < page.index(
                f'data-replica="{second.runtime.replicas.name}"')  # the leader first
            assert "(this process)" in page and "Replica" not in attention(web, hub)
            # what only the second's memory holds: its inbox refused a sender over the rate
            for _ in range(2):
                second.runtime.inbox.limiter.take("https://flood.example/")
            with pytest.raises(RateLimitedError):
                second.runtime.inbox.limiter.take("https://flood.example/")
            told = f"(as the replica {second.runtime.replicas.name} saw it)"
            wait(lambda: told in attention(web, hub), timeout=30)  # at its next report (every 5 s)
            shown = attention(web, hub)
            assert "Inbox refusing a sender" in shown and "https://flood.example/: 1 notifications refused" in shown
            assert not hub.runtime.inbox.limiter.refusals(0)  # (the page's own process refused nobody)
        wait(lambda: second.runtime.replicas.name not in {r["name"] for r in hub.runtime.replicas.all()})  # type: ignore[union-attr]
        assert "Inbox refusing" not in attention(web, hub)  # gone with its report
        # a third process's word: far behind, its relay failing, its store not written; then it goes silent
        third = Replicas(hub.runtime.db, "replica-three")
        third.report(hub.runtime.settings.ready_max_lag + 1, False, ["relay"], [
            {"what": "Your store kg is not written", "detail": "graphdb: 503", "link": "hub#stores", "since": ""},
            {"what": "Leadership flapping", "detail": "(worded by another version)", "since": "yesterday"}])
        shown = attention(web, hub)
        assert "Replica behind" in shown and "replica-three/" in shown and "Background work failing on another replica" in shown
        assert "Your store kg is not written" in shown and f"graphdb: 503 (as the replica {third.name} saw it)" in shown
        assert "(worded by another version) (as the replica" in shown  # a moment it cannot read: shown without one
        with hub.runtime.db.session() as session:  # its last report, as if long ago
            session.execute(update(ReplicaReport).where(ReplicaReport.name == third.name)
                            .values(seen_at=now() - SILENT - timedelta(seconds=1)))
        shown = attention(web, hub)
        assert "Replica silent" in shown and "Replica behind" not in shown and "Your store kg" not in shown, shown
        third.leave()
        assert "Replica" not in attention(web, hub)


def test_this_replicas_store_behind_the_archive_is_named_until_it_follows(tmp_path: Path) -> None:
    """Two processes on one database: one publishes; the other's store (not following: opened,
    not started) is behind the archive by more than LUCID_READY_MAX_LAG, and its overview says
    so; caught up, the item goes."""
    from lucid_hub.config import Settings
    from lucid_hub.rdf.msg import graph_msgs
    from lucid_hub.runtime import Runtime
    from lucid_hub.web.console.attention import attention
    from tests.conftest import parse_nt

    env = {"LUCID_DATABASE_URL": f"sqlite:///{tmp_path / 'hub.db'}", "LUCID_READY_MAX_LAG": "0"}
    one = Runtime.open(Settings.from_env({**env, "LUCID_DATA_DIR": str(tmp_path / "one")}))
    other = Runtime.open(Settings.from_env({**env, "LUCID_DATA_DIR": str(tmp_path / "other")}))
    try:
        assert not [i for i in attention(other) if i.what == "This replica is behind"]
        assert one.publisher.replace(G, graph_msgs(parse_nt('<http://ex/a> <http://ex/p> "1" .\n'), one.canonicalizer),
                                     author="t", message="") is not None
        (item,) = [i for i in attention(other) if i.what == "This replica is behind"]
        assert item.detail == "its store is 1 patches behind the archive" and item.link == "hub"
        assert G in other.publisher.sync.all()
        assert not [i for i in attention(other) if i.what == "This replica is behind"]
    finally:
        other.close()
        one.close()
