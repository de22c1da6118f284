"""What every `lucid-hub` command shares: the root group and its settings, argument types,
and the hub's database and parts opened for a command."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import pyoxigraph as ox

from lucid_hub import __version__
from lucid_hub.config import Settings
from lucid_hub.errors import InputError, InputTooLargeError
from lucid_hub.rdf.canon import Canonicalizer

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70


class Context:
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


pass_ctx = click.make_pass_decorator(Context)


class Iri(click.ParamType[str]):
    """An absolute IRI (a graph's, a rule's): a usage error naming the option otherwise."""

    name = "IRI"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            ox.NamedNode(str(value))
        except ValueError:
            self.fail(f"{value!r} is not an absolute IRI (such as https://acme.example/graphs/kpi)", param, ctx)
        return str(value)


IRI = Iri()


class Url(click.ParamType[str]):
    """An http(s) URL (a hub's): a usage error naming the option otherwise."""

    name = "URL"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text.startswith(("http://", "https://")) or len(text.split("//", 1)[1].strip("/")) == 0:
            self.fail(f"{text!r} is not an http(s) URL (such as https://hub.acme.example)", param, ctx)
        return text


URL = Url()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lucid-hub")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """lucid-hub: publish RDF named graphs as signed, hash-chained patches and mirror
    your partners' graphs. Settings come from LUCID_* environment variables."""
    state = Context(Settings.from_env())
    ctx.obj = state
    ctx.call_on_close(state.close)


def read_limited(path: Path, limit: int, what: str) -> bytes:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if size > limit:
        raise InputTooLargeError(
            f"{path}: {what} of {size} bytes exceeds the limit of {limit} bytes (LUCID_MAX_PATCH_BYTES)"
        )
    return path.read_bytes()


@contextmanager
def saying_if_new(state: Context) -> Iterator[None]:
    """Around a command that writes: if it made a new hub's data directory, it says where (a
    mistyped LUCID_DATA_DIR shows here, not as a client the running hub never heard of)."""
    settings = state.settings
    marker = settings.data_dir / "lucid-hub.db"
    new = not settings.database_configured and not marker.is_file()
    try:
        yield
    finally:
        if new and marker.is_file():
            click.echo(f"lucid-hub: made a new hub's data directory: {settings.data_dir} (LUCID_DATA_DIR)", err=True)


@contextmanager
def open_database(state: Context, *, writes: bool = True) -> Iterator[Any]:
    """The hub's database. A command that only reads needs an existing hub's (it never makes a
    data directory or a schema where a mistyped LUCID_DATA_DIR points); one that writes makes
    a new hub's when there is none, and says where."""
    from lucid_hub.db.session import Database

    settings = state.settings
    if not writes and not settings.database_configured and not (settings.data_dir / "lucid-hub.db").is_file():
        raise InputError(f"no hub's data at {settings.data_dir} (LUCID_DATA_DIR): point LUCID_DATA_DIR at the "
                         "data directory of the hub `lucid-hub serve` runs on")
    with saying_if_new(state) if writes else contextlib.nullcontext():
        if writes:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
        database = Database(settings.db_url)
        try:
            if writes:
                database.upgrade()
            elif not database.is_current():
                raise InputError("the database (LUCID_DATABASE_URL or _HOST) holds no lucid-hub schema: start the hub "
                                 "or run `lucid-hub db upgrade` first")
            yield database
        finally:
            database.dispose()


def one_line(text: str) -> str:
    return " ".join(text.split())


@contextmanager
def open_runtime(state: Context) -> Iterator[Any]:
    from lucid_hub.runtime import Runtime

    with saying_if_new(state):
        rt = Runtime.open(state.settings)
        try:
            yield rt
        finally:
            rt.close()


def hub_for(state: Context, hub_url: str | None, token: str | None) -> tuple[str, str | None] | None:
    """Where a command that needs the hub's parts sends its request: to `--hub`, or to the hub
    serving this data directory (it holds the store; lucid_hub.commands.handoff); None: open
    the data directory here (no hub serves it)."""
    if hub_url:
        return hub_url, token
    from lucid_hub.commands.handoff import running

    found = running(state.settings)
    return (found.url, found.token) if found else None


def call_hub(hub_url: str, token: str | None, method: str, path: str, **kwargs: Any) -> Any:
    """A call to a running hub's API (lucid_hub.client.HubClient); its JSON (None when it has
    no body). One line on failure."""
    from lucid_hub.client.hub_client import HubClient

    if not token:
        raise InputError("--hub needs --token (or LUCID_HUB_TOKEN): an access token that may write the rules' "
                         "graphs, or an admin's")
    return HubClient(hub_url, token=token).api(method, path, **kwargs)
