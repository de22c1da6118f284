"""The Graph Store Protocol and LDP as standard clients use them: media types with
parameters, entity tags exactly as the hub sends them, creating a graph, the container's
headers and subject (issue 14, points 12 and 13)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pyoxigraph as ox
import pytest

from tests.conftest import RunningHub, assert_consistent

G = "http://example.org/graphs/kpi"
NT = {"Content-Type": "application/n-triples"}
V1 = '<http://ex/a> <http://ex/p> "1" .\n'
V2 = '<http://ex/a> <http://ex/p> "2" .\n'
JSONLD_PROFILE = 'application/ld+json; profile="http://www.w3.org/ns/json-ld#expanded"'


def put(hub: RunningHub, body: str, graph: str = G, **headers: str):  # type: ignore[no-untyped-def]
    return hub.http.put(f"{hub.url}/graphs", params={"graph": graph}, data=body.encode(), timeout=30,
                        headers={**NT, **headers})


@pytest.mark.parametrize(("accept", "served"), [
    ("text/turtle;charset=utf-8", "text/turtle"),
    ("text/turtle; charset=UTF-8; q=0.9, application/n-triples; q=0.1", "text/turtle"),
    (JSONLD_PROFILE, "application/ld+json"),
    ("application/n-triples;q=0.5, text/turtle;q=0.4", "application/n-triples"),
    ("image/png, */*;q=0.1", "text/turtle"),
    ("TEXT/Turtle", "text/turtle"),
])
def test_accept_with_parameters_is_negotiated_on_graphs_and_archive(hub: RunningHub, accept: str, served: str) -> None:
    patch = put(hub, V1).json()["patch"]
    graph = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"Accept": accept}, timeout=30)
    assert graph.status_code == 200 and graph.headers["Content-Type"].startswith(served), graph.text
    container = hub.http.get(f"{hub.url}/patches", params={"graph": G}, headers={"Accept": accept}, timeout=30)
    assert container.status_code == 200 and container.headers["Content-Type"].startswith(served)
    one = hub.http.get(f"{hub.url}/patches/{patch}", headers={"Accept": f"{JSONLD_PROFILE}, application/trig;q=0.5"},
                       timeout=30)
    assert one.status_code == 200 and one.headers["Content-Type"].startswith("application/ld+json")


def test_if_match_with_the_etag_as_sent_and_other_preconditions(hub: RunningHub) -> None:
    first = put(hub, V1)
    etag = first.headers["ETag"]
    assert etag.startswith('"urn:sha256:')
    ok = put(hub, V2, **{"If-Match": etag})  # exactly as the hub sent it
    assert ok.status_code == 200, ok.text
    stale = put(hub, V1, **{"If-Match": etag})
    assert stale.status_code == 412 and stale.headers["ETag"] == ok.headers["ETag"]
    assert put(hub, V1, **{"If-Match": f'"urn:sha256:{"0" * 64}", {ok.headers["ETag"]}'}).status_code == 200
    current = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, timeout=30).headers["ETag"]
    assert put(hub, V2, **{"If-Match": f"W/{current}"}).status_code == 412  # weak tags never match If-Match
    assert put(hub, V2, **{"If-Match": "*"}).status_code == 200  # the graph exists
    assert put(hub, V1, "http://example.org/graphs/new", **{"If-Match": "*"}).status_code == 412
    assert put(hub, V1, **{"If-None-Match": "*"}).status_code == 412  # create-only, but it exists
    created = put(hub, V1, "http://example.org/graphs/new", **{"If-None-Match": "*"})
    assert created.status_code == 201
    bare = put(hub, V2, **{"If-Match": current.strip('"')})
    assert bare.status_code == 400 and "not an entity tag" in bare.text
    now = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, timeout=30)
    unchanged = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"If-None-Match": now.headers["ETag"]},
                             timeout=30)
    assert unchanged.status_code == 304 and unchanged.headers["ETag"] == now.headers["ETag"] and not unchanged.content
    # A read that must be of one version (If-Match): that version or 412, never another one.
    same = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"If-Match": now.headers["ETag"]}, timeout=30)
    assert same.status_code == 200 and same.headers["ETag"] == now.headers["ETag"]
    older = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"If-Match": current}, timeout=30)
    assert older.status_code == 412 and now.headers["ETag"].strip('"') in older.text
    assert_consistent(hub.runtime)


def test_post_without_a_graph_creates_one_and_locates_it(hub: RunningHub) -> None:
    created = hub.http.post(f"{hub.url}/graphs", data=V1.encode(), headers=NT, timeout=30)
    assert created.status_code == 201, created.text
    graph = created.json()["graph"]
    assert graph.startswith(f"{hub.url}/graphs/")
    # GSP §5.5: Location is the new graph's IRI, its own URL here (direct identification)
    assert created.headers["Location"] == graph
    content = hub.http.get(created.headers["Location"], headers={"Accept": "application/n-triples"}, timeout=30)
    assert content.status_code == 200 and content.text == V1
    indirect = hub.http.get(f"{hub.url}/graphs?graph={quote(graph, safe='')}", headers={"Accept": "application/n-triples"},
                            timeout=30)
    assert indirect.status_code == 200 and indirect.text == V1
    empty = hub.http.post(f"{hub.url}/graphs", data=b"", headers=NT, timeout=30)
    assert empty.status_code == 400 and "at least one triple" in empty.text
    reader = hub.session(hub.token("reader", ("partner",), ("graphs:read", "graphs:write")))
    assert reader.post(f"{hub.url}/graphs", data=V1.encode(), headers=NT, timeout=30).status_code == 403
    assert_consistent(hub.runtime)


def test_default_graph_and_multipart_are_refused_with_a_reason(hub: RunningHub) -> None:
    for method in ("GET", "PUT", "POST", "DELETE"):
        answer = hub.http.request(method, f"{hub.url}/graphs?default", data=V1.encode(), headers=NT, timeout=30)
        assert answer.status_code == 400 and "no default graph" in answer.text, (method, answer.text)
    multipart = hub.http.post(f"{hub.url}/graphs", params={"graph": G}, files={"a": ("a.nt", V1, "application/n-triples")},
                              timeout=30)
    assert multipart.status_code == 415 and "multipart" in multipart.text


def test_a_replace_answers_200_without_location_and_links_its_patch(hub: RunningHub) -> None:
    put(hub, V1)
    second = put(hub, V2)
    assert second.status_code == 200 and "Location" not in second.headers
    assert f'<{hub.url}/patches/{second.json()["patch"]}>; rel="urn:lucid-hub:ns:patch"' in second.headers["Link"]


def test_the_archive_container_speaks_ldp(hub: RunningHub) -> None:
    for i in range(2):
        put(hub, f'<http://ex/a> <http://ex/p> "{i}" .\n')
    raw_query = f"graph={quote(G, safe='')}"  # percent-encoded, as a client may send it
    url = f"{hub.url}/patches?{raw_query}"
    page = hub.http.get(url, headers={"Accept": "text/turtle"}, timeout=30)
    assert page.status_code == 200
    link = page.headers["Link"]
    assert '<http://www.w3.org/ns/ldp#BasicContainer>; rel="type"' in link
    assert '<http://www.w3.org/ns/ldp#Resource>; rel="type"' in link
    assert page.headers["Accept-Post"] == "application/rdf-patch" and page.headers["ETag"].startswith('"')
    subjects = {q.subject for q in ox.parse(page.content, format=ox.RdfFormat.TURTLE)}
    assert subjects == {ox.NamedNode(url)}  # exactly the request URI as sent
    again = hub.http.get(url, headers={"Accept": "text/turtle", "If-None-Match": page.headers["ETag"]}, timeout=30)
    assert again.status_code == 304
    put(hub, '<http://ex/a> <http://ex/p> "new" .\n')
    changed = hub.http.get(url, headers={"Accept": "text/turtle", "If-None-Match": page.headers["ETag"]}, timeout=30)
    assert changed.status_code == 200 and changed.headers["ETag"] != page.headers["ETag"]
    options = hub.http.options(url, timeout=30)
    assert options.status_code == 204 and options.headers["Accept-Post"] == "application/rdf-patch"
    assert "ldp#BasicContainer" in options.headers["Link"] and "POST" in options.headers["Allow"]
    one = hub.http.get(f"{hub.url}/patches/{hub.runtime.archive.head(G)}", timeout=30)
    assert 'ldp#Resource>; rel="type"' in one.headers["Link"] and one.headers["Cache-Control"].startswith("private")


LEXICAL = ('<http://ex/a> <http://ex/n> "01"^^<http://www.w3.org/2001/XMLSchema#integer> , '
           '"+1"^^<http://www.w3.org/2001/XMLSchema#integer> , "7"^^<http://www.w3.org/2001/XMLSchema#integer> , '
           '"1.50"^^<http://www.w3.org/2001/XMLSchema#decimal> , ".5"^^<http://www.w3.org/2001/XMLSchema#decimal> , '
           '"1.0E0"^^<http://www.w3.org/2001/XMLSchema#double> , "1"^^<http://www.w3.org/2001/XMLSchema#boolean> , '
           '"true"^^<http://www.w3.org/2001/XMLSchema#boolean> .\n')


@pytest.mark.parametrize(("accept", "rdflib_format"), [("text/turtle", "turtle"), ("application/trig", "trig")])
def test_turtle_and_trig_round_trip_every_lexical_form_through_rdflib(hub: RunningHub, accept: str,
                                                                     rdflib_format: str) -> None:
    import rdflib

    expected = {str(q.object) for q in ox.parse(LEXICAL.encode(), format=ox.RdfFormat.TURTLE)}
    patch = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=LEXICAL.encode(), timeout=30,
                         headers={"Content-Type": "text/turtle"}).json()["patch"]
    graph_text = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"Accept": accept}, timeout=30).text
    patch_text = hub.http.get(f"{hub.url}/patches/{patch}", headers={"Accept": "application/trig"}, timeout=30).text
    assert "01" in graph_text and " 01 " not in graph_text  # quoted, not a bare token
    was = rdflib.NORMALIZE_LITERALS
    rdflib.NORMALIZE_LITERALS = False  # rdflib keeps lexical forms only when told so
    try:
        for text, fmt in ((graph_text, rdflib_format), (patch_text, "trig")):
            dataset = rdflib.Dataset()
            dataset.parse(data=text, format=fmt)
            read = {o.n3() for _s, p, o, _g in dataset.quads() if str(p) == "http://ex/n"}
            assert read == expected, (fmt, read ^ expected)
    finally:
        rdflib.NORMALIZE_LITERALS = was
    for text, fmt in ((graph_text, accept), (patch_text, "application/trig")):  # and pyoxigraph
        read = {str(q.object) for q in ox.parse(text.encode(), format=ox.RdfFormat.from_media_type(fmt))
                if q.predicate.value == "http://ex/n"}
        assert read == expected


REPRESENTATIONS = ["text/turtle", "application/trig", "application/n-quads", "application/n-triples",
                   "application/ld+json"]


def test_each_representation_has_its_own_strong_entity_tag(hub: RunningHub) -> None:
    """RFC 9110 §8.8.1 and §8.8.3.3: one strong validator per representation. The reproduction:
    a JSON-LD request with the Turtle tag in If-None-Match got 304 (a cache would hand Turtle
    to a JSON-LD client). Each syntax validates only itself; a write's If-Match may carry the
    tag of any representation of the version it read."""
    version = put(hub, V1).json()["version"]
    tags = {}
    for media_type in REPRESENTATIONS:
        answer = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"Accept": media_type}, timeout=30)
        assert answer.status_code == 200 and answer.headers["Content-Type"].startswith(media_type)
        assert answer.headers["Vary"] == "Accept"
        tags[media_type] = answer.headers["ETag"]
    assert len(set(tags.values())) == len(REPRESENTATIONS), tags
    assert tags["application/n-triples"] == f'"{version}"'  # the line-based form names the version itself
    for asked in REPRESENTATIONS:
        for cached, tag in tags.items():
            answer = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, timeout=30,
                                  headers={"Accept": asked, "If-None-Match": tag})
            assert answer.status_code == (304 if cached == asked else 200), (asked, cached, answer.status_code)
            if answer.status_code == 200:
                assert answer.headers["Content-Type"].startswith(asked) and answer.content
    written = put(hub, V2, **{"If-Match": tags["application/ld+json"]})  # the version it names, from any syntax
    assert written.status_code == 200, written.text
    stale = put(hub, V1, **{"If-Match": tags["text/turtle"]})
    assert stale.status_code == 412
    versions = [hub.http.get(f"{hub.url}/graphs", params={"graph": G, "version": version}, timeout=30,
                             headers={"Accept": media_type}).headers["ETag"] for media_type in REPRESENTATIONS]
    assert versions == [tags[m] for m in REPRESENTATIONS]  # an old version's representations: the same tags


def test_a_deleted_graph_is_gone_until_it_is_written_again(hub: RunningHub) -> None:
    """GSP §5.4 (W3C get_of_delete__existing_graph, delete__nonexistent_graph): after DELETE the
    graph is 404 and a second DELETE too; its history stays in the archive and at ?version=;
    a PUT creates it again (201), even with the content it had. SPARQL's DROP GRAPH deletes it
    the same way, CREATE GRAPH makes it again (and is no conflict), CLEAR keeps it, empty."""
    from tests.web.test_sparql import update

    first = put(hub, V1).json()["version"]
    assert hub.http.delete(f"{hub.url}/graphs", params={"graph": G}, timeout=30).status_code == 200
    gone = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, timeout=30)
    assert gone.status_code == 404 and "deleted" in gone.text
    assert hub.http.head(f"{hub.url}/graphs", params={"graph": G}, timeout=30).status_code == 404
    assert hub.http.delete(f"{hub.url}/graphs", params={"graph": G}, timeout=30).status_code == 404
    old = hub.http.get(f"{hub.url}/graphs", params={"graph": G, "version": first}, headers={"Accept": "application/n-triples"})
    assert old.status_code == 200 and old.text == V1
    assert len(hub.http.get(f"{hub.url}/patches", params={"graph": G}, headers={"Accept": "application/json"}
                            ).json()["patches"]) == 2
    again = put(hub, V1)
    assert again.status_code == 201, again.text
    assert hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"Accept": "application/n-triples"}).text == V1
    # deleted while empty, then PUT empty again: no patch either time, gone and back all the same
    assert hub.http.delete(f"{hub.url}/graphs", params={"graph": G}).status_code == 200
    assert put(hub, "").status_code == 201
    assert hub.http.delete(f"{hub.url}/graphs", params={"graph": G}).status_code == 200
    assert hub.http.get(f"{hub.url}/graphs", params={"graph": G}).status_code == 404
    assert put(hub, "").status_code == 201
    assert hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"Accept": "application/n-triples"}).text == ""
    # SPARQL Update: DROP deletes, CREATE makes again, CLEAR empties
    assert update(hub.http, hub, f"DROP GRAPH <{G}>").status_code == 200
    assert hub.http.get(f"{hub.url}/graphs", params={"graph": G}).status_code == 404
    created = update(hub.http, hub, f"CREATE GRAPH <{G}>")
    assert created.status_code == 200, created.text
    assert hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"Accept": "application/n-triples"}).text == ""
    assert update(hub.http, hub, f"CREATE GRAPH <{G}>").status_code == 409  # now it exists
    put(hub, V2)
    assert update(hub.http, hub, f"CLEAR GRAPH <{G}>").status_code == 200
    assert hub.http.get(f"{hub.url}/graphs", params={"graph": G}).status_code == 200
    assert_consistent(hub.runtime)


def test_generic_clients_read_the_graph_document_as_the_graph(hub: RunningHub, rdf_js_clients: Path) -> None:
    """GSP §5.2: the representation is the graph. Comunica, given the graph's URL as a document
    source, negotiates a syntax (it prefers quad syntaxes) and must find the graph's triples
    (it found one, the inbox link, when they stood in a named graph); rdflib.js reads each
    N-Quads document's default graph as the document, as it does Turtle and JSON-LD."""
    from tests.conftest import run_node

    body = "".join(f'<http://ex/s{i}> <http://ex/p> "{i}" .\n' for i in range(7))
    put(hub, body)
    token = hub.http.headers["Authorization"].split()[1]
    url = f"{hub.url}/graphs?graph={quote(G, safe='')}"
    auth = hub.client("comunica", ("lucid-hub-admins",), ("graphs:read",))
    rows = run_node(rdf_js_clients, "comunica_select.js", "auto", url, "SELECT ?s ?o WHERE { ?s ?p ?o }",
                    f"{auth[0].client_id}:{auth[1]}")
    assert sorted(int(r["o"]) for r in rows) == list(range(7))
    for media_type in ("application/n-quads", "text/turtle", "application/ld+json"):  # (rdflib.js reads no TriG)
        found = run_node(rdf_js_clients, "rdflibjs_parse.js", url, media_type, token)
        assert found == {"statements": 7, "defaultGraph": 7}, (media_type, found)
