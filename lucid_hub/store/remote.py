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
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyoxigraph as ox
import requests
from requests.auth import AuthBase, HTTPBasicAuth, HTTPDigestAuth

from lucid_hub.config import Settings
from lucid_hub.errors import ConfigError, StoreError
from lucid_hub.rdf.msg import Msg
from lucid_hub.rdf.patch import Patch, occurrences
from lucid_hub.rdf.statements import relabel
from lucid_hub.store.layout import MSG, OCCURRENCE, SYSTEM, VERSION, index_graph, instance_id

log = logging.getLogger(__name__)

BLANK_NODE_MODES = ("blank", "skolem")
AUTH_SCHEMES = ("basic", "digest")
JSON_RESULTS = "application/sparql-results+json"
BULK_ROWS = 20_000
# An added blank-node MSG as written: the MSG, its occurrence, its instance id (for a skolem
# IRI) and a label unique in its request (for a blank node).
Row = tuple[Msg, int, str, str]


@dataclass(frozen=True)
class RemoteConfig:
    """Where the store is and how the hub talks to it (from the LUCID_STORE_* settings)."""

    query_url: str
    update_url: str
    gsp_url: str = ""
    user: str = ""
    password: str = ""
    auth: str = "basic"
    token: str = ""
    timeout: float = 30.0
    ca_file: str = ""
    blank_nodes: str = "blank"
    skolem_base: str = "urn:lucid-hub:bnode:"
    graphs: tuple[str, ...] = ("*",)
    max_answer_bytes: int = 1 << 30

    @classmethod
    def of(cls, settings: Settings) -> RemoteConfig | None:
        """The operator's store, or None (the embedded store only). A ConfigError names a
        setting that is missing or wrong."""
        named = [name for name in ("store_query_url", "store_update_url", "store_gsp_url", "store_user",
                                   "store_password", "store_password_file", "store_token", "store_token_file")
                 if getattr(settings, name)]
        if not named:
            return None
        for name in ("store_query_url", "store_update_url"):
            url = getattr(settings, name)
            if not url:
                raise ConfigError(f"LUCID_{named[0].upper()} is set but LUCID_{name.upper()} is not: the store "
                                  "needs its query and update endpoints")
        for name in ("store_query_url", "store_update_url", "store_gsp_url"):
            url = getattr(settings, name)
            if url and not url.startswith(("http://", "https://")):
                raise ConfigError(f"LUCID_{name.upper()} must be an http(s) URL, not {url!r}")
            if url and "@" in urlsplit(url).netloc:  # (a store's URL is named in logs and /readyz: no secrets)
                raise ConfigError(f"LUCID_{name.upper()} holds credentials: give them as LUCID_STORE_USER and "
                                  "LUCID_STORE_PASSWORD_FILE (or LUCID_STORE_TOKEN_FILE)")
        if settings.store_blank_nodes not in BLANK_NODE_MODES:
            raise ConfigError(f"LUCID_STORE_BLANK_NODES must be one of {', '.join(BLANK_NODE_MODES)}")
        if settings.store_auth not in AUTH_SCHEMES:
            raise ConfigError(f"LUCID_STORE_AUTH must be one of {', '.join(AUTH_SCHEMES)}")
        try:
            ox.NamedNode(settings.store_skolem_base + "x")
        except ValueError:
            raise ConfigError(f"LUCID_STORE_SKOLEM_BASE is not an IRI prefix: {settings.store_skolem_base!r}") from None
        if settings.store_timeout <= 0:
            raise ConfigError("LUCID_STORE_TIMEOUT must be a positive number of seconds")
        password, token = settings.secret("store_password"), settings.secret("store_token")
        if token and settings.store_user:
            raise ConfigError("LUCID_STORE_TOKEN and LUCID_STORE_USER are both set: give a bearer token or a user")
        if settings.store_max_answer_bytes <= 0:
            raise ConfigError("LUCID_STORE_MAX_ANSWER_BYTES must be a positive number of bytes")
        graphs = tuple(settings.store_graphs.split()) or ("*",)
        return cls(settings.store_query_url, settings.store_update_url, settings.store_gsp_url,
                   settings.store_user, password, settings.store_auth, token, settings.store_timeout,
                   settings.file("store_ca_file"), settings.store_blank_nodes, settings.store_skolem_base, graphs,
                   settings.store_max_answer_bytes)

    def keeps(self, graph: str) -> bool:
        """Whether the hub keeps `graph` in the store: LUCID_STORE_GRAPHS names IRIs, or
        prefixes ending in `*`; the hub's own graphs (`urn:lucid-hub:…`) never go there."""
        if graph.startswith("urn:lucid-hub:"):
            return False
        return any(graph.startswith(p[:-1]) if p.endswith("*") else graph == p for p in self.graphs)


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
        _removed, added_occ = _Occurrences(patch.graph, self.held).assign(patch)
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


class UpdateRenderer:
    """Patches as SPARQL 1.1 updates for a remote store (see the module's text)."""

    def __init__(self, blank_nodes: str, skolem_base: str) -> None:
        self.skolem = blank_nodes == "skolem"
        self.skolem_base = skolem_base

    def update(self, patches: list[Patch], held: Callable[[str, str], list[int]],
               instances: Callable[[str, list[tuple[str, int]]], dict[tuple[str, int], str]] | None = None) -> str:
        """One update request for consecutive patches of one graph. `held` answers a format 1
        patch's question of which occurrences of an MSG the store holds; in `skolem` mode,
        `instances` which instance (skolem IRIs) holds an MSG's occurrence, asked once for
        the request, so that a removal names its triples (`DELETE DATA`) instead of matching
        a pattern (which a store slows down on after many deletions)."""
        graph = patches[0].graph
        state = _Occurrences(graph, held)
        assigned = [state.assign(patch) for patch in patches]
        named: dict[tuple[str, int], str] = {}
        if self.skolem and instances is not None:
            needed = _held_before(patches, assigned)
            named = instances(graph, needed) if needed else {}
        operations: list[str] = []
        for number, (patch, (removed_occ, added_occ)) in enumerate(zip(patches, assigned, strict=True)):
            operations.extend(self._operations(patch, number, removed_occ, added_occ, named))
        operations.append(self.marker(graph, patches[0].prev, patches[-1].id))
        return " ;\n".join(operations)

    def _operations(self, patch: Patch, number: int, removed_occ: list[int], added_occ: list[int],
                    named: dict[tuple[str, int], str]) -> Iterator[str]:
        """The patch's operations; `named` holds the instance of each MSG occurrence known
        (and is moved on by this patch's additions and removals)."""
        g, idx = f"<{patch.graph}>", f"<{index_graph(patch.graph).value}>"
        gone = [msg.nquads[:-3] for msg in patch.removed if "_:" not in msg.nquads]
        gone_index: list[str] = []
        patterns: list[str] = []
        for msg, occurrence in zip(patch.removed, removed_occ, strict=True):
            if "_:" not in msg.nquads:
                continue
            instance = named.pop((msg.hash, occurrence), None)
            if instance is not None:
                node = self._skolem(instance)
                gone.extend(relabel(s, node) for s in msg.statements)
                gone_index.extend(_anchor(node("_:c14n0"), msg.hash, occurrence))
                continue
            pattern = " . ".join(relabel(s, _variable) for s in msg.statements)
            anchor = f'?n0 <{MSG.value}> "{msg.hash}" . ?n0 <{OCCURRENCE.value}> "{occurrence}"'
            patterns.append(f"DELETE {{ GRAPH {g} {{ {pattern} }} GRAPH {idx} {{ {anchor} }} }} "
                            f"WHERE {{ GRAPH {idx} {{ {anchor} }} GRAPH {g} {{ {pattern} }} }}")
        if gone:
            index_block = f" GRAPH {idx} {{ {' . '.join(gone_index)} }}" if gone_index else ""
            yield f"DELETE DATA {{ GRAPH {g} {{ {' . '.join(gone)} }}{index_block} }}"
        yield from patterns
        ground, rows = self.added(patch, number, added_occ)
        if self.skolem:
            named.update(((msg.hash, occurrence), instance) for msg, occurrence, instance, _label in rows)
        yield from self.additions(patch.graph, ground, rows)

    def additions(self, graph: str, ground: list[str], rows: list[Row]) -> Iterator[str]:
        """The operations that add ground statements and blank-node MSG instances (each with
        its occurrence, its instance id for a skolem IRI, and a label unique in the request)
        with their anchors."""
        g, idx = f"<{graph}>", f"<{index_graph(graph).value}>"
        if self.skolem:
            data, index = self.skolem_lines(ground, rows)
            if data:
                index_block = f" GRAPH {idx} {{ {' . '.join(index)} }}" if index else ""
                yield f"INSERT DATA {{ GRAPH {g} {{ {' . '.join(data)} }}{index_block} }}"
            return
        if ground:
            yield f"INSERT DATA {{ GRAPH {g} {{ {' . '.join(ground)} }} }}"
        if rows:
            blank_came: list[str] = []
            index_came: list[str] = []
            for msg, occurrence, _instance, label in rows:
                node = _blank(label)
                blank_came.extend(relabel(s, node) for s in msg.statements)
                index_came.extend(_anchor(node("_:c14n0"), msg.hash, occurrence))
            # Blank nodes go in a template (INSERT DATA refuses them in some stores, Virtuoso's).
            yield (f"INSERT {{ GRAPH {g} {{ {' . '.join(blank_came)} }} GRAPH {idx} {{ {' . '.join(index_came)} }} }} "
                   "WHERE {}")

    def skolem_lines(self, ground: list[str], rows: list[Row]) -> tuple[list[str], list[str]]:
        """Statements of added rows with blank nodes as skolem IRIs, and their anchors."""
        data = list(ground)
        index: list[str] = []
        for msg, occurrence, instance, _label in rows:
            node = self._skolem(instance)
            data.extend(relabel(s, node) for s in msg.statements)
            index.extend(_anchor(node("_:c14n0"), msg.hash, occurrence))
        return data, index

    def added(self, patch: Patch, number: int, added_occ: list[int]) -> tuple[list[str], list[Row]]:
        """A patch's added ground statements, and its added blank-node rows as `additions`
        takes them (the patch's `number` in its request makes the labels unique)."""
        ground = [msg.nquads[:-3] for msg in patch.added if "_:" not in msg.nquads]
        rows = [(msg, occurrence, instance_id(patch.id, row), f"p{number}r{row}")
                for row, (msg, occurrence) in enumerate(zip(patch.added, added_occ, strict=True),
                                                        start=len(patch.removed)) if "_:" in msg.nquads]
        return ground, rows

    def marker(self, graph: str, prev: str | None, version: str) -> str:
        """The operations that move the graph's version from `prev` to `version`."""
        system, marker = f"<{SYSTEM.value}>", f"<{VERSION.value}>"
        moved = f"INSERT DATA {{ GRAPH {system} {{ <{graph}> {marker} <{version}> }} }}"
        if prev is None:
            return moved
        return f"DELETE DATA {{ GRAPH {system} {{ <{graph}> {marker} <{prev}> }} }} ;\n{moved}"

    def rewrite(self, graph: str, ground: list[str], rows: list[tuple[Msg, int, str]], version: str) -> str:
        """One request that makes the store's graph exactly `ground` and the blank-node MSG
        instances of `rows` (MSG, occurrence, instance id) with their anchors, at `version`."""
        g, idx = f"<{graph}>", f"<{index_graph(graph).value}>"
        system, marker = f"<{SYSTEM.value}>", f"<{VERSION.value}>"
        operations = [
            f"DROP SILENT GRAPH {g}",
            f"DROP SILENT GRAPH {idx}",
            f"DELETE WHERE {{ GRAPH {system} {{ {g} {marker} ?v }} }}",
            *self.additions(graph, ground, [(msg, occurrence, instance, f"c{n}")
                                            for n, (msg, occurrence, instance) in enumerate(rows)]),
            self.marker(graph, None, version),
        ]
        return " ;\n".join(operations)

    def _skolem(self, instance: str) -> Callable[[str], str]:
        base = self.skolem_base
        return lambda label: f"<{base}{instance}.{label[len('_:c14n'):]}>"


def _anchor(node: str, digest: str, occurrence: int) -> list[str]:
    return [f'{node} <{MSG.value}> "{digest}"', f'{node} <{OCCURRENCE.value}> "{occurrence}"']


def _variable(label: str) -> str:
    return f"?n{label[len('_:c14n'):]}"


def _blank(prefix: str) -> Callable[[str], str]:
    return lambda label: f"_:{prefix}n{label[len('_:c14n'):]}"


class _Occurrences:
    """Which occurrence each blank-node MSG row of a patch removes and adds: as a format 2
    patch names them; for a format 1 patch by the rule (rdf.patch.occurrences) on what the
    store holds, asked once per MSG and followed through the request's patches."""

    def __init__(self, graph: str, held: Callable[[str, str], list[int]]) -> None:
        self.graph = graph
        self.ask = held
        self.known: dict[str, set[int]] = {}

    def assign(self, patch: Patch) -> tuple[list[int], list[int]]:
        removed = list(patch.removed_occurrences) or [0] * len(patch.removed)
        added = list(patch.added_occurrences) or [0] * len(patch.added)
        for digest, gone_rows, came_rows in _by_hash(patch):
            held = self.known.get(digest)
            if held is None:
                held = self.known[digest] = set(self.ask(self.graph, digest)) if patch.format == 1 else set()
            if patch.format == 1:
                gone, came = occurrences(held, len(gone_rows), len(came_rows))
                for i, o in zip(gone_rows, gone, strict=True):
                    removed[i] = o
                for i, o in zip(came_rows, came, strict=True):
                    added[i] = o
            held.difference_update(removed[i] for i in gone_rows)
            held.update(added[i] for i in came_rows)
        return removed, added


def _held_before(patches: list[Patch], assigned: list[tuple[list[int], list[int]]]) -> list[tuple[str, int]]:
    """The MSG occurrences the patches remove that none of them added before: instances the
    store holds from earlier requests."""
    added: set[tuple[str, int]] = set()
    needed: list[tuple[str, int]] = []
    for patch, (removed_occ, added_occ) in zip(patches, assigned, strict=True):
        for msg, occurrence in zip(patch.removed, removed_occ, strict=True):
            key = (msg.hash, occurrence)
            if "_:" not in msg.nquads:
                continue
            if key in added:  # added earlier in the request: its instance is known by then
                added.discard(key)
            else:
                needed.append(key)
        added.update((msg.hash, o) for msg, o in zip(patch.added, added_occ, strict=True) if "_:" in msg.nquads)
    return needed


def _by_hash(patch: Patch) -> Iterable[tuple[str, list[int], list[int]]]:
    rows: dict[str, tuple[list[int], list[int]]] = {}
    for which, msgs in enumerate((patch.removed, patch.added)):
        for i, msg in enumerate(msgs):
            if "_:" in msg.nquads:
                rows.setdefault(msg.hash, ([], []))[which].append(i)
    return [(digest, gone, came) for digest, (gone, came) in rows.items()]
