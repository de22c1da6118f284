"""Termination of a rule set (RDFTL's analysis, docs/rules.md): the triggering graph — an
edge from rule A to rule B when A's action can change triples B's event pattern matches —
and its cycles. A set whose triggering graph has a cycle is refused unless every rule on the
cycle carries an explicit BOUND; at run time a cascade depth limit stops what escapes.

An edge is drawn exactly when some quad could match both the action's template and the
event's pattern (the action's bindings are not followed further: an edge that the
conditions rule out still costs a refusal, which the author answers with a BOUND).
Webhook and notify actions change no graph: they raise no rule."""

from __future__ import annotations

from dataclasses import dataclass

from rdflib import Variable

from lucid_hub.rules.language import Pattern, Rule, RuleSyntaxError


def unify(a: Pattern, b: Pattern) -> bool:
    """Whether some quad matches both patterns (exact: the positions are unified, a variable
    standing for one term within its pattern; the two patterns' variables are apart)."""
    parent: dict[object, object] = {}

    def root(node: object) -> object:
        while parent.get(node, node) != node:
            node = parent[node]
        return node

    def key(side: str, term: object) -> tuple[str, object]:
        return (side, term) if isinstance(term, Variable) else ("=", term)

    nodes: set[tuple[str, object]] = set()
    for x, y in zip(a.terms(), b.terms(), strict=True):
        left, right = key("a", x), key("b", y)
        nodes |= {left, right}
        parent[root(left)] = root(right)
    constants: dict[object, object] = {}  # each class holds one term at most
    return all(node[0] != "=" or constants.setdefault(root(node), node) == node for node in nodes)


def raises(action_rule: Rule, event_rule: Rule) -> bool:
    """Whether `action_rule`'s action can raise `event_rule`'s event."""
    if action_rule.action != "update":
        return False
    changes = {"INSERT": action_rule.inserts, "DELETE": action_rule.deletes,
               "UPDATE": (*action_rule.inserts, *action_rule.deletes)}[event_rule.event]
    return any(unify(c, e) for c in changes for e in event_rule.on)


@dataclass(frozen=True)
class Analysis:
    edges: tuple[tuple[str, str], ...]  # (raising rule, raised rule)
    cycles: tuple[tuple[str, ...], ...]  # strongly connected groups that can fire forever
    unbounded: tuple[tuple[str, ...], ...]  # of those, the ones with a rule without a BOUND

    @property
    def terminates(self) -> bool:
        return not self.unbounded

    def explain(self) -> str:
        lines = [f"triggering graph: {len(self.edges)} edge(s)"]
        lines += [f"  <{a}> can raise <{b}>" for a, b in self.edges]
        for group in self.cycles:
            bounded = group not in self.unbounded
            lines.append(f"cycle {' -> '.join(f'<{r}>' for r in group)}: "
                         + ("every rule carries a BOUND: allowed" if bounded else
                            "refused: the rules can raise each other forever; break the cycle or give every "
                            "rule on it a BOUND"))
        return "\n".join(lines)


def _strongly_connected(names: list[str], successors: dict[str, list[str]]) -> list[tuple[str, ...]]:
    """Tarjan's strongly connected components that are cycles (more than one rule, or a rule
    that raises itself), with an explicit stack: a chain of a thousand rules overflowed
    Python's recursion limit (a 500 for a rule set that is merely long)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[tuple[str, ...]] = []

    def enter(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)

    for root in names:
        if root in index:
            continue
        enter(root)
        work = [(root, iter(successors[root]))]
        while work:
            node, pending = work[-1]
            for nxt in pending:
                if nxt not in index:
                    enter(nxt)
                    work.append((nxt, iter(successors[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:  # every successor seen: the node is done
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1 or node in successors[node]:
                        groups.append(tuple(sorted(group)))
    return groups


def analyse(rules: list[Rule]) -> Analysis:
    """The triggering graph of a rule set and its cycles (Tarjan's strongly connected
    components; a rule that raises itself is a cycle of one)."""
    names = [r.iri for r in rules]
    by_name = {r.iri: r for r in rules}
    # Only rules whose event names a graph the action writes can be raised by it (a variable
    # graph: any): an index, so that a thousand rules on different graphs are not a million pairs.
    by_graph: dict[object, list[Rule]] = {}
    for rule in rules:
        for graph in {p.graph if not isinstance(p.graph, Variable) else None for p in rule.on}:
            by_graph.setdefault(graph, []).append(rule)
    edges_found: set[tuple[str, str]] = set()
    for raiser in rules:
        if raiser.action != "update":
            continue
        written = {p.graph for p in (*raiser.inserts, *raiser.deletes)}
        variable = any(isinstance(g, Variable) for g in written)
        pool = rules if variable else [b for g in (*written, None) for b in by_graph.get(g, ())]
        edges_found.update((raiser.iri, b.iri) for b in pool if raises(raiser, b))
    order = {name: i for i, name in enumerate(names)}
    edges = tuple(sorted(edges_found, key=lambda e: (order[e[0]], order[e[1]])))
    successors: dict[str, list[str]] = {n: [] for n in names}
    for a, b in edges:
        successors[a].append(b)
    groups = _strongly_connected(names, successors)
    cycles = tuple(sorted(groups))
    unbounded = tuple(g for g in cycles if any(by_name[r].bound is None for r in g))
    return Analysis(edges, cycles, unbounded)


def terminating(rules: list[Rule], foreign: list[tuple[Rule, str]], where: dict[str, str] | None = None) -> Analysis:
    """The analysis of `rules` with the rules of partner hubs they can raise and be raised by
    (`foreign`: each with the hub it runs at; graph IRIs are global, a mirror keeps its
    publisher's IRI); RuleSyntaxError when they can fire forever, naming where each rule of
    the cycle runs that does not run here (`where` adds to those)."""
    places = dict(where or {})
    names = {r.iri for r in rules}
    every = list(rules)
    for rule, hub in foreign:
        if rule.iri not in names:
            names.add(rule.iri)
            every.append(rule)
            places.setdefault(rule.iri, hub)
    analysis = analyse(every)
    if not analysis.terminates:
        away = sorted({iri for group in analysis.unbounded for iri in group if iri in places})
        across = "; ".join(f"<{iri}> runs at {places[iri]}" for iri in away)
        raise RuleSyntaxError("the rule set can fire forever: " + analysis.explain().replace("\n", "; ")
                              + (f" (across hubs: {across})" if across else ""))
    return analysis
