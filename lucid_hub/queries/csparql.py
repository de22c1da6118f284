"""C-SPARQL registrations, read into what the hub evaluates (docs/queries.md, "C-SPARQL").

    REGISTER QUERY name [COMPUTED EVERY 10m] AS
    PREFIX ex: <http://example/>
    SELECT ... FROM <static> FROM STREAM <stream> [RANGE 1h STEP 10m] WHERE { ... }
    [AGGREGATE { (?total, SUM(?amount), ?broker) }]

becomes a standard SPARQL query (the FROM clauses and AGGREGATE taken out, AGGREGATE turned
into a grouped sub-query joined with the pattern, as C-SPARQL defines it: each solution gains
the aggregate of its group), the streams (graphs), one window (`range`, `step`), and the
static graphs (`FROM` joins the default graph, `FROM NAMED` a named one).

Hand-written: no maintained library reads C-SPARQL. It only finds the clauses C-SPARQL adds
to SPARQL, with a lexer that knows strings, IRIs, comments and braces; the rest of the text
is left to oxigraph's SPARQL parser, unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lucid_hub.errors import InputError

_HEADER = re.compile(r"\s*REGISTER\s+(QUERY|STREAM)\s+([A-Za-z0-9][A-Za-z0-9._-]{0,63})\s+"
                     r"(?:COMPUTED?\s+EVERY\s+(\d{1,9})\s*(ms|s|m|h|d)\s+)?AS\b", re.IGNORECASE)
_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>'''(?:[^'\\]|\\.|'(?!''))*'''|\"\"\"(?:[^"\\]|\\.|"(?!""))*\"\"\"
              |'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")
  | (?P<iri><[^<>"{}|^`\\\x00-\x20]*>)
  | (?P<number>\d+(?:\.\d+)?)
  | (?P<open>[{(\[])
  | (?P<close>[})\]])
  | (?P<word>[A-Za-z_][A-Za-z0-9_\-]*)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)
_WINDOW = re.compile(r"RANGE\s+(?:TRIPLES\s+(\d{1,7})|(\d{1,9})\s*(ms|s|m|h|d)\s+(?:STEP\s+(\d{1,9})\s*(ms|s|m|h|d)"
                     r"|(TUMBLING)))", re.IGNORECASE)
_FORMS = ("SELECT", "CONSTRUCT", "ASK", "DESCRIBE")


@dataclass
class Registration:
    """What a C-SPARQL registration asks for."""

    name: str
    kind: str  # "query" or "stream" (REGISTER STREAM: its results are an RDF stream)
    sparql: str
    streams: list[str]
    range_spec: str  # "1h" or "1000 triples"
    step_spec: str  # "10m", or "1" (patches: a triple window evaluated at every patch)
    static: list[str] = field(default_factory=list)  # FROM: merged into the default graph
    named: list[str] = field(default_factory=list)  # FROM NAMED


@dataclass
class _Token:
    kind: str
    text: str
    start: int
    end: int
    depth: int  # braces and brackets around it


def parse(text: str) -> Registration:
    """The registration `text` asks for; InputError naming what is wrong otherwise."""
    header = _HEADER.match(text)
    if header is None:
        raise InputError("a C-SPARQL registration starts REGISTER QUERY name [COMPUTED EVERY 10m] AS, followed "
                         "by the query")
    kind, name = header.group(1).lower(), header.group(2)
    every = f"{header.group(3)}{header.group(4).lower()}" if header.group(3) else None
    body = text[header.end():]
    tokens = _lex(body)
    cut: list[tuple[int, int]] = []
    streams: list[tuple[str, str, str]] = []
    static: list[str] = []
    named: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.depth == 0 and token.kind == "word" and token.text.upper() == "FROM":
            i = _from_clause(tokens, i, cut, streams, static, named)
            continue
        if token.depth == 0 and token.text.upper() == "CONSTRUCT" and i + 1 < len(tokens) and tokens[i + 1].text == "*":
            cut.append((tokens[i + 1].start, tokens[i + 1].end))  # C-SPARQL's CONSTRUCT * is SPARQL's CONSTRUCT WHERE
        i += 1
    if not streams:
        raise InputError("a C-SPARQL query reads at least one stream: FROM STREAM <graph> [RANGE 1h STEP 10m]")
    windows = {(r, s) for _iri, r, s in streams}
    if len(windows) > 1:
        raise InputError("all streams of one query share one window: give each FROM STREAM the same RANGE")
    range_spec, step_spec = windows.pop()
    if range_spec.endswith("triples"):
        step_spec = every or "1"
    elif every is not None and every != step_spec:
        raise InputError(f"COMPUTED EVERY {every} differs from the window's STEP {step_spec}: a window is "
                         "evaluated when it ends, once per step")
    aggregates = _aggregate_clause(tokens, cut)
    sparql = _without(body, cut)
    form = next((t.text.upper() for t in _lex(sparql) if t.depth == 0 and t.kind == "word"
                 and t.text.upper() in _FORMS), None)
    if form is None:
        raise InputError("the registered query is a SELECT, CONSTRUCT, ASK or DESCRIBE query")
    if kind == "stream" and form != "CONSTRUCT":
        raise InputError("REGISTER STREAM makes an RDF stream: its query is a CONSTRUCT; use REGISTER QUERY for "
                         "a SELECT or ASK")
    if aggregates:
        sparql = _aggregated(sparql, aggregates, form)
    return Registration(name, kind, sparql.strip(), [iri for iri, _r, _s in streams], range_spec, step_spec,
                        static, named)


def _lex(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    depth = 0
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup or "other"
        if kind == "space":
            continue
        if kind == "close":
            depth = max(0, depth - 1)
        tokens.append(_Token(kind, match.group(), match.start(), match.end(), depth))
        if kind == "open":
            depth += 1
    return tokens


def _from_clause(tokens: list[_Token], i: int, cut: list[tuple[int, int]], streams: list[tuple[str, str, str]],
                 static: list[str], named: list[str]) -> int:
    """Read the FROM clause at `i` (cut out of the text); the index after it."""
    start = tokens[i].start
    j = i + 1
    is_named = j < len(tokens) and tokens[j].kind == "word" and tokens[j].text.upper() == "NAMED"
    j += is_named
    is_stream = j < len(tokens) and tokens[j].kind == "word" and tokens[j].text.upper() == "STREAM"
    j += is_stream
    if j >= len(tokens) or tokens[j].kind != "iri":
        raise InputError("FROM, FROM NAMED and FROM STREAM take an IRI in angle brackets, e.g. FROM STREAM "
                         "<https://example.org/graph>")
    iri = tokens[j].text[1:-1]
    j += 1
    if not is_stream:
        (named if is_named else static).append(iri)
        cut.append((start, tokens[j - 1].end))
        return j
    if is_named:
        raise InputError("FROM NAMED STREAM is not offered: a window's stream triples are its default graph")
    if j >= len(tokens) or tokens[j].text != "[":
        raise InputError(f"FROM STREAM <{iri}> needs its window: [RANGE 1h STEP 10m], [RANGE 1h TUMBLING] or "
                         "[RANGE TRIPLES 1000]")
    close = next((k for k in range(j + 1, len(tokens)) if tokens[k].text == "]" and tokens[k].depth == 0), None)
    if close is None:
        raise InputError(f"the window of FROM STREAM <{iri}> is not closed with ]")
    inside = " ".join(t.text for t in tokens[j + 1:close])
    window = _WINDOW.fullmatch(inside.strip())
    if window is None:
        raise InputError(f"window [{inside[:80]}] is not RANGE n unit STEP n unit, RANGE n unit TUMBLING or "
                         "RANGE TRIPLES n (units: ms, s, m, h, d)")
    triples, size, unit, step, step_unit, tumbling = window.groups()
    if triples is not None:
        streams.append((iri, f"{int(triples)} triples", ""))
    else:
        range_spec = f"{int(size)}{unit.lower()}"
        streams.append((iri, range_spec, range_spec if tumbling else f"{int(step)}{step_unit.lower()}"))
    cut.append((start, tokens[close].end))
    return close + 1


def _aggregate_clause(tokens: list[_Token], cut: list[tuple[int, int]]) -> list[tuple[str, str, list[str]]]:
    """C-SPARQL's AGGREGATE { (?var, FUNC(expr), ?group...) ... } after the WHERE clause, cut
    out of the text: (variable, aggregate expression, grouping variables) each."""
    found = next((k for k, t in enumerate(tokens) if t.depth == 0 and t.kind == "word"
                  and t.text.upper() == "AGGREGATE"), None)
    if found is None:
        return []
    if found + 1 >= len(tokens) or tokens[found + 1].text != "{":
        raise InputError("AGGREGATE is followed by { (?var, FUNCTION(?x), ?group ...) }")
    close = next((k for k in range(found + 2, len(tokens)) if tokens[k].text == "}" and tokens[k].depth == 0), None)
    if close is None:
        raise InputError("the AGGREGATE clause is not closed with }")
    out: list[tuple[str, str, list[str]]] = []
    k = found + 2
    while k < close:
        if tokens[k].text != "(":
            raise InputError(f"AGGREGATE lists (?var, FUNCTION(?x), ?group ...) tuples, not {tokens[k].text[:40]!r}")
        end = next((m for m in range(k + 1, close + 1) if tokens[m].text == ")" and tokens[m].depth == tokens[k].depth),
                   None)
        if end is None:
            raise InputError("an AGGREGATE tuple is not closed with )")
        parts: list[list[_Token]] = [[]]
        for t in tokens[k + 1:end]:
            if t.text == "," and t.depth == tokens[k].depth + 1:
                parts.append([])
            else:
                parts[-1].append(t)
        texts = ["".join(_spaced(p)) for p in parts]
        if len(texts) < 2 or not re.fullmatch(r"\?\w+", texts[0]) or not all(
                re.fullmatch(r"\?\w+", g) for g in texts[2:]):
            raise InputError("an AGGREGATE tuple is (?var, FUNCTION(?x), ?group ...)")
        out.append((texts[0], texts[1], texts[2:]))
        k = end + 1
    cut.append((tokens[found].start, tokens[close].end))
    return out


def _spaced(tokens: list[_Token]) -> list[str]:
    out: list[str] = []
    for t in tokens:
        if out and (t.kind == "word" and out[-1][-1:].isalnum()):
            out.append(" ")
        out.append(t.text)
    return out


def _without(text: str, cut: list[tuple[int, int]]) -> str:
    out, at = [], 0
    for start, end in sorted(cut):
        out += [text[at:start], " "]
        at = end
    out.append(text[at:])
    return "".join(out)


def _aggregated(sparql: str, aggregates: list[tuple[str, str, list[str]]], form: str) -> str:
    """The query with each aggregate joined to its pattern: WHERE { P } becomes
    WHERE { P { SELECT ?g (F AS ?v) WHERE { P } GROUP BY ?g } }; a SELECT that lists its
    variables lists the aggregates' too."""
    tokens = _lex(sparql)
    where = next((k for k, t in enumerate(tokens) if t.depth == 0 and t.kind == "word" and t.text.upper() == "WHERE"),
                 None)
    first = where + 1 if where is not None else next(
        (k for k, t in enumerate(tokens) if t.depth == 0 and t.text == "{" and form != "CONSTRUCT"), None)
    if first is None or first >= len(tokens) or tokens[first].text != "{":
        raise InputError("AGGREGATE needs the query's WHERE { ... } pattern")
    close = next((k for k in range(first + 1, len(tokens)) if tokens[k].text == "}" and tokens[k].depth == 0), None)
    if close is None:
        raise InputError("the query's WHERE { ... } is not closed with }")
    pattern = sparql[tokens[first].end:tokens[close].start]
    joins = "".join(
        f" {{ SELECT {' '.join(groups)} ({expression} AS {var}) WHERE {{{pattern}}}"
        f"{' GROUP BY ' + ' '.join(groups) if groups else ''} }}" for var, expression, groups in aggregates)
    rewritten = sparql[:tokens[close].start] + joins + " " + sparql[tokens[close].start:]
    if form == "SELECT":
        select = next((k for k, t in enumerate(tokens) if t.depth == 0 and t.text.upper() == "SELECT"), 0)
        star = any(t.text == "*" for t in tokens[select:first])
        if not star:
            at = tokens[where].start if where is not None else tokens[first].start
            extra = " ".join(var for var, _e, _g in aggregates) + " "
            rewritten = rewritten[:at] + extra + rewritten[at:]
    return rewritten
