"""`lucid-hub demo`, the README's main job, runs on embedded defaults and leaves verifiable patches."""

from __future__ import annotations

import re
from pathlib import Path


def test_demo_runs_and_its_patches_verify(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("demo", "--offline", "--dir", "demo")
    assert result.code == 0, result.err
    assert "tampered patch refused" in result.out and "replayed patch refused" in result.out
    assert "demo complete" in result.out
    patches = sorted((tmp_path / "demo").glob("patch-*.rdfp"))
    assert len(patches) == 3
    for patch in patches:
        verified = run_cli("verify", patch, "--jwks", tmp_path / "demo" / "publisher-keys" / "jwks.json")
        assert verified.code == 0, verified.err


def test_the_two_hub_demo_verifies_everything_and_reports(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The README's main job: two hub processes, a mirror, a tampered delivery, a withdrawal."""
    result = run_cli("demo", "--dir", "hubs")
    assert result.code == 0, result.err + result.out
    report = result.out.split("\nreport\n", 1)[1]
    assert "mirror isomorphic to source     yes" in report
    assert "patches published               5" in report
    assert "verified and applied at Globex  4" in report and "quarantined at Globex           1" in report
    # publish-to-mirror latency is counted from the publish: it cannot be negative (it was, when
    # counted from ACME's answer, which a fast mirror can beat)
    applied = [int(m) for m in re.findall(r"Globex verified and applied it in (-?\d+) ms", result.out)]
    assert len(applied) == 3 and min(applied) >= 0, applied
    latency = re.search(r"publish-to-mirror latency\s+p50 (-?\d+) ms, max (-?\d+) ms", report)
    assert latency and int(latency.group(1)) >= 0, report
    # both hubs' data directories stay: the partner's archive holds the publisher's patches
    assert (tmp_path / "hubs" / "acme" / "lucid-hub.db").is_file()
    assert (tmp_path / "hubs" / "globex" / "lucid-hub.db").is_file()
