"""Reading and writing RDF documents as pyoxigraph quads, literals exactly as written.

pyoxigraph keeps lexical forms untouched (`"01"^^xsd:integer` stays `"01"`); only
language tags are lower-cased, as RDF says they are case-insensitive. Triple terms
(RDF-star / RDF 1.2) are refused here, at the boundary, so no later step sees them.

What parsing makes of a document is bounded as well as the document itself: RDF/XML is read
only without a document type declaration (its entities expand 672 bytes into 100 MB), and a
`ParseBudget` bounds the statements a body parses into (prefixes, `@vocab` and `xml:base`
make long terms of short text).
"""

from __future__ import annotations

import gzip
import io
import re
import xml.parsers.expat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, cast

import pyoxigraph as ox

from lucid_hub import nesting
from lucid_hub.errors import InputError, InputTooLargeError, RdfSyntaxError, UnsupportedRdfError

# Names and media types accepted on the command line and in HTTP content negotiation.
FORMATS: dict[str, ox.RdfFormat] = {
    "nt": ox.RdfFormat.N_TRIPLES,
    "ntriples": ox.RdfFormat.N_TRIPLES,
    "nq": ox.RdfFormat.N_QUADS,
    "nquads": ox.RdfFormat.N_QUADS,
    "ttl": ox.RdfFormat.TURTLE,
    "turtle": ox.RdfFormat.TURTLE,
    "trig": ox.RdfFormat.TRIG,
    "jsonld": ox.RdfFormat.JSON_LD,
    "json-ld": ox.RdfFormat.JSON_LD,
    "json": ox.RdfFormat.JSON_LD,
}

_LINE_IN_MESSAGE = re.compile(r"line (\d+)", re.IGNORECASE)

# What a body may parse into, in bytes of N-Triples text, for each byte of the body's limit:
# N-Triples is 1x itself, Turtle and JSON-LD with prefixes measured 2-3x (docs/http-api.md).
EXPANSION = 4


class ParseBudget:
    """The bytes of statements one body may parse into (`limit`), and what is spent.

    Shared by every consumer of one body; `spend` raises InputTooLargeError (413) naming
    the setting whose limit it is, once the statements made exceed it."""

    def __init__(self, limit: int, what: str = "the request body", setting: str = "LUCID_MAX_BODY_BYTES") -> None:
        self.limit = limit
        self.left = limit
        self.what = what
        self.setting = setting

    @classmethod
    def for_body(cls, body_limit: int, what: str = "the request body",
                 setting: str = "LUCID_MAX_BODY_BYTES") -> ParseBudget:
        """The budget of a body whose raw bytes `body_limit` bounds."""
        return cls(body_limit * EXPANSION, what, setting)

    def spend(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise InputTooLargeError(
                f"{self.what} parses into more than {self.limit:,} bytes of statements ({EXPANSION}x {self.setting}); "
                "send fewer statements per request, or shorter prefixes and literals")


def rdf_format(name: str) -> ox.RdfFormat:
    """The RDF format for a short name (`nt`, `ttl`, `trig`, ...) or a media type."""
    fmt = FORMATS.get(name.lower().lstrip("."))
    if fmt is None:
        fmt = ox.RdfFormat.from_media_type(name)
    if fmt is None:
        known = ", ".join(sorted({"nt", "nq", "ttl", "trig", "jsonld"}))
        raise InputError(f"unknown RDF format {name!r} (known: {known})")
    return fmt


def format_of_path(path: str | Path, override: str | None = None) -> ox.RdfFormat:
    """The format named by `override`, else the one the file extension implies."""
    if override:
        return rdf_format(override)
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    if not suffixes or suffixes[-1].lstrip(".") not in FORMATS:
        raise InputError(
            f"{path}: cannot tell the RDF syntax from the file name; "
            "use an .nt, .nq, .ttl, .trig or .jsonld extension or name the format"
        )
    return FORMATS[suffixes[-1].lstrip(".")]


# The longest term (an IRI or a literal) the RDF parsers take: oxigraph's parsers buffer one
# token of at most this many bytes and raise MemoryError ("Reached the buffer maximal size")
# beyond it, whatever the body limit allows.
TERM_MAX_BYTES = 16 * 1024 * 1024


def term_limit_error(exc: MemoryError, name: str) -> InputTooLargeError:
    """The parser's refusal of a term over TERM_MAX_BYTES, as the input error (413) it is; a
    MemoryError of another kind is raised again."""
    if "buffer maximal size" not in str(exc):
        raise exc
    return InputTooLargeError(f"{name}: a term (an IRI or a literal) is longer than {TERM_MAX_BYTES:,} bytes, "
                              "the most the RDF parser takes")


def read_quads(
    source: bytes | str | IO[bytes] | Path,
    fmt: ox.RdfFormat,
    *,
    base_iri: str | None = None,
    name: str = "<input>",
    check_terms: bool = True,
    budget: ParseBudget | None = None,
) -> Iterator[ox.Quad]:
    """Parse a document into quads, streaming; errors name `name` and the line.

    A `Path` is read from disk. Triples come back as quads in the default graph.
    `check_terms=False` skips the triple-term check, for callers that make it themselves
    on each quad's text (`has_triple_term`), which is cheaper. With a `budget`, each quad's
    N-Quads text is spent from it (callers that write each statement out anyway spend
    there instead: `rdf.msg.split_graphs`).
    """
    try:
        if fmt == ox.RdfFormat.JSON_LD:  # the one RDF syntax oxigraph parses recursively
            source = _bounded_json(source, name)
        elif fmt == ox.RdfFormat.RDF_XML:
            source = _xml_without_dtd(source, name)
        parser: Iterator[ox.Quad]
        if isinstance(source, Path):
            parser = ox.parse(path=str(source), format=fmt, base_iri=base_iri)
        else:
            parser = ox.parse(source, format=fmt, base_iri=base_iri)
        if budget is not None:
            parser = _spending(parser, budget)
        if not check_terms:
            yield from parser
            return
        for quad in parser:
            if has_triple_term(quad):
                raise triple_term_error(name, quad)
            yield quad
    except SyntaxError as exc:
        raise RdfSyntaxError(f"{name}: {_syntax_message(exc)}") from None
    except MemoryError as exc:
        raise term_limit_error(exc, name) from None
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise RdfSyntaxError(f"{name}: {exc}") from None


def _bounded_json(source: bytes | str | IO[bytes] | Path, name: str) -> bytes | str:
    """A JSON-LD document, read whole (oxigraph does not stream it either) and measured
    before it is parsed: its nesting drives the parser's recursion (lucid_hub.nesting)."""
    if isinstance(source, Path):
        source = source.read_bytes()
    elif not isinstance(source, bytes | str):
        source = source.read()
    nesting.check_json(source, name)
    return source


def _spending(quads: Iterator[ox.Quad], budget: ParseBudget) -> Iterator[ox.Quad]:
    spend = budget.spend
    for quad in quads:
        spend(len(str(quad)))
        yield quad


def _xml_without_dtd(source: bytes | str | IO[bytes] | Path, name: str) -> bytes:
    """An RDF/XML document, read whole and checked with expat (the standard library's XML
    parser) before oxigraph parses it: a document type declaration is refused wherever it
    stands, and with it every entity declaration (internal entities expand exponentially,
    external ones name files and URLs). RDF/XML needs neither; expat also refuses what is
    not well-formed XML, which oxigraph's lenient reader would take (a DOCTYPE inside the
    root element, a lower-case one)."""
    if isinstance(source, Path):
        data = source.read_bytes()
    elif isinstance(source, str):
        data = source.encode()
    elif isinstance(source, bytes):
        data = source
    else:
        data = source.read()
    parser = xml.parsers.expat.ParserCreate()

    def refuse(*_args: Any) -> None:
        raise RdfSyntaxError(f"{name}: RDF/XML with a document type declaration (<!DOCTYPE>, <!ENTITY>) is "
                             "not accepted: entities are not expanded here; write the values out")

    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)
    try:
        parser.Parse(data, True)
    except xml.parsers.expat.ExpatError as exc:
        raise RdfSyntaxError(f"{name}: not well-formed XML: {exc}") from None
    return data


def has_triple_term(quad: ox.Quad) -> bool:
    """Whether the quad holds a triple term (RDF-star / RDF 1.2)."""
    return type(quad.object) is ox.Triple or type(quad.subject) is ox.Triple


def triple_term_error(source: str, quad: ox.Quad) -> UnsupportedRdfError:
    """The error for a quad with a triple term, naming where it came from."""
    return UnsupportedRdfError(f"{source}: triple terms (RDF-star / RDF 1.2) are not supported: {quad}")


def _syntax_message(exc: SyntaxError) -> str:
    message = " ".join(str(exc.msg if exc.msg else exc).split())
    if exc.lineno and not _LINE_IN_MESSAGE.search(message):
        return f"line {exc.lineno}: {message}"
    return message


def read_file(path: str | Path, fmt: str | None = None, *, check_terms: bool = True,
              progress: Callable[[int], None] | None = None) -> Iterator[ox.Quad]:
    """Parse an RDF file (gzip-compressed when it ends in .gz), format from its name.

    `progress`, when given, is called with the number of bytes read as parsing proceeds.
    """
    p = Path(path)
    rdf_fmt = format_of_path(p, fmt)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    if p.suffix.lower() == ".gz":
        return _read_gzip(p, rdf_fmt, check_terms)
    if progress is not None:
        return _read_with_progress(p, rdf_fmt, check_terms, progress)
    return read_quads(p, rdf_fmt, name=str(p), check_terms=check_terms)


class ProgressReader(io.RawIOBase):
    """A binary file that reports how many bytes were read from it."""

    def __init__(self, raw: IO[bytes], progress: Callable[[int], None]) -> None:
        self._raw = raw
        self._progress = progress

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._raw.read(len(buffer))
        buffer[: len(data)] = data
        self._progress(len(data))
        return len(data)


def _read_with_progress(p: Path, rdf_fmt: ox.RdfFormat, check_terms: bool,
                        progress: Callable[[int], None]) -> Iterator[ox.Quad]:
    with p.open("rb") as raw:
        reader = io.BufferedReader(ProgressReader(raw, progress), buffer_size=1 << 20)
        yield from read_quads(cast(IO[bytes], reader), rdf_fmt, name=str(p), check_terms=check_terms)


def _read_gzip(p: Path, rdf_fmt: ox.RdfFormat, check_terms: bool) -> Iterator[ox.Quad]:
    try:
        with gzip.open(p, "rb") as fh:
            yield from read_quads(cast(IO[bytes], fh), rdf_fmt, name=str(p), check_terms=check_terms)
    except (OSError, EOFError) as exc:
        raise InputError(f"{p}: cannot read: {exc}") from None


XSD = "http://www.w3.org/2001/XMLSchema#"
# Turtle and TriG write numbers and booleans bare (`01`, `1.0E0`), and readers turn a bare
# token into its value: rdflib reads `01` as "1" and `1.0E0` as "1.0". A literal is written
# bare only in the form such readers keep; the others, and every double, are quoted
# ("01"^^xsd:integer), so that each syntax round-trips exactly (rdflib still normalises
# integers unless rdflib.NORMALIZE_LITERALS is False: docs/http-api.md).
_BARE_FORMS = {XSD + "integer": re.compile(r"0|-?[1-9][0-9]*"),
               XSD + "decimal": re.compile(r"-?(?:0|[1-9][0-9]*)\.[0-9]+"),
               XSD + "boolean": re.compile(r"true|false"),
               XSD + "double": None}
# While serialising, the quoted ones carry this datatype namespace (which no input may use:
# store.graphs.check_no_skolem), then get their XSD datatype back in the text.
_QUOTED_NS = "urn:lucid-hub:xsd:"


def _quote_numbers(quads: Iterable[ox.Quad]) -> Iterator[ox.Quad]:
    for quad in quads:
        obj = quad.object
        if type(obj) is ox.Literal and obj.datatype.value in _BARE_FORMS:
            bare = _BARE_FORMS[obj.datatype.value]
            if bare is None or not bare.fullmatch(obj.value):
                hidden = ox.NamedNode(_QUOTED_NS + obj.datatype.value[len(XSD):])
                quad = ox.Quad(quad.subject, quad.predicate, ox.Literal(obj.value, datatype=hidden), quad.graph_name)
        yield quad


def serialize(quads: Iterable[ox.Quad], fmt: ox.RdfFormat, prefixes: dict[str, str] | None = None) -> bytes:
    """Serialise quads, literals exactly as they are; for triple formats the quads must all
    be in one graph."""
    textual = fmt in (ox.RdfFormat.TURTLE, ox.RdfFormat.TRIG)
    if textual:
        quads = _quote_numbers(quads)
    items: Iterable[ox.Quad] | Iterable[ox.Triple] = quads
    if not fmt.supports_datasets:
        items = (q.triple for q in quads)
    out = ox.serialize(items, format=fmt, prefixes=prefixes)
    assert out is not None
    return out.replace(b"<" + _QUOTED_NS.encode(), f"<{XSD}".encode()) if textual else out
