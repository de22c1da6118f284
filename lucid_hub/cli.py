"""The `lucid-hub` command. Each subcommand parses its options, calls the domain code and
prints; errors are one line on stderr with a non-zero exit, never a traceback."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import pyoxigraph as ox

from lucid_hub import __version__
from lucid_hub.config import Settings, listening_url
from lucid_hub.diff import DiffEngine
from lucid_hub.errors import InputError, InputTooLargeError, LucidError, RemoteRefusedError, RemoteUnreachableError
from lucid_hub.rdf.apply import GraphReplica
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import check_patch_id
from lucid_hub.rdf.serialization import PATCH_FORMATS, read_patch, sniff_patch_format, write_patch
from lucid_hub.rdf.syntax import rdf_format, read_file, serialize

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70


class _Context:
    """What every subcommand shares: settings, and a canonicaliser made on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._canonicalizer: Canonicalizer | None = None

    @property
    def canonicalizer(self) -> Canonicalizer:
        if self._canonicalizer is None:
            self._canonicalizer = Canonicalizer(self.settings.canon_timeout,
                                                self.settings.canon_memory_mb)
        return self._canonicalizer

    def close(self) -> None:
        if self._canonicalizer is not None:
            self._canonicalizer.close()


pass_ctx = click.make_pass_decorator(_Context)


class _Iri(click.ParamType[str]):
    """An absolute IRI (a graph's, a rule's): a usage error naming the option otherwise."""

    name = "IRI"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            ox.NamedNode(str(value))
        except ValueError:
            self.fail(f"{value!r} is not an absolute IRI (such as https://acme.example/graphs/kpi)", param, ctx)
        return str(value)


IRI = _Iri()


class _Url(click.ParamType[str]):
    """An http(s) URL (a hub's): a usage error naming the option otherwise."""

    name = "URL"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text.startswith(("http://", "https://")) or len(text.split("//", 1)[1].strip("/")) == 0:
            self.fail(f"{text!r} is not an http(s) URL (such as https://hub.acme.example)", param, ctx)
        return text


URL = _Url()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lucid-hub")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """lucid-hub: publish RDF named graphs as signed, hash-chained patches and mirror
    your partners' graphs. Settings come from LUCID_* environment variables."""
    state = _Context(Settings.from_env())
    ctx.obj = state
    ctx.call_on_close(state.close)


def _read_limited(path: Path, limit: int, what: str) -> bytes:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if size > limit:
        raise InputTooLargeError(
            f"{path}: {what} of {size} bytes exceeds the limit of {limit} bytes (LUCID_MAX_PATCH_BYTES)"
        )
    return path.read_bytes()


@cli.command()
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--input-format", help="RDF syntax of FILE (default: from its extension).")
@click.option("--hash", "algorithm", type=click.Choice(["sha256", "sha384"]), default="sha256",
              show_default=True, help="Hash function of RDFC-1.0.")
@pass_ctx
def canon(state: _Context, file: Path, input_format: str | None, algorithm: str) -> None:
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
def diff(state: _Context, old: Path, new: Path, graph: str | None, prev: str | None, author: str,
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


def _engine(state: _Context, engine: str) -> DiffEngine:
    if engine == "spark":
        from lucid_hub.diff.spark import SparkDiffEngine, console_progress, spark_session

        settings = state.settings
        spark = spark_session(settings.spark_master, settings.spark_settings())
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
def apply(state: _Context, patch_file: Path, base: Path, version: str | None, out_format: str,
          patch_format: str | None, base_format: str | None) -> None:
    """Print the graph that results from applying PATCH to BASE."""
    if version is not None:
        check_patch_id(version, "--version")
    raw = _read_limited(patch_file, state.settings.max_patch_bytes, "patch")
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
def verify(state: _Context, patch_file: Path, jwks_file: Path, patch_format: str | None) -> None:
    """Exit 0 only if PATCH is intact and correctly signed by a key in the JWKS."""
    from lucid_hub.signing import TrustedKeys, verify_patch, verify_patch_bytes

    trusted = TrustedKeys.from_file(jwks_file)
    raw = _read_limited(patch_file, state.settings.max_patch_bytes, "patch")
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


@cli.command()
@click.option("--dir", "workdir", type=click.Path(path_type=Path, file_okay=False),
              help="Keep the hubs' data directories (or the offline demo's keys and patches) here "
                   "(default: a temporary directory).")
@click.option("--offline", is_flag=True, help="The patch chain alone, in this process: diff, sign, verify, apply.")
@pass_ctx
def demo(state: _Context, workdir: Path | None, offline: bool) -> None:
    """Two hubs (publisher and partner) on loopback, the whole chain, and a report (embedded
    defaults, nothing to install). Exit 0 only if everything verified."""
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    if offline:
        from lucid_hub.tools.demo_patches import run as run_offline

        run_offline(workdir, click.echo, state.canonicalizer)
        return
    from lucid_hub.tools.demo import run

    run(workdir, click.echo)


@cli.command()
@click.option("--host", help="Listening address (default: LUCID_HOST, 127.0.0.1).")
@click.option("--port", type=int, help="Listening port (default: LUCID_PORT, 8080).")
@click.option("--server", "server_kind", type=click.Choice(["auto", "gunicorn", "uvicorn", "werkzeug"]),
              default="auto", show_default=True,
              help="gunicorn managing uvicorn workers (auto); uvicorn alone (one process); werkzeug's threads.")
@click.option("--workers", type=click.IntRange(1, 64),
              help="gunicorn worker processes, each with its own copy of the store (default: LUCID_WEB_WORKERS, 1).")
@click.option("--threads", type=click.IntRange(1, 256), help="Request threads of each (default: LUCID_WEB_THREADS, 8).")
@pass_ctx
def serve(state: _Context, host: str | None, port: int | None, server_kind: str, workers: int | None,
          threads: int | None) -> None:
    """Run the hub: HTTP API, graph store, archive, patch log relay, mirrors."""
    from lucid_hub.server import serve as run_server

    settings = replace(state.settings, host=host or state.settings.host, port=port or state.settings.port,
                       web_workers=workers or state.settings.web_workers,
                       web_threads=threads or state.settings.web_threads)
    if not os.environ.get("LUCID_PUBLIC_URL"):  # not configured: where this hub listens now
        settings = replace(settings, public_url=listening_url(settings.host, settings.port))
    run_server(settings, click.echo, server_kind)


@cli.command()
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--graph", type=IRI, required=True, help="IRI of the graph FILE's content replaces.")
@click.option("--message", default="", help="Patch message.")
@click.option("--author", default="", help="Patch author (default: your user name).")
@click.option("--hub", "hub_url", type=URL, help="URL of a running hub (default: the hub of LUCID_DATA_DIR).")
@click.option("--input-format", help="RDF syntax of FILE (default: from its extension).")
@click.option("--engine", type=click.Choice(["auto", "local", "spark"]), default="auto", show_default=True,
              help="Diff engine; auto uses Spark from LUCID_SPARK_THRESHOLD_BYTES on.")
@pass_ctx
def publish(state: _Context, file: Path, graph: str, message: str, author: str, hub_url: str | None,
            input_format: str | None, engine: str) -> None:
    """Publish FILE as the new version of a graph (replace semantics)."""
    from lucid_hub.commands.publish_file import publish_file

    who = author or os.environ.get("USER", "") or "cli"
    remote = _hub_for(state, hub_url, None)  # (beside a hub serving the data directory: through it)
    with _saying_if_new(state):
        publish_file(state.settings, file, graph, author=who, message=message, hub_url=remote and remote[0],
                     fmt=input_format, canonicalizer=state.canonicalizer, echo=click.echo, engine=engine,
                     token=remote and remote[1])


@cli.command()
@click.option("--hub", "hub_url", type=URL, required=True, help="URL of the hub that evaluates the query.")
@click.option("--query", "query_file", required=True, type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="File with a SPARQL SELECT, ASK or CONSTRUCT query.")
@click.option("--graph", "graphs", type=IRI, multiple=True,
              help="A graph of the query's default graph (default: every "
              "graph you may read, or the query's FROM).")
@click.option("--json", "as_json", is_flag=True, help="One JSON notification per line (for programs).")
@click.option("--state", "state_file", type=click.Path(path_type=Path, dir_okay=False),
              help="Where the subscription id and last sequence are kept (default: in ~/.cache/lucid-hub).")
@click.option("--count", type=click.IntRange(min=1), help="Stop after this many notifications.")
def subscribe(hub_url: str, query_file: Path, graphs: tuple[str, ...], as_json: bool, state_file: Path | None,
              count: int | None) -> None:
    """Print a continuous query's results, then each change as it arrives (resumes where the
    last run stopped). Token: LUCID_ACCESS_TOKEN, or LUCID_CLIENT_ID and LUCID_CLIENT_SECRET."""
    from lucid_hub.commands.subscribe import default_state, follow

    query = _read_limited(query_file, 1_000_000, "query").decode("utf-8", errors="replace")
    follow(hub_url, query, state_file=state_file or default_state(hub_url, query), as_json=as_json, count=count,
           echo=click.echo, default_graphs=list(graphs) or None)


@cli.command()
@click.option("--name", help="This worker's name in claims and logs (default: host:pid:random).")
@pass_ctx
def worker(state: _Context, name: str | None) -> None:
    """Deliver WebSub notifications (beside `serve`; set LUCID_DELIVER_IN_PROCESS=false there to
    leave all delivery to workers). Several workers share the subscriptions."""
    from lucid_hub.commands.worker import run_worker
    from lucid_hub.logging_setup import configure_logging

    configure_logging(state.settings.log_format, state.settings.log_level.upper())
    run_worker(state.settings, name)


@cli.group()
def mirror() -> None:
    """Mirrors of other hubs' graphs (this hub subscribes, verifies and applies their patches).

    Beside the hub that serves the data directory, these commands go through it (its own
    settings decide what it may reach); otherwise they change the data directory's database
    and the hub acts on it at its next start."""


def _jwks_source(source: str | None) -> str | None:
    """A JWKS to pin as the hub takes it: a URL as it is, a file's content inline."""
    if source is None or source.startswith(("http://", "https://")):
        return source
    try:
        return Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{source}: cannot read the publisher's keys: {exc.strerror or exc}") from None


@mirror.command("add")
@click.option("--hub", "hub_url", type=URL, help="The publisher's WebSub hub URL (e.g. https://acme.example/hub).")
@click.option("--graph", type=IRI, help="IRI of the graph to mirror.")
@click.option("--from", "graph_url", type=URL,
              help="The graph's URL at the publisher: hub and graph found by its Link headers.")
@click.option("--client-id", required=True, help="Our client at the publisher (from its 'clients create').")
@click.option("--client-secret", required=True, envvar="LUCID_MIRROR_CLIENT_SECRET",
              help="Its secret (or LUCID_MIRROR_CLIENT_SECRET, which keeps it out of the shell history).")
@click.option("--trust-jwks", help="URL or file of the publisher's public keys to pin (default: its own JWKS now).")
@pass_ctx
def mirror_add(state: _Context, hub_url: str | None, graph: str | None, graph_url: str | None, client_id: str,
               client_secret: str, trust_jwks: str | None) -> None:
    """Mirror a graph of another hub; prints the mirror as JSON."""
    import json

    from lucid_hub.mirror import add_mirror
    from lucid_hub.outbound import AddressPolicy

    jwks = _jwks_source(trust_jwks)
    remote = _hub_for(state, None, None)
    if remote:
        added = _remote(*remote, "POST", "/admin/mirrors", json={
            "hub": hub_url, "graph": graph, "from": graph_url, "client_id": client_id,
            "client_secret": client_secret, "trust_jwks": jwks})
    else:
        with _database(state) as database:
            added = add_mirror(database, policy=AddressPolicy.of(state.settings), graph=graph, hub_url=hub_url,
                               client_id=client_id, client_secret=client_secret, trust_jwks=jwks,
                               graph_url=graph_url)
    click.echo(json.dumps(added, indent=2))


@mirror.command("list")
@pass_ctx
def mirror_list(state: _Context) -> None:
    """The mirrors as JSON: state, head, counts of applied and quarantined patches."""
    import json

    from lucid_hub.mirror import list_mirrors

    remote = _hub_for(state, None, None)
    if remote:
        found = _remote(*remote, "GET", "/admin/mirrors")["mirrors"]
    else:
        with _database(state, writes=False) as database:
            found = list_mirrors(database)
    click.echo(json.dumps(found, indent=2))


@mirror.command("remove")
@click.argument("mirror_ref", metavar="ID_OR_GRAPH")
@pass_ctx
def mirror_remove(state: _Context, mirror_ref: str) -> None:
    """Stop mirroring (the hub unsubscribes); the local copy stays readable until purged."""
    from lucid_hub.mirror import remove_mirror

    remote = _hub_for(state, None, None)
    if remote:
        _remote(*remote, "DELETE", "/admin/mirrors", params={"id": mirror_ref})
    else:
        with _database(state) as database:
            remove_mirror(database, mirror_ref)
    click.echo(f"mirror {mirror_ref} removed")


@mirror.command("trust")
@click.argument("mirror_ref", metavar="ID_OR_GRAPH")
@click.option("--jwks", "source", required=True, help="URL or file of the publisher's public keys (JWKS) to pin.")
@click.option("--replace", is_flag=True, help="Accept a JWKS without the keys pinned so far (the publisher lost "
                                              "its old key); otherwise it must keep them.")
@pass_ctx
def mirror_trust(state: _Context, mirror_ref: str, source: str, replace: bool) -> None:
    """Pin the publisher's keys again after it rotated its key; prints the mirror as JSON.
    Patches quarantined for the unknown key are then fetched again and applied."""
    import json

    from lucid_hub.mirror import trust_mirror
    from lucid_hub.outbound import AddressPolicy

    jwks = _jwks_source(source)
    assert jwks is not None
    remote = _hub_for(state, None, None)
    if remote:
        mirrors = _remote(*remote, "GET", "/admin/mirrors")["mirrors"]
        ident = next((m["id"] for m in mirrors if mirror_ref in (m["id"], m["graph"])), mirror_ref)
        trusted = _remote(*remote, "POST", f"/admin/mirrors/{ident}/trust", json={"jwks": jwks, "replace": replace})
    else:
        with _database(state) as database:
            trusted = trust_mirror(database, mirror_ref, jwks, policy=AddressPolicy.of(state.settings),
                                   replace=replace)
    click.echo(json.dumps(trusted, indent=2))


@cli.group()
def clients() -> None:
    """OAuth clients of partners (client credentials grant). Beside the hub that serves the
    data directory, these commands go through it."""


@clients.command("create")
@click.option("--name", required=True, help="Who the client is (a partner's hub, a publisher's job).")
@click.option("--group", "groups", multiple=True, help="A group access conditions can require (repeatable).")
@click.option("--scope", "scopes", multiple=True,
              help="graphs:read, graphs:write, hub:subscribe or admin (repeatable; default: graphs:read "
                   "hub:subscribe).")
@click.option("--callback-prefix", "callback_prefixes", multiple=True,
              help="URL prefix the client's WebSub callbacks must start with (repeatable).")
@pass_ctx
def clients_create(state: _Context, name: str, groups: tuple[str, ...], scopes: tuple[str, ...],
                   callback_prefixes: tuple[str, ...]) -> None:
    """Create a client; prints JSON with client_id and client_secret (shown only now)."""
    import json

    from lucid_hub.auth.clients import ClientRegistry

    words = [w for s in scopes for w in s.split()]
    remote = _hub_for(state, None, None)
    if remote:
        created = _remote(*remote, "POST", "/admin/clients", json={"name": name, "groups": list(groups),
                                                                     "scopes": words or None,
                                                                     "callback_prefixes": list(callback_prefixes)})
    else:
        with _database(state) as database:
            record, secret = ClientRegistry(database).create(
                name, groups=list(groups), scopes=words or None, callback_prefixes=list(callback_prefixes))
        created = {**record.to_json(), "client_secret": secret}
    click.echo(json.dumps(created, indent=2))


@clients.command("list")
@pass_ctx
def clients_list(state: _Context) -> None:
    """List the clients (without secrets) as JSON."""
    import json

    from lucid_hub.auth.clients import ClientRegistry

    remote = _hub_for(state, None, None)
    if remote:
        found = _remote(*remote, "GET", "/admin/clients")["clients"]
    else:
        with _database(state, writes=False) as database:
            found = [c.to_json() for c in ClientRegistry(database).list()]
    click.echo(json.dumps(found, indent=2))


@clients.command("delete")
@click.argument("client_id")
@pass_ctx
def clients_delete(state: _Context, client_id: str) -> None:
    """Delete a client (its tokens stop working when they expire; revoke them to stop them now)."""
    from lucid_hub.auth.clients import ClientRegistry

    remote = _hub_for(state, None, None)
    if remote:
        _remote(*remote, "DELETE", f"/admin/clients/{client_id}")
    else:
        with _database(state) as database:
            ClientRegistry(database).delete(client_id)
    click.echo(f"deleted {client_id}")


@cli.group("admin")
def admin_group() -> None:
    """Accounts of the admin page."""


@admin_group.command("create")
@click.option("--username", required=True)
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input (else: a prompt).")
@pass_ctx
def admin_create(state: _Context, username: str, password_stdin: bool) -> None:
    """Create an admin account for the admin page (/admin/ui/)."""
    from lucid_hub.auth.admins import AdminAccounts

    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = click.prompt("password", hide_input=True, confirmation_prompt=True)
    with _database(state) as database:
        AdminAccounts(database).create(username, password)
    click.echo(f"admin account {username} created")


@contextmanager
def _saying_if_new(state: _Context) -> Iterator[None]:
    """Around a command that writes: if it made a new hub's data directory, it says where (a
    mistyped LUCID_DATA_DIR shows here, not as a client the running hub never heard of)."""
    settings = state.settings
    marker = settings.data_dir / "lucid-hub.db"
    new = not settings.database_url and not marker.is_file()
    try:
        yield
    finally:
        if new and marker.is_file():
            click.echo(f"lucid-hub: made a new hub's data directory: {settings.data_dir} (LUCID_DATA_DIR)", err=True)


@contextmanager
def _database(state: _Context, *, writes: bool = True) -> Iterator[Any]:
    """The hub's database. A command that only reads needs an existing hub's (it never makes a
    data directory or a schema where a mistyped LUCID_DATA_DIR points); one that writes makes
    a new hub's when there is none, and says where."""
    from lucid_hub.db.session import Database

    settings = state.settings
    if not writes and not settings.database_url and not (settings.data_dir / "lucid-hub.db").is_file():
        raise InputError(f"no hub's data at {settings.data_dir} (LUCID_DATA_DIR): point LUCID_DATA_DIR at the "
                         "data directory of the hub `lucid-hub serve` runs on")
    with _saying_if_new(state) if writes else contextlib.nullcontext():
        if writes:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
        database = Database(settings.db_url)
        try:
            if writes:
                database.upgrade()
            elif not database.is_current():
                raise InputError("the database (LUCID_DATABASE_URL) holds no lucid-hub schema: start the hub or run "
                                 "`lucid-hub db upgrade` first")
            yield database
        finally:
            database.dispose()


@cli.command("log")
@click.option("--graph", type=IRI, required=True, help="IRI of an owned graph.")
@pass_ctx
def log_command(state: _Context, graph: str) -> None:
    """Print a graph's history: id, prev, author, time and counts, oldest first."""
    from lucid_hub.archive import Archive
    from lucid_hub.errors import NotFoundError

    with _database(state, writes=False) as db:  # the archive alone (no store): works beside a running hub
        archive = Archive(db)
        if not archive.exists(graph):
            raise NotFoundError(f"no graph <{graph}> in the archive at {state.settings.data_dir} (LUCID_DATA_DIR)")
        for record in archive.history(graph):
            click.echo(f"{record.id}  prev={record.prev or '-'}  {record.created:%Y-%m-%dT%H:%M:%SZ}  "
                       f"-{record.removed} +{record.added}  {record.author}  {record.message}")


@cli.group()
def db() -> None:
    """The hub's relational database."""


@db.command("upgrade")
@pass_ctx
def db_upgrade(state: _Context) -> None:
    """Create or migrate the schema to the newest version (Alembic)."""
    from lucid_hub.db.session import Database

    database = Database(state.settings.db_url)
    try:
        database.upgrade()
    finally:
        database.dispose()
    click.echo("database schema is up to date")


@db.command("downgrade")
@click.argument("revision")
@click.option("--yes", is_flag=True, help="Confirm: tables a migration created are dropped, with their data.")
@pass_ctx
def db_downgrade(state: _Context, revision: str, yes: bool) -> None:
    """Revert the schema to REVISION (an Alembic revision, `-1` for one step, `base` for none),
    before rolling back to an older lucid-hub. Back the database up first."""
    from alembic.util import CommandError

    from lucid_hub.db.session import Database

    if not yes:
        raise click.UsageError("a downgrade drops what newer migrations created: back up, then pass --yes")
    database = Database(state.settings.db_url)
    try:
        database.downgrade(revision)
    except CommandError as exc:
        raise InputError(f"cannot downgrade to {revision!r}: {exc}") from None
    finally:
        database.dispose()
    click.echo(f"database schema downgraded to {revision}")


@cli.group()
def bench() -> None:
    """Benchmarks (figures and ratios against a baseline run in the same process)."""


@bench.command("canon")
@click.option("--triples", default=1_000_000, show_default=True, help="Size of the large graph.")
@click.option("--blank-triples", default=100_000, show_default=True,
              help="Size of the graph whose subjects are all blank nodes.")
@click.option("--baseline-triples", default=20_000, show_default=True,
              help="Subset of the large graph the rdflib baseline runs on.")
@click.option("--blank-baseline-triples", default=700, show_default=True,
              help="Subset of the blank-node graph the rdflib baseline runs on (rdflib's "
                   "canonicalisation is superlinear there: 5,000 triples took 707 s).")
@click.option("--change", default=0.01, show_default=True, help="Fraction of triples changed.")
@click.option("--seed", default=1, show_default=True)
def bench_canon(triples: int, blank_triples: int, baseline_triples: int, blank_baseline_triples: int,
                change: float, seed: int) -> None:
    """MSG hashing and diff of generated graphs, against rdflib's canonicalisation."""
    from lucid_hub.tools.bench.canon import run

    run(triples=triples, blank_triples=blank_triples, baseline_triples=baseline_triples,
        blank_baseline_triples=blank_baseline_triples, change=change, seed=seed)


@bench.command("publish")
@click.option("--updates", default=1000, show_default=True, help="Small updates per log backend.")
@click.option("--clients", default=4, show_default=True, help="Concurrent clients for the throughput run.")
@click.option("--bulk-triples", default=1_000_000, show_default=True, help="0 skips the bulk run.")
@click.option("--change", default=0.01, show_default=True, help="Fraction changed in the re-publish.")
@click.option("--kafka/--no-kafka", default=True, show_default=True, help="Also run with the Kafka log.")
@click.option("--graphs", default=1, show_default=True, type=click.IntRange(1, 1000),
              help="Graphs the throughput clients publish to (client n to graph n mod GRAPHS).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Hub processes (serve --workers).")
@click.option("--core/--no-core", default=True, show_default=True,
              help="Also publish in this process without HTTP, with and without group commit.")
def bench_publish(updates: int, clients: int, bulk_triples: int, change: float, kafka: bool, graphs: int,
                  workers: int, core: bool) -> None:
    """Publishing latency, throughput and bulk re-publish, against direct pyoxigraph writes."""
    from lucid_hub.tools.bench.publish import run

    run(updates=updates, clients=clients, bulk_triples=bulk_triples, change=change, kafka=kafka, graphs=graphs,
        workers=workers, core=core)


@bench.command("auth")
@click.option("--conditions", default=1000, show_default=True)
@click.option("--graphs", default=10_000, show_default=True)
@click.option("--clients", default=200, show_default=True)
@click.option("--requests", "request_count", default=100_000, show_default=True)
@click.option("--seed", default=1, show_default=True)
def bench_auth(conditions: int, graphs: int, clients: int, request_count: int, seed: int) -> None:
    """Token validation plus access decision per request, against naive evaluation."""
    from lucid_hub.tools.bench.auth import run

    if min(conditions, clients, request_count) < 1 or graphs < 100:
        raise InputError("--conditions, --clients and --requests must be positive, --graphs at least 100")
    run(conditions, graphs, clients, request_count, seed)


@bench.command("sparql")
@click.option("--triples", default=100_000, show_default=True, help="Size of the queried graph.")
@click.option("--queries", default=200, show_default=True, help="Runs of each query.")
@click.option("--updates", default="1000,4000,16000", show_default=True,
              help="Comma-separated INSERT DATA sizes (triples).")
@click.option("--baseline-limit", default=4000, show_default=True,
              help="Largest update the previous release's rdflib translation is timed for (it grows as N squared).")
def bench_sparql(triples: int, queries: int, updates: str, baseline_limit: int) -> None:
    """Guarded SPARQL queries and updates over HTTP, against in-process pyoxigraph and rdflib."""
    from lucid_hub.tools.bench.sparql import run

    sizes = _counts(updates, "--updates")
    if triples < 2 or queries < 2 or any(n < 1 for n in sizes):
        raise InputError("--triples and --queries must be at least 2, --updates positive")
    run(triples=triples, queries=queries, updates=sizes, baseline_limit=baseline_limit)


@bench.command("e2e")
@click.option("--mirrors", default="1,10", show_default=True, help="Comma-separated mirror counts (partner hubs).")
@click.option("--patches", default=100, show_default=True, help="Patches per latency run.")
@click.option("--rate", default=10.0, show_default=True, help="Patches per second in the latency runs.")
@click.option("--missed", default=10_000, show_default=True, help="Patches a stopped mirror catches up on (0: skip).")
@click.option("--triples", default=100_000, show_default=True, help="Triples of the large patch (0: skip).")
def bench_e2e(mirrors: str, patches: int, rate: float, missed: int, triples: int) -> None:
    """Publisher to mirrors: latency, catch-up rate, large-patch apply against pyoxigraph's load."""
    from lucid_hub.tools.bench.e2e import run

    counts = _counts(mirrors, "--mirrors")
    if any(n < 1 for n in counts) or patches < 1 or rate <= 0 or missed < 0 or triples < 0:
        raise InputError("--mirrors, --patches and --rate must be positive, --missed and --triples at least 0")
    run(counts, patches, rate, missed, triples)


@bench.command("fanout")
@click.option("--subscribers", default="1,10,100,1000", show_default=True, help="Comma-separated counts.")
@click.option("--deliveries", default=2000, show_default=True,
              help="Deliveries per run (patches = this / subscribers).")
@click.option("--kafka/--no-kafka", default=True, show_default=True, help="Also run with the Kafka log.")
@click.option("--baseline", default="", help="Broker URL (e.g. redis://127.0.0.1:6379/15) to run flask-websub's "
              "hub with its Celery worker as the baseline (needs flask-websub, celery, redis).")
@click.option("--workers", default=0, show_default=True,
              help="Delivery worker processes beside serve (0: serve delivers in process).")
@click.option("--database", default="", help="Database URL for the hub (default: SQLite in its data directory); "
              "its tables are dropped before each run.")
def bench_fanout(subscribers: str, deliveries: int, kafka: bool, baseline: str, workers: int, database: str) -> None:
    """WebSub fan-out: deliveries/s and publish-to-delivered latency to loopback callbacks."""
    from lucid_hub.tools.bench.fanout import run

    counts = _counts(subscribers, "--subscribers")
    if any(n < 1 for n in counts) or deliveries < 1 or workers < 0:
        raise InputError("--subscribers and --deliveries must be positive, --workers at least 0")
    run(counts, deliveries, kafka, baseline, workers, database)


@bench.command("scale")
@click.option("--replicas", default="1,2,3", show_default=True, help="Comma-separated counts of serve processes.")
@click.option("--database", default="postgresql+psycopg://postgres@127.0.0.1:5432/bench_scale", show_default=True,
              help="PostgreSQL URL shared by the replicas; its tables are dropped before each run.")
@click.option("--reads", default=2000, show_default=True, help="Graph GETs, and SPARQL queries, per run.")
@click.option("--publishes", default=2000, show_default=True, help="Small publishes per run.")
@click.option("--clients", default=4, show_default=True, help="Load client processes.")
def bench_scale(replicas: str, database: str, reads: int, publishes: int, clients: int) -> None:
    """Hub replicas on one database: reads, queries and publishes per second, lag, start times."""
    from lucid_hub.tools.bench.scale import run

    counts = _counts(replicas, "--replicas")
    if any(n < 1 for n in counts) or min(reads, publishes, clients) < 1:
        raise InputError("--replicas, --reads, --publishes and --clients must be positive")
    if not database.startswith("postgresql"):
        raise InputError("--database must be a PostgreSQL URL: replicas share the archive there")
    run(counts, database, reads, publishes, clients)


@bench.command("console")
@click.option("--patches", default=10_000, show_default=True, help="Patches in the graph.")
@click.option("--subscriptions", default=1_000, show_default=True, help="Subscriptions to it.")
@click.option("--runs", default=20, show_default=True, help="Renders of each page.")
def bench_console(patches: int, subscriptions: int, runs: int) -> None:
    """The console's pages: render times with a long history and many subscribers (goal 300 ms)."""
    from lucid_hub.tools.bench.console import run

    if min(patches, subscriptions, runs) < 1:
        raise InputError("--patches, --subscriptions and --runs must be positive")
    run(patches, subscriptions, runs)


@bench.command("tls")
@click.option("--deliveries", default=3000, show_default=True, help="POSTs per run.")
@click.option("--in-flight", default=16, show_default=True, help="POSTs in flight at once.")
def bench_tls(deliveries: int, in_flight: int) -> None:
    """Deliveries to an https callback: HTTP/1.1 (aiohttp) against HTTP/2 (httpcore)."""
    import importlib.util

    if deliveries < 1 or in_flight < 1:
        raise InputError("--deliveries and --in-flight must be positive")
    missing = [name for name in ("hypercorn", "trustme") if importlib.util.find_spec(name) is None]
    if missing:
        raise InputError(f"bench tls needs {' and '.join(missing)} (pip install -e '.[bench]')")
    from lucid_hub.tools.bench.tls import run

    click.echo(f"== {deliveries} deliveries to an https callback on loopback, {in_flight} in flight")
    run(deliveries, in_flight)


@bench.command("hostile")
@click.option("--samples", default=100, show_default=True, help="Measurements of the well-behaved party per phase.")
@click.option("--attacks", default="empty,repeat,huge,trickle,dribble", show_default=True,
              help="Hostile publishers' archive pages to mirror beside a good one (comma-separated; empty: none).")
def bench_hostile(samples: int, attacks: str) -> None:
    """A well-behaved party's p99 beside a hostile partner, against its p99 alone."""
    if samples < 10:
        raise InputError("--samples must be 10 or more (a p99 of fewer is the maximum)")
    from lucid_hub.tools.bench.hostile import run

    run(samples, [a for a in attacks.split(",") if a])


@bench.command("push")
@click.option("--connections", default=10_000, show_default=True, help="Push channels (SSE clients) to hold open.")
@click.option("--events", default=20, show_default=True, help="Events to fan out to every client, one at a time.")
@click.option("--samples", default=200, show_default=True, help="Requests per p99, with and without the channels.")
def bench_push(connections: int, events: int, samples: int) -> None:
    """Memory, request latency and fan-out latency with thousands of open push channels."""
    if connections < 1 or events < 1 or samples < 10:
        raise InputError("--connections and --events must be 1 or more, --samples 10 or more")
    from lucid_hub.tools.bench.push import run

    run(connections, events, samples)


@bench.command("queries")
@click.option("--subscriptions", default="10,100,1000", show_default=True, help="Comma-separated counts.")
@click.option("--patches", default=200, show_default=True, help="Patches per phase (steady rate, then a burst).")
@click.option("--rate", default=20.0, show_default=True, help="Patches per second in the latency phase.")
@click.option("--idle", default=1000, show_default=True,
              help="Idle subscriptions added after the last count to measure memory per subscription (0: skip).")
@click.option("--seed", default=1, show_default=True)
def bench_queries(subscriptions: str, patches: int, rate: float, idle: int, seed: int) -> None:
    """Continuous query subscriptions: latency, notifications/s, evaluations per patch, memory,
    against the naive strategy (re-run every subscription after every patch)."""
    from lucid_hub.tools.bench.queries import run

    counts = _counts(subscriptions, "--subscriptions")
    if any(n < 1 for n in counts) or patches < 1 or rate <= 0 or idle < 0:
        raise InputError("--subscriptions, --patches and --rate must be positive, --idle at least 0")
    run(counts, patches, rate, idle, seed)


@bench.command("streams")
@click.option("--triples", default=100_000, show_default=True, help="Triples of the graph before its patches.")
@click.option("--patches", default=1000, show_default=True, help="Patches after it (five entity changes each).")
@click.option("--clients", default="100,1000", show_default=True, help="Comma-separated SSE client counts.")
@click.option("--events", default=50, show_default=True, help="Patches per fan-out latency phase.")
@click.option("--rate", default=10.0, show_default=True, help="Patches per second in the latency phase.")
@click.option("--burst", default=50, show_default=True, help="Patches published as fast as possible for events/s.")
@click.option("--seed", default=1, show_default=True)
def bench_streams(triples: int, patches: int, clients: str, events: int, rate: float, burst: int, seed: int) -> None:
    """Streams as Linked Data: replicating a history over LDES against the patch archive, and
    Server-Sent Events fan-out latency and events/s against one client."""
    from lucid_hub.tools.bench.streams import run

    counts = _counts(clients, "--clients")
    if triples < 10 or patches < 1 or events < 1 or burst < 1 or rate <= 0 or any(n < 1 for n in counts):
        raise InputError("--triples must be at least 10; --patches, --events, --burst, --rate and --clients positive")
    run(triples, patches, counts, events, rate, burst, seed)


@bench.command("rules")
@click.option("--rules", "counts", default="10,100,1000", show_default=True,
              help="Comma-separated counts of non-matching rules (the set grows through them).")
@click.option("--publishes", default=500, show_default=True, help="Small patches published per run.")
@click.option("--patches", default=20, show_default=True,
              help="Partner patches in the across-companies run (three hub processes; 0: skip).")
@click.option("--rate", default=2.0, show_default=True, help="Partner patches per second.")
def bench_rules(counts: str, publishes: int, patches: int, rate: float) -> None:
    """Rules: added publish latency and throughput with 0-1,000 rules (one matching immediate
    rule, the rest not matching), and partner patch -> derived patch at a third hub."""
    from lucid_hub.tools.bench.rules import run

    numbers = sorted(_counts(counts, "--rules"))
    if any(n < 1 for n in numbers) or publishes < 2 or patches < 0 or rate <= 0:
        raise InputError("--rules and --rate must be positive, --publishes at least 2, --patches at least 0")
    run(numbers, publishes, patches, rate)


@bench.command("diff")
@click.option("--sizes", default="1000000,10000000", show_default=True,
              help="Comma-separated snapshot sizes in triples; the scaling factor is last / first.")
@click.option("--work", type=click.Path(path_type=Path, file_okay=False), default=Path("bench-data"),
              show_default=True, help="Directory for the generated snapshots (kept and reused).")
@click.option("--master", default="local[2]", show_default=True, help="Spark master of the Spark runs.")
@click.option("--engines", default="local,spark", show_default=True, help="Engines to run besides sort+comm.")
@click.option("--floor/--no-floor", default=True, show_default=True,
              help="Also time Spark's floor: the lines read and grouped, no RDF parsing.")
def bench_diff(sizes: str, work: Path, master: str, engines: str, floor: bool) -> None:
    """Snapshot diffs: Spark and local engines against LC_ALL=C sort + comm on the same files."""
    from lucid_hub.tools.bench.diff import run

    numbers = _counts(sizes, "--sizes")
    chosen = [e.strip() for e in engines.split(",") if e.strip()]
    if any(e not in ("local", "spark") for e in chosen) or any(n <= 0 for n in numbers):
        raise InputError("--engines takes local and/or spark; --sizes positive numbers")
    run(numbers, work, master, chosen, floor)


def _counts(text: str, option: str) -> list[int]:
    """A benchmark option's comma-separated numbers (1_000_000 spelling allowed)."""
    try:
        return [int(n.replace("_", "")) for n in text.split(",") if n.strip()]
    except ValueError:
        raise InputError(f"{option} {text!r}: expected comma-separated numbers") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


@cli.group()
def rules() -> None:
    """Event-condition-action rules (docs/rules.md). On this hub's data directory, or on a
    running hub with --hub URL and a token that may write the rules' graphs (or admin)."""


def _rule_file(file: Path) -> str:
    from lucid_hub.rules.language import MAX_RULE_BYTES

    try:
        if file.stat().st_size > MAX_RULE_BYTES:
            raise InputTooLargeError(f"{file}: a rule file is at most {MAX_RULE_BYTES:,} bytes")
        return file.read_bytes().decode("utf-8")
    except OSError as exc:
        raise InputError(f"{file}: cannot read the rule file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{file}: a rule file is UTF-8 (byte {exc.start} is not)") from None


@contextmanager
def _runtime(state: _Context) -> Iterator[Any]:
    from lucid_hub.runtime import Runtime

    with _saying_if_new(state):
        rt = Runtime.open(state.settings)
        try:
            yield rt
        finally:
            rt.close()


def _hub_for(state: _Context, hub_url: str | None, token: str | None) -> tuple[str, str | None] | None:
    """Where a command that needs the hub's parts sends its request: to `--hub`, or to the hub
    serving this data directory (it holds the store; lucid_hub.commands.handoff); None: open
    the data directory here (no hub serves it)."""
    if hub_url:
        return hub_url, token
    from lucid_hub.commands.handoff import running

    found = running(state.settings)
    return (found.url, found.token) if found else None


def _remote(hub_url: str, token: str | None, method: str, path: str, **kwargs: Any) -> Any:
    """A call to a running hub's API; its JSON (None when it has no body). One line on failure."""
    import requests

    if not token:
        raise InputError("--hub needs --token (or LUCID_HUB_TOKEN): an access token that may write the rules' "
                         "graphs, or an admin's")
    try:
        answer = requests.request(method, hub_url.rstrip("/") + path, timeout=60,
                                  headers={"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}, **kwargs)
    except requests.RequestException as exc:
        raise RemoteUnreachableError(f"cannot reach the hub at {hub_url}: {type(exc).__name__}") from None
    if answer.status_code >= 400:
        try:
            detail = answer.json().get("detail") or answer.text
        except ValueError:
            detail = answer.text
        raise RemoteRefusedError(f"{hub_url} answered {answer.status_code}: {_one_line(str(detail))[:500]}",
                                 answer.status_code)
    return answer.json() if answer.content else None


_hub_option = click.option("--hub", "hub_url", type=URL, help="A running hub's URL (else: the hub of LUCID_DATA_DIR).")
_token_option = click.option("--token", envvar="LUCID_HUB_TOKEN", help="Access token for --hub (or LUCID_HUB_TOKEN).")


@rules.command("add")
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@_hub_option
@_token_option
@pass_ctx
def rules_add(state: _Context, file: Path, hub_url: str | None, token: str | None) -> None:
    """Add the rules of a file (a rule with an IRI already there is replaced); refused with the
    reason when a rule is not in the language, may not be defined, or the set can fire forever."""
    import json

    text = _rule_file(file)
    remote = _hub_for(state, hub_url, token)
    if remote:
        added = _remote(*remote, "POST", "/rules", data=text.encode(),
                        headers={"Content-Type": "text/plain; charset=utf-8"})["rules"]
    else:
        from lucid_hub.rules.model import OPERATOR

        with _runtime(state) as rt:
            added = [r.describe() for r in rt.rules.add(text, OPERATOR, f"operator (rules add {file.name})")]
    click.echo(json.dumps({"added": [r["iri"] for r in added]}, indent=2))


@rules.command("list")
@_hub_option
@_token_option
@pass_ctx
def rules_list(state: _Context, hub_url: str | None, token: str | None) -> None:
    """The rules as JSON (IRI, priority, coupling, event graph, action, owner)."""
    import json

    remote = _hub_for(state, hub_url, token)
    if remote:
        found = _remote(*remote, "GET", "/rules")["rules"]
    else:
        with _runtime(state) as rt:
            found = [r.describe() for r in rt.rules.rules()]
    click.echo(json.dumps([{k: v for k, v in r.items() if k != "text"} for r in found], indent=2))


@rules.command("show")
@click.argument("iri", type=IRI)
@_hub_option
@_token_option
@pass_ctx
def rules_show(state: _Context, iri: str, hub_url: str | None, token: str | None) -> None:
    """A rule's text, and its recent firings (as JSON)."""
    import json

    remote = _hub_for(state, hub_url, token)
    if remote:
        rule = _remote(*remote, "GET", "/rules", params={"iri": iri})
        history = _remote(*remote, "GET", "/rules/firings", params={"rule": iri, "limit": 20})["firings"]
    else:
        with _runtime(state) as rt:
            rule = rt.rules.get(iri).describe()
            history = rt.rules.history(iri, 20)
    click.echo(rule["text"].rstrip())
    click.echo(json.dumps({"firings": history}, indent=2))


@rules.command("remove")
@click.argument("iri", type=IRI)
@_hub_option
@_token_option
@pass_ctx
def rules_remove(state: _Context, iri: str, hub_url: str | None, token: str | None) -> None:
    """Remove a rule (a signed patch of the rules graph, like every change)."""
    remote = _hub_for(state, hub_url, token)
    if remote:
        _remote(*remote, "DELETE", "/rules", params={"iri": iri})
    else:
        from lucid_hub.rules.model import OPERATOR

        with _runtime(state) as rt:
            rt.rules.remove(iri, OPERATOR, "operator (rules remove)")
    click.echo(f"removed <{iri}>")


@rules.command("explain")
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
def rules_explain(file: Path) -> None:
    """Check a rule file and show its triggering graph: exit 0 when the set terminates, 1
    with the reason when it is not in the language or can fire forever."""
    from lucid_hub.rules.analysis import analyse
    from lucid_hub.rules.language import parse_rules

    found = parse_rules(_rule_file(file))
    analysis = analyse(found)
    click.echo(f"{len(found)} rule(s)")
    click.echo(analysis.explain())
    if not analysis.terminates:
        raise InputError(f"{file}: {len(analysis.unbounded)} cycle(s) without a BOUND on every rule: "
                         "the set can fire forever")


@rules.command("test")
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--patch", "patch_file", required=True, type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="An RDF Patch (A/D lines) of one graph: the change to try the rules on.")
@click.option("--graph", type=IRI, help="The patch's graph (when the patch does not name it with H graph).")
@pass_ctx
def rules_test(state: _Context, file: Path, patch_file: Path, graph: str | None) -> None:
    """Run the rules of FILE on a patch, against this hub's graphs as they are, writing
    nothing: prints each firing as a JSON line (rule, depth, instances, kept, edits or rows)."""
    import json

    from lucid_hub.rdf.rdfpatch import parse_rdf_patch

    raw = _read_limited(patch_file, state.settings.max_body_bytes, "the patch")
    doc = parse_rdf_patch(raw, state.canonicalizer, graph=graph)
    target = graph or doc.iri("graph")
    if not target:
        raise InputError(f"{patch_file}: name the patch's graph with --graph (or H graph <iri> in the patch)")
    remote = _hub_for(state, None, None)
    if remote:
        firings = _remote(*remote, "POST", "/admin/rules/test", json={
            "rules": _rule_file(file), "graph": target, "patch": raw.decode("utf-8", errors="replace")})["firings"]
    else:
        removed = [s for m in doc.removed for s in m.statements]
        added = [s for m in doc.added for s in m.statements]
        with _runtime(state) as rt:
            firings = rt.rules.simulate(_rule_file(file), target, removed, added)
    for firing in firings:
        click.echo(json.dumps(firing, sort_keys=True))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    try:
        result = cli.main(args=argv, prog_name="lucid-hub", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.UsageError as exc:
        click.echo(f"lucid-hub: usage: {_one_line(exc.format_message())} (see --help)", err=True)
        return EXIT_USAGE
    except click.Abort:
        click.echo("lucid-hub: aborted", err=True)
        return EXIT_ERROR
    except click.ClickException as exc:  # e.g. a benchmark that could not run
        click.echo(f"lucid-hub: error: {_one_line(exc.format_message())}", err=True)
        return EXIT_ERROR
    except LucidError as exc:
        click.echo(f"lucid-hub: error: {_one_line(str(exc))}", err=True)
        return EXIT_ERROR
    except BrokenPipeError:
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the promise is one line, never a traceback
        click.echo(f"lucid-hub: internal error: {type(exc).__name__}: {_one_line(str(exc))}",
                   err=True)
        return EXIT_INTERNAL
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
