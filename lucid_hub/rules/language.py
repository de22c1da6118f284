"""The rule language (docs/rules.md): event-condition-action rules in the manner of RDFTL,
written from SPARQL pieces, one or more to a file.

    PREFIX ex: <http://example.org/>
    RULE <urn:acme:rules:order-at-risk>
    PRIORITY 10
    IMMEDIATE
    ON INSERT { GRAPH <https://supplier.example/graphs/deliveries> { ?d ex:date ?date } }
    IF { GRAPH <https://acme.example/graphs/orders> { ?o ex:delivery ?d ; ex:promised ?p } FILTER (?date > ?p) }
    DO INSERT { GRAPH <https://acme.example/graphs/orders> { ?o ex:status ex:AtRisk } } WHERE {}

The clauses are cut apart here (by their keywords, outside braces, strings and IRIs); every
SPARQL piece is then parsed by rdflib's SPARQL parser, which says what is wrong with it. The
cutting is hand-written: no library parses this small language around SPARQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rdflib import Variable
from rdflib.plugins.sparql import prepareQuery
from rdflib.plugins.sparql.algebra import translateUpdate
from rdflib.plugins.sparql.parser import parseUpdate
from rdflib.term import Node

from lucid_hub.errors import InputError

KINDS = ("INSERT", "DELETE", "UPDATE")
MAX_RULE_BYTES = 64 * 1024
CLAUSES = ("RULE", "PRIORITY", "IMMEDIATE", "DEFERRED", "FOR", "BOUND", "ON", "IF", "DO")
_PREFIX = re.compile(r"\s*PREFIX\s+([A-Za-z][\w.-]*)?:\s*<([^<>\"{}|^`\\\s]*)>", re.I)


class RuleSyntaxError(InputError):
    """A rule file that is not in the language, with the rule and clause at fault."""


@dataclass(frozen=True)
class Pattern:
    """One quad pattern: a term is a URIRef or literal (fixed) or a Variable (anything)."""

    graph: Node
    subject: Node
    predicate: Node
    object: Node

    def terms(self) -> tuple[Node, Node, Node, Node]:
        return self.graph, self.subject, self.predicate, self.object


@dataclass(frozen=True)
class Rule:
    iri: str
    priority: int
    coupling: str  # "immediate" | "deferred"
    granularity: str  # "each" (per changed instance) | "all" (once for the set of changes)
    bound: int | None  # an explicit cascade bound: allows the rule on a cycle
    event: str  # INSERT | DELETE | UPDATE
    on: tuple[Pattern, ...]
    condition: str | None  # the IF group pattern or ASK, as written (prefixes apart)
    action: str  # "update" | "webhook" | "notify"
    target: str  # the SPARQL Update text, or the webhook / inbox URL
    inserts: tuple[Pattern, ...] = ()  # what the action's update may insert
    deletes: tuple[Pattern, ...] = ()  # ... and delete
    prefixes: str = ""
    text: str = field(default="", compare=False)

    @property
    def writes(self) -> frozenset[str]:
        """The graphs the action may change (a variable graph: '*')."""
        return frozenset(str(p.graph) if not isinstance(p.graph, Variable) else "*"
                         for p in (*self.inserts, *self.deletes))


def parse_rules(text: str) -> list[Rule]:
    """Every rule of a rule file; RuleSyntaxError naming the rule and clause at fault."""
    if len(text.encode()) > MAX_RULE_BYTES:
        raise RuleSyntaxError(f"a rule file is at most {MAX_RULE_BYTES:,} bytes")
    prefixes, rest = _prefixes(text)
    chunks = _split(rest, "RULE")
    if re.sub(r"#[^\n]*", "", chunks[0][1]).strip() or len(chunks) == 1:  # comments may precede
        raise RuleSyntaxError("a rule file is PREFIX lines, then one or more rules, each starting with RULE <iri>")
    rules = [_rule(prefixes, body) for _keyword, body in chunks[1:]]
    seen: set[str] = set()
    for rule in rules:
        if rule.iri in seen:
            raise RuleSyntaxError(f"rule <{rule.iri}> is written twice")
        seen.add(rule.iri)
    return rules


def _prefixes(text: str) -> tuple[str, str]:
    position, lines = 0, list[str]()
    while True:
        match = _PREFIX.match(text, position)
        if match is None:
            return "\n".join(lines) + ("\n" if lines else ""), text[position:]
        lines.append(match.group(0).strip())
        position = match.end()


def _split(text: str, only: str | None = None) -> list[tuple[str, str]]:
    """(keyword, text after it up to the next keyword) at brace depth 0, outside strings and
    IRIs; the first item holds what precedes the first keyword. `only` cuts at that keyword."""
    keywords = (only,) if only else CLAUSES
    out: list[tuple[str, str]] = []
    depth, i, start, current = 0, 0, 0, ""
    while i < len(text):
        ch = text[i]
        after = skip_opaque(text, i)
        if after is not None:
            i = after
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise RuleSyntaxError("a '}' closes nothing")
        elif depth == 0 and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_:?$")):
            for keyword in keywords:
                end = i + len(keyword)
                if text[i:end].upper() == keyword and (
                        end >= len(text) or not (text[end].isalnum() or text[end] == "_")):
                    out.append((current, text[start:i]))
                    current, start = keyword, end
                    i = end
                    break
            else:
                i += 1
                continue
            continue
        i += 1
    if depth != 0:
        raise RuleSyntaxError("a '{' is not closed")
    out.append((current, text[start:]))
    return out


def skip_opaque(text: str, i: int) -> int | None:
    """Where a string, an IRI or a comment that starts at `i` ends (None: none starts there):
    what a scan for SPARQL's braces and keywords must step over."""
    ch = text[i]
    if ch in "\"'":
        return _string_end(text, i)
    if ch == "<":
        close = text.find(">", i)
        if close != -1 and re.fullmatch(r"<[^<>\"{}|^`\\\s]*>", text[i:close + 1]):
            return close + 1
    if ch == "#":
        newline = text.find("\n", i)
        return len(text) if newline == -1 else newline
    return None


def _string_end(text: str, i: int) -> int:
    quote = text[i]
    long = text.startswith(quote * 3, i)
    closing = quote * 3 if long else quote
    j = i + len(closing)
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text.startswith(closing, j):
            return j + len(closing)
        if not long and text[j] == "\n":
            break
        j += 1
    raise RuleSyntaxError("a string is not closed")


def _rule(prefixes: str, body: str) -> Rule:
    parts = _split(body)
    iri_text = parts[0][1].strip()
    match = re.fullmatch(r"<([^<>\"{}|^`\\\s]+)>", iri_text)
    if match is None:
        raise RuleSyntaxError(f"RULE needs an IRI in angle brackets, not {iri_text[:80]!r}")
    iri = match.group(1)
    clauses: dict[str, str] = {}
    for keyword, text in parts[1:]:
        if keyword in clauses or (keyword in ("IMMEDIATE", "DEFERRED") and
                                  {"IMMEDIATE", "DEFERRED"} & clauses.keys()):
            raise RuleSyntaxError(f"rule <{iri}>: {keyword} is given twice")
        clauses[keyword] = text.strip()
    for needed in ("ON", "DO"):
        if needed not in clauses:
            raise RuleSyntaxError(f"rule <{iri}> has no {needed} clause")
    priority = _integer(iri, "PRIORITY", clauses.get("PRIORITY", "0"))
    bound = _integer(iri, "BOUND", clauses["BOUND"]) if "BOUND" in clauses else None
    if bound is not None and bound < 1:
        raise RuleSyntaxError(f"rule <{iri}>: BOUND must be at least 1")
    for flag in ("IMMEDIATE", "DEFERRED"):
        if clauses.get(flag):
            raise RuleSyntaxError(f"rule <{iri}>: {flag} takes nothing after it")
    granularity = "each"
    if "FOR" in clauses:
        words = clauses["FOR"].upper().split()
        if words not in (["EACH"], ["ALL"]):
            raise RuleSyntaxError(f"rule <{iri}>: FOR EACH or FOR ALL, not FOR {clauses['FOR'][:40]}")
        granularity = words[0].lower()
    event, on = _event(iri, prefixes, clauses["ON"])
    condition = _condition(iri, prefixes, clauses["IF"]) if "IF" in clauses else None
    action, target, inserts, deletes = _action(iri, prefixes, clauses["DO"])
    # A webhook or notification is sent after commit: deferred unless it says otherwise (which
    # the hub refuses, rules/model.py).
    deferred = "DEFERRED" in clauses or (action != "update" and "IMMEDIATE" not in clauses)
    return Rule(iri, priority, "deferred" if deferred else "immediate", granularity, bound,
                event, on, condition, action, target, inserts, deletes, prefixes, body)


def _integer(iri: str, name: str, text: str) -> int:
    if not re.fullmatch(r"-?\d{1,9}", text):
        raise RuleSyntaxError(f"rule <{iri}>: {name} needs a whole number, not {text[:40]!r}")
    return int(text)


def _event(iri: str, prefixes: str, text: str) -> tuple[str, tuple[Pattern, ...]]:
    kind, _, pattern = text.partition(" ")
    kind = kind.upper()
    if kind not in KINDS:
        raise RuleSyntaxError(f"rule <{iri}>: ON INSERT, DELETE or UPDATE, not ON {kind[:20]}")
    # The event pattern is a quad template: parsed as an INSERT DATA-free template by way of
    # an INSERT { … } WHERE {} update, which rdflib checks and translates into quads.
    quads = _template(iri, "ON", prefixes, f"INSERT {pattern.strip()} WHERE {{}}")[0]
    if not quads:
        raise RuleSyntaxError(f"rule <{iri}>: ON needs triple patterns in GRAPH <…> {{ … }}")
    return kind, quads


def _condition(iri: str, prefixes: str, text: str) -> str:
    # A group pattern is read as SELECT *: its variables are bound in the action (an ASK binds none).
    query = text if text.upper().startswith("ASK") or text.upper().startswith("SELECT") else f"SELECT * {text}"
    try:
        prepareQuery(prefixes + query)
    except Exception as exc:  # rdflib raises pyparsing's and its own errors: all mean "not SPARQL"
        raise RuleSyntaxError(f"rule <{iri}>: IF is not a SPARQL group pattern or ASK/SELECT: "
                              f"{' '.join(str(exc).split())[:300]}") from None
    return query


def _action(iri: str, prefixes: str, text: str) -> tuple[str, str, tuple[Pattern, ...], tuple[Pattern, ...]]:
    head = text.split(None, 1)[0].upper() if text else ""
    if head in ("WEBHOOK", "NOTIFY"):
        match = re.fullmatch(r"(?is)\w+\s+<(https?://[^<>\"{}|^`\\\s]+)>", text)
        if match is None:
            raise RuleSyntaxError(f"rule <{iri}>: DO {head} needs an http(s) URL in angle brackets")
        return head.lower(), match.group(1), (), ()
    inserts, deletes = _template(iri, "DO", prefixes, text)
    if not inserts and not deletes:
        raise RuleSyntaxError(f"rule <{iri}>: DO needs a SPARQL Update that inserts or deletes, "
                              "a WEBHOOK <url> or a NOTIFY <inbox>")
    for p in (*inserts, *deletes):
        if isinstance(p.graph, Variable) or p.graph is None:
            raise RuleSyntaxError(f"rule <{iri}>: the action writes named graphs only: GRAPH <iri> {{ … }}")
    return "update", text, inserts, deletes


def _template(iri: str, clause: str, prefixes: str, update: str) -> tuple[tuple[Pattern, ...], tuple[Pattern, ...]]:
    """The quads an update inserts and deletes (templates: variables stay variables)."""
    try:
        parsed = translateUpdate(parseUpdate(prefixes + update))
    except Exception as exc:  # rdflib raises pyparsing's and its own errors: all mean "not SPARQL"
        raise RuleSyntaxError(f"rule <{iri}>: {clause} is not valid SPARQL: {' '.join(str(exc).split())[:300]}") \
            from None
    inserts: list[Pattern] = []
    deletes: list[Pattern] = []
    for op in parsed.algebra:
        clauses: list[tuple[Any, list[Pattern]]] = []
        if op.name in ("InsertData", "DeleteData"):  # the data is the clause itself
            clauses.append((op, inserts if op.name == "InsertData" else deletes))
        elif op.name == "Modify":
            clauses += [(op[key], out) for key, out in (("insert", inserts), ("delete", deletes)) if key in op]
        else:
            raise RuleSyntaxError(f"rule <{iri}>: {clause} may insert and delete, not {op.name}")
        for part, out in clauses:
            # dict.get, not part.get: rdflib's CompValue.get answers a missing key with the key
            if dict.get(part, "triples"):
                raise RuleSyntaxError(f"rule <{iri}>: {clause} writes triples outside GRAPH <…> {{ … }}: "
                                      "every graph is named")
            for graph, triples in (dict.get(part, "quads") or {}).items():
                out.extend(Pattern(graph, *t) for t in triples)
    return tuple(inserts), tuple(deletes)
