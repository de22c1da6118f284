"""The W3C RDFC-1.0 test suite, run through lucid-hub's canonicaliser (not pyoxigraph directly)."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest

from lucid_hub.errors import CanonicalizationLimitExceeded
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.syntax import read_file
from tests.conftest import rdf_canon_tests_dir

SUITE = rdf_canon_tests_dir()
if SUITE is None:
    print("W3C RDFC-1.0 suite not found: set LUCID_RDF_CANON_TESTS or provide ../shared/rdf-canon-tests")
pytestmark = pytest.mark.skipif(
    SUITE is None,
    reason="W3C RDFC-1.0 suite not found (set LUCID_RDF_CANON_TESTS or provide ../shared/rdf-canon-tests)",
)


def _manifest() -> list[dict[str, str]]:
    if SUITE is None:
        return []
    with (SUITE / "manifest.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


EVAL_TESTS = [row for row in _manifest() if row["rdfc10"] == "TRUE"]
NEGATIVE_TESTS = [row for row in _manifest() if row["rdfc10"] == "RDFC10NegativeEvalTest"]


def _statements(path: Path) -> list[str]:
    return [str(q) for q in read_file(path)]


def test_suite_has_all_64_eval_tests() -> None:
    assert len(EVAL_TESTS) == 64
    assert [row["test"] for row in NEGATIVE_TESTS] == ["test074"]


@pytest.mark.parametrize("row", EVAL_TESTS, ids=[row["test"] for row in EVAL_TESTS])
def test_eval_output_is_byte_identical(row: dict[str, str], canonicalizer: Canonicalizer) -> None:
    assert SUITE is not None
    name = row["test"]
    algorithm = "sha384" if row["hashAlgorithm"] == "SHA384" else "sha256"
    expected = (SUITE / "rdfc10" / f"{name}-rdfc10.nq").read_bytes()
    actual = canonicalizer.canonicalize(_statements(SUITE / "rdfc10" / f"{name}-in.nq"), algorithm)
    assert actual.encode() == expected


def test_negative_clique_fails_with_limit_error_within_the_bound() -> None:
    assert SUITE is not None
    statements = _statements(SUITE / "rdfc10" / "test074-in.nq")
    with Canonicalizer(timeout=2.0) as canonicalizer:
        started = time.monotonic()
        with pytest.raises(CanonicalizationLimitExceeded, match=r"10 blank nodes.*work limit of 2 s"):
            canonicalizer.canonicalize(statements)
        elapsed = time.monotonic() - started
    assert elapsed < 2.0 + 1.5, f"the limit error came after {elapsed:.1f} s"


def test_negative_clique_fails_with_the_default_bound_of_at_most_5_seconds(canonicalizer: Canonicalizer) -> None:
    assert SUITE is not None
    assert canonicalizer.timeout <= 5.0
    started = time.monotonic()
    with pytest.raises(CanonicalizationLimitExceeded):
        canonicalizer.canonicalize(_statements(SUITE / "rdfc10" / "test074-in.nq"))
    assert time.monotonic() - started < 5.0 + 1.5
