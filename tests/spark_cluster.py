"""A standalone Spark cluster on loopback for the tests, started with pyspark's own launcher
(`spark-class` Master and Worker), whose executors run a Python that has pyspark, pyarrow and
pyoxigraph but not lucid-hub: a job that does not ship its own code fails there."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from lucid_hub.demo.ports import free_port, wait_for_port

# What the executors' Python gets from the test's environment (nothing of lucid-hub's own).
EXECUTOR_PACKAGES = ("pyspark", "py4j", "pyarrow", "pyoxigraph", "numpy", "numpy.libs")


def bare_python(where: Path) -> Path:
    """A virtual environment whose site-packages holds links to EXECUTOR_PACKAGES only."""
    venv = where / "executor-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True, timeout=60).stdout.strip())
    ours = Path(sysconfig.get_paths()["purelib"])
    for name in EXECUTOR_PACKAGES:
        if (ours / name).exists():
            (site / name).symlink_to(ours / name)
    return python


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@contextlib.contextmanager
def standalone_cluster(where: Path, executor_python: Path) -> Iterator[str]:
    """A master and one worker (1 core, 1 GiB) on loopback; yields the master's URL."""
    home = spark_home()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": str(executor_python), "SPARK_LOG_DIR": str(where / "logs"),
           "SPARK_WORKER_DIR": str(where / "work")}
    env.pop("PYTHONPATH", None)  # (the executors must not find the test's checkout)
    port, ui, worker_ui = free_port(), free_port(), free_port()
    launcher = str(home / "bin" / "spark-class")
    logs = where / "cluster.log"
    with logs.open("ab") as out:
        master = subprocess.Popen([launcher, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(port), "--webui-port", str(ui)], env=env, stdout=out, stderr=out)
        worker = None
        try:
            wait_for_port(port, deadline_s=120)
            worker = subprocess.Popen([launcher, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                                       "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                                       "--webui-port", str(worker_ui)], env=env, stdout=out, stderr=out)
            wait_for_port(worker_ui, deadline_s=120)
            yield f"spark://127.0.0.1:{port}"
        finally:
            for proc in (worker, master):
                if proc is not None:
                    proc.terminate()
                    proc.wait(timeout=60)
