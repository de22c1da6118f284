"""`lucid-hub subscribe`: follow a continuous query at a hub (REST + Server-Sent Events),
printing the results and then each change as it arrives; the subscription id and the last
sequence seen are kept in a state file, so the next run resumes where this one stopped."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import requests

from lucid_hub.client import HubClient, hub_token
from lucid_hub.client.events import event_lines
from lucid_hub.errors import InputError, RemoteRefusedError, RemoteUnreachableError
from lucid_hub.outbound import explain

TIMEOUT = 30.0


def default_state(hub_url: str, query: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lucid-hub" / "subscriptions"
    return base / (hashlib.sha256(f"{hub_url}\n{query}".encode()).hexdigest()[:24] + ".json")


def _events(response: requests.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    event: dict[str, str] = {}
    for line in event_lines(response):
        if line == "":
            if "data" in event:
                yield event.get("event", "message"), json.loads(event["data"])
            event = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(":")
            event[key] = event.get(key, "") + value.removeprefix(" ")


def _row(binding: dict[str, Any]) -> str:
    def term(t: dict[str, Any]) -> str:
        if t["type"] == "uri":
            return f"<{t['value']}>"
        if t["type"] == "bnode":
            return f"_:{t['value']}"
        suffix = f"@{t['xml:lang']}" if "xml:lang" in t else (f"^^<{t['datatype']}>" if "datatype" in t else "")
        return json.dumps(t["value"]) + suffix

    return "  ".join(f"{name}={term(value)}" for name, value in binding.items())


def render(message: dict[str, Any]) -> list[str]:
    """A notification as lines for people: `+`/`-` rows (or the ASK answer)."""
    note = message["notification"]
    head = f"# {note['sequence']}" + (" (reset: the current results)" if note.get("reset") else "")
    lines = [head]
    added, removed = note["addedResults"], note["removedResults"]
    if "boolean" in added:
        return [*lines, f"= {str(added['boolean']).lower()}"]
    lines += [f"- {_row(b)}" for b in removed["results"]["bindings"]]
    lines += [f"+ {_row(b)}" for b in added["results"]["bindings"]]
    return lines


def follow(hub_url: str, query: str, *, state_file: Path, as_json: bool, count: int | None,
           echo: Callable[[str], None], default_graphs: list[str] | None = None) -> int:
    """Follow the query; returns the number of notifications printed."""
    hub_url = hub_url.rstrip("/")
    token = hub_token(hub_url, "graphs:read")
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {token}"
    for graph in default_graphs or []:  # a misspelt graph fails now, not as a query that never says anything
        HubClient(hub_url, token=token).check_graph(graph)
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    printed = 0

    def show(message: dict[str, Any]) -> None:
        nonlocal printed
        printed += 1
        for line in [json.dumps(message)] if as_json else render(message):
            echo(line)
        note = message["notification"]
        state.update(spuid=note["spuid"], sequence=note["sequence"])
        state_file.parent.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps(state))

    try:
        if state.get("spuid"):
            check = http.get(f"{hub_url}/subscriptions/{state['spuid']}", timeout=TIMEOUT)
            if check.status_code != 200 or check.json().get("state") == "ended":
                state.clear()  # gone: subscribe again
        if not state.get("spuid"):
            spec: dict[str, Any] = {"sparql": query, "alias": "lucid-hub subscribe"}
            if default_graphs:
                spec["default-graph-uri"] = default_graphs
            answer = http.post(f"{hub_url}/subscriptions", json=spec, timeout=TIMEOUT)
            if answer.status_code != 201:
                raise RemoteRefusedError(f"the hub refused the subscription: {answer.status_code} "
                                         f"{' '.join(answer.text.split())[:300]}", answer.status_code)
            show(answer.json())
            if count is not None and printed >= count:
                return printed
        headers = {"Last-Event-ID": str(state["sequence"]), "Accept": "text/event-stream"}
        with http.get(f"{hub_url}/subscriptions/{state['spuid']}/events", headers=headers, stream=True,
                      timeout=(TIMEOUT, 60)) as stream:
            if stream.status_code != 200:
                raise RemoteRefusedError(f"the hub refused the event stream: {stream.status_code}", stream.status_code)
            for kind, data in _events(stream):
                if kind == "ended":
                    state_file.unlink(missing_ok=True)
                    raise InputError(f"the subscription ended: {data.get('error_description')}")
                show(data)
                if count is not None and printed >= count:
                    break
    except requests.RequestException as exc:
        raise RemoteUnreachableError(f"cannot reach the hub at {hub_url}: {explain(exc)}") from None
    return printed
