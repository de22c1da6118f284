"""The RDF core: canonical forms, MSGs, the patch model, its serialisations, apply.

A pure library (no servers, no I/O beyond what the caller hands in); publishing, the hub,
mirrors and the Spark job all call these same functions.
"""

from lucid_hub.rdf.apply import GraphReplica
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import GraphMsgs, Msg, dataset_msgs, graph_msgs
from lucid_hub.rdf.patch import Patch, utc_now
from lucid_hub.rdf.rdfpatch import split_wire
from lucid_hub.rdf.serialization import read_patch, write_patch

__all__ = [
    "Canonicalizer",
    "GraphMsgs",
    "GraphReplica",
    "Msg",
    "Patch",
    "dataset_msgs",
    "graph_msgs",
    "read_patch",
    "split_wire",
    "utc_now",
    "write_patch",
]
