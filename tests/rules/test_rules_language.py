"""The rule language and its termination analysis (docs/rules.md; issue 18, first part):
parsing with reasons for what is wrong, and the triggering graph with its cycles, checked
against brute force."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rdflib import Literal, URIRef, Variable

from lucid_hub.rules.analysis import analyse, unify
from lucid_hub.rules.language import Pattern, RuleSyntaxError, parse_rules

EXAMPLE = """PREFIX ex: <http://example.org/>
RULE <urn:acme:rules:order-at-risk>
PRIORITY 10
IMMEDIATE
ON INSERT { GRAPH <https://supplier.example/graphs/deliveries> { ?d ex:date ?date } }
IF { GRAPH <https://acme.example/graphs/orders> { ?o ex:delivery ?d ; ex:promised ?p } FILTER (?date > ?p) }
DO INSERT { GRAPH <https://acme.example/graphs/orders> { ?o ex:status ex:AtRisk } } WHERE {}
"""
EX = "http://example.org/"
ORDERS = URIRef("https://acme.example/graphs/orders")


def test_the_issues_example_parses_into_its_parts() -> None:
    (rule,) = parse_rules(EXAMPLE)
    assert (rule.iri, rule.priority, rule.coupling, rule.granularity, rule.bound, rule.event) == (
        "urn:acme:rules:order-at-risk", 10, "immediate", "each", None, "INSERT")
    assert rule.on == (Pattern(URIRef("https://supplier.example/graphs/deliveries"), Variable("d"),
                               URIRef(EX + "date"), Variable("date")),)
    assert rule.condition is not None and rule.condition.startswith("SELECT * {")
    assert rule.action == "update" and rule.writes == frozenset({str(ORDERS)})
    assert rule.inserts == (Pattern(ORDERS, Variable("o"), URIRef(EX + "status"), URIRef(EX + "AtRisk")),)


def test_every_clause_form() -> None:
    rules = parse_rules("""PREFIX ex: <http://example.org/>
# a comment that says RULE and DO does not cut anything
RULE <urn:r:1> PRIORITY -5 DEFERRED FOR ALL BOUND 3
ON UPDATE { GRAPH <urn:g:a> { ?s ex:p "ON DO { RULE" } }
IF ASK { GRAPH <urn:g:a> { ?s ex:q <urn:x:RULE> } }
DO DELETE { GRAPH <urn:g:b> { ?s ex:p ?o } } INSERT { GRAPH <urn:g:b> { ?s ex:p 1 } } WHERE { GRAPH <urn:g:b> { ?s ex:p ?o } }
RULE <urn:r:2> ON DELETE { GRAPH <urn:g:b> { ?s ?p ?o } } DO WEBHOOK <https://hooks.example/x>
RULE <urn:r:3> ON INSERT { GRAPH <urn:g:b> { ?s ?p ?o } } DO NOTIFY <https://partner.example/inbox?graph=g>
RULE <urn:r:4> ON INSERT { GRAPH <urn:g:c> { ?s ?p ?o } } DO INSERT DATA { GRAPH <urn:g:d> { <urn:s> <urn:p> "x" } }
""")
    first, webhook, notify, data = rules
    assert (first.priority, first.coupling, first.granularity, first.bound, first.event) == (
        -5, "deferred", "all", 3, "UPDATE")
    assert first.on[0].object == Literal("ON DO { RULE")
    assert len(first.deletes) == 1 and first.inserts[0].object == Literal(1)
    assert (webhook.action, webhook.target, webhook.event) == ("webhook", "https://hooks.example/x", "DELETE")
    assert (notify.action, notify.target) == ("notify", "https://partner.example/inbox?graph=g")
    assert data.inserts == (Pattern(URIRef("urn:g:d"), URIRef("urn:s"), URIRef("urn:p"), Literal("x")),)


@pytest.mark.parametrize(("text", "words"), [
    ("RULE <urn:r> DO INSERT DATA { GRAPH <urn:g> { <urn:s> <urn:p> 1 } }", "no ON clause"),
    ("RULE <urn:r> ON INSERT { GRAPH <urn:g> { ?s ?p ?o } }", "no DO clause"),
    ("RULE urn:r ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } DO WEBHOOK <https://h/x>", "RULE needs an IRI"),
    ("RULE <urn:r> PRIORITY high ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } DO WEBHOOK <https://h/x>", "PRIORITY"),
    ("RULE <urn:r> IMMEDIATE DEFERRED ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } DO WEBHOOK <https://h/x>", "twice"),
    ("RULE <urn:r> BOUND 0 ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } DO WEBHOOK <https://h/x>", "BOUND"),
    ("RULE <urn:r> FOR SOME ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } DO WEBHOOK <https://h/x>", "FOR EACH or FOR ALL"),
    ("RULE <urn:r> ON CHANGE { GRAPH <urn:g> { ?s ?p ?o } } DO WEBHOOK <https://h/x>", "ON INSERT, DELETE or UPDATE"),
    ("RULE <urn:r> ON INSERT { ?s ?p ?o } DO WEBHOOK <https://h/x>", "outside GRAPH"),
    ("RULE <urn:r> ON INSERT { GRAPH <urn:g> { ?s ?p } } DO WEBHOOK <https://h/x>", "not valid SPARQL"),
    ("RULE <urn:r> ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } IF { ?s ?p } DO WEBHOOK <https://h/x>", "IF is not"),
    ("RULE <urn:r> ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } DO WEBHOOK <ftp://h/x>", "http(s) URL"),
    ("RULE <urn:r> ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } DO INSERT { ?s ?p ?o } WHERE {}", "outside GRAPH"),
    ("RULE <urn:r> ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } DO INSERT { GRAPH ?g { ?s ?p ?o } } WHERE {}",
     "named graphs only"),
    ("RULE <urn:r> ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } DO CLEAR ALL", "may insert and delete, not Clear"),
    ("RULE <urn:r> ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } DO LOAD <http://x/y> INTO GRAPH <urn:g>", "may insert"),
    ("RULE <urn:r> ON INSERT { GRAPH <urn:g> { ?s ?p ?o } DO WEBHOOK <https://h/x>", "not closed"),
    ("RULE <urn:r> ON INSERT { GRAPH <urn:g> { ?s ?p \"o } } DO WEBHOOK <https://h/x>", "string is not closed"),
    ("RULE <urn:r> ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } DO WEBHOOK <https://h/x>\n"
     "RULE <urn:r> ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } DO WEBHOOK <https://h/x>", "written twice"),
    ("ON INSERT { GRAPH <urn:g> { ?s ?p ?o } }", "starting with RULE"),
    ("PREFIX ex: <http://example.org/>\n# nothing else", "one or more rules"),
    ("RULE <urn:r> ON INSERT { GRAPH <urn:g> { ?s ?p ?o } } DO WEBHOOK <https://h/x>" + " " * 70_000, "at most"),
])
def test_what_is_wrong_is_said(text: str, words: str) -> None:
    with pytest.raises(RuleSyntaxError) as caught:
        parse_rules(text)
    assert words in str(caught.value), str(caught.value)


def rule(name: str, on: str, do: str, bound: str = "") -> str:
    return f"RULE <urn:r:{name}> {bound} ON {on} DO {do}\n"


def test_cycles_are_refused_unless_every_rule_on_them_is_bounded() -> None:
    a_to_b = rule("a", "INSERT { GRAPH <urn:g:a> { ?s <urn:p> ?o } }",
                  "INSERT { GRAPH <urn:g:b> { ?s <urn:p> ?o } } WHERE {}")
    b_to_a = rule("b", "INSERT { GRAPH <urn:g:b> { ?s <urn:p> ?o } }",
                  "INSERT { GRAPH <urn:g:a> { ?s <urn:p> ?o } } WHERE {}")
    found = analyse(parse_rules(a_to_b + b_to_a))
    assert set(found.edges) == {("urn:r:a", "urn:r:b"), ("urn:r:b", "urn:r:a")}
    assert not found.terminates and found.unbounded == (("urn:r:a", "urn:r:b"),)
    assert "refused" in found.explain() and "BOUND" in found.explain()
    half = analyse(parse_rules(a_to_b.replace("<urn:r:a>", "<urn:r:a> BOUND 2") + b_to_a))
    assert not half.terminates
    bounded = analyse(parse_rules(a_to_b.replace("<urn:r:a>", "<urn:r:a> BOUND 2")
                                  + b_to_a.replace("<urn:r:b>", "<urn:r:b> BOUND 2")))
    assert bounded.terminates and bounded.cycles and "allowed" in bounded.explain()
    # a rule that raises itself is a cycle of one
    itself = analyse(parse_rules(rule("self", "INSERT { GRAPH <urn:g:a> { ?s <urn:p> ?o } }",
                                      "INSERT { GRAPH <urn:g:a> { ?o <urn:p> ?s } } WHERE {}")))
    assert itself.unbounded == (("urn:r:self",),)


def test_only_actions_that_can_match_raise_an_event() -> None:
    on_insert = rule("watch", "INSERT { GRAPH <urn:g:a> { ?s <urn:p> <urn:v> } }", "WEBHOOK <https://h/x>")
    on_delete = rule("gone", "DELETE { GRAPH <urn:g:a> { ?s <urn:p> ?o } }", "WEBHOOK <https://h/x>")
    on_update = rule("upd", "UPDATE { GRAPH <urn:g:a> { ?s <urn:p> ?o } }", "WEBHOOK <https://h/x>")
    actions = {
        "other-graph": "INSERT { GRAPH <urn:g:b> { ?s <urn:p> <urn:v> } } WHERE {}",
        "other-predicate": "INSERT { GRAPH <urn:g:a> { ?s <urn:q> <urn:v> } } WHERE {}",
        "other-object": "INSERT { GRAPH <urn:g:a> { ?s <urn:p> <urn:w> } } WHERE {}",
        "match": "INSERT { GRAPH <urn:g:a> { <urn:x> <urn:p> ?anything } } WHERE {}",
        "deletes": "DELETE { GRAPH <urn:g:a> { ?s <urn:p> ?o } } WHERE { GRAPH <urn:g:a> { ?s <urn:p> ?o } }",
    }
    text = on_insert + on_delete + on_update + "".join(
        rule(name, "INSERT { GRAPH <urn:g:z> { ?s ?p ?o } }", action) for name, action in actions.items())
    edges = set(analyse(parse_rules(text)).edges)
    assert edges == {("urn:r:match", "urn:r:watch"), ("urn:r:match", "urn:r:upd"),
                     ("urn:r:other-object", "urn:r:upd"),  # an update event takes any object
                     ("urn:r:deletes", "urn:r:gone"), ("urn:r:deletes", "urn:r:upd")}
    # webhooks and notifications change no graph: they raise nothing
    assert not any(a in ("urn:r:watch", "urn:r:gone", "urn:r:upd") for a, _b in edges)


TERMS = [URIRef("urn:t:1"), URIRef("urn:t:2"), Variable("x"), Variable("y")]
CONSTANTS = [t for t in TERMS if isinstance(t, URIRef)]


def _matches(pattern: Pattern, quad: tuple[URIRef, ...]) -> bool:
    bound: dict[Variable, URIRef] = {}
    for term, value in zip(pattern.terms(), quad, strict=True):
        if isinstance(term, Variable):
            if bound.setdefault(term, value) != value:
                return False
        elif term != value:
            return False
    return True


patterns = st.builds(Pattern, *(st.sampled_from(TERMS) for _ in range(4)))


@settings(max_examples=300, deadline=None)
@given(patterns, patterns)
def test_unify_says_yes_exactly_when_some_quad_matches_both(a: Pattern, b: Pattern) -> None:
    """Brute force over the constants the patterns name plus one they do not (what a
    variable may take besides them)."""
    domain = [*CONSTANTS, URIRef("urn:t:other")]
    some = any(_matches(a, q) and _matches(b, q) for q in itertools.product(domain, repeat=4))
    assert unify(a, b) == some
    assert unify(b, a) == unify(a, b)


def test_the_explain_command(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    good = tmp_path / "good.rules"
    good.write_text(EXAMPLE)
    done = run_cli("rules", "explain", good)
    assert done.code == 0 and "1 rule(s)" in done.out and "0 edge(s)" in done.out
    looping = tmp_path / "loop.rules"
    looping.write_text(rule("a", "INSERT { GRAPH <urn:g:a> { ?s <urn:p> ?o } }",
                            "INSERT { GRAPH <urn:g:a> { ?o <urn:p> ?s } } WHERE {}"))
    done = run_cli("rules", "explain", looping)
    assert done.code == 1 and "refused" in done.out and "can fire forever" in done.err
    for name, body, words in (("bad.rules", b"RULE <urn:r> ON INSERT {", "not closed"),
                              ("binary.rules", b"\xff\xfe", "UTF-8"),
                              ("big.rules", b"#" * 70_000, "at most")):
        (tmp_path / name).write_bytes(body)
        done = run_cli("rules", "explain", tmp_path / name)
        assert done.code == 1 and words in done.err and len(done.err.strip().splitlines()) == 1, done.err
    done = run_cli("rules", "explain", tmp_path / "missing.rules")  # a file named that is not there: usage (2)
    assert done.code == 2 and "does not exist" in done.err and len(done.err.strip().splitlines()) == 1


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(st.just(n), st.sets(st.tuples(st.integers(0, n - 1),
                                                                                   st.integers(0, n - 1))))))
def test_the_cycles_are_the_mutually_reachable_groups(graph: tuple[int, set[tuple[int, int]]]) -> None:
    """The strongly connected components (an explicit stack, not recursion) against brute force:
    rules are on a cycle together exactly when each reaches the other."""
    from lucid_hub.rules.analysis import _strongly_connected

    n, edges = graph
    names = [f"r{i}" for i in range(n)]
    successors = {name: [f"r{b}" for a, b in sorted(edges) if f"r{a}" == name] for name in names}
    reach = {a: {a} for a in names}
    for _ in names:  # closure: n rounds suffice
        for a in names:
            reach[a] |= {c for b in reach[a] for c in successors[b]}
    expected = set()
    for a in names:
        group = tuple(sorted(b for b in names if b in reach[a] and a in reach[b]))
        if len(group) > 1 or a in successors[a]:
            expected.add(group)
    assert set(_strongly_connected(names, successors)) == expected


def test_a_long_chain_of_rules_is_analysed_without_running_out_of_stack() -> None:
    """1,500 rules, each raising the next (a chain, no cycle), then closed into a cycle."""
    from lucid_hub.rules.language import Rule

    def rule(i: int, target: int) -> Rule:
        return Rule(f"urn:r:{i}", 0, "immediate", "each", 1, "INSERT",
                    (Pattern(URIRef(f"urn:g:{i}"), Variable("s"), URIRef(f"{EX}p"), Variable("o")),),
                    None, "update", "", (Pattern(URIRef(f"urn:g:{target}"), Variable("s"), URIRef(f"{EX}p"),
                                                 Variable("o")),))

    chain = [rule(i, i + 1) for i in range(1500)]
    analysis = analyse(chain)
    assert len(analysis.edges) == 1499 and analysis.cycles == () and analysis.terminates
    looped = analyse([*chain[:-1], rule(1499, 0)])
    assert len(looped.cycles) == 1 and len(looped.cycles[0]) == 1500 and looped.terminates  # all bounded
