"""Parsing keeps literals exactly as written, in every supported syntax."""

from __future__ import annotations

from pathlib import Path

import pytest

from lucid_hub.errors import InputError, RdfSyntaxError, UnsupportedRdfError
from lucid_hub.rdf.statements import terms
from lucid_hub.rdf.syntax import format_of_path, rdf_format, read_file, read_quads

XSD = "http://www.w3.org/2001/XMLSchema#"
DOCS = {
    "nt": f'<http://ex/s> <http://ex/p> "01"^^<{XSD}integer> .\n<http://ex/s> <http://ex/q> "abc"^^<{XSD}integer> .\n',
    "nq": f'<http://ex/s> <http://ex/p> "01"^^<{XSD}integer> <http://ex/g> .\n'
          f'<http://ex/s> <http://ex/q> "abc"^^<{XSD}integer> <http://ex/g> .\n',
    "ttl": f'@prefix xsd: <{XSD}> .\n<http://ex/s> <http://ex/p> "01"^^xsd:integer ; <http://ex/q> "abc"^^xsd:integer .\n',
    "trig": f'@prefix xsd: <{XSD}> .\n<http://ex/g> {{ <http://ex/s> <http://ex/p> "01"^^xsd:integer ; '
            f'<http://ex/q> "abc"^^xsd:integer . }}\n',
    "jsonld": '{"@id": "http://ex/s", "http://ex/p": {"@value": "01", "@type": "' + XSD + 'integer"}, '
              '"http://ex/q": {"@value": "abc", "@type": "' + XSD + 'integer"}}',
}


@pytest.mark.parametrize("ext", sorted(DOCS))
def test_literals_keep_their_lexical_form_in_every_syntax(ext: str, tmp_path: Path) -> None:
    path = tmp_path / f"data.{ext}"
    path.write_text(DOCS[ext])
    values = sorted(q.object.value for q in read_file(path))  # type: ignore[union-attr]
    assert values == ["01", "abc"]


def test_escapes_and_unicode_survive_to_the_canonical_statement() -> None:
    doc = '<http://ex/s> <http://ex/p> "a\\nb\\t\\"q\\" \\\\ \\u0001 ünï 😀"@de .'
    (quad,) = read_quads(doc.encode(), rdf_format("nt"))
    assert quad.object.value == 'a\nb\t"q" \\ \x01 ünï 😀'  # type: ignore[union-attr]
    assert str(quad) == '<http://ex/s> <http://ex/p> "a\\nb\\t\\"q\\" \\\\ \\u0001 ünï 😀"@de'


def test_syntax_error_names_source_and_line() -> None:
    doc = b'<http://ex/s> <http://ex/p> "ok" .\n<http://ex/s> <http://ex/p> "broken .\n'
    with pytest.raises(RdfSyntaxError, match=r"^old\.nt: .*line 2"):
        list(read_quads(doc, rdf_format("nt"), name="old.nt"))


@pytest.mark.parametrize("doc", [
    b'<http://ex/a> <http://ex/p> <<( <http://ex/a> <http://ex/b> <http://ex/c> )>> .',
    b'<< <http://ex/a> <http://ex/b> <http://ex/c> >> <http://ex/p> "x" .',
])
def test_triple_terms_are_rejected_clearly(doc: bytes) -> None:
    with pytest.raises(UnsupportedRdfError, match="triple terms"):
        list(read_quads(doc, rdf_format("ttl")))


def test_unknown_extension_and_missing_file_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot tell the RDF syntax"):
        format_of_path(tmp_path / "data.xyz")
    with pytest.raises(InputError, match="no such file"):
        read_file(tmp_path / "missing.nt")
    with pytest.raises(InputError, match="unknown RDF format"):
        rdf_format("yaml")


def test_gzip_input_is_read(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "data.nt.gz"
    path.write_bytes(gzip.compress(DOCS["nt"].encode()))
    assert len(list(read_file(path))) == 2
    (tmp_path / "bad.nt.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match=r"bad\.nt\.gz"):
        list(read_file(tmp_path / "bad.nt.gz"))


@pytest.mark.parametrize(("statement", "expected"), [
    ('<a> <p> "x <g>" <g>', ["<a>", "<p>", '"x <g>"', "<g>"]),
    ('<a> <p> "x"^^<http://dt> <g>', ["<a>", "<p>", '"x"^^<http://dt>', "<g>"]),
    ('<a> <p> "a \\" _:b"', ["<a>", "<p>", '"a \\" _:b"']),
    ("_:a <p> _:b _:g", ["_:a", "<p>", "_:b", "_:g"]),
    ('_:a <p> "x y"@en-us', ["_:a", "<p>", '"x y"@en-us']),
])
def test_statement_terms_split_exactly(statement: str, expected: list[str]) -> None:
    assert terms(statement) == expected


def test_statement_terms_of_a_huge_literal_take_linear_memory() -> None:
    # A backtracking regex needed memory per character here (the OOM killer stopped it).
    big = "x" * 50_000_000
    assert terms(f'_:b <http://ex/p> "{big}"')[2] == f'"{big}"'
