"""Dry runs: what rules would do on a hypothetical patch, in a worker of their own that holds
copies of the graphs (nothing is written)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from lucid_hub.config import Settings
from lucid_hub.queries.evaluator import BudgetExceeded, Refusal
from lucid_hub.rules.analysis import analyse
from lucid_hub.rules.language import Rule, RuleSyntaxError
from lucid_hub.rules.model import OPERATOR, Registered, check_shape
from lucid_hub.rules.replica import RulesReplica
from lucid_hub.store.graphs import GraphStore


def simulate(parsed: list[tuple[Rule, tuple[str, ...], str]], store: GraphStore, settings: Settings, graph: str,
             removed: list[str], added: list[str]) -> list[dict[str, Any]]:
    """What the rules `parsed` (RuleService.parse) would do if a patch of `graph` removed and added these
    statements now: each firing (depth first, priority order, as immediate rules fire;
    deferred rules and webhooks on the trigger after the cascade). Nothing is written: a
    worker of its own holds copies of the graphs."""
    analysis = analyse([rule for rule, _reads, _text in parsed])
    if not analysis.terminates:
        raise RuleSyntaxError("the rule set can fire forever: " + analysis.explain().replace("\n", "; "))
    regs = sorted((Registered(rule, reads, OPERATOR, body) for rule, reads, body in parsed), key=lambda r: r.order)
    for reg in regs:
        check_shape(reg.rule)
    replica = RulesReplica(store, settings.query_memory_mb, settings.rules_budget)
    out: list[dict[str, Any]] = []
    fired: Counter[str] = Counter()

    def fire(reg: Registered, on: str, gone: list[str], came: list[str], depth: int) -> dict[str, Any]:
        try:
            answer = replica.fire(reg.rule.iri, on, gone, came)
        except (Refusal, BudgetExceeded) as exc:
            answer = {"instances": 0, "kept": 0, "edits": {}, "rows": [], "failed": str(exc)}
        entry = {"rule": reg.rule.iri, "graph": on, "depth": depth, **answer}
        if answer["instances"]:
            out.append(entry)
        return answer

    def react(on: str, gone: list[str], came: list[str], depth: int) -> None:
        for reg in regs:
            if reg.rule.coupling != "immediate" or reg.rule.action != "update" or reg.graph != on:
                continue
            if depth > settings.rules_max_depth:
                out.append({"rule": reg.rule.iri, "graph": on, "depth": depth, "stopped":
                            f"cascade deeper than {settings.rules_max_depth} (LUCID_RULES_MAX_DEPTH)"})
                return
            if reg.rule.bound is not None and fired[reg.rule.iri] >= reg.rule.bound:
                continue
            answer = fire(reg, on, gone, came, depth)
            if answer["kept"]:
                fired[reg.rule.iri] += 1
            for target, edit in answer["edits"].items():
                replica.change(target, edit["removed"], edit["added"])
                react(target, edit["removed"], edit["added"], depth + 1)

    try:
        for reg in regs:
            replica.register(reg.rule.iri, reg.text, list(reg.reads))
        replica.ensure({g for reg in regs for g in reg.reads} | {graph})
        replica.change(graph, removed, added)
        react(graph, removed, added, 1)
        for reg in regs:
            if reg.graph == graph and not (reg.rule.coupling == "immediate" and reg.rule.action == "update"):
                fire(reg, graph, removed, added, 1)
    finally:
        replica.close()
    return out
