"""The `lucid-hub` command as users run it: results, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, whole_canonical

V1 = '<http://ex/o> <http://ex/line> _:a .\n_:a <http://ex/qty> "01"^^<http://www.w3.org/2001/XMLSchema#integer> .\n'
V2 = V1.replace('"01"', '"02"') + '<http://ex/o> <http://ex/status> "open" .\n'
G = "http://ex/g"


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "v1.nt").write_text(V1)
    (tmp_path / "v2.nt").write_text(V2)
    (tmp_path / "empty.nt").write_text("")
    return tmp_path


def one_line_error(result) -> str:  # type: ignore[no-untyped-def]
    assert result.code != 0
    assert result.err.count("\n") == 1 and result.err.startswith("lucid-hub: "), result.err
    assert "Traceback" not in result.err
    return str(result.err)


def test_keys_diff_verify_apply_round_trip(run_cli, files: Path) -> None:  # type: ignore[no-untyped-def]
    assert run_cli("keys", "generate", "--out", "keys").code == 0
    first = run_cli("diff", "empty.nt", "v1.nt", "--graph", G, "--author", "alice", "--message", "init",
                    "--key", "keys/signing-key.pem")
    assert first.code == 0 and first.out.startswith("H id <urn:sha256:")
    (files / "p1.rdfp").write_bytes(first.out_bytes)
    first_id = first.out.split("<", 1)[1].split(">", 1)[0]
    second = run_cli("diff", "v1.nt", "v2.nt", "--graph", G, "--prev", first_id, "--key", "keys/signing-key.pem")
    (files / "p2.rdfp").write_bytes(second.out_bytes)
    for name in ("p1.rdfp", "p2.rdfp"):
        verified = run_cli("verify", name, "--jwks", "keys/jwks.json")
        assert verified.code == 0 and verified.out.startswith("verified urn:sha256:")
    applied = run_cli("apply", "p1.rdfp", "empty.nt")
    assert applied.code == 0
    (files / "mid.nq").write_bytes(applied.out_bytes)
    final = run_cli("apply", "p2.rdfp", "mid.nq", "--version", first_id)
    assert final.code == 0
    got = [line[:-2] for line in final.out.splitlines()]
    expected = [line[:-2].rstrip() + f" <{G}>" for line in V2.splitlines()]
    assert whole_canonical(got) == whole_canonical(expected)


@pytest.mark.parametrize("fmt", ["trig", "jsonld"])
def test_diff_prints_trig_and_jsonld_that_verify(run_cli, files: Path, fmt: str) -> None:  # type: ignore[no-untyped-def]
    run_cli("keys", "generate", "--out", "keys")
    out = run_cli("diff", "v1.nt", "v2.nt", "--graph", G, "--format", fmt, "--key", "keys/signing-key.pem")
    (files / f"p.{fmt}").write_bytes(out.out_bytes)
    assert run_cli("verify", f"p.{fmt}", "--jwks", "keys/jwks.json").code == 0


def test_diff_of_quads_prints_one_patch_per_changed_graph(run_cli, files: Path) -> None:  # type: ignore[no-untyped-def]
    (files / "a.nq").write_text('<http://ex/s> <http://ex/p> "1" <http://ex/g1> .\n<http://ex/s> <http://ex/p> "1" <http://ex/g2> .\n'
                                '<http://ex/s> <http://ex/p> "1" <http://ex/g3> .\n')
    (files / "b.nq").write_text('<http://ex/s> <http://ex/p> "2" <http://ex/g1> .\n<http://ex/s> <http://ex/p> "1" <http://ex/g2> .\n')
    out = run_cli("diff", "a.nq", "b.nq")
    assert out.code == 0
    assert [line for line in out.out.splitlines() if line.startswith("H graph")] == [
        "H graph <http://ex/g1> .", "H graph <http://ex/g3> ."]


def test_reparsed_and_relabelled_input_gives_no_patch(run_cli, files: Path) -> None:  # type: ignore[no-untyped-def]
    (files / "v1-relabelled.ttl").write_text(V1.replace("_:a", "_:zz"))
    out = run_cli("diff", "v1.nt", "v1-relabelled.ttl", "--graph", G)
    assert out.code == 0 and out.out == "" and "no changes" in out.err


def test_canon_prints_rdfc10(run_cli, files: Path) -> None:  # type: ignore[no-untyped-def]
    out = run_cli("canon", "v1.nt")
    assert out.code == 0
    assert out.out == ('<http://ex/o> <http://ex/line> _:c14n0 .\n'
                       '_:c14n0 <http://ex/qty> "01"^^<http://www.w3.org/2001/XMLSchema#integer> .\n')


def test_canon_of_a_pathological_graph_fails_within_the_limit(run_cli, files: Path) -> None:  # type: ignore[no-untyped-def]
    clique = "".join(f"_:e{i} <http://ex/p> _:e{j} .\n" for i in range(10) for j in range(10))
    (files / "clique.nt").write_text(clique)
    err = one_line_error(run_cli("canon", "clique.nt", env={"LUCID_CANON_TIMEOUT": "1"}))
    assert "10 blank nodes" in err and "work limit of 1 s" in err


# --- malformed input ---------------------------------------------------------------------

def test_malformed_rdf_is_a_one_line_error_with_file_and_line(run_cli, files: Path) -> None:  # type: ignore[no-untyped-def]
    (files / "bad.nt").write_text(V1 + '<http://ex/s> <http://ex/p> "unterminated .\n')
    err = one_line_error(run_cli("diff", "v1.nt", "bad.nt", "--graph", G))
    assert "bad.nt" in err and "line 3" in err


@pytest.mark.parametrize("args", [
    ("diff", "v1.nt", "missing.nt", "--graph", G),
    ("diff", "v1.nt", "v2.nt"),  # triples but no --graph
    ("diff", "v1.nt", "v2.nt", "--graph", "not an iri"),
    ("diff", "v1.nt", "v2.nt", "--graph", G, "--prev", "urn:sha256:xyz"),
    ("diff", "v1.nt", "v2.nt", "--graph", G, "--key", "missing.pem"),
    ("diff", "v1.nt", "v2.nt", "--graph", G, "--created", "yesterday"),
    ("canon", "v1.unknown"),
    ("apply", "v1.nt", "v1.nt"),
    ("apply", "missing.rdfp", "v1.nt"),
    ("verify", "v1.nt", "--jwks", "v1.nt"),
    ("keys", "rotate", "--dir", "nowhere"),
    ("diff", "v1.nt"),
    ("nosuchcommand",),
])
def test_bad_input_gives_one_line_and_non_zero_exit(run_cli, files: Path, args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli(*args))


def test_triple_terms_are_refused(run_cli, files: Path) -> None:  # type: ignore[no-untyped-def]
    (files / "star.ttl").write_text("<http://ex/a> <http://ex/p> <<( <http://ex/a> <http://ex/b> <http://ex/c> )>> .\n")
    assert "triple terms" in one_line_error(run_cli("diff", "v1.nt", "star.ttl", "--graph", G))


def test_bad_setting_is_a_one_line_error(run_cli, files: Path) -> None:  # type: ignore[no-untyped-def]
    assert "LUCID_CANON_TIMEOUT" in one_line_error(run_cli("canon", "v1.nt", env={"LUCID_CANON_TIMEOUT": "soon"}))


# --- oversized, unauthorised, tampered and replayed patches -----------------------------

@pytest.fixture
def signed(run_cli, files: Path) -> Path:  # type: ignore[no-untyped-def]
    run_cli("keys", "generate", "--out", "keys")
    out = run_cli("diff", "empty.nt", "v1.nt", "--graph", G, "--key", "keys/signing-key.pem")
    (files / "p.rdfp").write_bytes(out.out_bytes)
    return files / "p.rdfp"


def test_oversized_patch_is_refused(run_cli, signed: Path) -> None:  # type: ignore[no-untyped-def]
    for args in (("verify", "p.rdfp", "--jwks", "keys/jwks.json"), ("apply", "p.rdfp", "empty.nt")):
        err = one_line_error(run_cli(*args, env={"LUCID_MAX_PATCH_BYTES": "100"}))
        assert "exceeds the limit of 100 bytes" in err


def test_patch_signed_by_another_key_is_refused(run_cli, signed: Path) -> None:  # type: ignore[no-untyped-def]
    run_cli("keys", "generate", "--out", "other")
    assert "unknown key" in one_line_error(run_cli("verify", "p.rdfp", "--jwks", "other/jwks.json"))


def test_unsigned_patch_is_refused_by_verify(run_cli, files: Path) -> None:  # type: ignore[no-untyped-def]
    run_cli("keys", "generate", "--out", "keys")
    (files / "u.rdfp").write_bytes(run_cli("diff", "empty.nt", "v1.nt", "--graph", G).out_bytes)
    assert "not signed" in one_line_error(run_cli("verify", "u.rdfp", "--jwks", "keys/jwks.json"))


def test_tampered_patch_is_refused_by_verify_and_apply(run_cli, signed: Path) -> None:  # type: ignore[no-untyped-def]
    signed.write_bytes(signed.read_bytes().replace(b'"01"', b'"99"'))
    assert "hash to" in one_line_error(run_cli("verify", "p.rdfp", "--jwks", "keys/jwks.json"))
    assert "hashes to" in one_line_error(run_cli("apply", "p.rdfp", "empty.nt"))


def test_replayed_patch_is_a_chain_error(run_cli, signed: Path) -> None:  # type: ignore[no-untyped-def]
    patch_id = signed.read_text().split("<", 1)[1].split(">", 1)[0]
    applied = run_cli("apply", "p.rdfp", "empty.nt")
    (signed.parent / "after.nq").write_bytes(applied.out_bytes)
    err = one_line_error(run_cli("apply", "p.rdfp", "after.nq", "--version", patch_id))
    assert "follows none" in err


def test_keys_generate_refuses_to_overwrite_and_writes_no_secret_to_jwks(run_cli, files: Path) -> None:  # type: ignore[no-untyped-def]
    assert run_cli("keys", "generate", "--out", "keys").code == 0
    assert "exists" in one_line_error(run_cli("keys", "generate", "--out", "keys"))
    jwks = json.loads((files / "keys" / "jwks.json").read_text())
    assert all("d" not in key for key in jwks["keys"])
    rotated = run_cli("keys", "rotate", "--dir", "keys")
    assert rotated.code == 0 and len(json.loads((files / "keys" / "jwks.json").read_text())["keys"]) == 2


def test_console_script_is_declared() -> None:
    assert 'lucid-hub = "lucid_hub.cli:main"' in (REPO / "pyproject.toml").read_text()
