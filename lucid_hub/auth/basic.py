"""HTTP Basic with an OAuth client's id and secret: how harvesters that know no OAuth read
streams and graphs (GET and HEAD only; lucid_hub.web.authz).

Checking a secret costs a deliberate password hash (tens of milliseconds); a harvester reads
hundreds of pages. A verified (client id, secret digest) is therefore remembered for
CACHE_SECONDS — a deleted or disabled client, or a changed secret, stops working within
that time, the way an issued bearer token lasts until it expires.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict

from lucid_hub.auth.clients import ClientRegistry
from lucid_hub.auth.tokens import Principal

CACHE_SECONDS = 30
CACHE_SIZE = 1024
ISSUER = "urn:lucid-hub:http-basic"


class BasicCredentials:
    def __init__(self, clients: ClientRegistry) -> None:
        self.clients = clients
        self._cache: OrderedDict[tuple[str, bytes], Principal] = OrderedDict()
        self._lock = threading.Lock()

    def authenticate(self, client_id: str, secret: str) -> Principal | None:
        """The client as a caller, when the secret is its own; None otherwise."""
        key = (client_id, hashlib.sha256(secret.encode()).digest())
        now = time.time()
        with self._lock:
            found = self._cache.get(key)
            if found is not None and found.expires_at > now:
                return found
        client = self.clients.authenticate(client_id, secret)
        if client is None:
            return None
        found = Principal(client.client_id, client.client_id, frozenset(client.groups), frozenset(client.scopes),
                          ISSUER, f"basic:{client.client_id}", int(now) + CACHE_SECONDS, {"name": client.name})
        with self._lock:
            self._cache[key] = found
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return found
