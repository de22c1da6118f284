"""RDF Patch text (`application/rdf-patch`), the wire format of patches.

Layout (docs/patch-format.md): `H id`, then `H signature` when signed, then the canonical
bytes. `split_wire` separates those three from the raw bytes without parsing any RDF, so
a receiver can check id and signature before it reads a single term.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from dataclasses import dataclass, field

import pyoxigraph as ox

from lucid_hub import gcpause
from lucid_hub.errors import PatchFormatError, PatchIntegrityError
from lucid_hub.rdf import metadata as meta
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import (
    LABEL_HASH_DIGITS,
    Msg,
    by_hash,
    chain_label,
    graph_msgs,
    msg_hash,
    msgs_with_occurrences,
    parse_chain_label,
)
from lucid_hub.rdf.patch import ID_PREFIX, XSD_DATETIME, Patch, check_patch_id, format_created, parse_created
from lucid_hub.rdf.statements import relabel
from lucid_hub.rdf.syntax import term_limit_error

MEDIA_TYPE = "application/rdf-patch"
_ID_LINE = re.compile(rb"H id <(urn:sha256:[0-9a-f]{64})> \.\n")
_SIGNATURE_LINE = re.compile(rb'H signature "([A-Za-z0-9_\-]+\.\.[A-Za-z0-9_\-]+)" \.\n')
_HEADER = re.compile(r"H ([A-Za-z][A-Za-z0-9_-]*) (.+) \.")
_LINE_NO = re.compile(r"line (\d+)")
KNOWN_HEADERS = ("id", "signature", "graph", "format", "prev", "author", "message", "created", "meta")
FORMAT_NAMES = {"2": 2, "3": 3}  # the `H format` values this hub reads (none: format 1)


def write_rdf_patch(patch: Patch) -> bytes:
    """The wire form: id line, signature line (when signed), canonical bytes."""
    head = f"H id <{patch.id}> .\n"
    if patch.signature is not None:
        head += f'H signature "{patch.signature}" .\n'
    return head.encode() + patch.canonical_bytes


@dataclass(frozen=True)
class WireParts:
    """A patch's raw bytes split into the claimed id, the signature and the id preimage."""

    claimed_id: str
    signature: str | None
    preimage: bytes

    def check_integrity(self) -> None:
        """PatchIntegrityError unless the preimage hashes to the claimed id."""
        actual = ID_PREFIX + hashlib.sha256(self.preimage).hexdigest()
        if not hmac.compare_digest(actual.encode(), self.claimed_id.encode()):
            raise PatchIntegrityError(
                f"patch bytes hash to {actual}, not to the claimed id {self.claimed_id}"
            )


def split_wire(raw: bytes) -> WireParts:
    """Split raw RDF Patch bytes by lines only; nothing else is parsed."""
    id_match = _ID_LINE.match(raw)
    if id_match is None:
        raise PatchFormatError("a patch must start with the line 'H id <urn:sha256:...> .'")
    rest = raw[id_match.end() :]
    signature = None
    sig_match = _SIGNATURE_LINE.match(rest)
    if sig_match is not None:
        signature = sig_match.group(1).decode()
        rest = rest[sig_match.end() :]
    return WireParts(id_match.group(1).decode(), signature, rest)


@dataclass
class RdfPatchDocument:
    """What an RDF Patch text says: its headers, its removed and added MSGs, and in a format
    2 patch each MSG's occurrence (from its blank-node labels)."""

    headers: dict[str, ox.NamedNode | ox.Literal]
    removed: list[Msg]
    added: list[Msg]
    format: int = 1
    removed_occurrences: tuple[int, ...] = ()
    added_occurrences: tuple[int, ...] = ()
    metadata: list[str] = field(default_factory=list)  # the `H meta` lines' texts, in order

    def iri(self, name: str) -> str | None:
        """The value of header `name`, which must be an IRI; None when absent."""
        return self._value(name, ox.NamedNode, "an IRI")

    def text(self, name: str) -> str | None:
        """The value of header `name`, which must be a literal; None when absent."""
        return self._value(name, ox.Literal, "a literal")

    def _value(self, name: str, kind: type, what: str) -> str | None:
        term = self.headers.get(name)
        if term is None:
            return None
        if type(term) is not kind:
            raise PatchFormatError(f"header {name} must be {what}, not {term}")
        return term.value


def parse_rdf_patch(raw: bytes, canonicalizer: Canonicalizer, graph: str | None = None) -> RdfPatchDocument:
    """Read RDF Patch text (ours or another RDF Delta tool's) into headers and MSGs.

    `D` and `A` rows may be quads in the patch's graph or triples (taken as in it).
    Removals must precede additions: lucid-hub applies all removals first.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchFormatError(f"patch is not UTF-8 (byte {exc.start})") from None
    headers: dict[str, ox.NamedNode | ox.Literal] = {}
    metadata: list[str] = []
    rows: dict[str, list[str]] = {"D": [], "A": []}
    row_lines: dict[str, list[int]] = {"D": [], "A": []}
    state = "headers"  # -> "rows" after TX -> "done" after TC
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        op = line[:2]
        if state == "done":
            raise PatchFormatError(f"line {number}: nothing may follow 'TC .'")
        if op == "H ":
            if state != "headers":
                raise PatchFormatError(f"line {number}: header after the first row")
            name, term = header_line(line, number)
            if name == "meta" and type(term) is ox.Literal:
                metadata.append(term.value)  # (the one header a patch repeats)
                continue
            if name in headers:
                raise PatchFormatError(f"line {number}: header {name} given twice")
            headers[name] = term
        elif line.rstrip() in ("TX .", "TX"):
            if state != "headers":
                raise PatchFormatError(f"line {number}: a patch holds one transaction")
            state = "rows"
        elif line.rstrip() in ("TC .", "TC"):
            state = "done"
        elif op in ("D ", "A "):
            if op == "D " and rows["A"]:
                raise PatchFormatError(f"line {number}: D rows must come before A rows")
            state = "rows"
            rows[op[0]].append(line[2:])
            row_lines[op[0]].append(number)
        elif op in ("TA", "PA", "PD"):
            what = "aborted transactions" if op == "TA" else "prefix rows"
            raise PatchFormatError(f"line {number}: {what} ({op}) are not supported")
        else:
            raise PatchFormatError(f"line {number}: not an RDF Patch row: {line[:60]!r}")
    if state == "rows":
        raise PatchFormatError("the transaction is not closed with 'TC .'")
    patch_graph = graph
    if "graph" in headers:
        named = headers["graph"]
        if type(named) is not ox.NamedNode:
            raise PatchFormatError("header graph must be an IRI")
        if graph is not None and named.value != graph:
            raise PatchFormatError(f"patch is for graph <{named.value}>, not <{graph}>")
        patch_graph = named.value
    removed_quads = _rows_to_quads(rows["D"], row_lines["D"], patch_graph)
    added_quads = _rows_to_quads(rows["A"], row_lines["A"], patch_graph)
    shared = _blank_labels(removed_quads) & _blank_labels(added_quads)
    if shared:
        raise PatchFormatError(
            f"blank node _:{sorted(shared)[0]} is used in both D and A rows; "
            "removed and added MSGs cannot share blank nodes"
        )
    fmt = patch_format(headers.get("format"))
    if fmt == 1:
        return RdfPatchDocument(headers, graph_msgs(removed_quads, canonicalizer).msgs(),
                                graph_msgs(added_quads, canonicalizer).msgs(), metadata=metadata)
    removed = msgs_with_occurrences(removed_quads, canonicalizer, "D rows")
    added = msgs_with_occurrences(added_quads, canonicalizer, "A rows")
    return RdfPatchDocument(headers, [m for m, _ in removed], [m for m, _ in added], fmt,
                            tuple(o for _, o in removed), tuple(o for _, o in added), metadata)


def patch_format(term: ox.NamedNode | ox.Literal | None) -> int:
    """The patch format a `format` header (or statement) names: 1 when absent."""
    if term is None:
        return 1
    if type(term) is not ox.Literal or term.value not in FORMAT_NAMES:
        raise PatchFormatError(f"unsupported patch format {term} (this hub reads formats 1, 2 and 3)")
    return FORMAT_NAMES[term.value]


def read_rdf_patch(raw: bytes, canonicalizer: Canonicalizer) -> Patch:
    """Read a complete lucid-hub patch; an `H id` that does not match raises. A large one is
    read with cyclic collection paused (a quarter of verifying a 100,000-triple patch: its
    MSGs, statements and rows all live until it is read)."""
    with gcpause.paused_for_bytes(len(raw)):
        try:
            parts = split_wire(raw)
            parts.check_integrity()
        except (PatchFormatError, PatchIntegrityError):
            parts = None  # (the general reader says what is wrong, or reads a patch without an id line)
        fast = read_canonical(parts, canonicalizer) if parts is not None else None
        return fast if fast is not None else _read_rdf_patch(raw, canonicalizer)


def _read_rdf_patch(raw: bytes, canonicalizer: Canonicalizer) -> Patch:
    doc = parse_rdf_patch(raw, canonicalizer)
    graph = doc.iri("graph")
    author, message, created = doc.text("author"), doc.text("message"), doc.text("created")
    missing = [n for n, v in (("graph", graph), ("author", author), ("message", message),
                              ("created", created)) if v is None]
    if missing:
        raise PatchFormatError(f"patch lacks the header(s) {', '.join(missing)}")
    unknown = sorted(set(doc.headers) - set(KNOWN_HEADERS))
    if "meta" in doc.headers:
        raise PatchFormatError("header meta must be a literal '<PREDICATE> VALUE'")
    if unknown:
        raise PatchFormatError(f"unknown header(s) {', '.join(unknown)}")
    created_term = doc.headers["created"]
    assert isinstance(created_term, ox.Literal)
    if created_term.datatype.value != XSD_DATETIME:
        raise PatchFormatError("header created must be an xsd:dateTime literal")
    prev = doc.iri("prev")
    assert graph is not None and author is not None and message is not None and created is not None
    patch = Patch(
        graph=graph,
        prev=check_patch_id(prev, "previous patch id") if prev is not None else None,
        author=author,
        message=message,
        created=parse_created(created),
        removed=tuple(doc.removed) if doc.format >= 2 else tuple(by_hash(doc.removed)),
        added=tuple(doc.added) if doc.format >= 2 else tuple(by_hash(doc.added)),
        signature=doc.text("signature"),
        format=doc.format,
        removed_occurrences=doc.removed_occurrences,
        added_occurrences=doc.added_occurrences,
        metadata=meta.normalise(meta.from_header_text(text) for text in doc.metadata),
    )
    claimed = doc.iri("id")
    if claimed is not None and claimed != patch.id:
        raise PatchIntegrityError(f"patch content hashes to {patch.id}, not to the claimed id {claimed}")
    return patch


def header_lines(raw: bytes, name: str) -> list[str]:
    """The values of the header lines `H name ...` of stored patch bytes (the text of a literal,
    the IRI of an IRI), read from the headers alone: no row is parsed."""
    head = raw.split(b"\nTX .\n", 1)[0].decode("utf-8")
    prefix = f"H {name} "
    return [header_line(line, number)[1].value
            for number, line in enumerate(head.split("\n"), start=1) if line.startswith(prefix)]


def header_line(line: str, number: int) -> tuple[str, ox.NamedNode | ox.Literal]:
    """One `H name term .` line: (name, term); PatchFormatError when malformed."""
    match = _HEADER.fullmatch(line.rstrip())
    if match is None:
        raise PatchFormatError(f"line {number}: malformed header (expected 'H name term .')")
    name, term_text = match.groups()
    try:
        (quad,) = ox.parse(f"<urn:x:s> <urn:x:p> {term_text} .", format=ox.RdfFormat.N_TRIPLES)
    except (SyntaxError, ValueError):
        raise PatchFormatError(f"line {number}: header {name} has a malformed value") from None
    term = quad.object
    if type(term) not in (ox.NamedNode, ox.Literal):
        raise PatchFormatError(f"line {number}: header {name} must be an IRI or a literal")
    return name, term


def _rows_to_quads(rows: list[str], numbers: list[int], graph: str | None) -> list[ox.Quad]:
    if not rows:
        return []
    document = "\n".join(rows) + "\n"
    try:
        quads = list(ox.parse(document, format=ox.RdfFormat.N_QUADS))
    except SyntaxError as exc:
        message = " ".join(str(exc.msg or exc).split())
        row = (exc.lineno or 1) - 1
        line = numbers[min(row, len(numbers) - 1)]
        raise PatchFormatError(f"line {line}: {_LINE_NO.sub('', message).strip(' :')}") from None
    except MemoryError as exc:
        raise term_limit_error(exc, "the patch") from None
    if graph is None:
        raise PatchFormatError("patch names no graph (header 'H graph <IRI> .')")
    for q in quads:
        if type(q.subject) is ox.Triple or type(q.object) is ox.Triple:
            raise PatchFormatError("triple terms (RDF-star / RDF 1.2) are not supported")
        g = q.graph_name
        if type(g) is not ox.DefaultGraph and not (type(g) is ox.NamedNode and g.value == graph):
            raise PatchFormatError(f"row for graph {g} in a patch of graph <{graph}>: {q}")
    return quads


def _blank_labels(quads: list[ox.Quad]) -> set[str]:
    return {t.value for q in quads for t in (q.subject, q.object) if type(t) is ox.BlankNode}


def read_canonical(parts: WireParts, canonicalizer: Canonicalizer) -> Patch | None:
    """A format 2 or 3 patch whose preimage (`parts`, its integrity checked by the caller) is in
    canonical form, read in one pass; None for anything else (another format, or bytes not in
    canonical form), which the general reader then reads and judges with its own reasons.

    Written by hand because it is the hot path of every mirror and catch-up: the general
    reader derives each MSG again from the rows (grouping triples, hashing, sorting) and
    serialises the patch again to compare bytes. Here the rows are checked to be exactly the
    canonical lines of the MSGs they name, in canonical order, so the preimage is the
    patch's canonical bytes and the checked id is its id. Only blank-node MSGs are
    canonicalised (their labels must name their hash, as the general reader requires).
    """
    with gcpause.paused_for_bytes(len(parts.preimage)):
        try:
            return _read_canonical(parts, canonicalizer)
        except (PatchFormatError, UnicodeDecodeError, SyntaxError, ValueError):
            return None


def _read_canonical(parts: WireParts, canonicalizer: Canonicalizer) -> Patch | None:
    lines = parts.preimage.decode("utf-8").split("\n")
    if lines[-1] != "" or "TX ." not in lines or lines[-2] != "TC .":
        return None
    tx = lines.index("TX .")
    headers: dict[str, ox.NamedNode | ox.Literal] = {}
    texts: list[str] = []
    for number, line in enumerate(lines[:tx], start=1):
        name, term = header_line(line, number)
        if name == "meta" and type(term) is ox.Literal:
            texts.append(term.value)
            continue
        if name in headers or name not in KNOWN_HEADERS[2:]:
            return None
        headers[name] = term
    doc = RdfPatchDocument(headers, [], [])
    graph, prev, author, message, created = (doc.iri("graph"), doc.iri("prev"), doc.text("author"),
                                             doc.text("message"), doc.text("created"))
    fmt = headers.get("format")
    if (graph is None or author is None or message is None or created is None
            or type(fmt) is not ox.Literal or fmt.value not in ("2", "3")):
        return None
    when = parse_created(created)
    metadata = tuple(meta.from_header_text(text) for text in texts)
    # The headers as the canonical form writes them (Patch.canonical_lines), and nothing else.
    expected = [f"H graph <{graph}> .", f'H format "{fmt.value}" .', *([f"H prev <{prev}> ."] if prev else []),
                f"H author {ox.Literal(author)} .", f"H message {ox.Literal(message)} .",
                f"H created {ox.Literal(format_created(when), datatype=ox.NamedNode(XSD_DATETIME))} .",
                *(f"H meta {ox.Literal(meta.header_text(item))} ." for item in meta.normalise(metadata))]
    if lines[:tx] != expected:
        return None
    suffix = f" <{graph}> ."
    rows = lines[tx + 1:-2]
    statements = [line[2:-len(suffix)] for line in rows]
    ops = [line[:2] for line in rows]
    removed_count = ops.count("D ")
    if (any(not line.endswith(suffix) for line in rows) or ops[:removed_count] != ["D "] * removed_count
            or ops[removed_count:] != ["A "] * (len(ops) - removed_count)):
        return None
    triples = [q.triple for q in ox.parse("".join(f"{s} .\n" for s in statements), format=ox.RdfFormat.N_TRIPLES)]
    if len(triples) != len(statements) or any(str(t) != s for t, s in zip(triples, statements, strict=True)):
        return None
    removed = _canonical_section(statements[:removed_count], triples[:removed_count], canonicalizer, "D rows")
    added = _canonical_section(statements[removed_count:], triples[removed_count:], canonicalizer, "A rows")
    if removed is None or added is None or _shares_blank_nodes(statements[:removed_count], triples[:removed_count],
                                                               statements[removed_count:], triples[removed_count:]):
        return None
    patch = Patch(graph=graph, prev=prev, author=author, message=message, created=when,
                  removed=tuple(m for m, _ in removed), added=tuple(m for m, _ in added),
                  signature=parts.signature, format=int(fmt.value), removed_occurrences=tuple(o for _, o in removed),
                  added_occurrences=tuple(o for _, o in added), metadata=metadata)
    # The preimage is the canonical bytes (every line checked above), so its checked hash is the id.
    patch.__dict__["canonical_bytes"] = parts.preimage
    patch.__dict__["id"] = parts.claimed_id
    return patch


def _canonical_section(statements: list[str], triples: list[ox.Triple], canonicalizer: Canonicalizer,
                       source: str) -> list[tuple[Msg, int]] | None:
    """The MSGs and occurrences of one part's rows, if the rows are exactly their canonical
    lines in canonical order (strictly ascending hash and occurrence); else None."""
    # (The text hints first: a term object is made only where a "_:" may be a blank node.)
    blank = [i for i, s in enumerate(statements) if "_:" in s and (
        type(triples[i].subject) is ox.BlankNode or type(triples[i].object) is ox.BlankNode)]
    instances: dict[tuple[str, int], tuple[Msg, int]] = {}
    if blank:
        quads = [ox.Quad(triples[i].subject, triples[i].predicate, triples[i].object) for i in blank]
        for msg, occurrence in msgs_with_occurrences(quads, canonicalizer, source):
            instances[msg.hash[:LABEL_HASH_DIGITS], occurrence] = (msg, occurrence)
    blank_rows = set(blank)
    out: list[tuple[Msg, int]] = []
    last: tuple[str, int] = ("", -1)
    at = 0
    while at < len(statements):
        statement = statements[at]
        if at not in blank_rows:
            nquads = f"{statement} .\n"
            entry = (Msg(msg_hash(nquads), nquads), 0)
            at += 1
        else:
            triple = triples[at]
            term = triple.subject if type(triple.subject) is ox.BlankNode else triple.object
            label = parse_chain_label(f"_:{term.value}") if type(term) is ox.BlankNode else None
            found = instances.pop((label[0], label[1]), None) if label else None
            if found is None:
                return None
            msg, occurrence = found
            rename = functools.partial(chain_label, msg.hash, occurrence)
            block = [relabel(line, rename) for line in msg.statements]
            if statements[at:at + len(block)] != block:
                return None
            entry = found
            at += len(block)
        key = (entry[0].hash, entry[1])
        if key <= last:
            return None
        last = key
        out.append(entry)
    return out if not instances else None


def _shares_blank_nodes(removed_statements: list[str], removed: list[ox.Triple], added_statements: list[str],
                        added: list[ox.Triple]) -> bool:
    def labels(statements: list[str], triples: list[ox.Triple]) -> set[str]:
        return {t.value for s, tr in zip(statements, triples, strict=True) if "_:" in s
                for t in (tr.subject, tr.object) if type(t) is ox.BlankNode}
    return bool(labels(removed_statements, removed) & labels(added_statements, added))
