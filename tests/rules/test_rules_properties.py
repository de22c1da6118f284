"""Property tests of rule firing (issue 18): for random terminating rule sets, graphs and
triggering changes, the hub's cascade leaves every graph as a straightforward interpreter of
the rule semantics does (priority order, depth first, each rule's condition on the state it
fires in), and two hubs replaying the same changes fire the same rules with the same results.

The interpreter below is written from docs/rules.md, apart from the engine: sets of triples,
the event matched against the change, the condition joined with the event's bindings, the
action's template instantiated for each row."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lucid_hub.config import Settings
from lucid_hub.rdf.msg import graph_msgs
from lucid_hub.rules.model import OPERATOR
from lucid_hub.runtime import Runtime

NODES = ("a", "b", "c")
PREDICATES = ("p", "q", "r")
GRAPHS = 3
_serial = itertools.count()


@dataclass(frozen=True)
class RuleSpec:
    name: str
    priority: int
    event: str  # INSERT | DELETE
    on_graph: int
    on_p: str
    cond: tuple[int, str] | None  # (graph, predicate): ?y <pred> ?z in that graph
    action: str  # INSERT | DELETE
    target: int  # a graph after on_graph: the set cannot cycle
    out_p: str
    out_object: str  # "y" or "z"


@st.composite
def rule_specs(draw: Any) -> list[RuleSpec]:
    specs = []
    for i in range(draw(st.integers(1, 4))):
        on_graph = draw(st.integers(0, GRAPHS - 2))
        cond = draw(st.none() | st.tuples(st.integers(0, GRAPHS - 1), st.sampled_from(PREDICATES)))
        specs.append(RuleSpec(f"r{i}", draw(st.integers(0, 3)), draw(st.sampled_from(["INSERT", "DELETE"])), on_graph,
                              draw(st.sampled_from(PREDICATES)), cond, draw(st.sampled_from(["INSERT", "DELETE"])),
                              draw(st.integers(on_graph + 1, GRAPHS - 1)), draw(st.sampled_from(PREDICATES)),
                              "z" if cond is not None and draw(st.booleans()) else "y"))
    return specs


triples = st.sets(st.tuples(st.sampled_from(NODES), st.sampled_from(PREDICATES), st.sampled_from(NODES)), max_size=6)


class Names:
    """IRIs of one example (examples share the hubs; each has graphs of its own)."""

    def __init__(self) -> None:
        self.base = f"http://ex.org/{next(_serial)}/"

    def graph(self, i: int) -> str:
        return f"{self.base}g{i}"

    def term(self, name: str) -> str:
        return f"<http://ex.org/{name}>"

    def nt(self, triple: tuple[str, str, str]) -> str:
        return " ".join(self.term(t) for t in triple)


def rule_text(names: Names, specs: list[RuleSpec]) -> str:
    out = []
    for spec in specs:
        cond = ""
        if spec.cond is not None:
            cond = f"IF {{ GRAPH <{names.graph(spec.cond[0])}> {{ ?y {names.term(spec.cond[1])} ?z }} }}\n"
        template = f"GRAPH <{names.graph(spec.target)}> {{ ?x {names.term(spec.out_p)} ?{spec.out_object} }}"
        out.append(f"RULE <{names.base}{spec.name}>\nPRIORITY {spec.priority}\n"
                   f"ON {spec.event} {{ GRAPH <{names.graph(spec.on_graph)}> {{ ?x {names.term(spec.on_p)} ?y }} }}\n"
                   f"{cond}DO {spec.action} {{ {template} }} WHERE {{}}\n")
    return "".join(out)


def interpret(specs: list[RuleSpec], state: list[set[tuple[str, str, str]]], graph: int,
              removed: set[tuple[str, str, str]], added: set[tuple[str, str, str]], fired: list[tuple[str, int]],
              depth: int = 1) -> None:
    """The semantics, straightforwardly: rules of the changed graph in priority order (then
    name); each one's change is applied and its own rules run before the next rule."""
    for spec in sorted(specs, key=lambda s: (-s.priority, s.name)):
        if spec.on_graph != graph:
            continue
        delta = added if spec.event == "INSERT" else removed
        instances = sorted({(s, o) for s, p, o in delta if p == spec.on_p})
        if not instances:
            continue
        rows = []
        for x, y in instances:
            if spec.cond is None:
                rows.append({"x": x, "y": y})
            else:
                g, pred = spec.cond
                rows += [{"x": x, "y": y, "z": o} for s, p, o in state[g] if p == pred and s == y]
        made = {(row["x"], spec.out_p, row[spec.out_object]) for row in rows}
        target = state[spec.target]
        gone, came = (set(), made - target) if spec.action == "INSERT" else (made & target, set())
        if rows:
            fired.append((spec.name, depth))
        if gone or came:
            target -= gone
            target |= came
            interpret(specs, state, spec.target, gone, came, fired, depth + 1)


@pytest.fixture(scope="module")
def runtimes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Runtime, Runtime]]:
    opened = []
    for name in ("one", "two"):
        data = tmp_path_factory.mktemp(name)
        opened.append(Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(data / "data"),
                                                      "LUCID_DATABASE_URL": f"sqlite:///{data / 'hub.db'}",
                                                      "LUCID_PUBLIC_URL": "http://127.0.0.1:9"})))
    yield opened[0], opened[1]
    for rt in opened:
        rt.close()


def publish(rt: Runtime, graph: str, names: Names, content: set[tuple[str, str, str]]) -> None:
    text = "".join(f"{names.nt(t)} .\n" for t in sorted(content))
    msgs = graph_msgs(list(ox.parse(text, format=ox.RdfFormat.N_TRIPLES)), rt.canonicalizer)
    rt.publisher.replace(graph, msgs, author="test", message="")


def content(rt: Runtime, names: Names, i: int) -> set[str]:
    graph = names.graph(i)
    if rt.archive.current_head(graph) is None:
        return set()
    return set(rt.publisher.content(graph)[1])


def as_statements(names: Names, triples_: set[tuple[str, str, str]]) -> set[str]:
    return {names.nt(t) for t in triples_}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=rule_specs(), initial=st.lists(triples, min_size=GRAPHS, max_size=GRAPHS), trigger=triples)
def test_a_cascade_does_what_the_semantics_say_and_replays_the_same(
        runtimes: tuple[Runtime, Runtime], specs: list[RuleSpec], initial: list[set[tuple[str, str, str]]],
        trigger: set[tuple[str, str, str]]) -> None:
    results = []
    for rt in runtimes:
        names = Names()
        for i, graph_content in enumerate(initial):
            if graph_content:
                publish(rt, names.graph(i), names, graph_content)
        rt.rules.add(rule_text(names, specs), OPERATOR, "test")
        publish(rt, names.graph(0), names, trigger)  # the change: graph 0 becomes `trigger`
        rt.rules.parts.rule_set.refresh(every=0)
        history = [(f["rule"].removeprefix(names.base), f["depth"], f["instances"], f["kept"], f["outcome"])
                   for f in reversed(rt.rules.history(limit=1000)) if f["rule"].startswith(names.base)]
        results.append(([content(rt, names, i) for i in range(GRAPHS)], history, names))
        for spec in specs:  # rules of one example stay out of the next one's way
            rt.rules.remove(f"{names.base}{spec.name}", OPERATOR, "test")

    state = [set(g) for g in initial]
    fired: list[tuple[str, int]] = []
    old = state[0]
    state[0] = set(trigger)
    interpret(specs, state, 0, old - trigger, trigger - old, fired)
    for graphs, history, names in results:
        assert graphs == [as_statements(names, g) for g in state]
        assert [(name, depth) for name, depth, _i, kept, _o in history if kept] == fired
    # two hubs, the same changes: the same firings with the same outcomes, the same graphs
    (graphs1, history1, _names1), (graphs2, history2, _names2) = results
    assert history1 == history2 and graphs1 == graphs2
