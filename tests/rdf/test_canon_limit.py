"""The canonicalisation work limit: cheap structures in process, the rest bounded by a guard."""

from __future__ import annotations

import time

import pytest

from lucid_hub.errors import CanonicalizationLimitExceeded, InputError
from lucid_hub.rdf.canon import SAFE_BLANK_NODES, Canonicalizer, canonicalize_document, needs_guard


def clique(n: int, predicate: str = "<http://ex/p>") -> list[str]:
    return [f"_:e{i} {predicate} _:e{j}" for i in range(n) for j in range(n)]


def chain(n: int) -> list[str]:
    return [f'_:n{i} <http://ex/next> _:n{i + 1}' for i in range(n)] + [f'_:n{i} <http://ex/v> "{i}"' for i in range(n + 1)]


def star(leaves: int) -> list[str]:
    """A hub with identical leaves: symmetric (so guarded) but cheap to canonicalise."""
    return [f"_:hub <http://ex/p> _:leaf{i}" for i in range(leaves)]


def test_small_structures_never_need_the_guard() -> None:
    assert not needs_guard(clique(SAFE_BLANK_NODES))


def test_blank_nodes_with_distinct_first_degree_signatures_need_no_guard() -> None:
    assert not needs_guard(chain(50))


def test_symmetric_structures_beyond_the_safe_size_go_to_the_guard() -> None:
    assert needs_guard(clique(SAFE_BLANK_NODES + 1))


def test_guarded_result_equals_in_process_result(canonicalizer: Canonicalizer) -> None:
    statements = clique(7)
    expected = canonicalize_document("".join(f"{s} .\n" for s in statements))
    assert canonicalizer.canonicalize(statements) == expected


def test_large_clique_fails_within_the_configured_timeout() -> None:
    with Canonicalizer(timeout=0.5) as c:
        started = time.monotonic()
        with pytest.raises(CanonicalizationLimitExceeded, match="12 blank nodes and 144 statements"):
            c.canonicalize(clique(12))
        assert time.monotonic() - started < 2.0


def test_guard_recovers_after_a_timeout() -> None:
    with Canonicalizer(timeout=0.5) as c:
        with pytest.raises(CanonicalizationLimitExceeded):
            c.canonicalize(clique(12))
        # The killed guard is replaced: the next guarded job succeeds.
        assert needs_guard(star(8))
        assert c.canonicalize(star(8)).count("\n") == 8


def test_guard_memory_limit_is_a_limit_error() -> None:
    # A guarded job that has to hold 200 MB cannot run in a guard limited to 128 MiB.
    statements = [*clique(7), f'_:e0 <http://ex/big> "{"x" * 200_000_000}"']
    with Canonicalizer(timeout=20.0, memory_mb=128) as c:
        with pytest.raises(CanonicalizationLimitExceeded, match=r"memory limit|failed"):
            c.canonicalize(statements)
        assert c.canonicalize(star(8)).count("\n") == 8  # and a fresh guard works again


def test_unknown_hash_algorithm_is_an_input_error(canonicalizer: Canonicalizer) -> None:
    with pytest.raises(InputError, match="sha256 or sha384"):
        canonicalizer.canonicalize(["_:a <http://ex/p> _:b"], "md5")


def test_single_blank_node_fast_path_matches_pyoxigraph(canonicalizer: Canonicalizer) -> None:
    statements = ['_:x <http://ex/p> "b"', '<http://ex/s> <http://ex/q> _:x', '_:x <http://ex/p> _:x']
    expected = canonicalize_document("".join(f"{s} .\n" for s in statements))
    assert canonicalizer.canonicalize(statements) == expected


def test_ground_statements_are_returned_sorted_and_deduplicated(canonicalizer: Canonicalizer) -> None:
    statements = ['<http://ex/b> <http://ex/p> "1"', '<http://ex/a> <http://ex/p> "1"', '<http://ex/b> <http://ex/p> "1"']
    assert canonicalizer.canonicalize(statements) == (
        '<http://ex/a> <http://ex/p> "1" .\n<http://ex/b> <http://ex/p> "1" .\n'
    )
