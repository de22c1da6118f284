"""Where the operator's stores are and how the hub talks to them: the LUCID_STORE_* settings
(the store named `default`) and the entries of LUCID_STORES_FILE, each checked with the
setting or key it came from named (docs/stores.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyoxigraph as ox

from lucid_hub.config import Settings
from lucid_hub.errors import ConfigError

BLANK_NODE_MODES = ("blank", "skolem")
AUTH_SCHEMES = ("basic", "digest")
# What configures one store: LUCID_STORE_<KEY> for the hub's store, or the key of an entry of
# LUCID_STORES_FILE for each further one (docs/stores.md).
STORE_KEYS = ("query_url", "update_url", "gsp_url", "user", "password", "password_file", "auth", "token",
              "token_file", "timeout", "ca_file", "graphs", "blank_nodes", "skolem_base", "max_answer_bytes")
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")


@dataclass(frozen=True)
class RemoteConfig:
    """Where a store is, how the hub talks to it and which graphs it keeps."""

    query_url: str
    update_url: str
    gsp_url: str = ""
    user: str = field(default="", repr=False)
    password: str = field(default="", repr=False)
    auth: str = "basic"
    token: str = field(default="", repr=False)
    timeout: float = 30.0
    ca_file: str = ""
    blank_nodes: str = "blank"
    skolem_base: str = "urn:lucid-hub:bnode:"
    graphs: tuple[str, ...] = ("*",)
    max_answer_bytes: int = 1 << 30
    name: str = "default"

    @classmethod
    def of(cls, settings: Settings) -> RemoteConfig | None:
        """The hub's store from the LUCID_STORE_* settings, or None. A ConfigError names a
        setting that is missing or wrong."""
        values: dict[str, Any] = {key: getattr(settings, f"store_{key}") for key in STORE_KEYS}
        if not any(values[key] for key in ("query_url", "update_url", "gsp_url", "user", "password",
                                           "password_file", "token", "token_file")):
            return None
        for key in ("password", "token"):
            values[key] = settings.secret(f"store_{key}")
        values["ca_file"] = settings.file("store_ca_file")
        return cls._build("default", values, lambda key: f"LUCID_STORE_{key.upper()}")

    @classmethod
    def all(cls, settings: Settings) -> list[RemoteConfig]:
        """Every store the hub keeps graphs in: LUCID_STORE_*'s (named `default`), and each
        entry of LUCID_STORES_FILE (a JSON list of objects with a `name` and the keys of
        STORE_KEYS; secrets best as `password_file`, `token_file`)."""
        stores = [store for store in [cls.of(settings)] if store is not None]
        path = settings.file("stores_file")
        if not path:
            return stores
        try:
            entries = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"LUCID_STORES_FILE {path}: not readable as JSON: {exc}") from None
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ConfigError(f"LUCID_STORES_FILE {path}: must hold a JSON list of stores (objects)")
        for entry in entries:
            name = entry.get("name")
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ConfigError(f"LUCID_STORES_FILE {path}: each store needs a name of lowercase letters, digits "
                                  f"and dashes (found {name!r})")
            if name in {store.name for store in stores}:
                raise ConfigError(f"LUCID_STORES_FILE {path}: two stores are named {name!r}")
            unknown = sorted(set(entry) - {"name", *STORE_KEYS})
            if unknown:
                raise ConfigError(f"LUCID_STORES_FILE {path}: store {name!r}: unknown key {unknown[0]!r} "
                                  f"(known: {', '.join(STORE_KEYS)})")
            defaults = {key: getattr(Settings, f"store_{key}") for key in STORE_KEYS}
            values = {**defaults, **entry}
            if isinstance(values["graphs"], list):
                values["graphs"] = " ".join(str(g) for g in values["graphs"])
            where = _keys_of(f"LUCID_STORES_FILE {path}: store {name!r}:")
            for key in ("password", "token"):
                values[key] = _secret(values[key], values[f"{key}_file"], where, key)
            if values["ca_file"] and not Path(str(values["ca_file"])).is_file():
                raise ConfigError(f"{where('ca_file')}: no file {values['ca_file']}")
            stores.append(cls._build(name, values, where))
        return stores

    @classmethod
    def _build(cls, name: str, values: dict[str, Any], where: Callable[[str], str]) -> RemoteConfig:
        """A store's configuration from its values, each checked; `where` names a key."""
        for key in ("query_url", "update_url", "gsp_url"):
            url = values[key]
            if not isinstance(url, str):
                raise ConfigError(f"{where(key)} must be a URL")
            if key != "gsp_url" and not url:
                raise ConfigError(f"{where(key)} is not set: a store needs its query and update endpoints")
            if url and not url.startswith(("http://", "https://")):
                raise ConfigError(f"{where(key)} must be an http(s) URL, not {url!r}")
            if url and "@" in urlsplit(url).netloc:  # (a store's URL is named in logs and /readyz: no secrets)
                raise ConfigError(f"{where(key)} holds credentials: give them as a user and a password file "
                                  "(or a token file)")
        if values["blank_nodes"] not in BLANK_NODE_MODES:
            raise ConfigError(f"{where('blank_nodes')} must be one of {', '.join(BLANK_NODE_MODES)}")
        if values["auth"] not in AUTH_SCHEMES:
            raise ConfigError(f"{where('auth')} must be one of {', '.join(AUTH_SCHEMES)}")
        try:
            ox.NamedNode(str(values["skolem_base"]) + "x")
        except ValueError:
            raise ConfigError(f"{where('skolem_base')} is not an IRI prefix: {values['skolem_base']!r}") from None
        for key, kind in (("timeout", float), ("max_answer_bytes", int)):
            try:
                values[key] = kind(values[key])
            except (TypeError, ValueError):
                raise ConfigError(f"{where(key)} must be a number, not {values[key]!r}") from None
            if values[key] <= 0:
                raise ConfigError(f"{where(key)} must be positive")
        if values["token"] and values["user"]:
            raise ConfigError(f"{where('token')} and {where('user')} are both set: give a bearer token or a user")
        graphs = tuple(str(values["graphs"]).split()) or ("*",)
        return cls(values["query_url"], values["update_url"], values["gsp_url"], str(values["user"]),
                   str(values["password"]), values["auth"], str(values["token"]), values["timeout"],
                   str(values["ca_file"]), values["blank_nodes"], str(values["skolem_base"]), graphs,
                   values["max_answer_bytes"], name)

    def keeps(self, graph: str) -> bool:
        """Whether the hub keeps `graph` in the store: LUCID_STORE_GRAPHS names IRIs, or
        prefixes ending in `*`; the hub's own graphs (`urn:lucid-hub:…`) never go there."""
        if graph.startswith("urn:lucid-hub:"):
            return False
        return any(graph.startswith(p[:-1]) if p.endswith("*") else graph == p for p in self.graphs)


def _keys_of(entry: str) -> Callable[[str], str]:
    """How a message names a key of one entry of LUCID_STORES_FILE."""
    return lambda key: f"{entry} {key}"


def _secret(value: object, file: object, where: Callable[[str], str], key: str) -> str:
    """A store's secret: given, or read from its file (a mounted Secret); never both."""
    if value and file:
        raise ConfigError(f"{where(key)} and {where(key + '_file')} are both set: give one")
    if not file:
        return str(value or "")
    try:
        return Path(str(file)).read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"{where(key + '_file')}: cannot read {file}: {exc.strerror}") from None
