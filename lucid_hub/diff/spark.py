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

import gzip
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any, TextIO

import pyoxigraph as ox

from lucid_hub import errors
from lucid_hub.diff import GraphChange
from lucid_hub.errors import InputError, LucidError, RdfSyntaxError, UnsupportedRdfError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import Msg, by_hash, msg_hash, unnamed_graph_statement
from lucid_hub.rdf.syntax import has_triple_term

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
LINE_SUFFIXES = (".nt", ".nq", ".nt.gz", ".nq.gz")
_ERROR = re.compile(r"lucid_hub\.errors\.(\w+): (.+)")
_RAISED = re.compile(r"^((?:\w+\.)*\w*(?:Error|Exception): .+)$", re.M)


def spark_session(master: str | None = "local[*]", conf: dict[str, str] | None = None, *,
                  ship_package: bool = True) -> Any:
    """A SparkSession for diff jobs: `master` and `spark.*` settings pass through. On a
    cluster the package travels with the jobs (`ship_package`, LUCID_SPARK_SHIP_PACKAGE).

    `master=None` leaves the master to spark-submit (settings made in code would win over it).
    The JVM logs errors only (no INFO/WARN chatter on the CLI's stderr) and Spark's console
    bar is off: `SparkProgress` reports instead.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("lucid-hub diff")
    if master is not None:
        builder = builder.master(master)
    settings = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "8",
                "spark.ui.showConsoleProgress": "false",
                # Even tasks on a few cores (the default 128 MB splits a 140 MB file 128 + 12).
                "spark.sql.files.maxPartitionBytes": str(32 * 1024 * 1024), **(conf or {})}
    if master is not None and master.startswith("local") and not os.environ.get("PYSPARK_PYTHON"):
        # Local workers run this interpreter (Spark's default is `python3` on PATH, which in a
        # venv that is not activated lacks the hub's packages: "No module named 'pyoxigraph'").
        # PySpark's context reads only the variable (spark.pyspark.python is spark-submit's).
        settings.setdefault("spark.pyspark.python", sys.executable)
        os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    log_config = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
    java_options = settings.get("spark.driver.extraJavaOptions", "")
    if "log4j2.configurationFile" not in java_options:
        settings["spark.driver.extraJavaOptions"] = f"{java_options} {log_config}".strip()
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")  # also when an existing JVM had another config
    if ship_package:
        from lucid_hub.diff.shipping import ship

        ship(spark)  # executors need not have lucid-hub installed (docs/spark.md)
    return spark


class SparkProgress:
    """Reports the running Spark stages every `interval` seconds, from a driver thread:
    `report` gets one line such as "stage 3 (groupBy): 14/32 tasks, 2 running"."""

    def __init__(self, spark: Any, report: Callable[[str], None], interval: float = 1.0) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._report = report
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spark-progress", daemon=True)
        self._reported = False
        self.phase = ""  # what the job does now, set by the engine

    def __enter__(self) -> SparkProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._reported:
            self._report("")  # the end: a console reporter clears its line

    def line(self) -> str | None:
        """The current progress line, or None when no stage runs."""
        parts = [self.phase] if self.phase else []
        for stage_id in sorted(self._tracker.getActiveStageIds()):
            info = self._tracker.getStageInfo(stage_id)
            if info is not None:
                parts.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks, "
                             f"{info.numActiveTasks} running")
        return "; ".join(parts) if len(parts) > bool(self.phase) else None

    def _run(self) -> None:
        last = None
        while not self._stop.wait(self._interval):
            try:
                text = self.line()
            except Exception:  # the JVM is going away (job ended or failed): nothing to report
                return
            if text and text != last:
                self._report(text)
                self._reported = True
                last = text


def console_progress(stream: TextIO | None = None, every: float = 10.0) -> Callable[[str], None]:
    """A `SparkProgress` reporter for a terminal (one line, rewritten in place) or a log
    (a line at most every `every` seconds). An empty text ends the progress display."""
    out = stream or sys.stderr
    tty = out.isatty()
    last = [-every]

    def report(text: str) -> None:
        if tty:
            out.write(f"\r\033[K{'spark: ' + text[:200] if text else ''}")
            out.flush()
        elif text and time.monotonic() - last[0] >= every:
            out.write(f"lucid-hub: spark: {text}\n")
            out.flush()
            last[0] = time.monotonic()

    return report


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


def _scoped_parse(batches: Iterable[Any], side: str, default_graph: str | None) -> Iterator[Any]:
    """mapInArrow: lines (with their file) in; (graph, stmt, a, b) per quad out, where a and b
    are the quad's blank nodes scoped to their side, file and graph (labels are document-scoped)."""
    import pyarrow as pa

    for batch in batches:
        lines, files = batch.column(0).to_pylist(), batch.column(1).to_pylist()
        graphs: list[str] = []
        stmts: list[str] = []
        a_col: list[str | None] = []
        b_col: list[str | None] = []
        start = 0
        while start < len(lines):  # a batch may span files: parse each file's run of lines
            name = files[start]
            end = start + 1
            while end < len(lines) and files[end] == name:
                end += 1
            _parse_lines(lines[start:end], f"{side}{name}|", name, default_graph, graphs, stmts, a_col, b_col)
            start = end
        yield pa.RecordBatch.from_arrays(
            [pa.array(graphs, pa.string()), pa.array(stmts, pa.string()),
             pa.array(a_col, pa.string()), pa.array(b_col, pa.string())],
            names=["graph", "stmt", "a", "b"])


def _parse_lines(lines: list[str], scope: str, file_name: str, default_graph: str | None, graphs: list[str],
                 stmts: list[str], a_col: list[str | None], b_col: list[str | None]) -> None:
    try:
        quads = ox.parse("\n".join(lines) + "\n", format=ox.RdfFormat.N_QUADS)
        for q in quads:
            g = q.graph_name
            if type(g) is ox.NamedNode:
                graph, statement = g.value, str(q.triple)
            else:
                graph, statement = unnamed_graph_statement(q, default_graph, _path(file_name))
            graphs.append(graph)
            stmts.append(statement)
            if "_:" in statement or "<<(" in statement:
                if has_triple_term(q):
                    raise UnsupportedRdfError(
                        f"{_path(file_name)}: triple terms (RDF-star / RDF 1.2) are not supported: {q}")
                nodes = [f"{scope}{graph}|{t.value}" for t in (q.subject, q.object) if type(t) is ox.BlankNode]
                a_col.append(nodes[0] if nodes else None)
                b_col.append(nodes[1] if len(nodes) > 1 else None)
            else:
                a_col.append(None)
                b_col.append(None)
    except SyntaxError as exc:
        # The line number within the whole file is found on the driver (only on failure):
        # counting lines on the way would cost the job a pass over the input.
        line = lines[min(max((exc.lineno or 1) - 1, 0), len(lines) - 1)]
        raise RdfSyntaxError(f"{_path(file_name)}: {_syntax_message(exc)}{_LINE_MARK}{line[:500]}") from None


_LINE_MARK = " @@line: "


def _path(uri: str) -> str:
    return uri.removeprefix("file://")


def _syntax_message(exc: SyntaxError) -> str:
    message = re.sub(r"(between )?(at )?line \d+( column \d+)?( and line \d+( column \d+)?)?", "", str(exc.msg))
    return " ".join(message.split()).strip(": ")


def _locate(error: LucidError) -> LucidError:
    """Replace the offending line's text in a syntax error by its number in the file."""
    text = str(error)
    if _LINE_MARK not in text:
        return error
    head, line = text.split(_LINE_MARK, 1)
    path, message = head.split(": ", 1)
    number = None
    opener: Any = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace", newline="\n") as fh:
            for n, candidate in enumerate(fh, 1):
                if candidate.rstrip("\r\n")[:500] == line:
                    number = n
                    break
    except OSError:
        pass
    where = f"line {number}" if number else f"the line {line[:80]!r}"
    return type(error)(f"{path}: {where}: {message}")


def _canonical_batches(batches: Iterable[Any], timeout: float, memory_mb: int) -> Iterator[Any]:
    """mapInArrow: (side, graph, statements) of each blank-node component in; (side, graph,
    MSG hash, canonical form) out, canonicalised on the executor."""
    import pyarrow as pa

    canonicalizer = _canonicalizer(timeout, memory_mb)
    for batch in batches:
        texts = [canonicalizer.canonicalize(statements) for statements in batch.column(2).to_pylist()]
        yield pa.RecordBatch.from_arrays(
            [batch.column(0), batch.column(1), pa.array([msg_hash(t) for t in texts], pa.string()),
             pa.array(texts, pa.string())], names=["side", "graph", "hash", "text"])


# --- driver side ------------------------------------------------------------------------

class SparkDiffEngine:
    """Diffs two snapshots (N-Triples/N-Quads files or directories, optionally gzipped)."""

    def __init__(self, spark: Any, canon_timeout: float = 5.0, canon_memory_mb: int = 2048,
                 checkpoint_dir: str | None = None, progress: Callable[[str], None] | None = None) -> None:
        self.spark = spark
        self.progress = progress
        self._watch: SparkProgress | None = None
        self.rounds = 0  # label propagation rounds of the last job (0: no blank-node edges)
        self.canon_timeout = canon_timeout
        self.canon_memory_mb = canon_memory_mb
        if checkpoint_dir:
            spark.sparkContext.setCheckpointDir(checkpoint_dir)

    def diff_files(self, old: Path, new: Path, *, default_graph: str | None = None,
                   fmt: str | None = None) -> list[GraphChange]:
        if fmt is not None and fmt.lower() not in ("nt", "nq", "ntriples", "nquads"):
            raise InputError("the Spark engine reads N-Triples or N-Quads")
        old_files, new_files = input_files(old), input_files(new)
        try:
            if self.progress is None:
                return self._diff(old_files, new_files, default_graph)
            with SparkProgress(self.spark, self.progress) as self._watch:
                return self._diff(old_files, new_files, default_graph)
        except LucidError as exc:
            raise _locate(exc) from None
        except Exception as exc:  # a worker's error arrives wrapped in the JVM's; unwrap ours
            raise _locate(_unwrap(exc)) from None

    def stop(self) -> None:
        """Stop the Spark session (its JVM and Python workers), e.g. before the process exits."""
        self.spark.stop()

    def _phase(self, name: str) -> None:
        """Name what the next Spark jobs do: in the progress line and Spark's UI."""
        self.spark.sparkContext.setJobDescription(f"lucid-hub diff: {name}")
        if self._watch is not None:
            self._watch.phase = name

    def _quads(self, side: str, files: list[Path], default_graph: str | None) -> Any:
        """(graph, stmt, a, b) per quad of one snapshot, parsed on the executors."""
        from pyspark.sql import functions as F

        lines = self.spark.read.text([str(p) for p in files]).select("value", F.input_file_name().alias("file"))
        return lines.mapInArrow(lambda batches: _scoped_parse(batches, side, default_graph),
                                "graph string, stmt string, a string, b string")

    def _diff(self, old: list[Path], new: list[Path], default_graph: str | None) -> list[GraphChange]:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        tagged = [self._quads(side, files, default_graph).withColumn("side", F.lit(side))
                  for side, files in (("o", old), ("n", new))]
        # One shuffle for everything: a ground statement's key is the same in both versions,
        # so its group says which versions hold it; a blank-node statement's key holds its
        # side-scoped nodes, so its group is one statement of one version (duplicates merged).
        grouped = tagged[0].unionByName(tagged[1]).groupBy("graph", "stmt", "a", "b").agg(
            F.max((F.col("side") == "o").cast("int")).alias("o"),
            F.max((F.col("side") == "n").cast("int")).alias("n"))
        kept = grouped.where(F.col("a").isNotNull() | (F.col("o") != F.col("n"))).persist(
            StorageLevel.MEMORY_AND_DISK)
        try:
            self._phase("parsing both snapshots, diffing ground triples")
            ground = self._ground_changes(kept.where(F.col("a").isNull()), F)
            blank = self._blank_changes(kept.where(F.col("a").isNotNull()).withColumn(
                "side", F.when(F.col("o") == 1, "o").otherwise("n")), F)
        finally:
            kept.unpersist()
        removed: dict[str, list[Msg]] = {}
        added: dict[str, list[Msg]] = {}
        for graph, digest, text, in_old, times in ground + blank:
            (removed if in_old else added).setdefault(graph, []).extend([Msg(digest, text)] * times)
        return [GraphChange(g, tuple(by_hash(removed.get(g, []))), tuple(by_hash(added.get(g, []))))
                for g in sorted(removed.keys() | added.keys())]

    @staticmethod
    def _ground_changes(changed: Any, F: Any) -> list[tuple[str, str, str, bool, int]]:
        """Ground triples in one version only, hashed on the executors: Spark's sha2 of the
        UTF-8 line is the MSG hash of a ground triple."""
        lines = changed.withColumn("line", F.concat(F.col("stmt"), F.lit(" .\n"))).withColumn(
            "hash", F.sha2(F.col("line"), 256))
        return [(r.graph, r.hash, r.line, bool(r.o), 1) for r in lines.select("graph", "hash", "line", "o").collect()]

    def _blank_changes(self, blank: Any, F: Any) -> list[tuple[str, str, str, bool, int]]:
        """Blank-node MSGs whose counts differ between the versions (a multiset)."""
        self._phase("blank-node MSGs: connected components")
        components = self._components(blank, F)
        grouped = (blank.join(components, blank.a == components.node)
                   .groupBy("side", "graph", "comp").agg(F.collect_list("stmt").alias("stmts"))
                   .select("side", "graph", "stmts"))
        timeout, memory = self.canon_timeout, self.canon_memory_mb
        msgs = grouped.mapInArrow(lambda batches: _canonical_batches(batches, timeout, memory),
                                  "side string, graph string, hash string, text string")
        counts = msgs.groupBy("graph", "hash", "text").agg(
            F.sum((F.col("side") == "o").cast("int")).alias("o"), F.sum((F.col("side") == "n").cast("int")).alias("n"))
        self._phase("blank-node MSGs: canonicalising, diffing")
        out = []
        for r in counts.where(F.col("o") != F.col("n")).collect():
            out.append((r.graph, r.hash, r.text, r.o > r.n, abs(r.o - r.n)))
        return out

    def _components(self, blank: Any, F: Any) -> Any:
        """(node, comp): each blank node and the smallest node id of its connected component."""
        edges = blank.where(F.col("b").isNotNull() & (F.col("a") != F.col("b"))).select(
            F.col("a").alias("src"), F.col("b").alias("dst"))
        nodes = blank.select(F.col("a").alias("node")).union(
            blank.where(F.col("b").isNotNull()).select(F.col("b").alias("node"))).distinct()
        self.rounds = 0
        if edges.limit(1).count() == 0:  # no triple joins two blank nodes: each is its own MSG
            return nodes.select("node", F.col("node").alias("comp"))
        edges = edges.union(edges.select(F.col("dst").alias("src"), F.col("src").alias("dst"))).distinct().persist()
        comp = nodes.select("node", F.col("node").alias("comp")).localCheckpoint()
        self.rounds = 0
        while True:
            self.rounds += 1
            neighbour = (edges.join(comp, edges.dst == comp.node)
                         .groupBy(edges.src).agg(F.min("comp").alias("ncomp")))
            spread = (comp.join(neighbour, comp.node == neighbour.src, "left")
                      .select("node", F.least("comp", F.coalesce("ncomp", "comp")).alias("comp")))
            # Pointer jumping: take the label of your label too. Labels stay nodes of the same
            # component, and a chain of n nodes (a long RDF list) settles in O(log n) rounds
            # instead of n.
            u, v = spread.alias("u"), spread.alias("v")
            updated = u.join(v, F.col("u.comp") == F.col("v.node")).select(
                F.col("u.node").alias("node"), F.least(F.col("u.comp"), F.col("v.comp")).alias("comp"))
            # Materialised every round: the lineage stops here, so the previous round's labels
            # can be dropped (unpersisting them under a lazily persisted successor broke it).
            updated = updated.localCheckpoint()
            changed = updated.join(comp.withColumnRenamed("comp", "old"), "node").where(
                F.col("comp") != F.col("old")).limit(1).count()
            comp.unpersist()
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
    text = str(exc)
    # A Python worker's traceback ends with its exception's own line ("ModuleNotFoundError: No
    # module named 'lucid_hub'"): that line says what failed, the frames before it do not.
    raised = [line for line in _RAISED.findall(text) if not line.startswith(("org.", "java.", "scala.", "py4j."))]
    if raised:
        return LucidError(f"the Spark job failed on an executor: {raised[-1].strip()[:300]}")
    first = " ".join(text.split())[:300]
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
    from lucid_hub.config import Settings

    spark = spark_session(args.master, ship_package=Settings.from_env().spark_ship_package)
    try:
        engine = SparkDiffEngine(spark, progress=console_progress())
        changes = engine.diff_files(args.old, args.new, default_graph=args.graph)
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

