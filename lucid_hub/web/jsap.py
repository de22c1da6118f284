"""The hub's JSAP (SEPA's application profile, docs/queries.md, "SEPA clients"): the endpoints
SEPA's clients read from a JSAP — SPARQL 1.1 query and update, the SE protocol's WebSocket,
SEPA's registration and token request — so that sepy and sepa-js connect from it unchanged.
An operator adds the applications' part (namespaces, queries and updates with forced
bindings, graphs, extended) in `LUCID_JSAP_FILE`; the hub's endpoints are always its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, Response, current_app, jsonify

from lucid_hub.config import Settings
from lucid_hub.errors import ConfigError
from lucid_hub.web.http import runtime

blueprint = Blueprint("jsap", __name__)
APPLICATION_KEYS = ("namespaces", "queries", "updates", "graphs", "extended")
NAMESPACES = {"rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#", "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
              "xsd": "http://www.w3.org/2001/XMLSchema#", "lh": "https://w3id.org/lucid-hub#"}


def application_part(settings: Settings) -> dict[str, Any]:
    """The operator's JSAP part (LUCID_JSAP_FILE): ConfigError, naming the problem, when it is
    not a JSON object of the application keys."""
    if not settings.jsap_file:
        return {}
    try:
        found = json.loads(Path(settings.jsap_file).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"LUCID_JSAP_FILE cannot be read: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"LUCID_JSAP_FILE is not JSON: {exc}") from None
    if not isinstance(found, dict) or not all(isinstance(found.get(k, {}), dict) for k in APPLICATION_KEYS):
        raise ConfigError(f"LUCID_JSAP_FILE holds a JSON object whose {', '.join(APPLICATION_KEYS)} are objects")
    unknown = sorted(set(found) - set(APPLICATION_KEYS))
    if unknown:
        raise ConfigError(f"LUCID_JSAP_FILE: {unknown[0]} is the hub's to say; give only {', '.join(APPLICATION_KEYS)}")
    return found


def profile(settings: Settings, application: dict[str, Any]) -> dict[str, Any]:
    """The JSAP of this hub, as SEPA's clients read one."""
    url = urlsplit(settings.public_url)
    secure = url.scheme == "https"
    port = url.port or (443 if secure else 80)
    path = url.path.rstrip("/")
    socket = "wss" if secure else "ws"
    base = settings.public_url.rstrip("/")
    return {
        "host": url.hostname,
        "oauth": {"enable": settings.dcr != "off" and secure, "register": f"{base}/oauth/sepa/register",
                  "tokenRequest": f"{base}/oauth/sepa/token"},
        "sparql11protocol": {"protocol": url.scheme, "port": port,
                             "query": {"path": f"{path}/sparql", "method": "POST", "format": "JSON"},
                             "update": {"path": f"{path}/sparql", "method": "POST", "format": "JSON"}},
        "sparql11seprotocol": {"protocol": socket, "reconnect": True,
                               "availableProtocols": {socket: {"port": port, "path": f"{path}/subscribe"}}},
        "graphs": application.get("graphs", {}),
        "namespaces": {**NAMESPACES, **application.get("namespaces", {})},
        "extended": application.get("extended", {}),
        "queries": application.get("queries", {}),
        "updates": application.get("updates", {}),
    }


def init_jsap(app: Any) -> None:
    """Read the operator's part once, when the app is made: a bad file stops the start."""
    app.extensions["jsap"] = application_part(app.extensions["lucid"].settings)


@blueprint.get("/jsap")
def jsap() -> Response:
    """The JSAP (public: it names endpoints, which discovery names anyway, and no graph)."""
    answer = jsonify(profile(runtime().settings, current_app.extensions["jsap"]))
    answer.headers["Cache-Control"] = "public, max-age=300"
    return answer
