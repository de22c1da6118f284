"""A triple store the operator runs (Virtuoso, GraphDB, Fuseki, Oxigraph server, …), spoken to
with the SPARQL 1.1 Protocol (query, update) and the Graph Store Protocol (docs/stores.md).

The hub writes each patch of the graphs it keeps there as one update request, in chain order,
with the graph's version (the id of the patch it holds) set in the same request, in the graph
`urn:lucid-hub:system` of the store. After a crash the hub reads that version and goes on from
the next patch: none is skipped or written twice (the hub is the graphs' only writer).

Blank nodes. A store relabels blank nodes and `DELETE DATA` cannot name them, so each stored
blank-node MSG (a structure of blank nodes and the triples that connect them) has an anchor:
its first node (`_:c14n0`) carries the MSG's hash and occurrence in the graph's index graph
(`urn:lucid-hub:msgs:…`, as in the embedded store). Removing an MSG deletes the triples that
match its whole pattern starting from the anchor with that hash and occurrence. Every blank
node connected to the anchor by a triple belongs to the same MSG, so the pattern can only
match that instance (or map it onto itself), never a structure that merely looks alike.
`LUCID_STORE_BLANK_NODES=skolem` stores blank nodes as IRIs under LUCID_STORE_SKOLEM_BASE
instead (a `/.well-known/genid/` base is RDF 1.1's advice): what the store's other
applications see is then stable across requests, at the cost of IRIs where there were blank
nodes.
"""
from __future__ import annotations

import json
from typing import Any

import pyoxigraph as ox
import requests
from requests.auth import AuthBase, HTTPBasicAuth, HTTPDigestAuth

from lucid_hub.errors import ConfigError, StoreError
from lucid_hub.rdf.patch import Patch
from lucid_hub.store.layout import MSG, OCCURRENCE, SYSTEM, VERSION, index_graph
from lucid_hub.store.remote_config import RemoteConfig
from lucid_hub.store.remote_updates import Occurrences, UpdateRenderer

__all__ = ["RemoteConfig", "RemoteStore", "UpdateRenderer"]

JSON_RESULTS = "application/sparql-results+json"
BULK_ROWS = 20_000


class _Bearer(AuthBase):
    def __init__(self, token: str) -> None:
        self.token = token

    def __call__(self, request: Any) -> Any:
        request.headers["Authorization"] = f"Bearer {self.token}"
        return request


class RemoteStore:
    """The operator's store: versions, patches written, graphs read and dropped."""

    def __init__(self, config: RemoteConfig) -> None:
        self.config = config
        self.session = requests.Session()
        self.session.headers["User-Agent"] = "lucid-hub"
        self.session.verify = config.ca_file or True
        auth: AuthBase | None = None
        if config.token:
            auth = _Bearer(config.token)
        elif config.user:
            auth = (HTTPDigestAuth if config.auth == "digest" else HTTPBasicAuth)(config.user, config.password)
        self.session.auth = auth
        self.render = UpdateRenderer(config.blank_nodes, config.skolem_base)
        # Add-only patches of this many rows or more go through the Graph Store (`_bulk`).
        self.bulk_rows = BULK_ROWS

    @property
    def name(self) -> str:
        """The store as readiness and logs name it (its update endpoint, no credentials)."""
        return self.config.update_url

    def close(self) -> None:
        self.session.close()

    # --- the protocol ------------------------------------------------------------------------
    def _call(self, method: str, url: str, *, accept: str | None = None, missing_ok: bool = False,
              **kwargs: Any) -> bytes | None:
        """One request to the store; its answer's body, read to at most LUCID_STORE_MAX_ANSWER_BYTES
        (a store that answers without end costs the hub no more); None for a 404 when
        `missing_ok`. A StoreError says what went wrong, never with the credentials."""
        headers = {**kwargs.pop("headers", {}), **({"Accept": accept} if accept else {})}
        try:
            with self.session.request(method, url, headers=headers, timeout=self.config.timeout, stream=True,
                                      **kwargs) as response:
                if response.status_code == 404 and missing_ok:
                    return None
                body = bytearray()
                for chunk in response.iter_content(1 << 16):
                    body += chunk
                    if len(body) > self.config.max_answer_bytes:
                        raise StoreError(f"the store at {url} answered with more than {self.config.max_answer_bytes:,} "
                                         "bytes (LUCID_STORE_MAX_ANSWER_BYTES)")
        except requests.RequestException as exc:
            raise StoreError(f"the store at {url} does not answer: {type(exc).__name__}") from None
        if response.status_code >= 300:
            detail = " ".join(body[:600].decode("utf-8", "replace").split())[:300]
            raise StoreError(f"the store at {url} answered {response.status_code}: {detail}")
        return bytes(body)

    def select(self, query: str) -> list[dict[str, ox.NamedNode | ox.BlankNode | ox.Literal]]:
        """A SELECT query's solutions, their terms as pyoxigraph terms."""
        body = self._call("POST", self.config.query_url, data={"query": query}, accept=JSON_RESULTS)
        try:
            bindings = json.loads(body or b"")["results"]["bindings"]
            blank: dict[str, ox.BlankNode] = {}  # a store's own labels (Virtuoso's nodeID://…) as blank nodes
            return [{name: _term(value, blank) for name, value in row.items()} for row in bindings]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"the store at {self.config.query_url} answered a query with no SPARQL JSON "
                             f"results: {type(exc).__name__}: {str(exc)[:200]}") from None

    def update(self, update: str) -> None:
        self._call("POST", self.config.update_url, data={"update": update})

    def check(self) -> None:
        """Raise a StoreError unless the store answers a trivial query now (readiness)."""
        self.select("SELECT ?v WHERE { VALUES ?v { 1 } }")

    # --- what the hub keeps there ----------------------------------------------------------
    def versions(self) -> dict[str, str]:
        """The graphs the hub wrote into the store, and the version each holds."""
        rows = self.select(f"SELECT ?g ?v WHERE {{ GRAPH <{SYSTEM.value}> {{ ?g <{VERSION.value}> ?v }} }}")
        return {row["g"].value: row["v"].value for row in rows}

    def version(self, graph: str) -> str | None:
        rows = self.select(f"SELECT ?v WHERE {{ GRAPH <{SYSTEM.value}> {{ <{graph}> <{VERSION.value}> ?v }} }}")
        return rows[0]["v"].value if rows else None

    def is_empty(self, graph: str) -> bool:
        return not self.select(f"SELECT ?s WHERE {{ GRAPH <{graph}> {{ ?s ?p ?o }} }} LIMIT 1")

    def held(self, graph: str, digest: str) -> list[int]:
        """The occurrences of an MSG the store holds (format 1 patches name none)."""
        rows = self.select(f'SELECT ?o WHERE {{ GRAPH <{index_graph(graph).value}> {{ ?n <{MSG.value}> "{digest}" ; '
                           f"<{OCCURRENCE.value}> ?o }} }}")
        return [int(row["o"].value) for row in rows]

    def instances(self, graph: str, keys: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """Which instance (in `skolem` mode: the id in its skolem IRIs) holds each MSG
        occurrence, by its anchor; an occurrence the store does not hold is left out."""
        base = self.config.skolem_base
        found: dict[tuple[str, int], str] = {}
        for start in range(0, len(keys), 500):
            values = " ".join(f'("{digest}" "{occurrence}")' for digest, occurrence in keys[start:start + 500])
            rows = self.select(f"SELECT ?n ?h ?o WHERE {{ VALUES (?h ?o) {{ {values} }} GRAPH "
                               f"<{index_graph(graph).value}> {{ ?n <{MSG.value}> ?h ; <{OCCURRENCE.value}> ?o }} }}")
            for row in rows:
                anchor = row["n"].value
                if isinstance(row["n"], ox.NamedNode) and anchor.startswith(base) and anchor.endswith(".0"):
                    found[row["h"].value, int(row["o"].value)] = anchor[len(base):-2]
        return found

    def probe(self) -> None:
        """Check that the store keeps blank nodes as LUCID_STORE_BLANK_NODES=blank needs: one
        blank node written into two graphs by one template (Virtuoso 7.2 applies such a template,
        then answers 500 and skips the rest of its request). A ConfigError says what to set."""
        if self.render.skolem:
            return
        scratch = "urn:lucid-hub:probe"
        try:
            self.update(f"INSERT {{ GRAPH <{scratch}:data> {{ <{scratch}> <{scratch}> _:b }} "
                        f"GRAPH <{scratch}:index> {{ _:b <{scratch}> 1 }} }} WHERE {{}}")
        except StoreError as exc:
            if "answered 5" not in str(exc):
                raise
            raise ConfigError(f"the store at {self.name} cannot keep blank nodes as blank nodes (it failed a "
                              f"template with one blank node in two graphs: {exc}); set "
                              "LUCID_STORE_BLANK_NODES=skolem (docs/stores.md)") from None
        finally:
            self.update(f"DROP SILENT GRAPH <{scratch}:data> ; DROP SILENT GRAPH <{scratch}:index>")

    def write(self, patches: list[Patch]) -> None:
        """Write consecutive patches of one graph in one update request (atomic where the store
        makes a request atomic), the graph's version set to the last one's id in it; a large
        add-only patch through the Graph Store (`_bulk`)."""
        if len(patches) == 1 and self._bulk(patches[0]):
            return
        self.update(self.render.update(patches, self.held, self.instances))

    def _bulk(self, patch: Patch) -> bool:
        """A large add-only patch: what can be written twice without harm (its ground triples,
        and in `skolem` mode its blank-node MSGs as skolem IRIs, which derive from the patch)
        as N-Triples POSTed to the Graph Store (a store parses them several times faster than
        an update's text); then one update request with the rest (`blank` mode's blank-node
        MSGs, the anchors) and the version. A crash between the requests leaves the version
        where it was: the next round writes the patch again, and the POSTed part changes
        nothing the second time."""
        if not self.config.gsp_url or patch.removed or len(patch.added) < self.bulk_rows:
            return False
        _removed, added_occ = Occurrences(patch.graph, self.held).assign(patch)
        ground, rows = self.render.added(patch, 0, added_occ)
        if self.render.skolem:
            data, index = self.render.skolem_lines(ground, rows)
            self._post_graph(patch.graph, data)
            self._post_graph(index_graph(patch.graph).value, index)
            self.update(self.render.marker(patch.graph, patch.prev, patch.id))
        else:
            self._post_graph(patch.graph, ground)
            marker = self.render.marker(patch.graph, patch.prev, patch.id)
            self.update(" ;\n".join([*self.render.additions(patch.graph, [], rows), marker]))
        return True

    def _post_graph(self, graph: str, statements: list[str]) -> None:
        if not statements:
            return
        body = "".join(f"{s} .\n" for s in statements).encode()
        self._call("POST", self.config.gsp_url, params={"graph": graph}, data=body,
                   headers={"Content-Type": "application/n-triples"})

    def drop(self, graph: str) -> None:
        """Remove the graph, its index and its version, in one request."""
        self.update(f"DROP SILENT GRAPH <{graph}> ;\nDROP SILENT GRAPH <{index_graph(graph).value}> ;\n"
                    f"DELETE WHERE {{ GRAPH <{SYSTEM.value}> {{ <{graph}> <{VERSION.value}> ?v }} }}")

    def triples(self, graph: str) -> list[ox.Triple]:
        """The graph as the store holds it: from the Graph Store endpoint when there is one,
        else with a SELECT (every store answers that)."""
        if self.config.gsp_url:
            body = self._call("GET", self.config.gsp_url, params={"graph": graph}, accept="application/n-triples",
                              missing_ok=True)
            try:
                return [q.triple for q in ox.parse(body or b"", format=ox.RdfFormat.N_TRIPLES)]
            except SyntaxError as exc:
                raise StoreError(f"the store at {self.config.gsp_url} sent unreadable N-Triples: {exc}") from None
        rows = self.select(f"SELECT ?s ?p ?o WHERE {{ GRAPH <{graph}> {{ ?s ?p ?o }} }}")
        return [ox.Triple(row["s"], row["p"], row["o"]) for row in rows]  # type: ignore[arg-type]

    def statements(self, graph: str) -> list[str]:
        """The graph as the hub publishes it: N-Triples statements (without ` .`), the skolem
        IRIs of LUCID_STORE_BLANK_NODES=skolem as blank nodes again."""
        base = self.config.skolem_base
        blank: dict[str, ox.BlankNode] = {}

        def node(term: Any) -> Any:
            if isinstance(term, ox.NamedNode) and term.value.startswith(base):
                return blank.setdefault(term.value, ox.BlankNode())
            return term

        return [str(ox.Triple(node(t.subject), t.predicate, node(t.object))) for t in self.triples(graph)]


def _term(value: dict[str, str], blank: dict[str, ox.BlankNode]) -> ox.NamedNode | ox.BlankNode | ox.Literal:
    kind = value["type"]
    if kind == "uri":
        return ox.NamedNode(value["value"])
    if kind == "bnode":
        return blank.setdefault(value["value"], ox.BlankNode())
    if "xml:lang" in value:
        return ox.Literal(value["value"], language=value["xml:lang"])
    if "datatype" in value:
        return ox.Literal(value["value"], datatype=ox.NamedNode(value["datatype"]))
    return ox.Literal(value["value"])
