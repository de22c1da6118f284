"""Reading and writing RDF documents as pyoxigraph quads, literals exactly as written.

pyoxigraph keeps lexical forms untouched (`"01"^^xsd:integer` stays `"01"`); only
language tags are lower-cased, as RDF says they are case-insensitive. Triple terms
(RDF-star / RDF 1.2) are refused here, at the boundary, so no later step sees them.
"""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, cast

import pyoxigraph as ox

from lucid_hub import nesting
from lucid_hub.errors import InputError, RdfSyntaxError, UnsupportedRdfError

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


def read_quads(
    source: bytes | str | IO[bytes] | Path,
    fmt: ox.RdfFormat,
    *,
    base_iri: str | None = None,
    name: str = "<input>",
    check_terms: bool = True,
) -> Iterator[ox.Quad]:
    """Parse a document into quads, streaming; errors name `name` and the line.

    A `Path` is read from disk. Triples come back as quads in the default graph.
    `check_terms=False` skips the triple-term check, for callers that make it themselves
    on each quad's text (`has_triple_term`), which is cheaper.
    """
    try:
        if fmt == ox.RdfFormat.JSON_LD:  # the one RDF syntax oxigraph parses recursively
            source = _bounded_json(source, name)
        if isinstance(source, Path):
            parser = ox.parse(path=str(source), format=fmt, base_iri=base_iri)
        else:
            parser = ox.parse(source, format=fmt, base_iri=base_iri)
        if not check_terms:
            yield from parser
            return
        for quad in parser:
            if has_triple_term(quad):
                raise triple_term_error(name, quad)
            yield quad
    except SyntaxError as exc:
        raise RdfSyntaxError(f"{name}: {_syntax_message(exc)}") from None
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
