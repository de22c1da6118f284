"""`lucid-hub rules …` (docs/rules.md): on this hub's data directory, or on a running hub through
its API (lucid_hub.client.HubClient)."""

from __future__ import annotations

import json
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
    open_runtime,
    pass_ctx,
    read_limited,
)
from lucid_hub.errors import InputError, InputTooLargeError


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


_hub_option = click.option("--hub", "hub_url", type=URL, help="A running hub's URL (else: the hub of LUCID_DATA_DIR).")
_token_option = click.option("--token", envvar="LUCID_HUB_TOKEN", help="Access token for --hub (or LUCID_HUB_TOKEN).")


@rules.command("add")
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@_hub_option
@_token_option
@pass_ctx
def rules_add(state: Context, file: Path, hub_url: str | None, token: str | None) -> None:
    """Add the rules of a file (a rule with an IRI already there is replaced); refused with the
    reason when a rule is not in the language, may not be defined, or the set can fire forever."""

    text = _rule_file(file)
    remote = hub_for(state, hub_url, token)
    if remote:
        added = call_hub(*remote, "POST", "/rules", data=text.encode(),
                        headers={"Content-Type": "text/plain; charset=utf-8"})["rules"]
    else:
        from lucid_hub.rules.model import OPERATOR

        with open_runtime(state) as rt:
            added = [r.describe() for r in rt.rules.add(text, OPERATOR, f"operator (rules add {file.name})")]
    click.echo(json.dumps({"added": [r["iri"] for r in added]}, indent=2))


@rules.command("list")
@_hub_option
@_token_option
@pass_ctx
def rules_list(state: Context, hub_url: str | None, token: str | None) -> None:
    """The rules as JSON (IRI, priority, coupling, event graph, action, owner)."""

    remote = hub_for(state, hub_url, token)
    if remote:
        found = call_hub(*remote, "GET", "/rules")["rules"]
    else:
        with open_runtime(state) as rt:
            found = [r.describe() for r in rt.rules.rules()]
    click.echo(json.dumps([{k: v for k, v in r.items() if k != "text"} for r in found], indent=2))


@rules.command("show")
@click.argument("iri", type=IRI)
@_hub_option
@_token_option
@pass_ctx
def rules_show(state: Context, iri: str, hub_url: str | None, token: str | None) -> None:
    """A rule's text, and its recent firings (as JSON)."""

    remote = hub_for(state, hub_url, token)
    if remote:
        rule = call_hub(*remote, "GET", "/rules", params={"iri": iri})
        history = call_hub(*remote, "GET", "/rules/firings", params={"rule": iri, "limit": 20})["firings"]
    else:
        with open_runtime(state) as rt:
            rule = rt.rules.get(iri).describe()
            history = rt.rules.history(iri, 20)
    click.echo(rule["text"].rstrip())
    click.echo(json.dumps({"firings": history}, indent=2))


@rules.command("remove")
@click.argument("iri", type=IRI)
@_hub_option
@_token_option
@pass_ctx
def rules_remove(state: Context, iri: str, hub_url: str | None, token: str | None) -> None:
    """Remove a rule (a signed patch of the rules graph, like every change)."""
    remote = hub_for(state, hub_url, token)
    if remote:
        call_hub(*remote, "DELETE", "/rules", params={"iri": iri})
    else:
        from lucid_hub.rules.model import OPERATOR

        with open_runtime(state) as rt:
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
def rules_test(state: Context, file: Path, patch_file: Path, graph: str | None) -> None:
    """Run the rules of FILE on a patch, against this hub's graphs as they are, writing
    nothing: prints each firing as a JSON line (rule, depth, instances, kept, edits or rows)."""

    from lucid_hub.rdf.rdfpatch import parse_rdf_patch

    raw = read_limited(patch_file, state.settings.max_body_bytes, "the patch")
    doc = parse_rdf_patch(raw, state.canonicalizer, graph=graph)
    target = graph or doc.iri("graph")
    if not target:
        raise InputError(f"{patch_file}: name the patch's graph with --graph (or H graph <iri> in the patch)")
    remote = hub_for(state, None, None)
    if remote:
        firings = call_hub(*remote, "POST", "/admin/rules/test", json={
            "rules": _rule_file(file), "graph": target, "patch": raw.decode("utf-8", errors="replace")})["firings"]
    else:
        removed = [s for m in doc.removed for s in m.statements]
        added = [s for m in doc.added for s in m.statements]
        with open_runtime(state) as rt:
            firings = rt.rules.simulate(_rule_file(file), target, removed, added)
    for firing in firings:
        click.echo(json.dumps(firing, sort_keys=True))


# --- rules offered between hubs (docs/rules.md, "Rules across hubs") ----------------------------

def _offers(state: Context, hub_url: str | None, token: str | None, method: str, path: str,
            act: Any, **kwargs: Any) -> Any:
    """Through a running hub's admin API, or on the data directory's hub (`act(offers)`)."""
    remote = hub_for(state, hub_url, token)
    if remote:
        return call_hub(*remote, method, f"/admin/rules/offers{path}", **kwargs)
    with open_runtime(state) as rt:
        assert rt.rule_offers is not None
        return act(rt.rule_offers)


@rules.command("offer")
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--to", "peer", type=URL, required=True, help="The partner hub's URL (where the rules would run).")
@click.option("--client-id", required=True, help="This hub's client at the partner (graphs:write).")
@click.option("--client-secret", envvar="LUCID_OFFER_CLIENT_SECRET", required=True,
              help="Its secret (or LUCID_OFFER_CLIENT_SECRET).")
@_hub_option
@_token_option
@pass_ctx
def rules_offer(state: Context, file: Path, peer: str, client_id: str, client_secret: str, hub_url: str | None,
                token: str | None) -> None:
    """Offer the rules of FILE to a partner hub: they run there, on its events, once its admin
    accepts; refused when they could fire forever with this hub's rules."""
    text = _rule_file(file)
    made = _offers(state, hub_url, token, "POST", "/outgoing",
                   lambda o: o.offer(peer, text, client_id, client_secret, f"operator (rules offer {file.name})"),
                   json={"hub": peer, "rules": text, "client_id": client_id, "client_secret": client_secret})
    click.echo(json.dumps({k: made[k] for k in ("id", "peer", "rules", "state", "location")}, indent=2))


@rules.command("offers")
@_hub_option
@_token_option
@pass_ctx
def rules_offers(state: Context, hub_url: str | None, token: str | None) -> None:
    """Offers of rules, both ways (JSON): partners' to this hub, and this hub's (asked how they stand)."""
    def listing(offers: Any) -> list[dict[str, Any]]:
        offers.refresh()
        return list(offers.all())

    found = _offers(state, hub_url, token, "GET", "", lambda o: {"offers": listing(o)})["offers"]
    click.echo(json.dumps([{k: v for k, v in o.items() if k != "text"} for o in found], indent=2))


DECISIONS = {"accept": "Accept a partner's offer: its rules run here, as the partner's party (refused with the "
                         "reason when they may not, or could fire forever).",
             "reject": "Reject a partner's offer (its rules never run).",
             "withdraw": "Withdraw an offer this hub made: the partner removes its rules."}


def _decision(verb: str) -> Any:
    @rules.command(verb, help=DECISIONS[verb])
    @click.argument("offer_id")
    @click.option("--reason", default="", help="Why (told to the offering hub; reject only).")
    @_hub_option
    @_token_option
    @pass_ctx
    def decide(state: Context, offer_id: str, reason: str, hub_url: str | None, token: str | None) -> None:
        offer_id = offer_id.removeprefix("urn:uuid:")
        who = f"operator (rules {verb})"
        acts = {"accept": lambda o: o.accept(offer_id, who), "reject": lambda o: o.reject(offer_id, who, reason),
                "withdraw": lambda o: o.withdraw(offer_id, who)}
        done = _offers(state, hub_url, token, "POST", f"/{verb}", acts[verb], params={"id": offer_id},
                       json={"reason": reason})
        click.echo(f"offer urn:uuid:{done['id']}: {done['state']}")
    return decide


for _verb in ("accept", "reject", "withdraw"):
    _decision(_verb)
