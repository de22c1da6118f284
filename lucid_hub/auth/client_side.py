"""The calling side: an access token for a hub, from the environment or by client credentials.

`LUCID_ACCESS_TOKEN` is used as it is; otherwise `LUCID_CLIENT_ID` and `LUCID_CLIENT_SECRET`
obtain one from the hub's token endpoint (RFC 6749 §4.4, client_secret_basic).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from lucid_hub.errors import AuthenticationError, LucidError


def hub_token(hub_url: str, scope: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    token = env.get("LUCID_ACCESS_TOKEN", "").strip()
    if token:
        return token
    client_id, secret = env.get("LUCID_CLIENT_ID", "").strip(), env.get("LUCID_CLIENT_SECRET", "").strip()
    if not client_id or not secret:
        raise AuthenticationError("the hub needs an access token: set LUCID_ACCESS_TOKEN, or LUCID_CLIENT_ID and "
                                  "LUCID_CLIENT_SECRET (from 'lucid-hub clients create')")
    return client_credentials_token(hub_url, client_id, secret, scope)


def client_credentials_token(hub_url: str, client_id: str, secret: str, scope: str | None = None,
                             http: Any = None) -> str:
    """A token from the hub's token endpoint; `http`, a requests Session, carries the call
    (a mirror's, which keeps to the outbound address policy)."""
    import requests

    data = {"grant_type": "client_credentials", **({"scope": scope} if scope else {})}
    try:
        response = (http or requests).post(f"{hub_url.rstrip('/')}/oauth/token", data=data, auth=(client_id, secret),
                                           timeout=30)
    except requests.RequestException as exc:
        raise LucidError(f"cannot reach the hub at {hub_url}: {exc}") from None
    if response.status_code != 200:
        detail = response.text.strip()[:300]
        raise AuthenticationError(f"the hub refused the client credentials ({response.status_code}): {detail}")
    token = response.json().get("access_token")
    if not isinstance(token, str):
        raise AuthenticationError("the hub's token response has no access_token")
    return token
