"""Hostile input at the HTTP boundary: bodies larger than allowed however they are framed,
and documents nested deeper than a parser can take. Every endpoint that reads a body, on the
threaded werkzeug server of the tests and on gunicorn as `lucid-hub serve` runs it.
Nothing may be written, and the hub must stay up."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from lucid_hub.demo.processes import HubProcess
from lucid_hub.nesting import MAX_NESTING, json_nesting
from tests.conftest import RunningHub, assert_consistent

G = "http://example.org/graphs/kpi"
LIMIT = 200_000  # LUCID_MAX_BODY_BYTES of the test hubs (conftest.running_hub)
NT = {"Content-Type": "application/n-triples"}


def triples(size: int) -> bytes:
    """Valid N-Triples of exactly `size` bytes (a truncated copy would still parse)."""
    line = b'<urn:s> <urn:p> "%s" .\n'
    out, n = bytearray(), 0
    while len(out) + 200 < size:
        out += line % (b"v%08d" % n)
        n += 1
    pad = size - len(out) - len(line % b"")
    out += line % (b"x" * pad)
    assert len(out) == size
    return bytes(out)


def chunked(data: bytes, piece: int = 8192) -> Iterator[bytes]:
    """A generator body: requests sends it with Transfer-Encoding: chunked, no length."""
    for start in range(0, len(data), piece):
        yield data[start:start + piece]


def body_endpoints(graph: str) -> list[tuple[str, str, dict[str, str]]]:
    """(method, path, headers) of every endpoint that reads a request body."""
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    as_json = {"Content-Type": "application/json"}
    q = f"?graph={graph}"
    return [
        ("PUT", f"/graphs{q}", NT),
        ("POST", f"/graphs{q}", NT),
        ("PUT", "/graphs/direct/kpi", NT),  # a graph named by its own URL
        ("POST", "/graphs", NT),  # a new graph the hub names
        ("POST", "/admin/rules/test", as_json),
        ("POST", f"/patches{q}", {"Content-Type": "application/rdf-patch"}),
        ("POST", "/sparql", {"Content-Type": "application/sparql-update"}),
        ("POST", "/sparql", {"Content-Type": "application/sparql-query"}),
        ("POST", "/sparql", form),
        ("POST", "/hub", form),
        ("POST", "/oauth/token", form),
        ("POST", "/oauth/revoke", form),
        ("POST", "/oauth/introspect", form),
        ("POST", "/admin/conditions", as_json),
        ("PUT", "/admin/conditions?iri=urn:c:x", as_json),
        ("POST", "/admin/clients", as_json),
        ("POST", "/admin/mirrors", as_json),
        ("POST", "/admin/mirrors/none/trust", as_json),
        ("POST", "/callback/none", {"Content-Type": "application/rdf-patch"}),
        ("POST", "/admin/ui/login", form),
    ]


def snapshot(hub: RunningHub) -> tuple[Any, ...]:
    """What a request could have written: graphs and heads, patches, clients, conditions."""
    rt = hub.runtime
    heads = [(g.iri, g.head, g.length) for g in rt.archive.graphs()]
    return heads, [c.client_id for c in rt.clients.list()], sorted(c.iri for c in rt.policies.conditions())


def test_a_chunked_body_one_byte_over_the_limit_is_refused_everywhere_and_nothing_is_written(
        hub: RunningHub) -> None:
    hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=triples(1000), headers=NT, timeout=30)
    before = snapshot(hub)
    too_large = triples(LIMIT + 1)
    for method, path, headers in body_endpoints(G):
        answer = hub.http.request(method, f"{hub.url}{path}", data=chunked(too_large), headers=headers, timeout=60)
        assert answer.status_code == 413, (method, path, answer.status_code, answer.text[:200])
        assert "exceeds the limit of 200,000 bytes" in answer.text, (method, path, answer.text)
    assert snapshot(hub) == before
    assert_consistent(hub.runtime)


def test_a_chunked_body_of_exactly_the_limit_is_published_whole(hub: RunningHub) -> None:
    exact = triples(LIMIT)
    answer = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=chunked(exact), headers=NT, timeout=60)
    assert answer.status_code == 201, answer.text
    published = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, timeout=30,
                             headers={"Accept": "application/n-triples"})
    assert sorted(published.content.splitlines()) == sorted(exact.splitlines())


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(hub: RunningHub) -> None:
    before = snapshot(hub)
    for method, path, headers in body_endpoints(G):
        answer = hub.http.request(method, f"{hub.url}{path}", data=triples(LIMIT + 1), headers=headers, timeout=60)
        assert answer.status_code == 413 and "200,000 bytes" in answer.text, (method, path, answer.text[:200])
    assert snapshot(hub) == before


def test_gunicorn_answers_413_to_a_chunked_body_far_over_the_limit(tmp_path: Path) -> None:
    home, runtime_dir = tmp_path / "home", tmp_path / "run"  # where gunicorn >= 25 puts its control socket
    env = {"LUCID_MAX_BODY_BYTES": str(LIMIT), "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime_dir)}
    with HubProcess("limits", tmp_path / "hub", env) as hub:
        for size in (LIMIT + 1, 30 * LIMIT):  # the second is still being sent when the hub answers
            answer = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=chunked(triples(size)),
                                  headers=NT, timeout=60)
            assert answer.status_code == 413 and "200,000 bytes" in answer.text, (size, answer.text[:200])
        token = hub.http.post(f"{hub.url}/oauth/token", data=chunked(b"grant_type=client_credentials&x=" * 20000),
                              headers={"Content-Type": "application/x-www-form-urlencoded"}, timeout=60)
        assert token.status_code == 413
        assert hub.http.get(f"{hub.url}/graphs", params={"graph": G}, timeout=30).status_code == 404
        assert hub.http.get(f"{hub.url}/healthz", timeout=30).status_code == 200
        # No control socket (it can stop or scale the server): the hub is run by signals
        assert not list(tmp_path.rglob("gunicorn.ctl"))
        assert "Control socket listening" not in (tmp_path / "hub" / "serve.log").read_text()


# --- nesting ---------------------------------------------------------------------------------

def nested_jsonld(depth: int) -> bytes:
    return ('{"@id":"urn:a","urn:p":' * depth + '"x"' + "}" * depth).encode()


def test_json_ld_nested_beyond_the_bound_is_refused_and_the_hub_stays_up(hub: RunningHub) -> None:
    deep = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=nested_jsonld(5000),
                        headers={"Content-Type": "application/ld+json"}, timeout=60)
    assert deep.status_code == 400 and "nests 5000 levels deep; at most 256" in deep.text
    assert hub.http.get(f"{hub.url}/healthz", timeout=30).status_code == 200
    fine = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=nested_jsonld(MAX_NESTING // 2),
                        headers={"Content-Type": "application/ld+json"}, timeout=60)
    assert fine.status_code == 201, fine.text
    assert fine.json()["added"] == 2  # every level is <urn:a>: <urn:a> <urn:p> <urn:a>, and "x"


@pytest.mark.parametrize("path", ["/admin/clients", "/admin/conditions", "/admin/mirrors"])
def test_json_bodies_nested_too_deeply_get_400_not_500(hub: RunningHub, path: str) -> None:
    body = '{"name":' + "[" * 50_000 + "]" * 50_000 + "}"
    answer = hub.http.post(f"{hub.url}{path}", data=body, headers={"Content-Type": "application/json"}, timeout=30)
    assert answer.status_code == 400 and "levels deep" in answer.text, answer.text


def test_an_access_token_nested_too_deeply_is_a_401(hub: RunningHub) -> None:
    def segment(value: str) -> str:
        return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")

    header = segment('{"alg":"Ed25519","typ":"at+jwt"}')
    deep_header = segment("[" * 3000 + "]" * 3000)
    deep_claims = segment('{"a":' + "[" * 2500 + "]" * 2500 + "}")
    for token in (f"{deep_header}.{segment('{}')}.c2ln", f"{header}.{deep_claims}.c2ln"):
        answer = requests.get(f"{hub.url}/graphs", params={"graph": G}, timeout=30,
                              headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 401 and "not a JWT" in answer.text, answer.text


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ ab', max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\ a', max_size=4), inner,
                                                                max_size=3),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_json_nesting_is_the_depth_a_parser_reaches(value: Any) -> None:
    assert json_nesting(json.dumps(value)) == _depth(value)


# --- what parsing makes of a body is bounded too -------------------------------------------------

def test_prefixes_that_expand_a_small_turtle_body_past_its_budget_are_refused_and_nothing_is_written(
        hub: RunningHub) -> None:
    """A prefix of 20 KB used 3,000 times: 150 KB of Turtle (under the 200 KB body limit) that
    parses into 180 MB of statements. Refused with 413 while parsing, before anything is kept."""
    before = snapshot(hub)
    long_ns = "http://example.org/" + "n" * 20_000 + "#"
    body = f"@prefix p: <{long_ns}> .\n".encode() + b"".join(b"p:s p:p p:o%d .\n" % i for i in range(3_000))
    assert len(body) < LIMIT
    answer = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=body,
                          headers={"Content-Type": "text/turtle"}, timeout=60)
    assert answer.status_code == 413, answer.text
    assert "parses into more than 800,000 bytes of statements" in answer.text
    assert "LUCID_MAX_BODY_BYTES" in answer.text
    assert snapshot(hub) == before
    # the same prefix used a few times is an ordinary body
    fine = f"@prefix p: <{long_ns}> .\n".encode() + b"".join(b"p:s p:p p:o%d .\n" % i for i in range(3))
    answer = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=fine, headers={"Content-Type": "text/turtle"})
    assert answer.status_code == 201, answer.text
    assert answer.json()["added"] == 3


def test_a_term_longer_than_the_parser_takes_is_a_413_naming_the_limit_and_nothing_is_written(
        tmp_path: Path) -> None:
    """The reproduction: a PUT of one 20 MB literal (under the body limit) answered 500, the RDF
    parser's MemoryError for a token over its 16 MiB buffer. Every body parsed as RDF refuses it
    as too large, naming the limit: graphs in each syntax, patches, access conditions."""
    from lucid_hub.rdf.syntax import TERM_MAX_BYTES
    from tests.conftest import running_hub

    huge = "x" * (TERM_MAX_BYTES + 1_000_000)
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}",
                     {"LUCID_MAX_BODY_BYTES": str(3 * TERM_MAX_BYTES)}) as hub:
        before = snapshot(hub)
        limit = f"{TERM_MAX_BYTES:,} bytes"
        for method, path, body, media_type, named in [
                ("PUT", f"/graphs?graph={G}", f'<urn:s> <urn:p> "{huge}" .\n', "application/n-triples", limit),
                ("PUT", f"/graphs?graph={G}", f'<urn:s> <urn:p> "{huge}" .\n', "text/turtle", limit),
                ("POST", f"/graphs?graph={G}", f"<urn:s> <urn:p> <urn:{huge}> .\n", "application/n-triples", limit),
                ("POST", f"/patches?graph={G}", f'TX .\nA <urn:s> <urn:p> "{huge}" .\nTC .\n', "application/rdf-patch",
                 limit),
                ("POST", "/admin/conditions", f'<urn:c:x> <{"http://www.w3.org/2000/01/rdf-schema#label"}> "{huge}" .\n',
                 "text/turtle", limit),
                # (an update has a limit of its own, far below the parser's)
                ("POST", "/sparql", f'INSERT DATA {{ GRAPH <{G}> {{ <urn:s> <urn:p> "{huge}" }} }}',
                 "application/sparql-update", "LUCID_MAX_UPDATE_BYTES")]:
            answer = hub.http.request(method, f"{hub.url}{path}", data=body.encode(), headers={"Content-Type": media_type})
            assert answer.status_code == 413 and named in answer.text, (path, media_type, answer.status_code,
                                                                        answer.text[:300])
        assert snapshot(hub) == before
