"""Versioned publishing over HTTP: graph store protocol, archive, upload, SPARQL Update.

Runs against a real HTTP server on loopback, on SQLite and on PostgreSQL where reachable.
After bad input, archive, store and log must still agree (assert_consistent).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
import requests

from lucid_hub.diff import GraphChange
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import graph_msgs
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.signing import TrustedKeys
from tests.conftest import RunningHub, assert_consistent, parse_nt, whole_canonical

G = "http://example.org/graphs/kpi"
XSD = "http://www.w3.org/2001/XMLSchema#"
V1 = (f'<http://ex/kpi1> <http://ex/value> "01"^^<{XSD}integer> .\n'
      f'<http://ex/kpi1> <http://ex/unit> "days" .\n'
      f'<http://ex/o> <http://ex/line> _:a .\n_:a <http://ex/qty> "1.50"^^<{XSD}decimal> .\n')
V2 = V1.replace('"01"', '"02"') + '<http://ex/kpi2> <http://ex/unit> "%" .\n'
NT = {"Content-Type": "application/n-triples"}


def put(hub: RunningHub, body: str, graph: str = G, **headers: str) -> requests.Response:
    return hub.http.put(f"{hub.url}/graphs", params={"graph": graph}, data=body.encode(),
                        headers={**NT, **headers}, timeout=30)


def get_nt(hub: RunningHub, graph: str = G, **params: str) -> requests.Response:
    return hub.http.get(f"{hub.url}/graphs", params={"graph": graph, **params},
                        headers={"Accept": "application/n-triples"}, timeout=30)


def statements(response: requests.Response) -> list[str]:
    return [line[:-2] for line in response.text.splitlines()]


def test_put_creates_versions_and_get_returns_them_exactly(hub: RunningHub) -> None:
    first = put(hub, V1, **{"X-Lucid-Author": "alice", "X-Lucid-Message": "initial"})
    assert first.status_code == 201
    v1 = first.json()["version"]
    assert first.headers["ETag"] == f'"{v1}"'
    # 201: Location is the graph's resource; the patch that made it is linked beside
    assert first.headers["Location"] == f"{hub.url}/graphs?graph={quote(G, safe='')}"
    assert f'<{hub.url}/patches/{v1}>; rel="urn:lucid-hub:ns:patch"' in first.headers["Link"]
    second = put(hub, V2)
    assert second.status_code == 200 and second.json()["removed"] == 1 and second.json()["added"] == 2
    v2 = second.json()["version"]
    now = get_nt(hub)
    assert now.headers["ETag"] == f'"{v2}"'
    assert '"02"^^<http://www.w3.org/2001/XMLSchema#integer>' in now.text  # lexical form kept
    assert whole_canonical(statements(now)) == whole_canonical([str(q) for q in parse_nt(V2)])
    old = get_nt(hub, version=v1)
    assert old.headers["ETag"] == f'"{v1}"'
    assert whole_canonical(statements(old)) == whole_canonical([str(q) for q in parse_nt(V1)])
    assert 'rel="hub"' in now.headers["Link"] and 'rel="self"' in now.headers["Link"]
    assert_consistent(hub.runtime)


def test_put_of_the_same_content_with_fresh_blank_nodes_makes_no_patch(hub: RunningHub) -> None:
    v1 = put(hub, V1).json()["version"]
    again = put(hub, V1.replace("_:a", "_:zz"))
    assert again.status_code == 200 and again.json()["patch"] is None and again.json()["version"] == v1
    assert len(hub.runtime.archive.history(G)) == 1


def test_an_unchanged_answer_names_the_version_it_compared_against_not_a_later_one(
        hub: RunningHub, monkeypatch: pytest.MonkeyPatch) -> None:
    """A publish that changes nothing answers with the version its content equals. Another
    writer's patch committed between that decision and the answer (another thread, another
    replica) must not be named: a client's next If-Match on it would overwrite that patch
    unseen. Each call below is made to interleave so, deterministically."""
    v1 = put(hub, V1).json()["version"]
    publisher = hub.runtime.publisher
    later: list[str] = []

    def and_then_another_writer(real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            patch = publisher.publish(G, lambda view: GraphChange(G, (), tuple(graph_msgs(parse_nt(
                f'<http://ex/other> <http://ex/n> "{len(later)}" .\n'), hub.runtime.canonicalizer).msgs())),
                author="other", message="")
            assert patch is not None
            later.append(patch.id)
            return result
        return call

    for name in ("replace", "merge", "upload"):
        monkeypatch.setattr(publisher, name, and_then_another_writer(getattr(publisher, name)))
    current = v1
    ground = '<http://ex/kpi1> <http://ex/unit> "days" .\n'  # in V1 (a merge's blank nodes are new ones)
    answers = [put(hub, V1), hub.http.post(f"{hub.url}/graphs", params={"graph": G}, data=ground.encode(),
                                           headers=NT, timeout=30)]
    for answer, newer in zip(answers, later, strict=True):
        assert answer.status_code == 200 and answer.json()["patch"] is None
        assert answer.json()["version"] == current and answer.headers["ETag"] == f'"{current}"', (current, newer)
        current = newer
    empty = hub.http.post(f"{hub.url}/patches", params={"graph": G}, data=f"H prev <{current}> .\n".encode(),
                          headers={"Content-Type": "application/rdf-patch"}, timeout=30)
    assert empty.status_code == 200 and empty.json()["patch"] is None and empty.json()["version"] == current
    assert hub.runtime.archive.head(G) == later[-1] != current


def test_content_negotiation_offers_turtle_trig_nquads_jsonld(hub: RunningHub) -> None:
    put(hub, V1)
    for media_type in ("text/turtle", "application/trig", "application/n-quads", "application/ld+json"):
        response = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"Accept": media_type}, timeout=30)
        assert response.status_code == 200 and response.headers["Content-Type"].startswith(media_type)
        assert "01" in response.text
    assert hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"Accept": "image/png"},
                        timeout=30).status_code == 406


def test_if_match_gives_optimistic_concurrency(hub: RunningHub) -> None:
    v1 = put(hub, V1).json()["version"]
    put(hub, V2)
    stale = put(hub, V1, **{"If-Match": f'"{v1}"'})
    assert stale.status_code == 412 and "not" in stale.text
    assert_consistent(hub.runtime)


def test_post_merges_and_delete_drops(hub: RunningHub) -> None:
    put(hub, V1)
    merged = hub.http.post(f"{hub.url}/graphs", params={"graph": G}, headers=NT, timeout=30,
                           data=b'<http://ex/kpi9> <http://ex/unit> "h" .\n<http://ex/kpi1> <http://ex/unit> "days" .\n')
    assert merged.json()["added"] == 1 and merged.json()["removed"] == 0
    dropped = hub.http.delete(f"{hub.url}/graphs", params={"graph": G}, timeout=30)
    assert dropped.json()["removed"] == 4 and get_nt(hub).status_code == 404  # gone (GSP §5.4), its history kept
    assert len(hub.runtime.archive.history(G)) == 3
    assert_consistent(hub.runtime)


def test_archive_lists_patches_with_paging_and_since(hub: RunningHub) -> None:
    ids = [put(hub, V1 + f'<http://ex/n> <http://ex/v> "{i}" .\n').json()["version"] for i in range(5)]
    first = hub.http.get(f"{hub.url}/patches", params={"graph": G}, timeout=30)
    assert first.status_code == 200 and "ldp:BasicContainer" in first.text
    assert [i for i in ids if f"/patches/{i}>" in first.text] == ids[:3]  # page size 3
    assert 'rel="next"' in first.headers["Link"]
    rest = hub.http.get(f"{hub.url}/patches", params={"graph": G, "since": ids[2]}, timeout=30)
    assert [i for i in ids if f"/patches/{i}>" in rest.text] == ids[3:]
    assert 'rel="next"' not in rest.headers["Link"]


def test_patch_resources_negotiate_and_verify_with_the_published_jwks(hub: RunningHub,
                                                                     canonicalizer: Canonicalizer) -> None:
    patch_id = put(hub, V1).json()["patch"]
    raw = hub.http.get(f"{hub.url}/patches/{patch_id}", timeout=30)
    assert raw.headers["Content-Type"].startswith("application/rdf-patch")
    jwks = hub.http.get(f"{hub.url}/.well-known/jwks.json", timeout=30).json()
    from lucid_hub.signing import verify_patch_bytes

    assert verify_patch_bytes(raw.content, TrustedKeys(jwks), canonicalizer).id == patch_id
    for media_type, marker in (("application/trig", "eccrev:Commit"), ("application/ld+json", "@id"),
                               ("text/html", "<pre>")):
        response = hub.http.get(f"{hub.url}/patches/{patch_id}", headers={"Accept": media_type}, timeout=30)
        assert response.status_code == 200 and marker in response.text
    assert hub.http.get(f"{hub.url}/patches/urn:sha256:{'0' * 64}", timeout=30).status_code == 404


def test_rdf_patch_upload_checks_prev(hub: RunningHub) -> None:
    v1 = put(hub, V1).json()["version"]
    body = f"H prev <{v1}> .\nTX .\nA <http://ex/kpi3> <http://ex/unit> \"kg\" <{G}> .\nTC .\n"
    headers = {"Content-Type": "application/rdf-patch"}
    created = hub.http.post(f"{hub.url}/patches", params={"graph": G}, data=body, headers=headers, timeout=30)
    assert created.status_code == 201 and created.json()["added"] == 1
    replayed = hub.http.post(f"{hub.url}/patches", params={"graph": G}, data=body, headers=headers, timeout=30)
    assert replayed.status_code == 409 and replayed.headers["ETag"] == f'"{created.json()["version"]}"'
    assert_consistent(hub.runtime)


def test_uploaded_patch_with_wrong_id_or_signature_is_422(hub: RunningHub, canonicalizer: Canonicalizer,
                                                         signing_key) -> None:  # type: ignore[no-untyped-def]
    from lucid_hub.rdf.rdfpatch import write_rdf_patch
    from lucid_hub.signing import sign_patch

    v1 = put(hub, V1).json()["version"]
    patch = Patch.build(G, v1, [], [read_rdf_patch(hub.http.get(f"{hub.url}/patches/{v1}", timeout=30).content,
                                                   canonicalizer).added[0]])
    headers = {"Content-Type": "application/rdf-patch"}
    # The content changed under the original id: the id no longer matches.
    tampered = write_rdf_patch(patch).replace(b'"days"', b'"weeks"')
    assert tampered != write_rdf_patch(patch)
    bad_id = hub.http.post(f"{hub.url}/patches", params={"graph": G}, data=tampered, headers=headers, timeout=30)
    assert bad_id.status_code == 422 and "claimed id" in bad_id.text
    foreign = write_rdf_patch(sign_patch(patch, signing_key))  # signed by a key this hub does not know
    bad_sig = hub.http.post(f"{hub.url}/patches", params={"graph": G}, data=foreign, headers=headers, timeout=30)
    assert bad_sig.status_code == 422 and "unknown key" in bad_sig.text
    assert hub.runtime.archive.head(G) == v1
    assert_consistent(hub.runtime)


def test_sparql_update_patch_contains_exactly_the_change(hub: RunningHub) -> None:
    put(hub, V1)
    update = (f'PREFIX ex: <http://ex/> DELETE {{ GRAPH <{G}> {{ ex:kpi1 ex:unit ?u }} }} '
              f'INSERT {{ GRAPH <{G}> {{ ex:kpi1 ex:unit "hours" }} }} WHERE {{ GRAPH <{G}> {{ ex:kpi1 ex:unit ?u }} }}')
    result = hub.http.post(f"{hub.url}/sparql", data=update, timeout=30,
                           headers={"Content-Type": "application/sparql-update"}).json()
    (change,) = result["patches"]
    assert change["removed"] == 1 and change["added"] == 1
    noop = hub.http.post(f"{hub.url}/sparql", data=update, headers={"Content-Type": "application/sparql-update"},
                         timeout=30).json()
    assert noop["patches"] == []
    assert_consistent(hub.runtime)


# --- bad input: clear 4xx, nothing half-written -----------------------------------------

def test_malformed_rdf_names_line_and_column(hub: RunningHub) -> None:
    put(hub, V1)
    response = put(hub, V1 + '<http://ex/s> <http://ex/p> "broken .\n')
    assert response.status_code == 400 and "line 5" in response.text and "column" in response.text
    assert_consistent(hub.runtime)


def test_wrong_content_type_is_415_and_oversized_body_is_413(hub: RunningHub) -> None:
    assert hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=V1, timeout=30,
                        headers={"Content-Type": "text/plain"}).status_code == 415
    big = put(hub, V1 + "".join(f'<http://ex/s{i}> <http://ex/p> "{"x" * 100}" .\n' for i in range(3000)))
    assert big.status_code == 413 and "limit" in big.text
    assert [g.iri for g in hub.runtime.archive.graphs()] == ["urn:lucid-hub:policies"]  # nothing of ours
    assert_consistent(hub.runtime)


def test_unknown_graph_and_missing_parameters(hub: RunningHub) -> None:
    assert get_nt(hub, graph="http://ex/none").status_code == 404
    assert hub.http.get(f"{hub.url}/graphs", timeout=30).status_code == 400
    assert get_nt(hub, graph="not an iri").status_code == 400
    assert hub.http.get(f"{hub.url}/patches", params={"graph": "http://ex/none"}, timeout=30).status_code == 404
    assert hub.http.get(f"{hub.url}/patches/not-a-patch-id", timeout=30).status_code == 400


def test_reserved_namespace_and_malformed_sparql_are_refused(hub: RunningHub) -> None:
    assert put(hub, '<urn:lucid-hub:bnode:abc.0> <http://ex/p> "x" .\n').status_code == 400
    response = hub.http.post(f"{hub.url}/sparql", data="INSERT DATA { nonsense", timeout=30,
                             headers={"Content-Type": "application/sparql-update"})
    assert response.status_code == 400 and "malformed" in response.text
    assert hub.http.post(f"{hub.url}/sparql", data="LOAD <http://evil/>", timeout=30,
                         headers={"Content-Type": "application/sparql-update"}).status_code == 400
    assert_consistent(hub.runtime)


def test_health_and_readiness(hub: RunningHub) -> None:
    assert hub.http.get(f"{hub.url}/healthz", timeout=30).text.strip() == "ok"
    assert hub.http.get(f"{hub.url}/readyz", timeout=30).status_code == 200


def test_uploaded_patch_removing_what_the_graph_lacks_is_409_and_archives_nothing(hub: RunningHub) -> None:
    v1 = put(hub, V1).json()["version"]
    body = f"H prev <{v1}> .\nTX .\nD <http://ex/kpi1> <http://ex/unit> \"weeks\" <{G}> .\nTC .\n"
    response = hub.http.post(f"{hub.url}/patches", params={"graph": G}, data=body, timeout=30,
                             headers={"Content-Type": "application/rdf-patch"})
    assert response.status_code == 409 and "does not hold" in response.text
    assert [p.id for p in hub.runtime.archive.history(G)] == [v1]
    assert_consistent(hub.runtime)


def test_sparql_queries_see_only_the_graphs_the_caller_may_read(hub: RunningHub) -> None:
    g1, g2 = "http://example.org/graphs/q1", "http://example.org/graphs/q2"
    for graph, value in ((g1, "1"), (g2, "2")):
        assert hub.http.put(f"{hub.url}/graphs", params={"graph": graph}, headers={"Content-Type": "text/turtle"},
                            data=f'<http://ex/s> <http://ex/v> "{value}" ; <http://ex/b> [ <http://ex/c> 1 ] .',
                            timeout=30).status_code == 201
    body = {"iri": "urn:c:reads-q1", "requiresGroup": ["q-readers"], "readGraph": [g1]}
    assert hub.http.post(f"{hub.url}/admin/conditions", json=body, timeout=30).status_code == 201
    reader = hub.session(hub.token("q reader", ("q-readers",), ("graphs:read",)))
    select = "SELECT ?v WHERE { ?s <http://ex/v> ?v }"
    # the admin reads both graphs (their union is the default graph); the reader only q1
    answer = hub.http.get(f"{hub.url}/sparql", params={"query": select}, timeout=30)
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("application/sparql-results+json")
    assert sorted(b["v"]["value"] for b in answer.json()["results"]["bindings"]) == ["1", "2"]
    mine = reader.post(f"{hub.url}/sparql", data=select, headers={"Content-Type": "application/sparql-query"},
                       timeout=30).json()["results"]["bindings"]
    assert [b["v"]["value"] for b in mine] == ["1"]
    # FROM names the dataset, but only graphs the caller may read have content; GRAPH cannot reach
    # other graphs, nor the store's own
    def values(query: str) -> list[str]:
        bindings = reader.get(f"{hub.url}/sparql", params={"query": query}, timeout=30).json()["results"]["bindings"]
        return [value["value"] for b in bindings for value in b.values()]

    assert values(f"SELECT ?v FROM <{g2}> WHERE {{ ?s <http://ex/v> ?v }}") == []
    assert values(f"SELECT ?v FROM <{g1}> WHERE {{ ?s <http://ex/v> ?v }}") == ["1"]
    assert values(f"SELECT ?v WHERE {{ GRAPH <{g2}> {{ ?s <http://ex/v> ?v }} }}") == []
    assert values("SELECT ?o WHERE { GRAPH <urn:lucid-hub:system> { ?s ?p ?o } }") == []
    construct = reader.get(f"{hub.url}/sparql", params={"query": "CONSTRUCT WHERE { ?s ?p ?o }"}, timeout=30)
    assert construct.headers["Content-Type"].startswith("application/n-triples") and construct.text.count("\n") == 3
    # bad input: 4xx with a reason
    assert requests.get(f"{hub.url}/sparql", params={"query": select}, timeout=30).status_code == 401
    bad = reader.get(f"{hub.url}/sparql", params={"query": "SELECT WHERE {"}, timeout=30)
    assert bad.status_code == 400 and "malformed SPARQL query" in bad.text
    service = reader.get(f"{hub.url}/sparql", params={"query": "SELECT * { SERVICE <http://x/> { ?s ?p ?o } }"},
                         timeout=30)
    assert service.status_code == 400 and "SERVICE" in service.text
    described = reader.get(f"{hub.url}/sparql", timeout=30)  # no query: the service description
    assert described.status_code == 200 and "sparql-service-description" in described.text
    huge = reader.post(f"{hub.url}/sparql", data="#" * 100_001, headers={"Content-Type": "application/sparql-query"},
                       timeout=30)
    assert huge.status_code == 413 and "LUCID_MAX_QUERY_BYTES" in huge.text


def test_an_application_may_name_the_user_it_publishes_for(hub: RunningHub) -> None:
    """`X-Lucid-Author` (the README's example) was silently ignored: the patch now names the
    user, as the authenticated party stated it, never in its place."""
    patch = put(hub, V1, **{"X-Lucid-Author": "alice  \t(the buyer)"}).json()["patch"]
    author = hub.runtime.archive.patch(patch).author
    assert author.startswith("alice (the buyer), as stated by test admin (") and author.endswith(")")
    plain = put(hub, V2).json()["patch"]
    assert hub.runtime.archive.patch(plain).author.startswith("test admin (")
