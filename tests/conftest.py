"""Shared fixtures: one canonicaliser (and guard process) per session, keys, the W3C suite."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyoxigraph as ox
import pytest

from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.signing import SigningKey, generate_key

REPO = Path(__file__).resolve().parent.parent


def rdf_canon_tests_dir() -> Path | None:
    """The W3C RDFC-1.0 suite: $LUCID_RDF_CANON_TESTS, else ../shared/rdf-canon-tests."""
    candidates = [os.environ.get("LUCID_RDF_CANON_TESTS"), str(REPO.parent / "shared" / "rdf-canon-tests")]
    for candidate in candidates:
        if candidate and (Path(candidate) / "manifest.ttl").is_file():
            return Path(candidate)
    return None


@pytest.fixture(scope="session")
def canonicalizer() -> Iterator[Canonicalizer]:
    with Canonicalizer(timeout=5.0) as c:
        yield c


@pytest.fixture(scope="session")
def signing_key() -> SigningKey:
    return generate_key()


@dataclass
class CliResult:
    code: int
    out: str
    err: str
    out_bytes: bytes


@pytest.fixture
def run_cli(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Run the installed `lucid-hub` console script as a user would, in tmp_path."""

    def run(*args: str | Path, env: dict[str, str] | None = None, stdin: bytes | None = None) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "lucid_hub.cli", *map(str, args)],
            capture_output=True, cwd=tmp_path, input=stdin,
            env={**os.environ, **(env or {})}, timeout=120, check=False,
        )
        return CliResult(proc.returncode, proc.stdout.decode(errors="replace"),
                         proc.stderr.decode(errors="replace"), proc.stdout)

    return run


def parse_nt(text: str) -> list[ox.Quad]:
    return list(ox.parse(text, format=ox.RdfFormat.N_TRIPLES))


def whole_canonical(statements: list[str] | list[ox.Quad]) -> str:
    """Whole-graph RDFC-1.0 canonical N-Quads: an isomorphism test independent of MSGs."""
    ds = ox.Dataset(
        q if isinstance(q, ox.Quad) else next(iter(ox.parse(q + " .", format=ox.RdfFormat.N_QUADS)))
        for q in statements
    )
    ds.canonicalize(ox.CanonicalizationAlgorithm.RDFC_1_0)
    return "".join(sorted(f"{q} .\n" for q in ds))
