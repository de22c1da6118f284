"""lucid-hub: live, verified replication of RDF named graphs between business partners."""

__version__ = "0.1.0"
