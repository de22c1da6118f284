"""Commands on patches and keys, no hub needed: canon, diff, apply, verify, keys."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import click
import pyoxigraph as ox

from lucid_hub.cli.base import (
    IRI,
    Context,
    cli,
    pass_ctx,
    read_limited,
)
from lucid_hub.diff import DiffEngine
from lucid_hub.errors import InputError
from lucid_hub.rdf.apply import GraphReplica
from lucid_hub.rdf.patch import check_patch_id
from lucid_hub.rdf.serialization import PATCH_FORMATS, read_patch, sniff_patch_format, write_patch
from lucid_hub.rdf.syntax import rdf_format, read_file, serialize


@cli.command()
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--input-format", help="RDF syntax of FILE (default: from its extension).")
@click.option("--hash", "algorithm", type=click.Choice(["sha256", "sha384"]), default="sha256",
              show_default=True, help="Hash function of RDFC-1.0.")
@pass_ctx
def canon(state: Context, file: Path, input_format: str | None, algorithm: str) -> None:
    """Print the RDFC-1.0 canonical N-Quads of the dataset in FILE."""
    statements = [str(q) for q in read_file(file, input_format)]
    sys.stdout.write(state.canonicalizer.canonicalize(statements, algorithm))


@cli.command()
@click.argument("old", type=click.Path(path_type=Path, exists=True, dir_okay=True))
@click.argument("new", type=click.Path(path_type=Path, exists=True, dir_okay=True))
@click.option("--graph", type=IRI, help="IRI of the graph that triples (and default-graph quads) belong to.")
@click.option("--prev", help="Id of the patch that produced OLD (none: OLD is the first version).")
@click.option("--author", default="", help="Patch author.")
@click.option("--message", default="", help="Patch message.")
@click.option("--created", help="Creation time, ISO 8601 (default: now). For reproducible patches.")
@click.option("--key", "key_file", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="Private Ed25519 key (PEM or JWK) to sign with; unsigned without it.")
@click.option("--format", "fmt", type=click.Choice(PATCH_FORMATS), default="rdf-patch",
              show_default=True)
@click.option("--input-format", help="RDF syntax of OLD and NEW (default: from extensions).")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True,
              help="local: in process; spark: a Spark job (LUCID_SPARK_MASTER) for bulk snapshots.")
@pass_ctx
def diff(state: Context, old: Path, new: Path, graph: str | None, prev: str | None, author: str,
         message: str, created: str | None, key_file: Path | None, fmt: str,
         input_format: str | None, engine: str) -> None:
    """Print the patch that turns OLD into NEW, one per changed graph.

    OLD and NEW are files; with --engine spark also directories of .nt/.nq(.gz) files."""
    from lucid_hub.signing import load_key, sign_patch

    if prev is not None:
        check_patch_id(prev, "--prev")
    when = _parse_time(created) if created else None
    key = load_key(key_file) if key_file else None
    differ = _engine(state, engine)
    try:
        changes = differ.diff_files(old, new, default_graph=graph, fmt=input_format)
    finally:
        stop = getattr(differ, "stop", None)
        if stop is not None:
            stop()
    if prev is not None and len(changes) > 1:
        raise InputError("--prev names the version of one graph, but several graphs changed; "
                         "diff one graph at a time")
    if not changes:
        click.echo("lucid-hub: no changes", err=True)
    for change in changes:
        patch = change.to_patch(prev, author=author, message=message, created=when)
        if key is not None:
            patch = sign_patch(patch, key)
        sys.stdout.buffer.write(write_patch(patch, fmt))
    sys.stdout.flush()


def _engine(state: Context, engine: str) -> DiffEngine:
    if engine == "spark":
        from lucid_hub.diff.spark import SparkDiffEngine, console_progress, spark_session

        settings = state.settings
        spark = spark_session(settings.spark_master, settings.spark_settings(),
                              ship_package=settings.spark_ship_package)
        return SparkDiffEngine(spark, settings.canon_timeout, settings.canon_memory_mb, progress=console_progress())
    from lucid_hub.diff.local import LocalDiffEngine

    return LocalDiffEngine(state.canonicalizer)


def _parse_time(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"--created {text!r} is not an ISO 8601 date and time") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@cli.command()
@click.argument("patch_file", metavar="PATCH", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.argument("base", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--version", "version", help="Id of the version BASE is at (default: none, "
              "i.e. BASE is the content before the graph's first patch).")
@click.option("--format", "out_format", default="nquads", show_default=True,
              type=click.Choice(["nquads", "ntriples", "turtle", "trig"]))
@click.option("--patch-format", type=click.Choice(PATCH_FORMATS), help="Default: detected.")
@click.option("--base-format", help="RDF syntax of BASE (default: from its extension).")
@pass_ctx
def apply(state: Context, patch_file: Path, base: Path, version: str | None, out_format: str,
          patch_format: str | None, base_format: str | None) -> None:
    """Print the graph that results from applying PATCH to BASE."""
    if version is not None:
        check_patch_id(version, "--version")
    raw = read_limited(patch_file, state.settings.max_patch_bytes, "patch")
    fmt = patch_format or sniff_patch_format(raw, patch_file.name)
    patch = read_patch(raw, state.canonicalizer, fmt)
    graph = ox.NamedNode(patch.graph)
    triples = []
    for q in read_file(base, base_format):
        if type(q.graph_name) is not ox.DefaultGraph and q.graph_name != graph:
            raise InputError(f"{base}: holds graph {q.graph_name}, but the patch is for {graph}")
        triples.append(q)
    replica = GraphReplica(triples, state.canonicalizer, version)
    replica.apply(patch)
    quads = [ox.Quad(t.subject, t.predicate, t.object, graph) for t in replica.triples()]
    out = serialize(quads, rdf_format(out_format))
    if out_format in ("nquads", "ntriples"):
        out = b"".join(sorted(line + b"\n" for line in out.split(b"\n")[:-1]))
    sys.stdout.buffer.write(out)
    sys.stdout.flush()


@cli.command()
@click.argument("patch_file", metavar="PATCH", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--jwks", "jwks_file", required=True, type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="The publisher's public keys (JWKS).")
@click.option("--patch-format", type=click.Choice(PATCH_FORMATS), help="Default: detected.")
@pass_ctx
def verify(state: Context, patch_file: Path, jwks_file: Path, patch_format: str | None) -> None:
    """Exit 0 only if PATCH is intact and correctly signed by a key in the JWKS."""
    from lucid_hub.signing import TrustedKeys, verify_patch, verify_patch_bytes

    trusted = TrustedKeys.from_file(jwks_file)
    raw = read_limited(patch_file, state.settings.max_patch_bytes, "patch")
    fmt = patch_format or sniff_patch_format(raw, patch_file.name)
    if fmt == "rdf-patch":
        patch = verify_patch_bytes(raw, trusted, state.canonicalizer)
    else:
        patch = read_patch(raw, state.canonicalizer, fmt)
        verify_patch(patch, trusted)
    click.echo(f"verified {patch.id} (graph <{patch.graph}>, "
               f"-{len(patch.removed)} +{len(patch.added)} MSGs)")


@cli.group()
def keys() -> None:
    """Publisher signing keys (Ed25519)."""


@keys.command("generate")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Directory for signing-key.pem (mode 0600) and jwks.json.")
def keys_generate(out_dir: Path) -> None:
    """Write a new private key and the public JWKS."""
    from lucid_hub.signing import KeyRing

    key = KeyRing(out_dir).create()
    click.echo(f"generated key kid={key.kid} in {out_dir}")


@keys.command("rotate")
@click.option("--dir", "key_dir", required=True, type=click.Path(path_type=Path, exists=True, file_okay=False))
def keys_rotate(key_dir: Path) -> None:
    """Make a new active key; the old one stays in the JWKS for verification."""
    from lucid_hub.signing import KeyRing

    ring = KeyRing(key_dir)
    if not ring.exists():
        raise InputError(f"{key_dir}: no signing key to rotate (run 'keys generate' first)")
    key = ring.rotate()
    click.echo(f"rotated: active key is now kid={key.kid}")
