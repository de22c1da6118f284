"""Each graph's history as a Linked Data Event Stream (docs/streams.md): replicated by a
standard LDES client (ldes-client from npm) and by an independent reader written here with
rdflib (not the code that writes the documents), both materialising a graph isomorphic to
the hub's; pages, views, public graphs, HTTP Basic, the push channel, and bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
from rdflib import Dataset, Graph, Literal, URIRef
from rdflib.compare import isomorphic
from rdflib.namespace import RDF

from tests.conftest import RunningHub, npm_install, running_hub

LDES = "https://w3id.org/ldes#"
TREE = "https://w3id.org/tree#"
PROV = "http://www.w3.org/ns/prov#"
DCT = "http://purl.org/dc/terms/"
AS = "https://www.w3.org/ns/activitystreams#"
LH = "https://w3id.org/lucid-hub#"
G = "https://data.example.com/open/kpis"
PRIVATE = "https://data.example.com/private/orders"
FIRST = """<http://ex/a> <http://ex/p> "1" .
<http://ex/b> <http://ex/p> _:x .
_:x <http://ex/q> "2" .
_:x <http://ex/r> <http://ex/a> .
<http://ex/c> <http://ex/p> "3" .
<http://ex/d> <http://ex/p> "4" .
_:y <http://ex/q> "blank-rooted" .
"""
SECOND = """<http://ex/a> <http://ex/p> "1b" .
<http://ex/b> <http://ex/p> _:x .
_:x <http://ex/q> "2b" .
<http://ex/d> <http://ex/p> "4" .
<http://ex/e> <http://ex/p> "5" .
"""
THIRD = """<http://ex/a> <http://ex/p> "1c" .
<http://ex/d> <http://ex/p> "4" .
<http://ex/e> <http://ex/p> "5" .
<http://ex/e> <http://ex/p> "6" .
<http://ex/f> <http://ex/p> _:z .
_:z <http://ex/q> _:w .
_:w <http://ex/q> "deep" .
"""
OPEN_DATA = """@prefix eccauth: <https://vocab.eccenca.com/auth/> .
<urn:test:open> a eccauth:AccessCondition ;
    eccauth:requiresGroup "urn:lucid-hub:everyone" ;
    eccauth:grantReadGraphPattern "https://data.example.com/open/*" .
"""


@pytest.fixture
def streams_hub(tmp_path: Path) -> Iterator[RunningHub]:
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}",
                     {"LUCID_STREAM_PAGE_MEMBERS": "3"}) as hub:
        answer = hub.http.post(f"{hub.url}/admin/conditions", data=OPEN_DATA, headers={"Content-Type": "text/turtle"})
        assert answer.status_code in (200, 201), answer.text
        yield hub


def put(hub: RunningHub, graph: str, nt: str) -> None:
    answer = hub.http.put(f"{hub.url}/graphs", params={"graph": graph}, data=nt.encode(),
                          headers={"Content-Type": "application/n-triples"})
    assert answer.status_code in (200, 201), answer.text


def hub_graph(hub: RunningHub, graph: str) -> Graph:
    answer = hub.http.get(f"{hub.url}/graphs", params={"graph": graph}, headers={"Accept": "application/n-triples"})
    assert answer.status_code == 200
    return Graph().parse(data=answer.text, format="nt")


def stream_url(hub: RunningHub, graph: str) -> str:
    return f"{hub.url}/streams?graph={quote(graph, safe='')}"


# --- an independent reader: rdflib, following tree:view and tree:relation ---------------------

class Reader:
    """What an LDES client does, written from the specification: fetch the event stream,
    follow its view and every relation, remember processed members (never emitted twice),
    and materialise the latest version of each entity (timestamp, then sequence path)."""

    def __init__(self, session: requests.Session, url: str, accept: str = "application/trig") -> None:
        self.session, self.url, self.accept = session, url, accept
        self.seen: set[str] = set()
        self.immutable: set[str] = set()
        self.latest: dict[str, tuple[str, int, str, list[tuple[Any, Any, Any]]]] = {}
        self.pages = 0

    def fetch(self, url: str) -> Dataset:
        answer = self.session.get(url, headers={"Accept": self.accept}, timeout=30)
        assert answer.status_code == 200, (url, answer.status_code, answer.text)
        self.pages += 1
        data = Dataset()
        fmt = {"application/trig": "trig", "application/n-quads": "nquads", "application/ld+json": "json-ld",
               "text/turtle": "turtle"}[self.accept]
        data.parse(data=answer.text, format=fmt, publicID=url)
        if "immutable" in answer.headers.get("Cache-Control", ""):
            self.immutable.add(url)
        return data

    def sync(self) -> int:
        """Read everything not read yet; the number of new members."""
        description = self.fetch(self.url)
        es = URIRef(self.url)
        assert (es, RDF.type, URIRef(LDES + "EventStream")) in description
        self.paths = {p: description.value(es, URIRef(LDES + p)) for p in ("timestampPath", "sequencePath",
                                                                             "versionOfPath")}
        todo, visited, new = [str(description.value(es, URIRef(TREE + "view")))], set(), 0
        while todo:
            url = todo.pop()
            if url in visited or url in self.immutable:
                continue
            visited.add(url)
            data = self.fetch(url)
            for relation in data.objects(URIRef(url), URIRef(TREE + "relation")):
                todo.append(str(data.value(relation, URIRef(TREE + "node"))))
            for member in data.objects(es, URIRef(TREE + "member")):
                if str(member) in self.seen:
                    continue
                self.seen.add(str(member))
                new += 1
                self._take(data, member)
        return new

    def _take(self, data: Dataset, member: Any) -> None:
        entity = str(data.value(member, self.paths["versionOfPath"]))
        stamp = str(data.value(member, self.paths["timestampPath"]))
        position = int(data.value(member, self.paths["sequencePath"]))
        kind = str(data.value(member, RDF.type))
        payload = list(data.graph(member).triples((None, None, None)))
        held = self.latest.get(entity)
        if held is None or (stamp, position) > held[:2]:
            self.latest[entity] = (stamp, position, kind, payload)

    def graph(self) -> Graph:
        out = Graph()
        for _stamp, _position, kind, payload in self.latest.values():
            if kind != AS + "Delete":
                for triple in payload:
                    out.add(triple)
        return out


def test_an_independent_reader_replicates_the_stream_and_stays_in_sync(streams_hub: RunningHub) -> None:
    hub = streams_hub
    put(hub, G, FIRST)
    put(hub, G, SECOND)
    reader = Reader(requests.Session(), stream_url(hub, G))  # a public graph: no credentials
    assert reader.sync() > 6
    assert isomorphic(reader.graph(), hub_graph(hub, G))
    fetched = reader.pages
    put(hub, G, THIRD)
    assert reader.sync() >= 4  # the new versions only, never one twice
    assert isomorphic(reader.graph(), hub_graph(hub, G))
    assert reader.pages - fetched < fetched, "full pages were fetched again"
    for accept in ("application/n-quads", "application/ld+json"):
        other = Reader(requests.Session(), stream_url(hub, G), accept)
        other.sync()
        assert isomorphic(other.graph(), hub_graph(hub, G)), accept


def test_members_are_versions_with_provenance_and_deletions(streams_hub: RunningHub) -> None:
    hub = streams_hub
    put(hub, G, FIRST)
    put(hub, G, SECOND)
    head = hub.runtime.archive.head(G)
    data, members = view_members(hub, "last/1")
    kinds: dict[str, str] = {}
    for member in members:
        kinds[str(data.value(member, URIRef(DCT + "isVersionOf")))] = str(data.value(member, RDF.type))
        activity = data.value(member, URIRef(PROV + "wasGeneratedBy"))
        patch_id = str(data.value(activity, URIRef(DCT + "identifier")))
        assert str(activity) == f"{hub.url}/patches/{patch_id}"
        assert data.value(activity, URIRef(DCT + "creator")) is not None
    assert kinds["http://ex/c"] == AS + "Delete" and kinds["http://ex/e"] == AS + "Create"
    assert kinds["http://ex/a"] == AS + "Update"
    # the link to the signed patch: what a client verifies what it replicated against
    signed = requests.get(f"{hub.url}/patches/{head}", timeout=30)
    assert signed.status_code == 200 and b"H signature" in signed.content


@pytest.fixture(scope="session")
def ldes_client() -> Path:
    """ldes-client, the LDES reference client (rdf-connect), from the npm registry."""
    modules = npm_install("ldes-client", "ldes-client@0.3.0")
    script = modules.parent / f"ldes_replicate-{os.getpid()}.mjs"  # beside its node_modules: ES modules
    shutil.copy(Path(__file__).resolve().parents[1] / "js" / "ldes_replicate.js", script)  # resolve from there
    return script


def replicate(script: Path, url: str, *extra: str) -> Graph:
    """Run ldes-client over the whole stream; materialise what it emits: per entity, the
    payload (the member's named graph) of its latest version, unless that is a deletion."""
    done = subprocess.run(["node", str(script), url, *extra], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    data = Dataset()  # one document: blank nodes are labelled apart by the client already
    data.parse(data="".join(json.loads(line)["quads"] for line in done.stdout.splitlines()), format="nquads")
    latest: dict[str, tuple[str, int, Any]] = {}
    for member, _p, entity in data.triples((None, URIRef(DCT + "isVersionOf"), None)):
        key = (str(data.value(member, URIRef(PROV + "generatedAtTime"))),
               int(data.value(member, URIRef(LH + "streamPosition"))), member)
        if str(entity) not in latest or key[:2] > latest[str(entity)][:2]:
            latest[str(entity)] = key
    out = Graph()
    for _stamp, _position, member in latest.values():
        if (member, RDF.type, URIRef(AS + "Delete")) not in data:
            for triple in data.graph(member).triples((None, None, None)):
                out.add(triple)
    return out


def test_the_ldes_reference_client_replicates_a_public_graph(streams_hub: RunningHub, ldes_client: Path) -> None:
    hub = streams_hub
    put(hub, G, FIRST)
    put(hub, G, SECOND)
    assert isomorphic(replicate(ldes_client, stream_url(hub, G)), hub_graph(hub, G))
    put(hub, G, THIRD)
    assert isomorphic(replicate(ldes_client, stream_url(hub, G)), hub_graph(hub, G))


def test_the_ldes_reference_client_reads_a_private_graph_with_http_basic(streams_hub: RunningHub,
                                                                        ldes_client: Path) -> None:
    hub = streams_hub
    put(hub, PRIVATE, FIRST)
    record, secret = hub.client("harvester", ("lucid-hub-admins",), ("graphs:read",))
    assert isomorphic(replicate(ldes_client, stream_url(hub, PRIVATE), f"{record.client_id}:{secret}"),
                      hub_graph(hub, PRIVATE))


# --- access ------------------------------------------------------------------------------

def test_public_graphs_need_no_token_and_others_say_how_to_authenticate(streams_hub: RunningHub) -> None:
    hub = streams_hub
    put(hub, G, FIRST)
    put(hub, PRIVATE, FIRST)
    for path in ("/streams", "/streams/pages", "/graphs", "/patches", "/streams/views/latest"):
        assert requests.get(f"{hub.url}{path}", params={"graph": G}, timeout=30).status_code == 200, path
        denied = requests.get(f"{hub.url}{path}", params={"graph": PRIVATE}, timeout=30)
        assert denied.status_code == 401 and "not public" in denied.text, path
        assert "Basic" in denied.headers["WWW-Authenticate"] and "Bearer" in denied.headers["WWW-Authenticate"]
    # without credentials nothing is written, public or not
    assert requests.put(f"{hub.url}/graphs", params={"graph": G}, data=FIRST,
                        headers={"Content-Type": "application/n-triples"}, timeout=30).status_code == 401
    # asking whether a graph is public (each answer's caching, the catalogue) records no denial
    from sqlalchemy import func, select

    from lucid_hub.db.models import Denial

    def denials() -> int:
        with hub.runtime.db.session() as session:
            return int(session.scalar(select(func.count()).select_from(Denial)) or 0)

    before = denials()
    for _ in range(3):
        assert hub.http.get(f"{hub.url}/streams/pages", params={"graph": PRIVATE}, timeout=30).status_code == 200
        assert requests.get(f"{hub.url}/catalog", timeout=30).status_code == 200
    assert denials() == before
    # a party without a condition for the private graph: 403 (it is authenticated)
    stranger = hub.session(hub.token("stranger", (), ("graphs:read",)))
    assert stranger.get(f"{hub.url}/streams", params={"graph": PRIVATE}, timeout=30).status_code == 403
    assert stranger.get(f"{hub.url}/streams", params={"graph": G}, timeout=30).status_code == 200
    # the catalogue lists what the caller may read
    anonymous = requests.get(f"{hub.url}/catalog", timeout=30).text
    assert G in anonymous and PRIVATE not in anonymous
    assert PRIVATE in hub.http.get(f"{hub.url}/catalog", timeout=30).text


def test_http_basic_reads_only_and_wrong_secrets_are_refused_and_limited(streams_hub: RunningHub) -> None:
    hub = streams_hub
    put(hub, PRIVATE, FIRST)
    record, secret = hub.client("harvester", ("lucid-hub-admins",), ("graphs:read", "graphs:write"))
    good = (record.client_id, secret)
    assert requests.get(f"{hub.url}/streams", params={"graph": PRIVATE}, auth=good, timeout=30).status_code == 200
    assert requests.get(f"{hub.url}/graphs", params={"graph": PRIVATE}, auth=good, timeout=30).status_code == 200
    write = requests.put(f"{hub.url}/graphs", params={"graph": PRIVATE}, data=FIRST, auth=good,
                         headers={"Content-Type": "application/n-triples"}, timeout=30)
    assert write.status_code == 401 and "GET and HEAD" in write.text
    statuses = [requests.get(f"{hub.url}/streams", params={"graph": PRIVATE}, auth=(record.client_id, "wrong"),
                             timeout=30).status_code for _ in range(12)]
    assert statuses[0] == 401 and statuses[-1] == 429
    broken = requests.get(f"{hub.url}/streams", params={"graph": PRIVATE}, timeout=30,
                          headers={"Authorization": "Basic !!!"})
    assert broken.status_code == 401 and "base64" in broken.text


def test_a_condition_for_everyone_may_not_grant_write(streams_hub: RunningHub) -> None:
    bad = OPEN_DATA.replace("<urn:test:open>", "<urn:test:open-write>").replace(
        "grantReadGraphPattern", "grantWriteGraphPattern")
    answer = streams_hub.http.post(f"{streams_hub.url}/admin/conditions", data=bad,
                                   headers={"Content-Type": "text/turtle"})
    assert answer.status_code == 400 and "read only" in answer.text


def view_members(hub: RunningHub, view: str) -> tuple[Dataset, list[Any]]:
    """A view's members, following its pages."""
    data, url = Dataset(), f"{hub.url}/streams/views/{view}?graph={quote(G, safe='')}"
    while url:
        data.parse(data=requests.get(url, timeout=30).text, format="trig")
        nodes = [str(data.value(r, URIRef(TREE + "node"))) for r in data.objects(URIRef(url), URIRef(TREE + "relation"))]
        url = nodes[0] if nodes else ""
    return data, list(data.objects(URIRef(stream_url(hub, G)), URIRef(TREE + "member")))


# --- pages, views, time ------------------------------------------------------------------

def test_full_pages_are_immutable_and_the_newest_short_lived(streams_hub: RunningHub) -> None:
    hub = streams_hub
    put(hub, G, FIRST)
    first = requests.get(f"{hub.url}/streams/pages", params={"graph": G, "page": 0}, timeout=30)
    assert "immutable" in first.headers["Cache-Control"] and first.headers["Cache-Control"].startswith("public")
    assert "Accept" in first.headers["Vary"]
    again = requests.get(f"{hub.url}/streams/pages", params={"graph": G, "page": 0}, timeout=30,
                         headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304
    pages = hub.runtime.streams.current(G)
    last = len(pages.members) // 3
    newest = requests.get(f"{hub.url}/streams/pages", params={"graph": G, "page": last}, timeout=30)
    assert "immutable" not in newest.headers["Cache-Control"] and "max-age=1" in newest.headers["Cache-Control"]
    put(hub, G, SECOND)  # more members: page 0 is byte for byte what it was
    later = requests.get(f"{hub.url}/streams/pages", params={"graph": G, "page": 0}, timeout=30)
    assert later.content == first.content and later.headers["ETag"] == first.headers["ETag"]


def test_a_client_jumps_to_the_members_after_a_time(streams_hub: RunningHub) -> None:
    hub = streams_hub
    put(hub, G, FIRST)
    put(hub, G, SECOND)
    stream = hub.runtime.streams.current(G)
    second = stream.activities[1].timestamp
    first = stream.activities[0].timestamp
    answer = requests.get(f"{hub.url}/streams/pages", params={"graph": G, "after": first}, timeout=30,
                          allow_redirects=False)
    assert answer.status_code == 303
    page = int(answer.headers["Location"].rsplit("page=", 1)[1])
    assert stream.members[page * 3:(page + 1) * 3][-1].activity.timestamp == second or first == second
    # the root bounds each full page by its first and last timestamps
    root = Dataset().parse(data=requests.get(f"{hub.url}/streams/pages", params={"graph": G}, timeout=30).text,
                           format="trig")
    bounds = {str(root.value(r, URIRef(TREE + "node"))) for r in root.objects(None, URIRef(TREE + "relation"))
              if root.value(r, RDF.type) == URIRef(TREE + "LessThanOrEqualToRelation")}
    assert len(bounds) == len(stream.members) // 3


def test_views_keep_the_latest_the_last_n_and_a_duration(streams_hub: RunningHub) -> None:
    hub = streams_hub
    put(hub, G, FIRST)
    put(hub, G, SECOND)
    put(hub, G, THIRD)

    def members(view: str) -> tuple[Dataset, list[Any]]:
        return view_members(hub, view)

    data, latest = members("latest")
    entities = [str(data.value(m, URIRef(DCT + "isVersionOf"))) for m in latest]
    assert len(entities) == len(set(entities)) and "http://ex/c" not in entities  # deleted, not retained
    view = URIRef(f"{hub.url}/streams/views/latest?graph={quote(G, safe='')}")
    policy = data.value(view, URIRef(LDES + "retentionPolicy"))
    assert data.value(policy, URIRef(LDES + "versionAmount")) == Literal(1)
    data, last2 = members("last/2")
    per_entity: dict[str, int] = defaultdict(int)
    for m in last2:
        per_entity[str(data.value(m, URIRef(DCT + "isVersionOf")))] += 1
    assert max(per_entity.values()) == 2 and per_entity["http://ex/a"] == 2
    _data, hour = members("since/PT1H")
    assert len(hour) == len(hub.runtime.streams.current(G).members)  # all of it is younger than an hour
    _data, none = members("since/PT0S")
    assert none == []


def test_bad_stream_requests_get_reasons(streams_hub: RunningHub) -> None:
    hub = streams_hub
    put(hub, G, FIRST)
    cases = [("/streams/pages", {"graph": G, "page": "x"}, 400, "page number"),
             ("/streams/pages", {"graph": G, "page": "99"}, 404, "does not exist"),
             ("/streams/pages", {"graph": G, "after": "yesterday"}, 400, "UTC time"),
             ("/streams/views/last/0", {"graph": G}, 400, "unknown view"),
             ("/streams/views/since/P1M", {"graph": G}, 400, "duration"),
             ("/streams/views/weird", {"graph": G}, 400, "unknown view"),
             ("/streams", {"graph": "not an iri"}, 400, "absolute IRI"),
             ("/streams", {}, 400, "graph=IRI"),
             ("/streams/events", {"graph": G, "type": "text/html"}, 400, "type must be"),
             ("/streams/events", {"graph": G, "after": "-1"}, 400, "Last-Event-ID")]
    for path, params, status, reason in cases:
        answer = hub.http.get(f"{hub.url}{path}", params=params, timeout=30)
        assert answer.status_code == status and reason in answer.text, (path, params, answer.status_code, answer.text)
    assert hub.http.get(f"{hub.url}/streams", params={"graph": "https://data.example.com/none"},
                        timeout=30).status_code == 404
    assert requests.get(f"{hub.url}/streams", params={"graph": "https://data.example.com/none"},
                        timeout=30).status_code == 401  # no probing which graphs exist
    assert hub.http.get(f"{hub.url}/streams", params={"graph": G}, headers={"Accept": "image/png"},
                        timeout=30).status_code == 406


def test_the_push_channel_carries_each_patchs_members_and_resumes(streams_hub: RunningHub) -> None:
    hub = streams_hub
    put(hub, G, FIRST)
    put(hub, G, SECOND)
    events: list[tuple[str, dict[str, Any]]] = []
    with requests.get(f"{hub.url}/streams/events", params={"graph": G, "after": 0, "type": "application/n-quads"},
                      stream=True, timeout=30) as answer:
        assert answer.status_code == 200
        event_id = ""
        for line in answer.iter_lines(decode_unicode=True):
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                events.append((event_id, json.loads(line[6:])))
                if len(events) == 2:
                    break
    assert [e[0] for e in events] == ["1", "2"]
    stream = hub.runtime.streams.current(G)
    assert len(events[0][1]["members"]) + len(events[1][1]["members"]) == len(stream.members)
    body = Dataset().parse(data=events[1][1]["body"], format="nquads")
    assert {str(m) for m in body.objects(URIRef(stream_url(hub, G)), URIRef(TREE + "member"))} == set(
        events[1][1]["members"])
    with requests.get(f"{hub.url}/streams/events", params={"graph": G}, headers={"Last-Event-ID": "1"},
                      stream=True, timeout=30) as answer:
        data = next(line for line in answer.iter_lines(decode_unicode=True) if line.startswith("data: "))
    assert json.loads(data[6:])["seq"] == 2


def test_channels_and_links_are_discoverable_from_the_graph(streams_hub: RunningHub) -> None:
    hub = streams_hub
    put(hub, G, FIRST)
    answer = requests.get(f"{hub.url}/channels", params={"graph": G}, timeout=30)
    kinds = {c["kind"]: c for c in answer.json()["channels"]}
    assert {"websub", "ldes", "ldes-events", "ldn-inbox", "patch-events", "query-subscriptions"} <= set(kinds)
    assert kinds["ldes"]["url"] == stream_url(hub, G)
    for kind in ("ldes", "ldes-events", "patch-events"):
        assert requests.get(kinds[kind]["url"], timeout=30, stream=True).status_code == 200, kind
    rdf = requests.get(f"{hub.url}/channels", params={"graph": G}, headers={"Accept": "text/turtle"}, timeout=30)
    assert rdf.status_code == 200 and Graph().parse(data=rdf.text, format="turtle")
    context = requests.get(f"{hub.url}/contexts/lucid-hub.jsonld", timeout=30).json()
    assert context["@context"]["ldes"] == LDES


def test_the_patch_archive_gives_the_latest_n(streams_hub: RunningHub) -> None:
    hub = streams_hub
    for nt in (FIRST, SECOND, THIRD):
        put(hub, G, nt)
    ids = [r.id for r in hub.runtime.archive.history(G)]
    answer = requests.get(f"{hub.url}/patches", params={"graph": G, "size": 2}, headers={"Accept": "application/json"},
                          timeout=30)
    assert [p["id"] for p in answer.json()["patches"]] == ids[-2:]
    for bad in ({"size": "0"}, {"size": "x"}, {"size": "2", "since": ids[0]}):
        refused = requests.get(f"{hub.url}/patches", params={"graph": G, **bad}, timeout=30)
        assert refused.status_code == 400 and "size" in refused.text, bad


def test_ground_patches_take_the_short_way_to_the_same_members(streams_hub: RunningHub,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Rebuilding a stream slices ground rows instead of parsing them (members.ground_patch):
    the members, their states and activities are those the full reader gives."""
    from lucid_hub.streams import members as m

    hub = streams_hub
    put(hub, G, FIRST)  # blank nodes: the full reader
    put(hub, G, '<http://ex/a> <http://ex/p> "x\\ny \\"q\\" ." .\n<http://ex/g> <http://ex/p> "7"@en .\n')
    put(hub, G, '<http://ex/g> <http://ex/p> "7b"@en .\n<http://ex/h> <http://ex/p> "8"^^<http://ex/t> .\n')
    put(hub, G, THIRD)
    bodies = [link.body for link in hub.runtime.archive.chain(G, 0, 100, bodies=True)]
    assert [m.ground_patch(b, G) is not None for b in bodies] == [False, False, True, False]

    def build() -> m.GraphStream:
        stream = m.GraphStream(G, hub.runtime.canonicalizer)
        stream.extend([(link.id, link.seq, link.body) for link in hub.runtime.archive.chain(G, 0, 100, bodies=True)])
        return stream

    short = build()
    monkeypatch.setattr(m, "ground_patch", lambda _body, _graph: None)
    full = build()
    assert [(x.entity, x.kind, x.statements) for x in short.members] == \
        [(x.entity, x.kind, x.statements) for x in full.members]
    assert short.activities == full.activities and short.starts == full.starts
