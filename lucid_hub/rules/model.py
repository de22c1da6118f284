"""The rules' words: who owns a rule, a rule as registered, a firing as recorded, and the
small judgements every part makes of a rule and a patch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rdflib import URIRef

from lucid_hub.errors import LucidError
from lucid_hub.policy.decisions import Party
from lucid_hub.rdf.patch import Patch
from lucid_hub.rules.language import Rule, RuleSyntaxError

RULES_GRAPH = "urn:lucid-hub:rules"
LH = "https://w3id.org/lucid-hub#"
RULE_TEXT, RULE_OWNER, RDF_TYPE = LH + "ruleText", LH + "ruleOwner", "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"




@dataclass(frozen=True)
class Owner:
    """Who defined a rule: an admin, or a party (whose access conditions the rule obeys)."""

    admin: bool
    account: str
    endpoint_id: str
    groups: tuple[str, ...] = ()

    @property
    def party(self) -> Party:
        return Party(self.account, self.endpoint_id, frozenset(self.groups))

    def to_json(self) -> dict[str, Any]:
        return {"admin": self.admin, "account": self.account, "endpoint_id": self.endpoint_id,
                "groups": list(self.groups)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Owner:
        return cls(bool(data["admin"]), str(data["account"]), str(data["endpoint_id"]),
                   tuple(str(g) for g in data.get("groups") or ()))


OPERATOR = Owner(True, "operator", "lucid-hub cli")


@dataclass(frozen=True)
class Registered:
    """A rule of the rule set: as parsed, what it reads, who owns it, its text."""

    rule: Rule
    reads: tuple[str, ...]
    owner: Owner
    text: str

    @property
    def graph(self) -> str:
        """The graph whose patches fire the rule (ON names one)."""
        return str(self.rule.on[0].graph)

    @property
    def order(self) -> tuple[int, str]:
        return -self.rule.priority, self.rule.iri

    def describe(self) -> dict[str, Any]:
        r = self.rule
        return {"iri": r.iri, "priority": r.priority, "coupling": r.coupling, "granularity": r.granularity,
                "bound": r.bound, "event": r.event, "graph": self.graph, "action": r.action,
                "writes": sorted(r.writes), "reads": list(self.reads), "owner": self.owner.to_json(),
                "text": self.text}



class CascadeStopped(LucidError):
    """A cascade ran deeper than the limit (something the analysis did not foresee)."""


class RuleFailed(LucidError):
    """A rule's firing failed: its reason is recorded; an immediate cascade is rolled back."""

    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(f"rule <{rule}>: {reason}")
        self.rule = rule
        self.reason = reason


@dataclass
class Firing:
    """One row of the firing history, as it is being made."""

    rule: str
    trigger: str
    graph: str
    coupling: str
    depth: int
    instances: int = 0
    kept: int = 0
    outcome: str = "not-met"
    reason: str = ""
    patches: list[str] = field(default_factory=list)
    attempts: int = 1

    def row(self) -> dict[str, Any]:
        return {"rule": self.rule, "trigger": self.trigger, "graph": self.graph, "coupling": self.coupling,
                "depth": self.depth, "instances": self.instances, "kept": self.kept, "outcome": self.outcome,
                "reason": self.reason[:4000], "patches": " ".join(self.patches), "attempts": self.attempts,
                "fired_at": datetime.now(UTC)}




def lane_name(owner: Owner) -> str:
    """The lane a rule is evaluated in (lanes.py): its owner's; '' is the operator's and admins'."""
    return "" if owner.admin else owner.account


def refusal(reg: Registered, allows: Callable[[Party, str, Any], bool]) -> str:
    """Why the rule may not fire now (its owner lost access), or ''."""
    if reg.owner.admin:
        return ""
    party = reg.owner.party
    for graph in reg.reads:
        if not allows(party, graph, "read"):
            return f"its owner {reg.owner.account} may no longer read <{graph}>"
    for graph in reg.rule.writes:
        if not allows(party, graph, "write"):
            return f"its owner {reg.owner.account} may no longer write <{graph}>"
    return ""


def check_shape(rule: Rule) -> None:
    """What the run time needs of a rule beyond the language: one graph in ON; a webhook or
    notification runs after commit (DEFERRED)."""
    graphs = {p.graph for p in rule.on}
    if len(graphs) != 1 or not isinstance(next(iter(graphs)), URIRef):
        raise RuleSyntaxError(f"rule <{rule.iri}>: ON names one graph, GRAPH <iri> {{ … }}")
    if rule.action != "update" and rule.coupling == "immediate":
        raise RuleSyntaxError(f"rule <{rule.iri}>: a {rule.action.upper()} is sent after commit; write DEFERRED "
                              "(a network call never runs inside a publish)")


def may_match(rule: Rule, patch: Patch) -> bool:
    """A cheap first look: can the patch hold a triple with the event's fixed predicates?"""
    predicates = {f"<{p.predicate}>" for p in rule.on if isinstance(p.predicate, URIRef)}
    if len(predicates) != len(rule.on):
        return True  # a variable predicate: the worker decides
    sides = {"INSERT": (patch.added,), "DELETE": (patch.removed,), "UPDATE": (patch.added, patch.removed)}[rule.event]
    return all(any(f" {p} " in m.nquads for side in sides for m in side) for p in predicates)


def delta(patch: Patch) -> tuple[list[str], list[str]]:
    """The patch's removed and added statements (blank nodes as the patch labels them)."""
    return ([s for m in patch.removed for s in m.statements], [s for m in patch.added for s in m.statements])


def aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
