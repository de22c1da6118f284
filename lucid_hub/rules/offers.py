"""Rules across hubs (docs/rules.md, "Rules across hubs"): RDFTL places a rule at the peers
where its events happen. A hub offers a rule file to a partner hub as a signed Linked Data
Notification (`Offer`); the partner's admin accepts or rejects it; an accepted rule runs at
the partner as the offering party's rule (its access conditions there), so its actions reach
the offering hub as the partner's signed patches (in a graph the offering hub mirrors) or
signed webhooks. A withdrawn offer (`Undo`) removes the rules.

Termination spans the hubs: each side sends the other the *summaries* of its rules (event
patterns and action templates; no conditions, no texts), and every rule-set change on either
side is analysed with the other side's rules in it (graph IRIs are global: a mirror keeps its
publisher's IRI), so a cycle through two companies is refused, both rules named.

Two halves: `Offering` (this hub offers to partners) and `Offered` (partners offer to this
hub); `OfferBook` keeps both directions in `rule_offers`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rdflib import Variable
from sqlalchemy import select

from lucid_hub import nesting
from lucid_hub.db.models import RuleOffer
from lucid_hub.db.session import Database
from lucid_hub.db.times import iso, now
from lucid_hub.errors import ConflictError, ForbiddenError, InputError, NotFoundError
from lucid_hub.rules.language import Pattern, Rule
from lucid_hub.rules.replica import _term

AS = "https://www.w3.org/ns/activitystreams"
LH = "https://w3id.org/lucid-hub#"
CONTEXT = [AS, {"lh": LH}]
MAX_OFFER_BYTES = 256 * 1024  # a rule file (64 KiB) and the offering hub's summaries
MAX_SUMMARIES = 2000
OPEN = ("pending", "accepted")  # offers whose rules run (accepted) or may (pending)


# --- summaries: what the termination analysis needs of a rule, and nothing more ----------------

def summary(rule: Rule) -> dict[str, Any]:
    """A rule as another hub's analysis sees it: event, action kind, bound and patterns."""
    def patterns(items: tuple[Pattern, ...]) -> list[list[str]]:
        return [[t.n3() for t in p.terms()] for p in items]

    return {"iri": rule.iri, "event": rule.event, "action": rule.action, "bound": rule.bound,
            "on": patterns(rule.on), "inserts": patterns(rule.inserts), "deletes": patterns(rule.deletes)}


def told_summaries(rules: Iterable[tuple[Rule, bool]], may_read: Callable[[str], bool]) -> list[dict[str, Any]]:
    """Rules as a party's hub is told them for its termination analysis: nothing the party
    could not read itself. Its own rules (`True`) as they are; another party's under a name
    that means nothing (`urn:lucid:rule:<n>`), with its variables renamed, and as a fresh
    variable each graph the party may not read, each subject and object that is not a
    variable, and each predicate of such a graph (an unknown term: the analysis takes it to
    match anything, which can only make it more careful, never less)."""
    return [summary(rule) if own else summary(_redacted(rule, n, may_read))
            for n, (rule, own) in enumerate(rules, start=1)]


def _redacted(rule: Rule, n: int, may_read: Callable[[str], bool]) -> Rule:
    names: dict[str, Variable] = {}
    hidden = (Variable(f"h{k}") for k in itertools.count())

    def renamed(term: Any) -> Variable | None:
        return names.setdefault(str(term), Variable(f"v{len(names)}")) if isinstance(term, Variable) else None

    def pattern(p: Pattern) -> Pattern:
        readable = isinstance(p.graph, Variable) or may_read(str(p.graph))
        graph = renamed(p.graph) or (p.graph if readable else next(hidden))
        predicate = renamed(p.predicate) or (p.predicate if readable else next(hidden))
        return Pattern(graph, renamed(p.subject) or next(hidden), predicate, renamed(p.object) or next(hidden))

    return Rule(f"urn:lucid:rule:{n}", 0, "immediate", "each", rule.bound, rule.event, tuple(map(pattern, rule.on)),
                None, rule.action, "", tuple(map(pattern, rule.inserts)), tuple(map(pattern, rule.deletes)))


def rule_of(data: Any) -> Rule:
    """A summary back as a rule the analysis takes (InputError for anything else)."""
    try:
        if not isinstance(data, dict) or data.get("event") not in ("INSERT", "DELETE", "UPDATE"):
            raise ValueError("event is INSERT, DELETE or UPDATE")
        if data.get("action") not in ("update", "webhook", "notify"):
            raise ValueError("action is update, webhook or notify")
        bound = data.get("bound")
        if bound is not None and (not isinstance(bound, int) or isinstance(bound, bool) or bound < 1):
            raise ValueError("bound is a whole number of 1 or more, or null")

        def patterns(key: str) -> tuple[Pattern, ...]:
            items = data.get(key) or []
            if not isinstance(items, list) or len(items) > 100:
                raise ValueError(f"{key} is a list of at most 100 patterns")
            out = []
            for item in items:
                if not isinstance(item, list) or len(item) != 4 or not all(isinstance(t, str) for t in item):
                    raise ValueError(f"a pattern of {key} is four terms (graph, subject, predicate, object)")
                out.append(Pattern(*(_term(t) for t in item)))
            return tuple(out)

        iri = data.get("iri")
        if not isinstance(iri, str) or not iri.startswith(("http://", "https://", "urn:")) or len(iri) > 2048:
            raise ValueError("iri is an absolute IRI")
        on = patterns("on")
        if not on:
            raise ValueError("on names at least one pattern")
        return Rule(iri, 0, "immediate", "each", bound, data["event"], on, None, data["action"], "",
                    patterns("inserts"), patterns("deletes"))
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise InputError(f"a rule summary is malformed: {exc}") from None


def rules_of(summaries: Iterable[Any]) -> list[Rule]:
    return [rule_of(item) for item in summaries]


def reads_any(rule: Rule, graphs: Callable[[str], bool]) -> bool:
    """Whether a rule's event or action names a graph `graphs` holds true of (or any graph)."""
    names = [p.graph for p in (*rule.on, *rule.inserts, *rule.deletes)]
    return any(isinstance(g, Variable) or graphs(str(g)) for g in names)


# --- the activities -------------------------------------------------------------------------

def body_bytes(activity: dict[str, Any]) -> bytes:
    """The bytes an activity is sent (and signed) as."""
    return json.dumps(activity, sort_keys=True, separators=(",", ":")).encode()


def offer_activity(offer_id: str, actor: str, target: str, rules_text: str, iris: list[str],
                   summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The LDN `Offer` of a rule file (ActivityStreams 2.0; the rules as lh:RuleSet)."""
    return {"@context": CONTEXT, "id": f"urn:uuid:{offer_id}", "type": "Offer", "actor": actor, "target": target,
            "published": iso(now()),
            "object": {"type": "lh:RuleSet", "lh:ruleText": rules_text, "lh:rule": iris},
            "lh:summaries": summaries}


def undo_activity(offer_id: str, actor: str, target: str) -> dict[str, Any]:
    """The `Undo` that withdraws an offer."""
    return {"@context": CONTEXT, "id": f"urn:uuid:{uuid.uuid4()}", "type": "Undo", "actor": actor, "target": target,
            "published": iso(now()), "object": f"urn:uuid:{offer_id}"}


@dataclass(frozen=True)
class Received:
    """An activity posted to this hub's offers inbox, read (not yet trusted)."""

    kind: str  # "Offer" | "Undo"
    offer_id: str  # the offer's uuid (an Undo's object)
    actor: str
    rules_text: str = ""
    summaries: tuple[Any, ...] = ()


def read_activity(raw: bytes) -> Received:
    """The activity's fields, or InputError saying what is wrong with it."""
    if len(raw) > MAX_OFFER_BYTES:
        raise InputError(f"an offer is at most {MAX_OFFER_BYTES:,} bytes")
    document = nesting.loads(raw, "the activity")
    if not isinstance(document, dict):
        raise InputError("an activity is a JSON-LD object")
    kind, actor = document.get("type"), document.get("actor")
    if not isinstance(actor, str) or not actor.startswith(("http://", "https://")):
        raise InputError("the activity's actor is the offering hub's URL (http or https)")
    actor = actor.rstrip("/")
    if kind == "Undo":
        return Received("Undo", _offer_id(document.get("object"), "the Undo's object"), actor)
    if kind != "Offer":
        raise InputError(f"this inbox takes Offer and Undo activities, not {str(kind)[:40]!r}")
    offer_id = _offer_id(document.get("id"), "the Offer's id")
    thing = document.get("object")
    text = thing.get("lh:ruleText") if isinstance(thing, dict) else None
    if not isinstance(thing, dict) or thing.get("type") != "lh:RuleSet" or not isinstance(text, str) or not text:
        raise InputError('the Offer\'s object is {"type": "lh:RuleSet", "lh:ruleText": "RULE …"}')
    summaries = document.get("lh:summaries") or []
    if not isinstance(summaries, list) or len(summaries) > MAX_SUMMARIES:
        raise InputError(f"lh:summaries is a list of at most {MAX_SUMMARIES} rule summaries")
    rules_of(summaries)  # (malformed ones refused now, not at the accepting admin's click)
    return Received("Offer", offer_id, actor, text, tuple(summaries))


def _offer_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.startswith("urn:uuid:"):
        raise InputError(f"{what} is a urn:uuid: IRI")
    try:
        return str(uuid.UUID(value[len("urn:uuid:"):]))
    except ValueError:
        raise InputError(f"{what} is a urn:uuid: IRI") from None


def digest(raw: bytes) -> str:
    """What an activity's `X-Lucid-Signature` signs: `sha256:HEX` of its bytes."""
    return "sha256:" + hashlib.sha256(raw).hexdigest()


# --- the book of offers -----------------------------------------------------------------------

class OfferBook:
    """The `rule_offers` rows: offers made (`out`) and received (`in`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, row: RuleOffer) -> None:
        with self.db.session() as session:
            if session.get(RuleOffer, row.id) is not None:
                raise ConflictError(f"offer urn:uuid:{row.id} was received already (a replay)")
            session.add(row)

    def get(self, offer_id: str, direction: str) -> RuleOffer:
        with self.db.session() as session:
            row = session.get(RuleOffer, offer_id)
            if row is None or row.direction != direction:
                raise NotFoundError(f"no offer urn:uuid:{offer_id} {'to' if direction == 'in' else 'from'} this hub")
            session.expunge(row)
            return row

    def all(self, direction: str | None = None, states: Iterable[str] | None = None) -> list[RuleOffer]:
        query = select(RuleOffer).order_by(RuleOffer.created_at.desc())
        if direction is not None:
            query = query.where(RuleOffer.direction == direction)
        if states is not None:
            query = query.where(RuleOffer.state.in_(list(states)))
        with self.db.session() as session:
            rows = list(session.scalars(query).all())
            for row in rows:
                session.expunge(row)
            return rows

    def decide(self, offer_id: str, state: str, by: str, reason: str = "", *,
               expect: Iterable[str] = OPEN, summaries: str | None = None) -> RuleOffer:
        """Move an offer to `state` if it is in one of `expect` (ConflictError otherwise)."""
        with self.db.session() as session:
            row = session.get(RuleOffer, offer_id)
            if row is None:
                raise NotFoundError(f"no offer urn:uuid:{offer_id}")
            if row.state not in tuple(expect):
                raise ConflictError(f"offer urn:uuid:{offer_id} is {row.state} already")
            row.state, row.decided_by, row.reason, row.decided_at = state, by[:255], reason[:4000], now()
            if summaries is not None:
                row.summaries = summaries
            session.flush()
            session.expunge(row)
            return row

    def foreign(self) -> list[tuple[Rule, str]]:
        """The rules of other hubs this hub's rule set must terminate with: those of the
        partners' open offers to it, the partners' own rules they told of, and the rules this
        hub's open offers run at partners; each with where it runs."""
        out: list[tuple[Rule, str]] = []
        for row in self.all(states=OPEN):
            for rule in rules_of(json.loads(row.summaries or "[]")):
                out.append((rule, row.peer))
        return out


def describe(row: RuleOffer) -> dict[str, Any]:
    """An offer as the API and the console show it (never the client secret)."""
    owner = json.loads(row.owner) if row.owner else None
    return {"id": row.id, "iri": f"urn:uuid:{row.id}", "direction": row.direction, "peer": row.peer,
            "rules": row.rule_iris.split(), "text": row.rules, "state": row.state, "reason": row.reason,
            "decidedBy": row.decided_by, "created": iso(row.created_at),
            "decided": iso(row.decided_at) if row.decided_at else None, "location": row.location or None,
            "party": owner.get("account") if owner else None,
            "peerRules": [item.get("iri") for item in json.loads(row.summaries or "[]") if isinstance(item, dict)]}


def check_actor(actor: str, prefixes: list[str]) -> None:
    """The offering party's client must name the offering hub: one of its callback prefixes
    lies under the activity's actor (the hub URL whose keys sign the offer)."""
    if not any(prefix.startswith(actor + "/") for prefix in prefixes):
        raise ForbiddenError(f"the actor {actor} is not a hub of yours: your client's callback prefixes "
                             f"({', '.join(prefixes) or 'none'}) must lie under it")
