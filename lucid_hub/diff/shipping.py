"""The Spark diff engine's own code, shipped to the executors with each job.

Executors run the engine's worker functions (parsing, canonicalising, hashing), which live in
this package. On a cluster whose executors have only pyspark, pyarrow and pyoxigraph, the job
would fail with "No module named 'lucid_hub'" unless the package travels with it: the driver
zips the package it runs (so executors run exactly the driver's version, never an older copy in
an image) and adds it to the job (`SparkContext.addPyFile`). Written by hand: Spark takes a zip
of modules, and the standard library's zipfile makes one; nothing else is needed.
"""

from __future__ import annotations

import hashlib
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_built: dict[Path, Path] = {}


def package_root() -> Path:
    """The directory of the `lucid_hub` package this process runs."""
    import lucid_hub

    return Path(lucid_hub.__file__).resolve().parent


def package_zip(root: Path | None = None) -> Path:
    """A zip of the package's modules (`lucid_hub/…/*.py`), made once per process and named
    by its content's hash (executors cache files by name)."""
    root = root or package_root()
    with _lock:
        if root in _built and _built[root].is_file():
            return _built[root]
        sources = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
        digest = hashlib.sha256()
        for path in sources:
            digest.update(path.relative_to(root.parent).as_posix().encode())
            digest.update(path.read_bytes())
        target = Path(tempfile.gettempdir()) / f"lucid_hub-{digest.hexdigest()[:16]}.zip"
        if not target.is_file():
            partial = target.with_suffix(f".{threading.get_ident()}.part")
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
                for path in sources:
                    archive.write(path, path.relative_to(root.parent).as_posix())
            partial.replace(target)
        _built[root] = target
        return target


def ship(spark: Any) -> Path | None:
    """Add the package to the session's jobs unless its executors run in this process's
    Python (a `local` master); the zip shipped, or None."""
    context = spark.sparkContext
    if str(context.master).startswith("local"):
        return None
    archive = package_zip()
    context.addPyFile(str(archive))
    return archive
