"""`lucid-hub publish`: a file as a graph's new version, into the data directory directly
(opening the hub's parts), or to a running hub over HTTP (lucid_hub.client), with progress."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from lucid_hub.client import HubClient, hub_token
from lucid_hub.config import Settings
from lucid_hub.diff import GraphChange
from lucid_hub.diff.local import file_graph_msgs
from lucid_hub.errors import ConflictError, InputError, LucidError, RemoteRefusedError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.metadata import Metadata
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.syntax import format_of_path
from lucid_hub.store.layout import check_no_skolem

MEDIA_TYPES = {"nt": "application/n-triples", "nq": "application/n-quads", "ttl": "text/turtle",
               "trig": "application/trig", "jsonld": "application/ld+json"}


def publish_file(settings: Settings, path: Path, graph: str, *, author: str, message: str, hub_url: str | None,
                 fmt: str | None, canonicalizer: Canonicalizer, echo: Callable[[str], None],
                 engine: str = "auto", spark: Any = None, token: str | None = None, metadata: Metadata = ()) -> None:
    """Publish `path` as the new content of `graph`, saying what happens as it goes.

    engine: `local`, `spark` (a Spark job diffs the store's current version against the
    file), or `auto` (Spark from LUCID_SPARK_THRESHOLD_BYTES on, when pyspark is installed).
    With `hub_url`, the hub publishes it, called with `token` (default: from LUCID_ACCESS_TOKEN
    or LUCID_CLIENT_ID and LUCID_CLIENT_SECRET). `metadata` goes with the patch (format 3).
    """
    if engine == "auto":
        engine = "spark" if path.stat().st_size >= settings.spark_threshold_bytes and _has_spark() else "local"
    if hub_url and engine == "spark":
        client = HubClient(hub_url, token=token or hub_token(hub_url, "graphs:read graphs:write"))
        _publish_spark_http(settings, client, path, graph, message=message, echo=echo, spark=spark,
                            metadata=metadata)
        return
    if hub_url:  # the hub records the token's party as the author
        client = HubClient(hub_url, token=token or hub_token(hub_url, "graphs:write"))
        _publish_http(client, path, graph, author=author, message=message, fmt=fmt, echo=echo, metadata=metadata)
        return
    from lucid_hub.runtime import Runtime

    if engine == "spark":
        _publish_spark(settings, path, graph, author=author, message=message, echo=echo, spark=spark,
                       metadata=metadata)
        return

    started = time.monotonic()
    size = path.stat().st_size
    with click.progressbar(length=size, label=f"reading {path.name}", file=sys.stderr,
                           hidden=not sys.stderr.isatty()) as bar:
        graphs = file_graph_msgs(path, fmt, graph, canonicalizer, progress=bar.update)
    new = graphs.get(graph)
    if set(graphs) - {graph} or new is None:
        raise InputError(f"{path}: holds other graphs than <{graph}>")
    check_no_skolem(new.ground, str(path))
    echo(f"read {len(new):,} MSGs in {time.monotonic() - started:.1f} s; diffing and publishing ...")
    runtime = Runtime.open(settings)
    try:
        patch = runtime.publisher.replace(graph, new, author=author, message=message, metadata=metadata)
    finally:
        runtime.close()
    _report(echo, graph, patch, started)


def _publish_http(client: HubClient, path: Path, graph: str, *, author: str, message: str, fmt: str | None,
                  echo: Callable[[str], None], metadata: Metadata = ()) -> None:
    rdf_fmt = format_of_path(path, fmt)
    size = path.stat().st_size
    with path.open("rb") as raw, click.progressbar(length=size, label=f"uploading {path.name}",
                                                   file=sys.stderr, hidden=not sys.stderr.isatty()) as bar:
        result = client.put_graph(graph, raw, size, rdf_fmt.media_type, message, progress=bar.update,
                                  sent=lambda: echo("waiting for the hub to diff and publish ..."), author=author,
                                  metadata=metadata)
    if result.get("patch"):
        echo(f"published {result['patch']} (-{result['removed']} +{result['added']} MSGs)")
    else:
        echo(f"no changes: <{graph}> already has this content")


def _has_spark() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyspark") is not None


def _publish_spark(settings: Settings, path: Path, graph: str, *, author: str, message: str,
                   echo: Callable[[str], None], spark: Any, metadata: Metadata = ()) -> None:
    """The Spark job diffs the store's current version (exported) against the file; the change
    then goes through the same archive, chain, signature and log path as any other."""
    import tempfile

    from lucid_hub.runtime import Runtime

    started = time.monotonic()
    runtime = Runtime.open(settings)
    try:
        with tempfile.TemporaryDirectory(prefix="lucid-publish-") as tmp:
            old = Path(tmp) / "current.nt"
            version = runtime.publisher.export(graph, old)
            echo(f"exported <{graph}> at {version or 'no version'}; diffing with Spark ({settings.spark_master}) ...")
            change = _spark_change(settings, old, path, graph, spark)
        if change is None:
            _report(echo, graph, None, started)
            return
        # The job diffed against `version`: publish only if the graph is still there (409 otherwise).
        patch = runtime.publisher.publish(graph, lambda _view: change, author=author, message=message,
                                          expect_prev=True, prev=version, metadata=metadata)
    finally:
        runtime.close()
    _report(echo, graph, patch, started)


def _publish_spark_http(settings: Settings, client: HubClient, path: Path, graph: str, *, message: str,
                        echo: Callable[[str], None], spark: Any, metadata: Metadata = ()) -> None:
    """A Spark job beside a running hub (a Kubernetes Job, a SparkApplication): it exports the
    graph's current version over HTTP, diffs it against the file on Spark, and uploads the
    change as a bare RDF Patch naming that version as `prev`. The hub builds, signs and chains
    the patch (the cluster never holds its key), or answers 409 if the graph moved meanwhile."""
    import tempfile

    from lucid_hub.rdf.rdfpatch import MEDIA_TYPE

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lucid-publish-") as tmp:
        old = Path(tmp) / "current.nt"
        version = client.download_graph(graph, old)  # None: a new graph, diffed against nothing
        master = spark.sparkContext.master if spark is not None else settings.spark_master
        echo(f"exported <{graph}> at {version or 'no version'} from {client.base}; diffing with Spark ({master}) ...")
        change = _spark_change(settings, old, path, graph, spark)
    if change is None:
        _report(echo, graph, None, started)
        return
    try:  # no `H id`: the hub builds it
        result = client.post_patch(graph, change.to_patch(version).canonical_bytes, MEDIA_TYPE, message,
                                  metadata)
    except RemoteRefusedError as exc:
        if exc.status == 409:
            raise ConflictError(f"<{graph}> changed at the hub while the Spark job ran ({exc}); "
                                "run the job again") from None
        raise
    echo(f"published {result['patch']} (-{result['removed']} +{result['added']} MSGs) "
         f"in {time.monotonic() - started:.1f} s")


def spark_diff(settings: Settings, spark: Any = None) -> Callable[[Path, Path, str], GraphChange | None]:
    """A diff of two N-Triples files of one graph on Spark (`lucid-hub capture --engine spark`)."""
    return lambda old, new, graph: _spark_change(settings, old, new, graph, spark)


def _spark_change(settings: Settings, old: Path, new: Path, graph: str, spark: Any) -> GraphChange | None:
    """The change of `graph` from `old` to `new`, diffed on Spark; None if there is none."""
    from lucid_hub.diff.spark import SparkDiffEngine, console_progress, spark_session

    session = spark or spark_session(settings.spark_master, settings.spark_settings(),
                                     ship_package=settings.spark_ship_package)
    engine = SparkDiffEngine(session, settings.canon_timeout, settings.canon_memory_mb, progress=console_progress())
    try:
        changes = engine.diff_files(old, new, default_graph=graph)
    finally:
        if spark is None:  # ours: stop it cleanly (its workers would complain at exit)
            engine.stop()
    other = [c.graph for c in changes if c.graph != graph]
    if other:
        raise InputError(f"{new}: holds other graphs than <{graph}> (e.g. <{other[0]}>)")
    return changes[0] if changes else None


def _report(echo: Callable[[str], None], graph: str, patch: Patch | None, started: float) -> None:
    if patch is None:
        echo(f"no changes: <{graph}> already has this content")
    else:
        echo(f"published {patch.id} (-{len(patch.removed)} +{len(patch.added)} MSGs) "
             f"in {time.monotonic() - started:.1f} s")


def spark_publish_main(argv: list[str] | None = None) -> int:
    """spark-submit entry point: publish FILE as the new version of a graph at a running hub,
    diffed on the cluster spark-submit gives (see spark_publish.py)."""
    import argparse

    from lucid_hub.diff.spark import spark_session

    parser = argparse.ArgumentParser(prog="lucid_hub.commands.spark_publish", description=spark_publish_main.__doc__)
    parser.add_argument("file", type=Path)
    parser.add_argument("--graph", required=True, help="IRI of the graph FILE's content replaces")
    parser.add_argument("--hub", required=True, help="URL of the running hub")
    parser.add_argument("--message", default="", help="patch message")
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()
        session = spark_session(None, settings.spark_settings(),  # the master is spark-submit's
                                ship_package=settings.spark_ship_package)
        try:
            with Canonicalizer(settings.canon_timeout, settings.canon_memory_mb) as canonicalizer:
                publish_file(settings, args.file, args.graph, author="", message=args.message, hub_url=args.hub,
                             fmt=None, canonicalizer=canonicalizer, echo=print, engine="spark", spark=session)
        finally:
            session.stop()
    except LucidError as exc:
        print(f"lucid-hub: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    return 0
