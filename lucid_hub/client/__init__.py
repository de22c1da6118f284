"""Talking to another hub (as RDF Delta's client module does): tokens, discovery, keys,
subscription requests, archive pages, graphs at a version, bulk uploads."""

from lucid_hub.client.hub_client import (
    Budget,
    HubClient,
    RoundOver,
    discover,
    fetch_jwks,
    prefetched,
    same_origin,
)
from lucid_hub.client.tokens import client_credentials_token, hub_token

__all__ = ["Budget", "HubClient", "RoundOver", "client_credentials_token", "discover", "fetch_jwks", "hub_token",
           "prefetched", "same_origin"]
