"""RDF Patch as other tools apply it (issue 14, point 14): in format 2 a blank node keeps its
label across the whole chain of a graph, so a generic applier that adds and deletes by label
(rdflib's RDF Patch reader) reproduces the hub's graph exactly, from the first patch or from a
copy of the graph at any version. Format 1 labels were per patch: such an applier merged
blank nodes of different patches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunningHub, running_hub

G = "https://acme.example/graphs/orders"
LINE = "[ ex:product ex:{p} ; ex:quantity {q} ]"
VERSIONS = [  # lines of order 7: identical copies, changes inside structures, removal and re-adding
    [("p1", 1), ("p1", 1), ("p2", 3)],
    [("p1", 1), ("p2", 4)],
    [("p1", 1), ("p1", 1), ("p2", 4), ("p5", 7)],
    [],
    [("p1", 1)],
]


def turtle(lines: list[tuple[str, int]]) -> str:
    body = " , ".join(LINE.format(p=p, q=q) for p, q in lines)
    order = f"ex:order7 ex:line {body} ." if lines else ""
    return f"@prefix ex: <http://example.org/> .\nex:order7 ex:status \"open\" .\n{order}\n"


def publish_all(hub: RunningHub) -> list[str]:
    versions = []
    for lines in VERSIONS:
        answer = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=turtle(lines).encode(), timeout=30,
                              headers={"Content-Type": "text/turtle"})
        assert answer.status_code in (200, 201), answer.text
        versions.append(answer.json()["version"])
    return versions


def patches(hub: RunningHub) -> list[dict[str, Any]]:
    page = hub.http.get(f"{hub.url}/patches", params={"graph": G}, headers={"Accept": "application/json"},
                        timeout=30).json()
    out = list(page["patches"])
    while page["next"]:
        page = hub.http.get(page["next"], headers={"Accept": "application/json"}, timeout=30).json()
        out += page["patches"]
    return out


def content(hub: RunningHub, version: str | None = None) -> set[str]:
    params = {"graph": G, **({"version": version} if version else {})}
    text = hub.http.get(f"{hub.url}/graphs", params=params, headers={"Accept": "application/n-triples"},
                        timeout=30).text
    return set(text.splitlines())


def applied(start: set[str], bodies: list[str]) -> set[str]:
    """What rdflib's RDF Patch reader makes of a copy of the graph and patches after it."""
    import rdflib

    was = rdflib.NORMALIZE_LITERALS
    rdflib.NORMALIZE_LITERALS = False
    try:
        dataset = rdflib.Dataset()
        graph = rdflib.URIRef(G)
        if start:  # the copy as a patch that adds it (rdflib's N-Triples reader renames blank nodes)
            rows = "".join(f"A {line[:-2]} <{G}> .\n" for line in sorted(start))
            dataset.parse(data=f"TX .\n{rows}TC .\n", format="patch")
        for body in bodies:
            dataset.parse(data=body, format="patch")
        return {f"{s.n3()} {p.n3()} {o.n3()} ." for s, p, o in dataset.graph(graph)}
    finally:
        rdflib.NORMALIZE_LITERALS = was


def test_a_generic_applier_follows_a_format_2_chain_by_label(hub: RunningHub) -> None:
    versions = publish_all(hub)
    bodies = [p["body"] for p in patches(hub)]
    assert all('H format "2" .' in body for body in bodies)
    final = content(hub)
    assert applied(set(), bodies) == final  # from the first patch: exactly, labels included
    for n, version in enumerate(versions[:-1]):  # from a copy of the graph at each version
        assert applied(content(hub, version), bodies[n + 1:]) == final, n


def test_with_format_1_patches_a_generic_applier_merges_blank_nodes(tmp_path: Path) -> None:
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'v1.db'}", {"LUCID_PATCH_FORMAT": "1"}) as hub:
        publish_all(hub)
        bodies = [p["body"] for p in patches(hub)]
        assert not any("H format" in body for body in bodies)
        assert len(applied(set(), bodies)) != len(content(hub))  # why format 2 exists


@pytest.mark.parametrize("fmt", ["application/trig", "application/ld+json"])
def test_the_linked_data_forms_carry_the_same_labels(hub: RunningHub, fmt: str) -> None:
    publish_all(hub)
    last = patches(hub)[-2]["id"]  # the patch that removes every line
    answer = hub.http.get(f"{hub.url}/patches/{last}", headers={"Accept": fmt}, timeout=30)
    assert answer.status_code == 200 and "_:h" in answer.text and 'o0b0' in answer.text
