"""ruff and mypy are part of the test suite, so the one test command checks them too."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO, cache_dir


def test_ruff_is_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "lucid_hub", "lucid_bench", "tests"], cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    # Its incremental cache outside the checkout, kept between runs and clones on this machine:
    # a fresh clone checks only what changed since the last run (mypy's cache is keyed by each
    # module's contents and its dependencies' interfaces, so it is not a way to miss an error).
    cache = cache_dir() / "mypy"
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)], cwd=REPO, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
