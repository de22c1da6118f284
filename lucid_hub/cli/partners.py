"""Commands on who the hub deals with: mirrors of partners' graphs, OAuth clients, admin accounts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from lucid_hub.cli.base import (
    IRI,
    URL,
    Context,
    call_hub,
    cli,
    hub_for,
    open_database,
    pass_ctx,
)
from lucid_hub.errors import InputError


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
def mirror_add(state: Context, hub_url: str | None, graph: str | None, graph_url: str | None, client_id: str,
               client_secret: str, trust_jwks: str | None) -> None:
    """Mirror a graph of another hub; prints the mirror as JSON."""


    jwks = _jwks_source(trust_jwks)
    remote = hub_for(state, None, None)
    if remote:
        added = call_hub(*remote, "POST", "/admin/mirrors", json={
            "hub": hub_url, "graph": graph, "from": graph_url, "client_id": client_id,
            "client_secret": client_secret, "trust_jwks": jwks})
    else:
        with open_database(state) as database:
            added = _registry(state, database).add(graph=graph, hub_url=hub_url,
                               client_id=client_id, client_secret=client_secret, trust_jwks=jwks,
                               graph_url=graph_url)
    click.echo(json.dumps(added, indent=2))


@mirror.command("list")
@pass_ctx
def mirror_list(state: Context) -> None:
    """The mirrors as JSON: state, head, counts of applied and quarantined patches."""


    remote = hub_for(state, None, None)
    if remote:
        found = call_hub(*remote, "GET", "/admin/mirrors")["mirrors"]
    else:
        with open_database(state, writes=False) as database:
            found = _registry(state, database).list()
    click.echo(json.dumps(found, indent=2))


@mirror.command("remove")
@click.argument("mirror_ref", metavar="ID_OR_GRAPH")
@pass_ctx
def mirror_remove(state: Context, mirror_ref: str) -> None:
    """Stop mirroring (the hub unsubscribes); the local copy stays readable until purged."""

    remote = hub_for(state, None, None)
    if remote:
        call_hub(*remote, "DELETE", "/admin/mirrors", params={"id": mirror_ref})
    else:
        with open_database(state) as database:
            _registry(state, database).remove(mirror_ref)
    click.echo(f"mirror {mirror_ref} removed")


@mirror.command("trust")
@click.argument("mirror_ref", metavar="ID_OR_GRAPH")
@click.option("--jwks", "source", required=True, help="URL or file of the publisher's public keys (JWKS) to pin.")
@click.option("--replace", is_flag=True, help="Accept a JWKS without the keys pinned so far (the publisher lost "
                                              "its old key); otherwise it must keep them.")
@pass_ctx
def mirror_trust(state: Context, mirror_ref: str, source: str, replace: bool) -> None:
    """Pin the publisher's keys again after it rotated its key; prints the mirror as JSON.
    Patches quarantined for the unknown key are then fetched again and applied."""


    jwks = _jwks_source(source)
    assert jwks is not None
    remote = hub_for(state, None, None)
    if remote:
        mirrors = call_hub(*remote, "GET", "/admin/mirrors")["mirrors"]
        ident = next((m["id"] for m in mirrors if mirror_ref in (m["id"], m["graph"])), mirror_ref)
        trusted = call_hub(*remote, "POST", f"/admin/mirrors/{ident}/trust", json={"jwks": jwks, "replace": replace})
    else:
        with open_database(state) as database:
            trusted = _registry(state, database).trust(mirror_ref, jwks,
                                   replace=replace)
    click.echo(json.dumps(trusted, indent=2))



def _registry(state: Context, database: Any) -> Any:
    """The mirrors' registry on a database a command opened."""
    from lucid_hub.mirror import MirrorRegistry
    from lucid_hub.outbound import AddressPolicy

    return MirrorRegistry(database, AddressPolicy.of(state.settings))


@cli.group()
def clients() -> None:
    """OAuth clients of partners (client credentials grant). Beside the hub that serves the
    data directory, these commands go through it."""


@clients.command("create")
@click.option("--name", required=True, help="Who the client is (a partner's hub, a publisher's job).")
@click.option("--group", "groups", multiple=True, help="A group access conditions can require (repeatable).")
@click.option("--attribute", "attributes", multiple=True,
              help="claim=value its tokens carry, for conditions' requiresAttribute, e.g. tier=gold (repeatable).")
@click.option("--scope", "scopes", multiple=True,
              help="graphs:read, graphs:write, hub:subscribe or admin (repeatable; default: graphs:read "
                   "hub:subscribe).")
@click.option("--callback-prefix", "callback_prefixes", multiple=True,
              help="URL prefix the client's WebSub callbacks must start with (repeatable).")
@pass_ctx
def clients_create(state: Context, name: str, groups: tuple[str, ...], attributes: tuple[str, ...],
                   scopes: tuple[str, ...], callback_prefixes: tuple[str, ...]) -> None:
    """Create a client; prints JSON with client_id and client_secret (shown only now)."""

    from lucid_hub.auth.clients import ClientRegistry

    words = [w for s in scopes for w in s.split()]
    remote = hub_for(state, None, None)
    if remote:
        created = call_hub(*remote, "POST", "/admin/clients", json={"name": name, "groups": list(groups),
                                                                     "attributes": list(attributes),
                                                                     "scopes": words or None,
                                                                     "callback_prefixes": list(callback_prefixes)})
    else:
        with open_database(state) as database:
            record, secret = ClientRegistry(database).create(
                name, groups=list(groups), scopes=words or None, callback_prefixes=list(callback_prefixes),
                attributes=list(attributes))
        created = {**record.to_json(), "client_secret": secret}
    click.echo(json.dumps(created, indent=2))


@clients.command("list")
@pass_ctx
def clients_list(state: Context) -> None:
    """List the clients (without secrets) as JSON."""

    from lucid_hub.auth.clients import ClientRegistry

    remote = hub_for(state, None, None)
    if remote:
        found = call_hub(*remote, "GET", "/admin/clients")["clients"]
    else:
        with open_database(state, writes=False) as database:
            found = [c.to_json() for c in ClientRegistry(database).list()]
    click.echo(json.dumps(found, indent=2))


@clients.command("delete")
@click.argument("client_id")
@pass_ctx
def clients_delete(state: Context, client_id: str) -> None:
    """Delete a client (its tokens stop working when they expire; revoke them to stop them now)."""
    from lucid_hub.auth.clients import ClientRegistry

    remote = hub_for(state, None, None)
    if remote:
        call_hub(*remote, "DELETE", f"/admin/clients/{client_id}")
    else:
        with open_database(state) as database:
            ClientRegistry(database).delete(client_id)
    click.echo(f"deleted {client_id}")


@cli.group("admin")
def admin_group() -> None:
    """Accounts of the admin page."""


@admin_group.command("create")
@click.option("--username", required=True)
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input (else: a prompt).")
@pass_ctx
def admin_create(state: Context, username: str, password_stdin: bool) -> None:
    """Create an admin account for the admin page (/admin/ui/)."""
    from lucid_hub.auth.admins import AdminAccounts

    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = click.prompt("password", hide_input=True, confirmation_prompt=True)
    with open_database(state) as database:
        AdminAccounts(database).create(username, password)
    click.echo(f"admin account {username} created")
