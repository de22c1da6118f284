"""The Spark engine on a real standalone cluster (pyspark's own launcher: a master and a worker
on loopback) whose executors run a Python with pyspark, pyarrow and pyoxigraph but without
lucid-hub: the jobs ship the package themselves (lucid_hub.diff.shipping), from the CLI and
from spark-submit as the chart's Spark job runs it, and give the local engine's patches."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.spark_cluster import bare_python, spark_home, standalone_cluster

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark-cluster")]  # its JVMs beside the local ones

XSD = "http://www.w3.org/2001/XMLSchema#"
OLD = ('<http://ex/a> <http://ex/p> _:x .\n_:x <http://ex/v> "1" .\n<http://ex/b> <http://ex/p> "keep" .\n'
       f'<http://ex/c> <http://ex/p> "01"^^<{XSD}integer> .\n')
NEW = ('<http://ex/a> <http://ex/p> _:y .\n_:y <http://ex/v> "2" .\n<http://ex/b> <http://ex/p> "keep" .\n'
       f'<http://ex/c> <http://ex/p> "1"^^<{XSD}integer> .\n<http://ex/d> <http://ex/p> _:l .\n'
       '_:l <http://ex/first> "x" .\n')


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[test]'")
    if not (spark_home() / "bin" / "spark-class").exists():
        pytest.skip(f"the pyspark package has no spark-class at {spark_home() / 'bin'}")
    where = tmp_path_factory.mktemp("spark-cluster")
    python = bare_python(where)
    with standalone_cluster(where, python) as master:
        yield master, python


def spark_env(cluster: tuple[str, Path], **more: str) -> dict[str, str]:
    """The driver's environment: the cluster's master, and the executors' Python (the driver
    names it to the executors: PYSPARK_PYTHON, as an operator sets it for their cluster)."""
    master, python = cluster
    env = {**os.environ, "LUCID_SPARK_MASTER": master, "PYSPARK_PYTHON": str(python),
           "PYSPARK_DRIVER_PYTHON": sys.executable,
           "LUCID_SPARK_CONF": "spark.driver.host=127.0.0.1,spark.driver.bindAddress=127.0.0.1,"
                               "spark.executor.memory=512m,spark.sql.shuffle.partitions=2", **more}
    env.pop("PYTHONPATH", None)
    return env


def changes(text: str) -> list[str]:
    return [line for line in text.splitlines() if line[:2] in ("D ", "A ")]


def test_the_executors_python_has_the_engines_wheels_but_not_lucid_hub(cluster: tuple[str, Path]) -> None:
    _master, python = cluster
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    has = subprocess.run([str(python), "-c", "import pyspark, pyarrow, pyoxigraph"], env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    lacks = subprocess.run([str(python), "-c", "import lucid_hub"], cwd="/", env=env, capture_output=True, text=True,
                           timeout=60, check=False)
    assert has.returncode == 0, has.stderr
    assert lacks.returncode != 0 and "No module named 'lucid_hub'" in lacks.stderr


def test_the_cli_diffs_on_the_cluster_and_gives_the_local_engines_patch(cluster: tuple[str, Path],
                                                                         tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "old.nt").write_text(OLD)
    (tmp_path / "new.nt").write_text(NEW)
    local = run_cli("diff", tmp_path / "old.nt", tmp_path / "new.nt", "--graph", "http://ex/g")
    assert local.code == 0 and len(changes(local.out)) >= 4, local.err
    on_cluster = run_cli("diff", tmp_path / "old.nt", tmp_path / "new.nt", "--graph", "http://ex/g",
                         "--engine", "spark", env=spark_env(cluster))
    assert on_cluster.code == 0, on_cluster.err[-3000:]
    assert changes(on_cluster.out) == changes(local.out)
    # Without the package travelling with the job, these executors cannot run it: the
    # shipping is what made the run above work.
    unshipped = run_cli("diff", tmp_path / "old.nt", tmp_path / "new.nt", "--graph", "http://ex/g",
                        "--engine", "spark", env=spark_env(cluster, LUCID_SPARK_SHIP_PACKAGE="false"))
    last = unshipped.err.strip().splitlines()[-1]  # (before it: the JVM's banner and the progress lines)
    assert unshipped.code != 0 and last == ("lucid-hub: error: the Spark job failed on an executor: "
                                            "ModuleNotFoundError: No module named 'lucid_hub'"), unshipped.err[-3000:]


def test_spark_submit_on_the_cluster_publishes_to_a_running_hub(cluster: tuple[str, Path], tmp_path: Path) -> None:
    """What the chart's Spark job runs: spark-submit of spark_publish.py, the master
    spark-submit's (the cluster's), the hub's client credentials from the environment."""
    from lucid_hub.diff.local import diff_graph
    from lucid_hub.rdf.canon import Canonicalizer
    from tests.conftest import parse_nt, running_hub

    master, _python = cluster
    (tmp_path / "v1.nt").write_text(OLD)
    (tmp_path / "v2.nt").write_text(NEW)
    job = Path(__file__).resolve().parents[2] / "lucid_hub" / "commands" / "spark_publish.py"
    submit = spark_home() / "bin" / "spark-submit"
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}") as hub:
        record, secret = hub.client("bulk job", ("lucid-hub-admins",), ("graphs:read", "graphs:write"))
        env = spark_env(cluster, LUCID_CLIENT_ID=record.client_id, LUCID_CLIENT_SECRET=secret)
        env.pop("LUCID_ACCESS_TOKEN", None)
        for snapshot in ("v1.nt", "v2.nt"):
            result = subprocess.run([str(submit), "--master", master, "--conf", "spark.ui.enabled=false",
                                     "--conf", "spark.driver.host=127.0.0.1", str(job), str(tmp_path / snapshot),
                                     "--graph", "http://ex/g", "--hub", hub.url, "--message", snapshot],
                                    capture_output=True, text=True, timeout=600, env=env, check=False)
            assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
            assert f"diffing with Spark ({master})" in result.stdout
        first, second = hub.runtime.archive.history("http://ex/g")
        expected = diff_graph(parse_nt(OLD), parse_nt(NEW), "http://ex/g", Canonicalizer())
        assert second.prev == first.id and (second.removed, second.added) == (
            len(expected.removed), len(expected.added))
