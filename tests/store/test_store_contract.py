"""One contract for every store the hub writes graphs into: the embedded store, and the
operator's own (Oxigraph server and Virtuoso here, spoken to with SPARQL 1.1 Protocol). Each
holds, after any chain of patches, exactly the graph the patches make (isomorphic, blank-node
structures included), at the version of the last patch; removing a blank-node structure
removes exactly that one, never another that looks alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lucid_hub.config import Settings
from lucid_hub.diff.local import diff_graph
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.store import GraphStore
from lucid_hub.store.remote import RemoteConfig, RemoteStore
from tests import stores
from tests.conftest import whole_canonical

# One Oxigraph server and one Virtuoso for the module, on one worker (conftest.XDIST_GROUPS).
pytestmark = pytest.mark.xdist_group("stores")

G = "http://example.org/graphs/kpi"


def parse(text: str) -> list[ox.Quad]:
    return list(ox.parse(text, format=ox.RdfFormat.TURTLE))

# Versions of a graph that add, change and remove blank-node structures: two copies of one
# structure (occurrences 0 and 1), a list, a nested structure, and a larger structure that
# contains a smaller one's triples (removing the small one must leave the large one whole).
VERSIONS = [
    """<http://example.org/a> <http://example.org/p> _:x . _:x <http://example.org/q> "1" .
       <http://example.org/a> <http://example.org/p> _:y . _:y <http://example.org/q> "1" .
       <http://example.org/a> <http://example.org/list> _:l1 .
       _:l1 <http://www.w3.org/1999/02/22-rdf-syntax-ns#first> <http://example.org/x> .
       _:l1 <http://www.w3.org/1999/02/22-rdf-syntax-ns#rest> <http://www.w3.org/1999/02/22-rdf-syntax-ns#nil> .
       <http://example.org/a> <http://example.org/v> "7"^^<http://www.w3.org/2001/XMLSchema#integer> .""",
    """<http://example.org/a> <http://example.org/p> _:x . _:x <http://example.org/q> "1" .
       <http://example.org/b> <http://example.org/p> _:big . _:big <http://example.org/q> "1" .
       _:big <http://example.org/r> "2"@en .
       <http://example.org/b> <http://example.org/p> _:small . _:small <http://example.org/q> "1" .
       <http://example.org/a> <http://example.org/nested> _:n . _:n <http://example.org/in> _:m .
       _:m <http://example.org/q> "deep\\nline" .""",
    """<http://example.org/a> <http://example.org/p> _:x . _:x <http://example.org/q> "1" .
       <http://example.org/b> <http://example.org/p> _:big . _:big <http://example.org/q> "1" .
       _:big <http://example.org/r> "2"@en .
       <http://example.org/a> <http://example.org/v> "8"^^<http://www.w3.org/2001/XMLSchema#integer> .""",
    """<http://example.org/a> <http://example.org/p> _:x . _:x <http://example.org/q> "1" .
       <http://example.org/a> <http://example.org/p> _:y . _:y <http://example.org/q> "1" .
       <http://example.org/a> <http://example.org/p> _:z . _:z <http://example.org/q> "1" .""",
    "",
]


class Target(Protocol):
    def apply(self, patches: list[Patch]) -> None: ...
    def version(self, graph: str) -> str | None: ...
    def statements(self, graph: str) -> list[str]: ...
    def drop(self, graph: str) -> None: ...


class Embedded:
    def __init__(self) -> None:
        self.store = GraphStore()

    def apply(self, patches: list[Patch]) -> None:
        for patch in patches:
            self.store.apply(patch)

    def version(self, graph: str) -> str | None:
        return self.store.version(graph)

    def statements(self, graph: str) -> list[str]:
        return self.store.statements(graph)

    def drop(self, graph: str) -> None:
        self.store.drop(graph)


class Remote:
    def __init__(self, running: stores.RunningStore, blank_nodes: str) -> None:
        running.clear()
        env = {f"LUCID_{k}": v for k, v in (("STORE_BLANK_NODES", blank_nodes),)}
        config = RemoteConfig.of(Settings.from_env({**running.env(), **env}))
        assert config is not None
        self.store = RemoteStore(config)

    def apply(self, patches: list[Patch]) -> None:
        self.store.write(patches)

    def version(self, graph: str) -> str | None:
        return self.store.version(graph)

    def statements(self, graph: str) -> list[str]:
        return self.store.statements(graph)

    def drop(self, graph: str) -> None:
        self.store.drop(graph)


# Virtuoso 7.2 fails a template that puts one blank node in two graphs (it applies it, then
# answers 500 and skips the rest of the request): with Virtuoso, blank nodes are skolemised
# (docs/stores.md).
TARGETS = ["embedded", "oxigraph-blank", "oxigraph-skolem", "virtuoso-skolem"]


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest) -> Target:
    if request.param == "embedded":
        return Embedded()
    kind, blank_nodes = request.param.split("-")
    return Remote(request.getfixturevalue(kind), blank_nodes)


def chain(canonicalizer: Canonicalizer, versions: list[str], format_2: bool) -> Iterator[tuple[Patch, str]]:
    """Patches from one version to the next (format 2 naming occurrences, or format 1), each
    with the graph it makes, as whole-graph canonical N-Quads."""
    reference = Embedded()  # what the graph holds (format 2 patches name occurrences from it)
    previous = parse("")
    head = None
    for text in versions:
        current = parse(text)
        change = diff_graph(previous, current, G, canonicalizer)
        if change.is_empty:
            continue
        held = (lambda digest: reference.store.held(G, digest).keys()) if format_2 else None
        patch = change.to_patch(head, held=held)
        reference.apply([patch])
        head = patch.id
        previous = current
        yield patch, whole_canonical(current)


@pytest.mark.parametrize("format_2", [True, False], ids=["format-2", "format-1"])
def test_a_store_holds_what_each_patch_makes_blank_node_structures_included(
        target: Target, canonicalizer: Canonicalizer, format_2: bool) -> None:
    for patch, expected in chain(canonicalizer, VERSIONS, format_2):
        target.apply([patch])
        assert target.version(G) == patch.id
        assert whole_canonical(target.statements(G)) == expected, f"after {patch.id}"


def test_consecutive_patches_go_in_one_request_and_the_version_is_the_last(
        target: Target, canonicalizer: Canonicalizer) -> None:
    patches = list(chain(canonicalizer, VERSIONS[:4], True))
    target.apply([p for p, _ in patches[:3]])  # one request: three patches
    assert target.version(G) == patches[2][0].id
    assert whole_canonical(target.statements(G)) == patches[2][1]
    target.apply([patches[3][0]])
    assert whole_canonical(target.statements(G)) == patches[3][1]
    target.drop(G)
    assert target.version(G) is None and target.statements(G) == []


lines = st.sampled_from([
    "<http://example.org/s> <http://example.org/p> _:b{n} . _:b{n} <http://example.org/q> \"{n}\" .",
    "<http://example.org/s> <http://example.org/p> _:b{n} . _:b{n} <http://example.org/q> \"1\" .",
    "<http://example.org/s{n}> <http://example.org/p> \"v\" .",
    "_:c{n} <http://example.org/p> _:d{n} . _:d{n} <http://example.org/p> _:c{n} .",
    "<http://example.org/s> <http://example.org/p> _:e{n} . _:e{n} <http://example.org/q> \"1\" . "
    "_:e{n} <http://example.org/r> \"x\" .",
])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.tuples(lines, st.integers(0, 3)), max_size=5), min_size=1, max_size=4))
def test_any_chain_of_versions_leaves_the_store_isomorphic_to_the_last(
        target: Target, canonicalizer: Canonicalizer, versions: list[list[tuple[str, int]]]) -> None:
    target.drop(G)
    texts = ["\n".join(line.format(n=f"{i}x{n}") for i, (line, n) in enumerate(version)) for version in versions]
    for patch, expected in chain(canonicalizer, texts, True):
        target.apply([patch])
        assert whole_canonical(target.statements(G)) == expected


def test_the_store_settings_are_checked_with_a_reason(tmp_path: Path) -> None:
    from lucid_hub.errors import ConfigError

    def refused(**env: str) -> str:
        with pytest.raises(ConfigError) as caught:
            RemoteConfig.of(Settings.from_env({f"LUCID_{k.upper()}": v for k, v in env.items()}))
        return str(caught.value)

    assert "LUCID_STORE_UPDATE_URL" in refused(store_query_url="http://127.0.0.1:1/q")
    assert "http(s) URL" in refused(store_query_url="ftp://x/q", store_update_url="http://x/u")
    credentials = refused(store_query_url="http://x/q", store_update_url="https://lucid:s3cret@x/u")
    assert "holds credentials" in credentials and "s3cret" not in credentials
    ok = {"store_query_url": "http://127.0.0.1:1/q", "store_update_url": "http://127.0.0.1:1/u"}
    assert "LUCID_STORE_BLANK_NODES" in refused(**ok, store_blank_nodes="pattern")
    assert "LUCID_STORE_AUTH" in refused(**ok, store_auth="ntlm")
    assert "bearer token or a user" in refused(**ok, store_token="t", store_user="u")
    assert "no file" in refused(**ok, store_ca_file=str(tmp_path / "missing.pem"))
    assert "cannot read" in refused(**ok, store_password_file=str(tmp_path / "missing"))
    assert "positive" in refused(**ok, store_timeout="0")
    assert RemoteConfig.of(Settings.from_env({})) is None
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    config = RemoteConfig.of(Settings.from_env({f"LUCID_{k.upper()}": v for k, v in ok.items()} | {
        "LUCID_STORE_USER": "hub", "LUCID_STORE_PASSWORD_FILE": str(password),
        "LUCID_STORE_GRAPHS": "http://example.org/graphs/* urn:x:one"}))
    assert config is not None and config.password == "s3cret" and "s3cret" not in repr(
        Settings.from_env({"LUCID_STORE_PASSWORD": "s3cret"}))
    assert config.keeps(G) and config.keeps("urn:x:one") and not config.keeps("urn:x:two")
    assert not config.keeps("urn:lucid-hub:policies")


@pytest.mark.parametrize("kind,blank_nodes,text", [
    ("oxigraph", "skolem", VERSIONS[0]), ("virtuoso", "skolem", VERSIONS[0]),
    ("oxigraph", "blank", "<http://example.org/a> <http://example.org/p> \"ground only\" ."),
    ("oxigraph", "blank", VERSIONS[0]),
])
def test_a_large_add_only_patch_goes_through_the_graph_store_and_writing_it_again_changes_nothing(
        request: pytest.FixtureRequest, canonicalizer: Canonicalizer, kind: str, blank_nodes: str, text: str) -> None:
    target = Remote(request.getfixturevalue(kind), blank_nodes)
    target.store.bulk_rows = 1  # (20,000 rows by default)
    (patch, expected), (follow, after) = chain(canonicalizer, [text, VERSIONS[1]], True)
    posted: list[str] = []
    post = target.store._post_graph
    target.store._post_graph = lambda graph, lines: (posted.append(graph), post(graph, lines))[1]  # type: ignore[method-assign]
    target.apply([patch])
    assert posted and posted[0] == G  # the Graph Store took the triples
    assert target.version(G) == patch.id and whole_canonical(target.statements(G)) == expected
    if blank_nodes == "skolem" or "_:" not in text:
        target.apply([patch])  # a crash before its version was set: the next round writes it again
        assert whole_canonical(target.statements(G)) == expected
    target.store.bulk_rows = 10**9
    target.apply([follow])  # and the next patch removes what it added, anchors and all
    assert whole_canonical(target.statements(G)) == after


@pytest.mark.parametrize("kind", ["oxigraph", "virtuoso"])
def test_skolem_removals_name_their_triples_instead_of_matching_a_pattern(
        request: pytest.FixtureRequest, canonicalizer: Canonicalizer, kind: str) -> None:
    target = Remote(request.getfixturevalue(kind), "skolem")
    (first, _), (second, _), (third, last) = chain(canonicalizer, VERSIONS[:3], True)
    target.apply([first])
    store = target.store
    rendered = store.render.update([second, third], store.held, store.instances)
    assert "WHERE" not in rendered and "DELETE DATA" in rendered  # (removals of earlier and in-request MSGs)
    target.apply([second, third])
    assert whole_canonical(target.statements(G)) == last and target.version(G) == third.id
