"""The RDF store of owned graphs and mirrors (embedded default: on-disk pyoxigraph).

Blank nodes are kept skolemised inside the store (RDF 1.1 Concepts §3.5): every stored MSG
instance has an id, so a patch is applied as one atomic SPARQL update together with the
graph's version marker, and removals find the instance by MSG hash. Skolem IRIs never
leave the store: reads turn them back into blank nodes.
"""

from lucid_hub.store.graphs import GraphStore
from lucid_hub.store.layout import SKOLEM_PREFIX

__all__ = ["SKOLEM_PREFIX", "GraphStore"]
