"""The Spark diff engine, for bulk snapshots: the same changes as the local engine
(byte-identical patches), computed on executors.

Nothing but the changes reaches the driver: lines are parsed on executors; ground triples
are diffed with one shuffle (tagged union, group-by); blank-node triples are grouped into
MSGs by connected components (iterative min-label propagation with DataFrames, checkpointed);
each MSG is canonicalised on the executors by the same `lucid_hub.rdf` code the local
engine uses; the MSG multisets of both versions are differenced with one more group-by.
Run in process (`local[*]` by default) or as a job on any Spark master (spark-submit of
`lucid_hub/diff/spark_job.py`, see docs/spark.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyoxigraph as ox

from lucid_hub import errors
from lucid_hub.diff import GraphChange
from lucid_hub.errors import InputError, LucidError, RdfSyntaxError, UnsupportedRdfError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import Msg, by_hash, msg_hash
from lucid_hub.rdf.syntax import has_triple_term

LINE_SUFFIXES = (".nt", ".nq", ".nt.gz", ".nq.gz")
# Label propagation checkpoints its lineage this often (iterations), or plans grow without bound.
CHECKPOINT_EVERY = 4
_ERROR = re.compile(r"lucid_hub\.errors\.(\w+): (.+)")


def spark_session(master: str | None = "local[*]", conf: dict[str, str] | None = None) -> Any:
    """A SparkSession for diff jobs: `master` and `spark.*` settings pass through.

    `master=None` leaves the master to spark-submit (settings made in code would win over it).
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("lucid-hub diff")
    if master is not None:
        builder = builder.master(master)
    settings = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "8",
                "spark.ui.showConsoleProgress": "true", **(conf or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def input_files(path: Path) -> list[Path]:
    """The N-Triples/N-Quads files of a snapshot: the file itself, or those in a directory."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(LINE_SUFFIXES))
        if not files:
            raise InputError(f"{path}: no .nt or .nq files in the directory")
        return files
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    if not path.name.lower().endswith(LINE_SUFFIXES):
        raise InputError(f"{path}: the Spark engine reads N-Triples or N-Quads (.nt, .nq, optionally .gz)")
    return [path]


# --- executor side: module-level functions, pickled by reference -------------------------

@lru_cache(maxsize=4)
def _canonicalizer(timeout: float, memory_mb: int) -> Canonicalizer:
    return Canonicalizer(timeout, memory_mb)  # one per Python worker, reused across tasks


def _parse_partition(rows: Iterable[tuple[str, int]], side: str, file_id: int, file_name: str,
                     default_graph: str | None) -> Iterator[tuple[str, str, str, str | None, str | None]]:
    """(side, graph, statement, node, other node) per quad; nodes are file-scoped blank nodes."""
    rows = list(rows)
    if not rows:
        return
    try:
        quads = list(ox.parse("\n".join(line for line, _ in rows) + "\n", format=ox.RdfFormat.N_QUADS))
    except SyntaxError as exc:
        row = rows[min(max((exc.lineno or 1) - 1, 0), len(rows) - 1)]
        message = re.sub(r"(between )?(at )?line \d+( column \d+)?( and line \d+( column \d+)?)?", "", str(exc.msg))
        raise RdfSyntaxError(f"{file_name}: line {row[1] + 1}: {' '.join(message.split()).strip(': ')}") from None
    for q in quads:
        if has_triple_term(q):
            raise UnsupportedRdfError(f"{file_name}: triple terms (RDF-star / RDF 1.2) are not supported: {q}")
        g = q.graph_name
        if type(g) is ox.NamedNode:
            graph, statement = g.value, str(q.triple)
        elif type(g) is ox.DefaultGraph:
            if default_graph is None:
                raise UnsupportedRdfError(f"{file_name}: holds triples outside a named graph; name their graph")
            graph, statement = default_graph, str(q)
        else:
            raise UnsupportedRdfError(
                f"{file_name}: graph {g} is named by a blank node; a published graph needs an IRI")
        nodes: list[str] = []
        if "_:" in statement:
            # Blank-node labels are scoped to one document and, for publishing, to one graph.
            scope = f"{side}{file_id}|{graph}|"
            nodes = [scope + t.value for t in (q.subject, q.object) if type(t) is ox.BlankNode]
        yield side, graph, statement, nodes[0] if nodes else None, nodes[1] if len(nodes) > 1 else None


def _canonical(row: tuple[tuple[str, str], list[str]], timeout: float, memory_mb: int) -> tuple[str, str, str, str]:
    """(side, graph, MSG hash, canonical form) of one blank-node component, on an executor."""
    (side, graph), statements = row
    text = _canonicalizer(timeout, memory_mb).canonicalize(statements)
    return side, graph, msg_hash(text), text


# --- driver side ------------------------------------------------------------------------

class SparkDiffEngine:
    """Diffs two snapshots (N-Triples/N-Quads files or directories, optionally gzipped)."""

    def __init__(self, spark: Any, canon_timeout: float = 5.0, canon_memory_mb: int = 2048,
                 checkpoint_dir: str | None = None) -> None:
        self.spark = spark
        self.canon_timeout = canon_timeout
        self.canon_memory_mb = canon_memory_mb
        if checkpoint_dir:
            spark.sparkContext.setCheckpointDir(checkpoint_dir)

    def diff_files(self, old: Path, new: Path, *, default_graph: str | None = None,
                   fmt: str | None = None) -> list[GraphChange]:
        if fmt is not None and fmt.lower() not in ("nt", "nq", "ntriples", "nquads"):
            raise InputError("the Spark engine reads N-Triples or N-Quads")
        try:
            return self._diff(input_files(old), input_files(new), default_graph)
        except LucidError:
            raise
        except Exception as exc:  # a worker's error arrives wrapped in the JVM's; unwrap ours
            raise _unwrap(exc) from None

    def _quads(self, side: str, files: list[Path], default_graph: str | None) -> Any:
        sc = self.spark.sparkContext
        parts = []
        for file_id, path in enumerate(files):
            name = str(path)
            lines = sc.textFile(str(path)).zipWithIndex()
            parts.append(lines.mapPartitions(
                lambda rows, s=side, i=file_id, n=name: _parse_partition(rows, s, i, n, default_graph)))
        return sc.union(parts)

    def _diff(self, old: list[Path], new: list[Path], default_graph: str | None) -> list[GraphChange]:
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType, StructField, StructType

        schema = StructType([StructField(c, StringType(), nullable) for c, nullable in
                             (("side", False), ("graph", False), ("stmt", False), ("a", True), ("b", True))])
        rows = self._quads("o", old, default_graph).union(self._quads("n", new, default_graph))
        quads = self.spark.createDataFrame(rows, schema).persist()
        try:
            ground = self._ground_changes(quads, F)
            blank = self._blank_changes(quads, F)
        finally:
            quads.unpersist()
        removed: dict[str, list[Msg]] = {}
        added: dict[str, list[Msg]] = {}
        for graph, digest, text, in_old, times in ground + blank:
            (removed if in_old else added).setdefault(graph, []).extend([Msg(digest, text)] * times)
        return [GraphChange(g, tuple(by_hash(removed.get(g, []))), tuple(by_hash(added.get(g, []))))
                for g in sorted(removed.keys() | added.keys())]

    @staticmethod
    def _ground_changes(quads: Any, F: Any) -> list[tuple[str, str, str, bool, int]]:
        """Ground triples in one version only (a graph is a set: each counts once), hashed on
        the executors: Spark's sha2 of the UTF-8 line is the MSG hash of a ground triple."""
        ground = quads.where(F.col("a").isNull()).select("side", "graph", "stmt").distinct()
        tagged = ground.groupBy("graph", "stmt").agg(
            F.max((F.col("side") == "o").cast("int")).alias("o"), F.max((F.col("side") == "n").cast("int")).alias("n"))
        changed = tagged.where(F.col("o") != F.col("n")).withColumn(
            "line", F.concat(F.col("stmt"), F.lit(" .\n"))).withColumn("hash", F.sha2(F.col("line"), 256))
        return [(r.graph, r.hash, r.line, bool(r.o), 1) for r in changed.collect()]

    def _blank_changes(self, quads: Any, F: Any) -> list[tuple[str, str, str, bool, int]]:
        """Blank-node MSGs whose counts differ between the versions (a multiset)."""
        blank = quads.where(F.col("a").isNotNull()).distinct()
        components = self._components(blank, F)
        grouped = (blank.join(components, blank.a == components.node)
                   .groupBy("side", "graph", "comp").agg(F.collect_list("stmt").alias("stmts")))
        timeout, memory = self.canon_timeout, self.canon_memory_mb
        canonical = grouped.rdd.map(lambda r: _canonical(((r.side, r.graph), list(r.stmts)), timeout, memory))
        msgs = self.spark.createDataFrame(canonical, "side string, graph string, hash string, text string")
        counts = msgs.groupBy("graph", "hash", "text").agg(
            F.sum((F.col("side") == "o").cast("int")).alias("o"), F.sum((F.col("side") == "n").cast("int")).alias("n"))
        out = []
        for r in counts.where(F.col("o") != F.col("n")).collect():
            out.append((r.graph, r.hash, r.text, r.o > r.n, abs(r.o - r.n)))
        return out

    def _components(self, blank: Any, F: Any) -> Any:
        """(node, comp): each blank node and the smallest node id of its connected component."""
        edges = blank.where(F.col("b").isNotNull() & (F.col("a") != F.col("b"))).select(
            F.col("a").alias("src"), F.col("b").alias("dst"))
        edges = edges.union(edges.select(F.col("dst").alias("src"), F.col("src").alias("dst"))).distinct().persist()
        nodes = blank.select(F.col("a").alias("node")).union(
            blank.where(F.col("b").isNotNull()).select(F.col("b").alias("node"))).distinct()
        comp = nodes.select("node", F.col("node").alias("comp")).localCheckpoint()
        iteration = 0
        while True:
            iteration += 1
            neighbour = (edges.join(comp, edges.dst == comp.node)
                         .groupBy(edges.src).agg(F.min("comp").alias("ncomp")))
            updated = (comp.join(neighbour, comp.node == neighbour.src, "left")
                       .select("node", F.least("comp", F.coalesce("ncomp", "comp")).alias("comp")))
            updated = updated.localCheckpoint() if iteration % CHECKPOINT_EVERY == 0 else updated.persist()
            changed = updated.join(comp.withColumnRenamed("comp", "old"), "node").where(
                F.col("comp") != F.col("old")).limit(1).count()
            comp = updated
            if changed == 0:
                edges.unpersist()
                return comp


def _unwrap(exc: Exception) -> LucidError:
    """The lucid-hub error a Spark worker raised, from the text of the wrapping exception."""
    found = _ERROR.findall(str(exc))
    if found:
        name, message = found[-1]
        cls = getattr(errors, name, LucidError)
        if isinstance(cls, type) and issubclass(cls, LucidError):
            return cls(message.strip())
    first = " ".join(str(exc).split())[:300]
    return LucidError(f"the Spark job failed: {first}")


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point: diff two snapshots, write one unsigned patch per changed graph.

    The hub signs patches when it publishes them; the cluster never holds its key.
    """
    import argparse
    import sys

    from lucid_hub.rdf.rdfpatch import write_rdf_patch

    parser = argparse.ArgumentParser(prog="lucid_hub.diff.spark", description=main.__doc__)
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--graph", help="graph of default-graph triples")
    parser.add_argument("--out", type=Path, help="directory for the patches (default: standard output)")
    parser.add_argument("--master", help="Spark master (default: spark-submit's)")
    args = parser.parse_args(argv)
    spark = spark_session(args.master)
    try:
        changes = SparkDiffEngine(spark).diff_files(args.old, args.new, default_graph=args.graph)
    except LucidError as exc:
        print(f"lucid-hub: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    for n, change in enumerate(changes):
        body = write_rdf_patch(change.to_patch(None))
        if args.out is None:
            sys.stdout.buffer.write(body)
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{n:05d}.rdfp").write_bytes(body)
    return 0

