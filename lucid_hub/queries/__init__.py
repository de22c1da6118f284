"""Continuous queries: SPARQL subscriptions with added and removed results (SEPA), kept in
the database and evaluated in a guard process on the patch stream (docs/queries.md).

The package imports nothing itself: its guard processes (`query_process`, and the rules'
`rules.rule_process` that builds on it) import only what they run, and a new worker started
after a kill costs 0.3 s of imports, not 1 s (the service, OAuth and the database models are
the hub's, never a worker's). The service is `lucid_hub.queries.service.QueryService`."""
