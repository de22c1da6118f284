"""The calling side's access token for another hub: from the environment, or by client
credentials (RFC 6749 §4.4, client_secret_basic) at the hub's token endpoint.

`LUCID_ACCESS_TOKEN` is used as it is; otherwise `LUCID_CLIENT_ID` and `LUCID_CLIENT_SECRET`
obtain one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import requests

from lucid_hub.errors import (
    AuthenticationError,
    RemoteAnswerError,
    RemoteCredentialsRefused,
    RemoteUnreachableError,
)
from lucid_hub.outbound import explain

TIMEOUT = 30.0


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
                             http: requests.Session | None = None) -> str:
    """A token from the hub's token endpoint; `http` carries the call (a mirror's session,
    which keeps to the outbound address policy)."""
    data = {"grant_type": "client_credentials", **({"scope": scope} if scope else {})}
    try:
        response = (http or requests).post(f"{hub_url.rstrip('/')}/oauth/token", data=data, auth=(client_id, secret),
                                           timeout=TIMEOUT)
    except requests.RequestException as exc:
        raise RemoteUnreachableError(f"cannot reach the hub at {hub_url}: {explain(exc)}") from None
    if response.status_code != 200:
        detail = response.text.strip()[:300]
        raise RemoteCredentialsRefused(f"the hub refused the client credentials ({response.status_code}): {detail}",
                                       response.status_code)
    try:
        token = response.json().get("access_token")
    except ValueError:
        token = None
    if not isinstance(token, str):
        raise RemoteAnswerError("the hub's token response has no access_token")
    return token
