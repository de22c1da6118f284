"""`lucid-hub bench canon`: MSG hashing, diff and patch building on generated graphs.

Each measured case runs in a fresh child process so that its peak RSS is its own; the
rdflib baseline (`to_canonical_graph` plus set difference) runs on a subset in the same
run, and the figures are compared as throughput ratios.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

EX = "http://example.org/"
XSD = "http://www.w3.org/2001/XMLSchema#"
GRAPH = "http://example.org/graph/bench"


@dataclass(frozen=True)
class Dataset:
    name: str
    old: Path
    new: Path
    triples: int


def _literal(rng: random.Random, i: int) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        return f'"{rng.randrange(10**6)}"^^<{XSD}integer>'
    if kind == 1:
        return f'"{rng.random() * 1000:.2f}"^^<{XSD}decimal>'
    if kind == 2:
        return f'"Produkt {i} \\"groß\\"\\nline 2"@de'
    if kind == 3:
        return f'"2026-{1 + i % 12:02d}-{1 + i % 28:02d}"^^<{XSD}date>'
    return f"<{EX}ref/{rng.randrange(10**5)}>"


def _records_mixed(rng: random.Random, triples: int) -> list[list[str]]:
    """Records of ~10 ground triples; 1 in 33 also carries a 3-triple blank-node MSG."""
    records = []
    count, i = 0, 0
    while count < triples:
        s = f"<{EX}item/{i}>"
        rec = [f"{s} <{EX}p{k}> {_literal(rng, i * 10 + k)} .\n" for k in range(10)]
        if i % 33 == 0:
            b = f"_:d{i}"
            rec += [f"{s} <{EX}dimension> {b} .\n",
                    f'{b} <{EX}width> "{rng.randrange(1000)}"^^<{XSD}decimal> .\n',
                    f'{b} <{EX}unit> "cm" .\n']
        records.append(rec)
        count += len(rec)
        i += 1
    return records


def _records_blank(rng: random.Random, triples: int) -> list[list[str]]:
    """Records whose every subject is a blank node: an order with a nested order line."""
    records = []
    count, i = 0, 0
    while count < triples:
        o, line = f"_:o{i}", f"_:l{i}"
        rec = [f"{o} <{EX}orderNo> \"{i}\" .\n",
               f"{o} <{EX}customer> <{EX}customer/{rng.randrange(5000)}> .\n",
               f"{o} <{EX}total> {_literal(rng, i)} .\n",
               f"{o} <{EX}line> {line} .\n",
               f"{line} <{EX}product> <{EX}product/{rng.randrange(20000)}> .\n",
               f"{line} <{EX}quantity> \"{rng.randrange(1, 99)}\"^^<{XSD}integer> .\n",
               f"{line} <{EX}note> {_literal(rng, i + 1)} .\n"]
        records.append(rec)
        count += len(rec)
        i += 1
    return records


def _write(path: Path, records: list[list[str]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.writelines(rec)


def _change(rng: random.Random, records: list[list[str]], fraction: float) -> list[list[str]]:
    """A new version: about `fraction` of the triples changed (records edited or replaced)."""
    total = sum(len(r) for r in records)
    new = [list(r) for r in records]
    changed = 0
    while changed < total * fraction:
        idx = rng.randrange(len(new))
        rec = new[idx]
        k = rng.randrange(len(rec))
        subject, predicate, _ = rec[k].split(" ", 2)
        rec[k] = f'{subject} {predicate} "changed {rng.randrange(10**9)}" .\n'
        changed += 2  # one triple removed, one added
    return new


def generate(directory: Path, triples: int, blank_triples: int, change: float, seed: int) -> list[Dataset]:
    """Write the benchmark graphs (old and new version of each) as N-Triples files."""
    rng = random.Random(seed)  # noqa: S311 (reproducible test data, not secrets)
    out = []
    for name, maker, size in (("mixed", _records_mixed, triples), ("blank", _records_blank, blank_triples)):
        old_records = maker(rng, size)
        new_records = _change(rng, old_records, change)
        old, new = directory / f"{name}-old.nt", directory / f"{name}-new.nt"
        _write(old, old_records)
        _write(new, new_records)
        out.append(Dataset(name, old, new, sum(len(r) for r in old_records)))
    return out


def measure(old: str, new: str) -> dict[str, Any]:
    """Runs in a child process: time each phase of diffing two files; print JSON."""
    import resource

    from lucid_hub.diff.local import LocalDiffEngine, file_graph_msgs
    from lucid_hub.rdf.canon import Canonicalizer
    from lucid_hub.rdf.rdfpatch import write_rdf_patch
    from lucid_hub.signing import generate_key, sign_patch

    figures: dict[str, Any] = {}
    with Canonicalizer() as canonicalizer:
        t0 = time.perf_counter()
        (msgs,) = file_graph_msgs(Path(old), None, GRAPH, canonicalizer).values()
        t1 = time.perf_counter()
        hashes = msgs.hashes()
        t2 = time.perf_counter()
        figures["msgs"] = sum(hashes.values())
        figures["blank_msgs"] = msgs.blank.total()
        figures["decompose_s"] = t1 - t0
        figures["hash_all_s"] = t2 - t1
        del msgs, hashes
        t3 = time.perf_counter()
        changes = LocalDiffEngine(canonicalizer).diff_files(Path(old), Path(new), default_graph=GRAPH)
        t4 = time.perf_counter()
        key = generate_key()
        patches = [sign_patch(c.to_patch(None, author="bench", message="bench"), key) for c in changes]
        body = b"".join(write_rdf_patch(p) for p in patches)
        t5 = time.perf_counter()
        figures["diff_s"] = t4 - t3
        figures["patch_build_s"] = t5 - t4
        figures["removed"] = sum(len(p.removed) for p in patches)
        figures["added"] = sum(len(p.added) for p in patches)
        figures["patch_bytes"] = len(body)
    # The diff reads the new version in a child process: count its peak too.
    figures["peak_rss_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                              + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return figures


def _measure_in_child(old: Path, new: Path) -> dict[str, Any]:
    code = ("import json,sys; from lucid_bench.canon import measure; "
            "print(json.dumps(measure(sys.argv[1], sys.argv[2])))")
    result = subprocess.run([sys.executable, "-c", code, str(old), str(new)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise click.ClickException(f"benchmark child failed: {result.stderr.strip()[-500:]}")
    figures: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def _subset(path: Path, lines: int, out: Path) -> Path:
    with path.open(encoding="utf-8") as src, out.open("w", encoding="utf-8") as dst:
        for n, line in enumerate(src):
            if n >= lines:
                break
            dst.write(line)
    return out


def _rdflib_baseline(old: Path, new: Path) -> float:
    """Seconds for rdflib to canonicalise both versions and take set differences."""
    import rdflib
    from rdflib.compare import to_canonical_graph

    rdflib.NORMALIZE_LITERALS = False
    start = time.perf_counter()
    a = to_canonical_graph(rdflib.Graph().parse(old, format="nt"))
    b = to_canonical_graph(rdflib.Graph().parse(new, format="nt"))
    _ = (set(a) - set(b), set(b) - set(a))
    return time.perf_counter() - start


def _ours_on(old: Path, new: Path) -> float:
    from lucid_hub.diff.local import LocalDiffEngine
    from lucid_hub.rdf.canon import Canonicalizer

    with Canonicalizer() as canonicalizer:
        start = time.perf_counter()
        LocalDiffEngine(canonicalizer).diff_files(old, new, default_graph=GRAPH)
        return time.perf_counter() - start


def run(*, triples: int, blank_triples: int, baseline_triples: int, blank_baseline_triples: int,
        change: float, seed: int) -> None:
    """Generate, measure, print a report with the goals (diff <= 10 s, RSS <= 2 GB, >= 20x rdflib)."""
    echo = click.echo
    with tempfile.TemporaryDirectory(prefix="lucid-bench-") as tmp:
        directory = Path(tmp)
        echo(f"generating graphs (seed {seed}, {change:.1%} changed) ...")
        datasets = generate(directory, triples, blank_triples, change, seed)
        for ds in datasets:
            echo(f"\n== {ds.name}: {ds.triples:,} triples per version")
            f = _measure_in_child(ds.old, ds.new)
            rate = ds.triples / f["decompose_s"]
            echo(f"  MSGs                     {f['msgs']:,} ({f['blank_msgs']:,} with blank nodes)")
            echo(f"  read + MSG decomposition {f['decompose_s']:.2f} s ({rate:,.0f} triples/s)")
            hash_rate = f["msgs"] / f["hash_all_s"]
            echo(f"  hash every MSG           {f['hash_all_s']:.2f} s ({hash_rate:,.0f} MSGs/s)")
            echo(f"  diff of two versions     {f['diff_s']:.2f} s  (-{f['removed']:,} +{f['added']:,} MSGs)")
            echo(f"  patch build+sign+write   {f['patch_build_s']:.3f} s ({f['patch_bytes']:,} bytes)")
            echo(f"  peak RSS, diff child incl. {f['peak_rss_mb']:,.0f} MB")
            subset = baseline_triples if ds.name == "mixed" else blank_baseline_triples
            sub_old = _subset(ds.old, subset, directory / f"{ds.name}-sub-old.nt")
            sub_new = _subset(ds.new, subset, directory / f"{ds.name}-sub-new.nt")
            base_s = _rdflib_baseline(sub_old, sub_new)
            ours_s = _ours_on(sub_old, sub_new)
            base_rate = 2 * subset / base_s
            ours_full_rate = 2 * ds.triples / f["diff_s"]
            echo(f"  rdflib baseline          {base_s:.2f} s on {subset:,} triples/version "
                 f"({base_rate:,.0f} triples/s)")
            echo(f"  lucid-hub, same subset   {ours_s:.3f} s -> {base_s / ours_s:,.1f}x faster")
            echo(f"  lucid-hub, full size     {ours_full_rate:,.0f} triples/s -> "
                 f"{ours_full_rate / base_rate:,.1f}x the baseline's throughput")
            if ds.name == "mixed":
                _goal("diff of two versions <= 10 s", f["diff_s"] <= 10, f"{f['diff_s']:.2f} s")
                _goal("peak RSS <= 2048 MB", f["peak_rss_mb"] <= 2048, f"{f['peak_rss_mb']:,.0f} MB")
            _goal(">= 20x the rdflib baseline", ours_full_rate / base_rate >= 20,
                  f"{ours_full_rate / base_rate:,.1f}x")


def _goal(name: str, met: bool, figure: str) -> None:
    click.echo(f"  goal {name:34} {'met' if met else 'MISSED'} ({figure})")
