"""The Spark engine gives the same changes, and byte-identical patches, as the local engine.

Real Spark in local mode, one session for the whole test run.
"""

from __future__ import annotations

import gzip
from datetime import UTC, datetime
from pathlib import Path

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings

from lucid_hub.diff.local import LocalDiffEngine
from lucid_hub.diff.spark import SparkDiffEngine
from lucid_hub.errors import CanonicalizationLimitExceeded, RdfSyntaxError, UnsupportedRdfError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.rdfpatch import write_rdf_patch
from tests.rdf.test_properties import graphs

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]  # one JVM at a time (conftest.XDIST_GROUPS)
WHEN = datetime(2026, 6, 1, tzinfo=UTC)
XSD = "http://www.w3.org/2001/XMLSchema#"
OLD = (f'<http://ex/s> <http://ex/p> "01"^^<{XSD}integer> <http://ex/g1> .\n'
       '<http://ex/s> <http://ex/q> _:x <http://ex/g1> .\n_:x <http://ex/v> "a \\"quoted\\"\\nline" <http://ex/g1> .\n'
       '<http://ex/a> <http://ex/p> _:y <http://ex/g2> .\n<http://ex/a> <http://ex/p> _:z <http://ex/g2> .\n'
       '<http://ex/k> <http://ex/p> "unchanged" <http://ex/g4> .\n'
       '_:l1 <http://www.w3.org/1999/02/22-rdf-syntax-ns#first> "x"@de <http://ex/g2> .\n'
       '_:l1 <http://www.w3.org/1999/02/22-rdf-syntax-ns#rest> _:l2 <http://ex/g2> .\n'
       '_:l2 <http://www.w3.org/1999/02/22-rdf-syntax-ns#first> "ünï" <http://ex/g2> .\n'
       '_:l2 <http://www.w3.org/1999/02/22-rdf-syntax-ns#rest> <http://www.w3.org/1999/02/22-rdf-syntax-ns#nil> <http://ex/g2> .\n')
NEW = (f'<http://ex/s> <http://ex/p> "1"^^<{XSD}integer> <http://ex/g1> .\n'
       '<http://ex/s> <http://ex/q> _:other <http://ex/g1> .\n_:other <http://ex/v> "a \\"quoted\\"\\nline" <http://ex/g1> .\n'
       '<http://ex/a> <http://ex/p> _:y <http://ex/g2> .\n'
       '<http://ex/k> <http://ex/p> "unchanged" <http://ex/g4> .\n'
       '<http://ex/n> <http://ex/p> _:m <http://ex/g3> .\n')


def both(spark, old: Path, new: Path, canonicalizer: Canonicalizer, **kwargs):  # type: ignore[no-untyped-def]
    remote = SparkDiffEngine(spark).diff_files(old, new, **kwargs)
    local = LocalDiffEngine(canonicalizer).diff_files(old, new, **kwargs)
    return remote, local


def test_multi_graph_snapshot_gives_byte_identical_patches(spark, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                           canonicalizer: Canonicalizer) -> None:
    (tmp_path / "old.nq").write_text(OLD)
    (tmp_path / "new.nq").write_text(NEW)
    remote, local = both(spark, tmp_path / "old.nq", tmp_path / "new.nq", canonicalizer)
    assert [c.graph for c in remote] == ["http://ex/g1", "http://ex/g2", "http://ex/g3"]  # g4 unchanged: no patch
    assert remote == local
    for a, b in zip(remote, local, strict=True):
        assert write_rdf_patch(a.to_patch(None, created=WHEN)) == write_rdf_patch(b.to_patch(None, created=WHEN))


def test_gzip_and_non_lean_duplicates(spark, tmp_path: Path, canonicalizer: Canonicalizer) -> None:  # type: ignore[no-untyped-def]
    old = '<http://ex/a> <http://ex/p> _:x .\n<http://ex/a> <http://ex/p> _:y .\n<http://ex/a> <http://ex/p> _:w .\n'
    new = '<http://ex/a> <http://ex/p> _:q .\n<http://ex/b> <http://ex/p> "1" .\n<http://ex/b> <http://ex/p> "1" .\n'
    (tmp_path / "old.nt.gz").write_bytes(gzip.compress(old.encode()))
    (tmp_path / "new.nt").write_text(new)
    remote, local = both(spark, tmp_path / "old.nt.gz", tmp_path / "new.nt", canonicalizer, default_graph="http://ex/g")
    (change,) = remote
    assert len(change.removed) == 2 and len(change.added) == 1  # 3 -> 1 copies of one MSG; one ground triple
    assert remote == local


def test_directory_snapshots_scope_blank_nodes_per_file(spark, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        canonicalizer: Canonicalizer) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    (tmp_path / "old" / "part1.nt").write_text('<http://ex/a> <http://ex/p> _:b .\n_:b <http://ex/v> "1" .\n')
    (tmp_path / "old" / "part2.nt").write_text('<http://ex/c> <http://ex/p> _:b .\n_:b <http://ex/v> "2" .\n')
    (tmp_path / "new" / "all.nt").write_text('<http://ex/a> <http://ex/p> _:b1 .\n_:b1 <http://ex/v> "1" .\n'
                                             '<http://ex/c> <http://ex/p> _:b2 .\n_:b2 <http://ex/v> "2" .\n')
    remote = SparkDiffEngine(spark).diff_files(tmp_path / "old", tmp_path / "new", default_graph="http://ex/g")
    assert remote == []  # the same two MSGs: _:b of part1 and _:b of part2 are different nodes


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=graphs(), b=graphs())
def test_engines_agree_on_random_graphs(spark, tmp_path_factory: pytest.TempPathFactory,  # type: ignore[no-untyped-def]
                                        canonicalizer: Canonicalizer, a: list[ox.Quad], b: list[ox.Quad]) -> None:
    directory = tmp_path_factory.mktemp("random")
    (directory / "a.nt").write_bytes(ox.serialize(a, format=ox.RdfFormat.N_QUADS) or b"")
    (directory / "b.nt").write_bytes(ox.serialize(b, format=ox.RdfFormat.N_QUADS) or b"")
    remote, local = both(spark, directory / "a.nt", directory / "b.nt", canonicalizer, default_graph="http://ex/g")
    assert remote == local


def test_malformed_line_is_reported_with_file_and_line(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "old.nt").write_text('<http://ex/a> <http://ex/p> "1" .\n')
    (tmp_path / "new.nt").write_text('<http://ex/a> <http://ex/p> "1" .\n<http://ex/a> <http://ex/p> "2" .\n'
                                     '<http://ex/a> <http://ex/p> "broken .\n')
    with pytest.raises(RdfSyntaxError, match=r"new\.nt: line 3"):
        SparkDiffEngine(spark).diff_files(tmp_path / "old.nt", tmp_path / "new.nt", default_graph="http://ex/g")
    with pytest.raises(UnsupportedRdfError, match="name their graph"):
        SparkDiffEngine(spark).diff_files(tmp_path / "old.nt", tmp_path / "old.nt")


def test_pathological_msg_fails_with_the_limit_error_naming_its_size(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    clique = "".join(f"_:e{i} <http://ex/p> _:e{j} .\n" for i in range(10) for j in range(10))
    (tmp_path / "old.nt").write_text("")
    (tmp_path / "new.nt").write_text(clique)
    with pytest.raises(CanonicalizationLimitExceeded, match="10 blank nodes and 100 statements"):
        SparkDiffEngine(spark, canon_timeout=1.0).diff_files(tmp_path / "old.nt", tmp_path / "new.nt",
                                                             default_graph="http://ex/g")


def test_publish_with_the_spark_engine_archives_the_same_patch(spark, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                               canonicalizer: Canonicalizer) -> None:
    from lucid_hub.commands.publish_file import publish_file
    from lucid_hub.config import Settings
    from lucid_hub.diff.local import diff_graph
    from lucid_hub.runtime import Runtime
    from tests.conftest import assert_consistent, parse_nt

    v1 = '<http://ex/a> <http://ex/p> _:x .\n_:x <http://ex/v> "1" .\n<http://ex/b> <http://ex/p> "keep" .\n'
    v2 = '<http://ex/a> <http://ex/p> _:y .\n_:y <http://ex/v> "2" .\n<http://ex/b> <http://ex/p> "keep" .\n'
    (tmp_path / "v1.nt").write_text(v1)
    (tmp_path / "v2.nt").write_text(v2)
    settings = Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data")})
    lines: list[str] = []
    for version in ("v1.nt", "v2.nt"):
        publish_file(settings, tmp_path / version, "http://ex/g", author="a", message="m", hub_url=None, fmt=None,
                     canonicalizer=canonicalizer, echo=lines.append, engine="spark", spark=spark)
    assert any("diffing with Spark" in line for line in lines)
    runtime = Runtime.open(settings)
    try:
        history = runtime.archive.history("http://ex/g")
        assert len(history) == 2
        expected = diff_graph(parse_nt(v1), parse_nt(v2), "http://ex/g", canonicalizer)
        assert (history[1].removed, history[1].added) == (len(expected.removed), len(expected.added)) == (1, 1)
        assert_consistent(runtime)
    finally:
        runtime.close()


def test_spark_submit_runs_the_job_module(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    if not submit.exists():
        pytest.skip(f"the pyspark package has no spark-submit at {submit}")
    (tmp_path / "old.nq").write_text(OLD)
    (tmp_path / "new.nq").write_text(NEW)
    job = Path(__file__).resolve().parents[2] / "lucid_hub" / "diff" / "spark_job.py"
    result = subprocess.run([str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false", str(job),
                             str(tmp_path / "old.nq"), str(tmp_path / "new.nq"), "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable}, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    patches = sorted((tmp_path / "out").glob("*.rdfp"))
    assert [p.read_text().split("\n")[1] for p in patches] == [
        "H graph <http://ex/g1> .", "H graph <http://ex/g2> .", "H graph <http://ex/g3> ."]
    local = run_cli("diff", tmp_path / "old.nq", tmp_path / "new.nq")
    removed_added = [line for line in local.out.splitlines() if line[:2] in ("D ", "A ")]
    assert removed_added == [line for p in patches for line in p.read_text().splitlines() if line[:2] in ("D ", "A ")]


def test_a_failed_spark_publish_publishes_nothing(spark, tmp_path: Path, canonicalizer: Canonicalizer) -> None:  # type: ignore[no-untyped-def]
    from lucid_hub.commands.publish_file import publish_file
    from lucid_hub.config import Settings
    from lucid_hub.runtime import Runtime

    (tmp_path / "v1.nt").write_text('<http://ex/a> <http://ex/p> "1" .\n')
    (tmp_path / "bad.nt").write_text('<http://ex/a> <http://ex/p> "2" .\n<http://ex/a> <http://ex/p> "broken .\n')
    settings = Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data")})
    kwargs = {"author": "a", "message": "m", "hub_url": None, "fmt": None, "canonicalizer": canonicalizer,
              "echo": lambda _line: None, "engine": "spark", "spark": spark}
    publish_file(settings, tmp_path / "v1.nt", "http://ex/g", **kwargs)
    with pytest.raises(RdfSyntaxError, match=r"bad\.nt: line 2"):
        publish_file(settings, tmp_path / "bad.nt", "http://ex/g", **kwargs)
    runtime = Runtime.open(settings)
    try:
        assert len(runtime.archive.history("http://ex/g")) == 1
    finally:
        runtime.close()


def _wait_for_file(path: str, _item: object) -> int:
    """A task that holds its stage open until the test creates `path` (bounded by a deadline)."""
    import os
    import time

    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)  # inside the Spark task: it is what keeps the stage running
    return 1


def test_progress_reports_the_running_stage_with_the_engines_phase(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import threading
    import time
    from functools import partial

    from lucid_hub.diff.spark import SparkProgress

    release = tmp_path / "release"
    lines: list[str] = []
    with SparkProgress(spark, lines.append, interval=0.02) as progress:
        progress.phase = "testing"
        job = threading.Thread(target=lambda: spark.sparkContext.parallelize(range(3), 3).map(
            partial(_wait_for_file, str(release))).sum())
        job.start()
        deadline = time.monotonic() + 60
        while not lines and time.monotonic() < deadline:
            time.sleep(0.02)  # waiting for a condition (a reported line), with a deadline
        release.touch()
        job.join()
    assert lines, "no progress line while a stage was running"
    assert lines[0].startswith("testing; stage ") and "/3 tasks" in lines[0]
    assert lines[-1] == ""  # the end: a console reporter clears its line


def test_console_progress_writes_lines_to_a_log_at_most_every_interval() -> None:
    import io

    from lucid_hub.diff.spark import console_progress

    out = io.StringIO()
    report = console_progress(out, every=3600)
    report("stage 1: 0/4 tasks")
    report("stage 1: 1/4 tasks")  # within the interval: not written
    report("")
    assert out.getvalue() == "lucid-hub: spark: stage 1: 0/4 tasks\n"


def test_cli_reports_a_malformed_snapshot_in_one_line_without_jvm_output(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "old.nt").write_text('<http://ex/a> <http://ex/p> "1" .\n')
    (tmp_path / "new.nt").write_text('<http://ex/a> <http://ex/p> "1" .\n<http://ex/a> <http://ex/p> broken .\n')
    result = run_cli("diff", "--engine", "spark", "--graph", "http://ex/g", "old.nt", "new.nt",
                     env={"LUCID_SPARK_MASTER": "local[1]"})
    assert result.code == 1
    assert result.out == ""
    errors = [line for line in result.err.splitlines() if not line.startswith("lucid-hub: spark: ")]
    # The JVM itself announces its incubator module (Spark 4 on Java 17+); nothing else may come.
    errors = [line for line in errors if not line.startswith("WARNING: Using incubator modules")]
    assert len(errors) == 1, result.err
    assert errors[0].startswith("lucid-hub: error: ") and "new.nt: line 2:" in errors[0]


def test_local_engine_refuses_directories_with_a_pointer_to_spark(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    result = run_cli("diff", "a", "b")
    assert result.code == 1
    assert "is a directory" in result.err and "--engine spark" in result.err


def test_bench_diff_runs_the_baseline_and_an_engine_on_generated_snapshots(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("bench", "diff", "--sizes", "3000,6000", "--engines", "local", "--work", tmp_path / "w")
    assert result.code == 0, result.err
    assert "sort+comm" in result.out and "local  engine" in result.out
    assert "scaling 3,000 -> 6,000 triples" in result.out
    old = (tmp_path / "w" / "snapshot-3000-old.nq").read_text().splitlines()
    new = (tmp_path / "w" / "snapshot-3000-new.nq").read_text().splitlines()
    blank = sum(1 for line in old if "_:" in line)
    assert 0.005 < blank / len(old) < 0.02  # about 1% of triples in blank-node MSGs
    assert 0.002 < len(set(old) ^ set(new)) / 2 / len(old) < 0.01  # about 0.5% changed
    bad = run_cli("bench", "diff", "--sizes", "many")
    assert bad.code == 1 and "--sizes" in bad.err


def test_a_long_rdf_list_settles_in_logarithmic_rounds(spark, tmp_path: Path, canonicalizer: Canonicalizer) -> None:  # type: ignore[no-untyped-def]
    rdf = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
    n = 64
    items = [f'_:l{i} <{rdf}first> "item {i}" .\n_:l{i} <{rdf}rest> {f"_:l{i + 1}" if i + 1 < n else f"<{rdf}nil>"} .\n'
             for i in range(n)]
    (tmp_path / "old.nt").write_text("<http://ex/s> <http://ex/list> _:l0 .\n" + "".join(items))
    (tmp_path / "new.nt").write_text("<http://ex/s> <http://ex/list> _:l0 .\n" + "".join(items[:-1]) +
                                     f'_:l{n - 1} <{rdf}first> "changed" .\n_:l{n - 1} <{rdf}rest> <{rdf}nil> .\n')
    engine = SparkDiffEngine(spark)
    remote = engine.diff_files(tmp_path / "old.nt", tmp_path / "new.nt", default_graph="http://ex/g")
    local = LocalDiffEngine(canonicalizer).diff_files(tmp_path / "old.nt", tmp_path / "new.nt", default_graph="http://ex/g")
    assert remote == local
    assert [(len(c.removed), len(c.added)) for c in remote] == [(1, 1)]  # the whole list is one MSG
    assert 0 < engine.rounds <= 10  # plain propagation would need 65 rounds


def test_a_spark_job_beside_a_running_hub_publishes_through_its_http_api(
        spark, tmp_path: Path, canonicalizer: Canonicalizer, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The Kubernetes Job / SparkApplication path: export over HTTP, diff on Spark, upload the
    change naming the exported version as prev; the hub signs and chains it."""
    from lucid_hub.commands.publish_file import publish_file
    from lucid_hub.errors import AuthenticationError
    from tests.conftest import assert_consistent, running_hub, whole_canonical

    g = "http://ex/g"
    v1 = '<http://ex/a> <http://ex/p> _:x .\n_:x <http://ex/v> "1" .\n<http://ex/b> <http://ex/p> "keep" .\n'
    v2 = ('<http://ex/a> <http://ex/p> _:y .\n_:y <http://ex/v> "2" .\n<http://ex/b> <http://ex/p> "keep" .\n'
          '<http://ex/c> <http://ex/p> "01"^^<http://www.w3.org/2001/XMLSchema#integer> .\n')
    (tmp_path / "v1.nt").write_text(v1)
    (tmp_path / "v2.nt").write_text(v2)
    lines: list[str] = []
    kwargs = {"author": "ignored", "message": "bulk", "fmt": None, "canonicalizer": canonicalizer,
              "echo": lines.append, "engine": "spark", "spark": spark}
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}") as hub:
        settings = hub.runtime.settings
        monkeypatch.delenv("LUCID_ACCESS_TOKEN", raising=False)
        with pytest.raises(AuthenticationError, match="LUCID_ACCESS_TOKEN"):
            publish_file(settings, tmp_path / "v1.nt", g, hub_url=hub.url, **kwargs)
        monkeypatch.setenv("LUCID_ACCESS_TOKEN", hub.token("bulk job", ("lucid-hub-admins",),
                                                           ("graphs:read", "graphs:write")))
        publish_file(settings, tmp_path / "v1.nt", g, hub_url=hub.url, **kwargs)
        first = hub.runtime.archive.head(g)
        publish_file(settings, tmp_path / "v2.nt", g, hub_url=hub.url, **kwargs)
        publish_file(settings, tmp_path / "v2.nt", g, hub_url=hub.url, **kwargs)  # unchanged: no patch
        history = hub.runtime.archive.history(g)
        assert len(history) == 2 and history[1].prev == first
        assert (history[1].removed, history[1].added) == (1, 2)
        assert history[1].author.startswith("bulk job") and history[1].message == "bulk"  # the token's party
        assert whole_canonical(hub.runtime.publisher.content(g)[1]) == whole_canonical(
            [str(q.triple) for q in ox.parse(v2, format=ox.RdfFormat.N_TRIPLES)])
        assert any("exported <http://ex/g> at no version" in line for line in lines)
        assert lines[-1] == "no changes: <http://ex/g> already has this content"
        assert_consistent(hub.runtime)


def test_spark_submit_publishes_to_a_running_hub(tmp_path: Path) -> None:
    """What the chart's SparkApplication runs: spark-submit of spark_publish.py, the master
    spark-submit's, the hub's client credentials from the environment."""
    import os
    import subprocess
    import sys

    import pyspark

    from tests.conftest import running_hub

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    if not submit.exists():
        pytest.skip(f"the pyspark package has no spark-submit at {submit}")
    (tmp_path / "new.nt").write_text('<http://ex/a> <http://ex/p> _:x .\n_:x <http://ex/v> "1" .\n')
    job = Path(__file__).resolve().parents[2] / "lucid_hub" / "commands" / "spark_publish.py"
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}") as hub:
        record, secret = hub.client("bulk job", ("lucid-hub-admins",), ("graphs:read", "graphs:write"))

        def submit_job(client_secret: str) -> subprocess.CompletedProcess[str]:
            env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "LUCID_CLIENT_ID": record.client_id,
                   "LUCID_CLIENT_SECRET": client_secret}
            env.pop("LUCID_ACCESS_TOKEN", None)
            return subprocess.run([str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false", str(job),
                                   str(tmp_path / "new.nt"), "--graph", "http://ex/g", "--hub", hub.url,
                                   "--message", "snapshot 47"], capture_output=True, text=True, timeout=300,
                                  env=env, check=False)

        refused = submit_job("wrong")
        # Spark's PythonRunner merges the driver's stderr into stdout.
        assert refused.returncode == 1 and "lucid-hub: error: the hub refused the client credentials" in refused.stdout
        result = submit_job(secret)
        assert result.returncode == 0, result.stderr[-2000:]
        (patch,) = hub.runtime.archive.history("http://ex/g")
        assert patch.message == "snapshot 47" and patch.added == 1 and result.stdout.strip().splitlines()[-1].startswith(
            f"published {patch.id} (-0 +1 MSGs)")
        assert "diffing with Spark (local[1])" in result.stdout  # spark-submit's master, not the default
