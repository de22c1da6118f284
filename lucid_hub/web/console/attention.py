"""What needs an admin's attention, for the overview: each item says what, about whom, since
when, and links to the page where it is dealt with. It must tell the truth: a partner whose
deliveries fail is named at its first failed attempt, not once its subscription has failed
for good or fallen 100 patches behind."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from lucid_hub.errors import LogUnavailableError
from lucid_hub.leadership import FLAPPING_WINDOW, lease_of
from lucid_hub.publish.relay import backlog
from lucid_hub.queries.troubles import troubles
from lucid_hub.web.console.figures import KEY_AGE_DAYS, LAGGING, PAGE, RULE_FIRINGS, key_age_days
from lucid_hub.web.moments import aware
from lucid_hub.web.parts import HubParts

QUIET = timedelta(minutes=10)  # a subscription behind with no success for this long needs attention
RECENT = timedelta(hours=24)  # queries and windows ended this recently are named
RELAY_STALLED = timedelta(minutes=1)  # an outbox row this old: the relay does not keep up
LOG_TIMEOUT = 0.5  # seconds the overview waits for the patch log's answer (a broker that is down)


@dataclass(frozen=True)
class Item:
    what: str
    detail: str
    link: str = ""
    since: datetime | None = None


def _when(value: str | datetime | None) -> datetime | None:
    return aware(value) if value else None


def attention(hub: HubParts, mirrors: list[dict[str, Any]] | None = None) -> list[Item]:
    """Everything that needs attention now, the most pressing kinds first."""
    items: list[Item] = []
    replicas = hub.replicas.all() if hub.replicas is not None else []
    items += _health(hub, replicas)
    items += _subscribers(hub)
    items += _mirrors(hub, hub.mirror_registry.list() if mirrors is None else mirrors)
    items += _roles(hub)
    items += _rules(hub)
    items += _queries(hub)
    mine = local(hub)
    items += mine
    items += _told_by_others(replicas, mine)
    age = key_age_days(hub.keys.active_path)
    if age >= KEY_AGE_DAYS:
        items.append(Item("Signing key due for rotation", f"in use for {age} days (lucid-hub keys rotate)",
                          "hub#keys"))
    return items


def _health(hub: HubParts, replicas: list[dict[str, Any]]) -> list[Item]:
    """The hub's own: its patch log, this replica's store, the other replicas, the leadership lease."""
    out = []
    try:
        hub.log.check(timeout=LOG_TIMEOUT)
    except LogUnavailableError as exc:
        out.append(Item("Patch log unreachable", f"{exc}: patches are archived, but not relayed to partners",
                        "hub"))
    waiting, oldest = backlog(hub.db) if not hub.log.written_by_archive else (0, None)
    if oldest is not None and datetime.now(UTC) - oldest >= RELAY_STALLED:
        out.append(Item("Relay stalled", f"{waiting} archived patches are not in the patch log yet: partners and "
                        "other processes do not see them (the hub page says which background work fails)", "hub",
                        oldest))
    lag = hub.publisher.sync.lag()
    if lag > hub.settings.ready_max_lag:
        out.append(Item("This replica is behind", f"its store is {lag} patches behind the archive", "hub"))
    for replica in replicas:
        if replica["this"]:
            continue  # (this process's own: above, and its roles below)
        name = replica["name"]
        if replica["silent"]:
            out.append(Item("Replica silent", f"{name} on {replica['host']} has not reported since: stopped without "
                            "a word (killed, hung, or cut off from the database)", "hub", replica["seen"]))
            continue
        if replica["lag"] > hub.settings.ready_max_lag:
            out.append(Item("Replica behind", f"{name}: its store is {replica['lag']} patches behind the archive",
                            "hub", replica["seen"]))
        if replica["failing"]:
            out.append(Item("Background work failing on another replica", f"{name}: {', '.join(replica['failing'])}",
                            "hub", replica["seen"]))
    lease = lease_of(hub.db)
    if lease is not None and lease[2] < time.time():
        holder, epoch, expires = lease
        out.append(Item("No leader", f"the lease (epoch {epoch}, last held by {holder}) ran out: no process relays "
                        "patches, delivers or evaluates until one takes it", "hub",
                        datetime.fromtimestamp(expires, UTC)))
    return out


def local(hub: HubParts) -> list[Item]:
    """What needs attention that only this process's memory holds: the handovers it saw, its
    stores' rounds (the leader's), its inboxes' refusals. Its report tells the other replicas
    (`notes`), so a page any replica renders names them."""
    return _flapping(hub) + _stores(hub) + _inboxes(hub)


def notes(hub: HubParts) -> list[dict[str, str]]:
    """`local` as this process's report carries it."""
    return [{"what": i.what, "detail": i.detail, "link": i.link, "since": i.since.isoformat() if i.since else ""}
            for i in local(hub)]


def _told_by_others(replicas: list[dict[str, Any]], mine: list[Item]) -> list[Item]:
    """The other replicas' notes (as their last reports said; a silent one is named as such)."""
    out, seen = [], {(i.what, i.detail) for i in mine}
    for replica in replicas:
        if replica["this"] or replica["silent"]:
            continue
        for note in replica["notes"]:
            if (note.get("what"), note.get("detail")) in seen:
                continue
            seen.add((note.get("what"), note.get("detail")))
            out.append(Item(str(note.get("what", "")), f"{note.get('detail', '')} (as the replica {replica['name']} "
                            "saw it)", str(note.get("link", "")), _noted(note.get("since"))))
    return out


def _noted(since: Any) -> datetime | None:
    """A note's moment (another version's replica may word it otherwise: then none)."""
    try:
        return _when(since) if isinstance(since, str) else None
    except ValueError:
        return None


def _flapping(hub: HubParts) -> list[Item]:
    flaps = hub.leadership.flapping() if hub.leadership is not None else []
    if not flaps:
        return []
    return [Item("Leadership flapping", f"the lease changed hands {len(flaps)} times in "
                 f"{FLAPPING_WINDOW / 60:.0f} minutes (epoch {flaps[0][1]} to {flaps[-1][1]}): a database too "
                 "slow for LUCID_LEADER_LEASE_SECONDS, or processes fighting over it; each handover pauses the "
                 "relay", "hub", datetime.fromtimestamp(flaps[0][0], UTC))]


def _inboxes(hub: HubParts) -> list[Item]:
    """Senders an inbox refused lately (over their rate): a partner whose notifications are lost."""
    since = time.time() - RECENT.total_seconds()
    return [Item("Inbox refusing a sender", f"{sender}: {count} notifications refused (over "
                 f"{hub.inbox.limiter.limit} a minute), the last at "
                 f"{datetime.fromtimestamp(last, UTC):%H:%M:%S} UTC", "inboxes", datetime.fromtimestamp(first, UTC))
            for sender, (count, first, last) in sorted(hub.inbox.limiter.refusals(since).items())]


def _subscribers(hub: HubParts) -> list[Item]:
    quiet = datetime.now(UTC) - QUIET
    out = []
    troubled = hub.hub.subscriptions(worst_first=True, limit=PAGE, troubled=(LAGGING, quiet))
    names = hub.clients.names() if troubled else {}  # (one read, not one a row)
    for s in troubled:
        name = names.get(s["endpoint_id"])
        who = f"{name + ' (' + s['endpoint_id'] + ')' if name else s['endpoint_id']} at {s['callback']}"
        link = f"subscriptions?graph={quote(s['graph'], safe='')}"
        since = _when(s["last_success_at"] or s["created_at"])
        if s["state"] == "failed":
            out.append(Item("Subscription failed", f"{who} ({s['graph']}): {s['last_error']}", link, since))
        elif s["state"] == "cancelled":
            out.append(Item("Subscription ended", f"{who} ({s['graph']}): {s['last_error']} (the partner was told; "
                            "cancel it on the subscribers page once dealt with)", link))
        elif s["attempts"]:
            out.append(Item("Deliveries failing", f"{who}: {s['attempts']} failed attempts, {s['lag']} patches of "
                            f"{s['graph']} waiting: {s['last_error']}", link, since))
        else:
            out.append(Item("Subscriber behind", f"{who}: {s['lag']} patches of {s['graph']}", link, since))
    return out


def _mirrors(hub: HubParts, mirrors: list[dict[str, Any]]) -> list[Item]:
    """Mirrors with quarantined patches, not active, whose rounds fail, or behind their
    publisher (as it said at the last asking: mirror/lags.py)."""
    out = []
    stuck, lags = hub.mirrors.stuck(), hub.mirrors.lags.all()
    for m in mirrors:
        if m["quarantined"]:
            out.append(Item("Patches quarantined", f"{m['graph']}: {m['quarantined']} ({m['last_error']})", "mirrors"))
        if m["state"] != "active":
            reason = f": {m['last_error']}" if m.get("last_error") else ""
            out.append(Item(f"Mirror {m['state']}", f"{m['graph']} from {m['hub']}{reason}", "mirrors"))
            continue
        if m["graph"] in stuck:
            reason, since = stuck[m["graph"]]
            out.append(Item("Mirror's upkeep failing", f"{m['graph']} from {m['hub']}: {reason}", "mirrors", since))
        lag = lags.get(m["id"])
        if lag is not None and lag.behind and lag.since is not None:
            count = f"{lag.patches}{' or more' if lag.more else ''}"
            out.append(Item("Mirror behind its publisher", f"{m['graph']}: {count} patches after its head, as "
                            f"{m['publisher']} said at {datetime.fromtimestamp(lag.asked, UTC):%H:%M:%S} UTC "
                            "(its deliveries have not brought it up to date)", "mirrors",
                            datetime.fromtimestamp(lag.since, UTC)))
    return out


def _roles(hub: HubParts) -> list[Item]:
    """Background roles of this process whose last rounds failed (the relay to the patch log,
    deliveries, mirrors, deferred rules …), since their last good round."""
    out = []
    for role in hub.roles.all():
        if role.failures_in_a_row:
            since = datetime.fromtimestamp(role.last_success, UTC) if role.last_success else None
            out.append(Item(f"Background work failing: {role.name}",
                            f"{role.failures_in_a_row} rounds in a row failed (the log says why); tried again",
                            "hub", since))
    return out


def _rules(hub: HubParts) -> list[Item]:
    out = []
    firings = [f for f in hub.rules.history(limit=RULE_FIRINGS) if f["outcome"] in ("failed", "rolled-back")]
    failing = Counter(f["rule"] for f in firings)
    first = {f["rule"]: f["firedAt"] for f in firings}  # (newest first: the last one written is the oldest)
    for rule, count in sorted(failing.items()):
        out.append(Item("Rule failing", f"{rule}: {count} of its recent firings failed or were rolled back",
                        "rules", _when(first[rule])))
    offers = hub.rule_offers.all("in") if hub.rule_offers is not None else []
    for offer in (o for o in offers if o["state"] == "pending"):
        out.append(Item("Rule offer waiting", f"{offer['peer']} offers {', '.join(offer['rules'])}", "rule-offers",
                        _when(offer["created"])))
    return out


def _queries(hub: HubParts) -> list[Item]:
    out = []
    for t in troubles(hub.db, datetime.now(UTC) - RECENT):
        kind = "Continuous query" if t["kind"] == "query" else "Window"
        if t["attempts"]:
            out.append(Item(f"{kind} webhook failing", f"{t['name']} of {t['account']} to {t['callback']}: "
                            f"{t['attempts']} failed attempts: {t['error']}", "queries", t["at"]))
        if t["state"] == "ended":
            out.append(Item(f"{kind} ended", f"{t['name']} of {t['account']}: {t['reason']}", "queries", t["at"]))
    return out


def _stores(hub: HubParts) -> list[Item]:
    out = []
    for store in hub.remotes:  # (the leader's last rounds: the others know them from its notes)
        if store.problem:
            out.append(Item(f"Your store {store.store.config.name} is not written", store.problem, "hub#stores"))
        elif store.behind >= LAGGING:
            out.append(Item(f"Your store {store.store.config.name} is behind",
                            f"{store.store.name}: {store.behind} patches", "hub#stores"))
        for graph, reason in sorted(store.refused.items()):
            out.append(Item("Graph not written to your store", reason, f"graph?graph={quote(graph, safe='')}"))
    return out
