"""`lucid-hub bench diff`: bulk snapshot diffs with the Spark and the local engine.

Generated N-Quads snapshots (an ERP export: item records of 10 ground triples over 4 graphs,
about 1% of triples in 3-triple blank-node MSGs, records in shuffled order); the new snapshot
changes about 0.5% of the triples. In the same run, on the same files: the baseline
`LC_ALL=C sort` + `comm -3`, the local engine, and the Spark engine (`local[2]` by default),
each as a child process whose process tree is watched for its peak RSS. The two engines'
patches must be byte-identical. "spark floor" is what Spark itself costs on the same files
(lines read and grouped in one shuffle, no parsing): no Spark diff can beat it.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

EX = "http://example.org/erp/"
XSD = "http://www.w3.org/2001/XMLSchema#"
GRAPHS = 4
CHANGE_EVERY = 20  # one triple in one record of 20 changes: 0.5% of the triples
CREATED = "2026-01-01T00:00:00Z"


def _record(i: int, version: int) -> list[str]:
    """The lines of record `i` in snapshot `version` (0 old, 1 new)."""
    g = f"<{EX}graph/{i % GRAPHS}>"
    s = f"<{EX}item/{i}>"
    values = [f'"{(i * 7919 + k) % 100003}"^^<{XSD}integer>' if k % 3 == 0 else
              f'"Artikel {i}-{k} \\"Größe\\" M"@de' if k % 3 == 1 else
              f"<{EX}ref/{(i + k) % 50021}>" for k in range(10)]
    changed = version == 1 and i % CHANGE_EVERY == 7
    if changed:
        values[(i // CHANGE_EVERY) % 10] = f'"changed {i}"'
    lines = [f"{s} <{EX}p{k}> {values[k]} {g} .\n" for k in range(10)]
    if i % 33 == 0:  # about 1% of triples in blank-node MSGs (3 triples each)
        b = f"_:d{i}"
        width = i % 997 + (1 if version == 1 and i % (33 * CHANGE_EVERY) == 0 else 0)
        lines += [f"{s} <{EX}dimension> {b} {g} .\n",
                  f'{b} <{EX}width> "{width}"^^<{XSD}decimal> {g} .\n',
                  f'{b} <{EX}unit> "cm" {g} .\n']
    return lines


def _records(triples: int) -> int:
    per_33 = 33 * 10 + 3
    return max(1, triples * 33 // per_33)


def generate(path: Path, triples: int, version: int) -> None:
    """Write a snapshot of about `triples` triples, records in a fixed shuffled order."""
    n = _records(triples)
    step = 1_000_003  # a prime: i -> i * step mod n visits every record once when coprime
    while math.gcd(step, n) != 1:
        step += 2
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8", buffering=1 << 20) as fh:
        chunk: list[str] = []
        for j in range(n):
            chunk += _record(j * step % n, version)
            if len(chunk) > 100_000:
                fh.writelines(chunk)
                chunk = []
        fh.writelines(chunk)
    tmp.rename(path)


@dataclass
class Run:
    wall_s: float
    peak_mb: dict[str, float] = field(default_factory=dict)
    stdout: bytes = b""


def _tree(root: int) -> list[int]:
    """The pids of `root` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _role(pid: int) -> tuple[str, int] | None:
    """(role, VmHWM in kB) of a process: python driver, jvm, python worker, sort..."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().split(b"\0")
        with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
            hwm = next((int(line.split()[1]) for line in fh if line.startswith("VmHWM:")), 0)
    except OSError:
        return None
    if not cmd[0]:
        return None  # exited (a zombie)
    text = b" ".join(cmd).decode(errors="replace")
    if "java" in cmd[0].decode(errors="replace"):
        role = "jvm"
    elif "pyspark.daemon" in text or "pyspark/daemon" in text or "pyspark.worker" in text:
        role = "python worker"
    elif "lucid_hub.cli" in text:
        role = "python driver"
    elif "_child_main" in text:
        role = "python child"
    else:
        role = os.path.basename(cmd[0].decode(errors="replace")) or "other"
    return role, hwm


def run_watched(cmd: list[str], env: dict[str, str] | None = None) -> Run:
    """Run `cmd`, its stdout kept; peak RSS per role (largest process of each role)."""
    peaks: dict[int, tuple[str, int]] = {}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for pid in _tree(proc.pid):
                found = _role(pid)
                if found and found[1] >= peaks.get(pid, ("", 0))[1]:  # an exited process reads as 0
                    peaks[pid] = found
            done.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    done.set()
    watcher.join()
    if proc.returncode != 0:
        raise click.ClickException(f"{cmd[:4]} failed ({proc.returncode}): {err.decode()[-2000:]}")
    by_role: dict[str, float] = {}
    for role, kb in peaks.values():
        by_role[role] = max(by_role.get(role, 0.0), kb / 1024)
    return Run(wall, by_role, out)


def _baseline(old: Path, new: Path) -> Run:
    script = 'LC_ALL=C comm -3 <(LC_ALL=C sort "$1") <(LC_ALL=C sort "$2") | wc -l'
    return run_watched(["bash", "-c", script, "bench", str(old), str(new)])


def _engine(engine: str, old: Path, new: Path, master: str) -> Run:
    env = {**os.environ, "LUCID_SPARK_MASTER": master}
    return run_watched([sys.executable, "-m", "lucid_hub.cli", "diff", "--engine", engine,
                        "--created", CREATED, str(old), str(new)], env)


def floor_main() -> None:
    """Child process: Spark's own floor on these files — read both as text lines and group
    them (one shuffle), no RDF parsing, no Python workers. Prints the differing lines."""
    from pyspark.sql import functions as F

    from lucid_hub.diff.spark import spark_session

    old, new, master = sys.argv[1:4]
    spark = spark_session(master)
    sides = [spark.read.text(path).withColumn("side", F.lit(side)) for side, path in (("o", old), ("n", new))]
    grouped = sides[0].union(sides[1]).groupBy("value").agg(
        F.max((F.col("side") == "o").cast("int")).alias("o"), F.max((F.col("side") == "n").cast("int")).alias("n"))
    print(grouped.where("o != n").count())
    spark.stop()


def _floor(old: Path, new: Path, master: str) -> Run:
    return run_watched([sys.executable, "-c", "from lucid_bench.diff import floor_main; floor_main()",
                        str(old), str(new), master])


def _fmt_peaks(run: Run) -> str:
    return ", ".join(f"{role} {mb:,.0f} MB" for role, mb in sorted(run.peak_mb.items()))


def run(sizes: list[int], work: Path, master: str, engines: list[str], floor: bool = True) -> None:
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[int, Run]] = {}
    for size in sizes:
        old, new = work / f"snapshot-{size}-old.nq", work / f"snapshot-{size}-new.nq"
        for path, version in ((old, 0), (new, 1)):
            if not path.exists():
                t = time.perf_counter()
                generate(path, size, version)
                click.echo(f"generated {path.name} ({path.stat().st_size / 1e6:,.0f} MB) "
                           f"in {time.perf_counter() - t:.1f} s")
        with old.open("rb") as fh:
            lines = sum(1 for _ in fh)
        click.echo(f"\n== {lines:,} triples per snapshot ({old.stat().st_size / 1e6:,.0f} MB), "
                   f"Spark master {master}")
        base = _baseline(old, new)
        results.setdefault("sort+comm", {})[size] = base
        click.echo(f"  sort+comm      {base.wall_s:8.2f} s   ({int(base.stdout)} lines differ)  "
                   f"peak {_fmt_peaks(base)}")
        outputs = {}
        for engine in engines:
            r = _engine(engine, old, new, master)
            results.setdefault(engine, {})[size] = r
            outputs[engine] = r.stdout
            click.echo(f"  {engine:<6} engine  {r.wall_s:8.2f} s   {r.wall_s / base.wall_s:5.2f}x sort+comm  "
                       f"peak {_fmt_peaks(r)}")
        if floor and "spark" in engines:
            r = _floor(old, new, master)
            results.setdefault("spark floor", {})[size] = r
            click.echo(f"  spark floor    {r.wall_s:8.2f} s   {r.wall_s / base.wall_s:5.2f}x sort+comm  "
                       f"(text lines read and grouped, no parsing; {int(r.stdout)} lines differ)")
        if len(set(outputs.values())) > 1:
            raise click.ClickException("the engines' patches differ")
        if outputs:
            click.echo(f"  patches        identical across engines ({len(next(iter(outputs.values()))):,} bytes)")
    if len(sizes) > 1:
        small, large = sizes[0], sizes[-1]
        click.echo(f"\n== scaling {small:,} -> {large:,} triples ({large / small:.0f}x the data)")
        for name, runs in results.items():
            click.echo(f"  {name:<12} {runs[large].wall_s / runs[small].wall_s:6.2f}x")
