"""Data-directory commands beside a running hub.

The hub's RDF store belongs to the process that serves it (RocksDB lets one process open
it), so a command that needs more than the database cannot open it while `serve` runs. It
hands its request to that hub instead: `serve` writes where it listens into the data
directory (`serve.json`, removed when it stops), and the command calls the hub's API there
with a short-lived token of the operator's. It signs that token with the hub's own key,
which it may: whoever can read the data directory holds the hub. Every such command does it
the same way (publish, rules); commands that need only the database use it directly.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import requests

from lucid_hub.auth.clients import ClientRegistry
from lucid_hub.auth.tokens import TokenService
from lucid_hub.config import Settings
from lucid_hub.db.session import Database
from lucid_hub.signing import KeyRing

SERVE_FILE = "serve.json"
OPERATOR = "lucid-hub operator (command line)"
OPERATOR_SCOPES = ["admin", "graphs:read", "graphs:write", "hub:subscribe"]
TOKEN_SECONDS = 300


@dataclass(frozen=True)
class RunningHub:
    """The hub serving a data directory: where it listens, and a token to call it with."""

    url: str
    token: str


def record(settings: Settings, url: str) -> Path:
    """`serve`: say where this data directory's hub listens (`url`) and its public URL."""
    path = settings.data_dir / SERVE_FILE
    path.write_text(json.dumps({"url": url, "public_url": settings.public_url, "pid": os.getpid()}))
    return path


def forget(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def running(settings: Settings) -> RunningHub | None:
    """The hub serving `settings.data_dir`, when one does and answers; None otherwise."""
    try:
        found = json.loads((settings.data_dir / SERVE_FILE).read_text())
        os.kill(int(found["pid"]), 0)  # (a file a killed hub left behind names no process)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    url = str(found["url"])
    try:
        if requests.get(f"{url}/healthz", timeout=5).status_code != 200:
            return None
    except requests.RequestException:
        return None
    return RunningHub(url, _operator_token(settings, str(found["public_url"])))


def _operator_token(settings: Settings, issuer: str) -> str:
    database = Database(settings.db_url)
    try:
        registry = ClientRegistry(database)
        operator = next((c for c in registry.list() if c.name == OPERATOR), None)
        if operator is None:
            operator, _secret = registry.create(OPERATOR, groups=["lucid-hub-admins"], scopes=OPERATOR_SCOPES)
        tokens = TokenService(database, KeyRing(settings.keys_dir), issuer, lifetime=TOKEN_SECONDS)
        return tokens.issue(operator, " ".join(OPERATOR_SCOPES))
    finally:
        database.dispose()
