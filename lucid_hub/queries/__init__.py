"""Continuous queries: SPARQL subscriptions with added and removed results (SEPA), kept in
the database and evaluated in a guard process on the patch stream (docs/queries.md)."""

from lucid_hub.queries.service import QueryService

__all__ = ["QueryService"]
