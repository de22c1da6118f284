"""`lucid-hub demo`, the README's main job, runs on embedded defaults and leaves verifiable patches."""

from __future__ import annotations

from pathlib import Path


def test_demo_runs_and_its_patches_verify(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("demo", "--dir", "demo")
    assert result.code == 0, result.err
    assert "tampered patch refused" in result.out and "replayed patch refused" in result.out
    assert "demo complete" in result.out
    patches = sorted((tmp_path / "demo").glob("patch-*.rdfp"))
    assert len(patches) == 3
    for patch in patches:
        verified = run_cli("verify", patch, "--jwks", tmp_path / "demo" / "publisher-keys" / "jwks.json")
        assert verified.code == 0, verified.err
