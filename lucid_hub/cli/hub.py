"""Commands that run or look into this hub: demo, serve, publish, capture, subscribe, worker, log, db."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import click

from lucid_hub.cli.base import (
    IRI,
    URL,
    Context,
    cli,
    hub_for,
    open_database,
    pass_ctx,
    read_limited,
    saying_if_new,
)
from lucid_hub.config import listening_url
from lucid_hub.errors import InputError


@cli.command()
@click.option("--dir", "workdir", type=click.Path(path_type=Path, file_okay=False),
              help="Keep the hubs' data directories (or the offline demo's keys and patches) here "
                   "(default: a temporary directory).")
@click.option("--offline", is_flag=True, help="The patch chain alone, in this process: diff, sign, verify, apply.")
@pass_ctx
def demo(state: Context, workdir: Path | None, offline: bool) -> None:
    """Two hubs (publisher and partner) on loopback, the whole chain, and a report (embedded
    defaults, nothing to install). Exit 0 only if everything verified."""
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    if offline:
        from lucid_hub.demo.offline import run as run_offline

        run_offline(workdir, click.echo, state.canonicalizer)
        return
    from lucid_hub.demo import run

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
def serve(state: Context, host: str | None, port: int | None, server_kind: str, workers: int | None,
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
@click.option("--meta", "meta_pairs", nargs=2, multiple=True, metavar="PREDICATE VALUE",
              help="Metadata signed with the patch (repeatable): a predicate IRI and a value, "
              "<IRI>, an N-Triples literal, or plain text.")
@pass_ctx
def publish(state: Context, file: Path, graph: str, message: str, author: str, hub_url: str | None,
            input_format: str | None, engine: str, meta_pairs: tuple[tuple[str, str], ...]) -> None:
    """Publish FILE as the new version of a graph (replace semantics)."""
    from lucid_hub.commands.publish_file import publish_file
    from lucid_hub.rdf.metadata import from_pair, normalise

    metadata = normalise(from_pair(predicate, value) for predicate, value in meta_pairs)

    who = author or os.environ.get("USER", "") or "cli"
    remote = hub_for(state, hub_url, None)  # (beside a hub serving the data directory: through it)
    with saying_if_new(state):
        publish_file(state.settings, file, graph, author=who, message=message, hub_url=remote and remote[0],
                     fmt=input_format, canonicalizer=state.canonicalizer, echo=click.echo, engine=engine,
                     token=remote and remote[1], metadata=metadata)


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

    query = read_limited(query_file, 1_000_000, "query").decode("utf-8", errors="replace")
    follow(hub_url, query, state_file=state_file or default_state(hub_url, query), as_json=as_json, count=count,
           echo=click.echo, default_graphs=list(graphs) or None)


@cli.command()
@click.option("--name", help="This worker's name in claims and logs (default: host:pid:random).")
@pass_ctx
def worker(state: Context, name: str | None) -> None:
    """Deliver WebSub notifications (beside `serve`; set LUCID_DELIVER_IN_PROCESS=false there to
    leave all delivery to workers). Several workers share the subscriptions."""
    from lucid_hub.commands.delivery_worker import run_worker
    from lucid_hub.logging_setup import configure_logging

    configure_logging(state.settings.log_format, state.settings.log_level.upper())
    run_worker(state.settings, name)


@cli.command()
@click.option("--graph", "graphs", type=IRI, multiple=True,
              help="IRI of a graph the hub keeps in the operator's store (repeat; default: every owned one).")
@click.option("--hub", "hub_url", type=URL, help="URL of a running hub (default: the hub of LUCID_DATA_DIR).")
@click.option("--token", envvar="LUCID_HUB_TOKEN", help="An admin's access token for --hub (or LUCID_HUB_TOKEN).")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True,
              help="Diff engine (without a running hub): spark for large graphs (LUCID_SPARK_MASTER).")
@click.option("--store", "store", help="The store to capture from, where several keep the graph.")
@pass_ctx
def capture(state: Context, graphs: tuple[str, ...], hub_url: str | None, token: str | None, engine: str,
            store: str | None) -> None:
    """Publish what applications changed in the operator's store as patches (author `capture`)."""
    remote = hub_for(state, hub_url, token)  # (beside a hub serving the data directory: through it)
    if remote:
        from lucid_hub.cli.base import call_hub

        if not graphs:
            raise InputError("--graph is required with a running hub: name the graphs to capture")
        if engine == "spark":
            raise InputError("--engine spark needs the data directory to itself: the running hub diffs in its process")
        done = [call_hub(*remote, "POST", "/admin/store/capture", params={"graph": g, **({"store": store} if store
                                                                                          else {})}) for g in graphs]
    else:
        from lucid_hub.cli.base import open_runtime
        from lucid_hub.commands.publish_file import spark_diff

        diff = spark_diff(state.settings) if engine == "spark" else None
        with open_runtime(state) as runtime:
            assert runtime.capture is not None
            done = [vars(c) for c in ([runtime.capture.graph(g, diff, store) for g in graphs] if graphs
                                      else runtime.capture.all(diff))]
    for item in done:
        click.echo(f"<{item['graph']}>: " + (f"captured as {item['patch']} (-{item['removed']} +{item['added']})"
                                             if item["patch"] else "the store holds what the hub published"))


@cli.command("log")
@click.option("--graph", type=IRI, required=True, help="IRI of an owned graph.")
@pass_ctx
def log_command(state: Context, graph: str) -> None:
    """Print a graph's history: id, prev, author, time and counts, oldest first; below a
    patch, the metadata its publisher signed with it."""
    from lucid_hub.archive import Archive
    from lucid_hub.errors import NotFoundError
    from lucid_hub.rdf.rdfpatch import header_lines

    with open_database(state, writes=False) as db:  # the archive alone (no store): works beside a running hub
        archive = Archive(db)
        if not archive.exists(graph):
            raise NotFoundError(f"no graph <{graph}> in the archive at {state.settings.data_dir} (LUCID_DATA_DIR)")
        for record in archive.history(graph):
            click.echo(f"{record.id}  prev={record.prev or '-'}  {record.created:%Y-%m-%dT%H:%M:%SZ}  "
                       f"-{record.removed} +{record.added}  {record.author}  {record.message}")
            for line in header_lines(record.body, "meta"):  # (format 3: what the publisher attached)
                click.echo(f"    meta {line}")


@cli.group()
def db() -> None:
    """The hub's relational database."""


@db.command("upgrade")
@pass_ctx
def db_upgrade(state: Context) -> None:
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
def db_downgrade(state: Context, revision: str, yes: bool) -> None:
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


@cli.command()
@click.argument("target", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--keys", "keys", type=click.Choice(["encrypted", "plain", "omit"]), default="encrypted",
              show_default=True, help="The signing keys: encrypted with the passphrase, readable, or left out "
                                      "(when they come from a Secret of yours).")
@click.option("--passphrase-file", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="A file holding the passphrase the keys are encrypted with (12 bytes or more).")
@pass_ctx
def backup(state: Context, target: Path, keys: str, passphrase_file: Path | None) -> None:
    """Back this hub up into TARGET (.tar.gz) while it runs: the database as one consistent
    snapshot and the signing keys; the store is rebuilt at restore (docs/operations.md)."""
    from lucid_hub.commands.backup import backup as run_backup
    from lucid_hub.commands.backup import read_passphrase

    run_backup(state.settings, target, keys=keys, passphrase=read_passphrase(passphrase_file), echo=click.echo)


@cli.command()
@click.argument("source", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--passphrase-file", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="The passphrase the backup's keys were encrypted with.")
@pass_ctx
def restore(state: Context, source: Path, passphrase_file: Path | None) -> None:
    """Restore a backup into a new data directory (LUCID_DATA_DIR) and an empty database:
    every patch is verified and the store rebuilt before this says it is done."""
    from lucid_hub.commands.backup import read_passphrase
    from lucid_hub.commands.backup import restore as run_restore

    run_restore(state.settings, source, passphrase=read_passphrase(passphrase_file), echo=click.echo)
