"""Hubs that keep their graphs in the operator's own triple store: a publisher's owned graphs
written through, and a partner's mirror applied into its store; blank-node structures added,
changed and removed; the store down and back, the hub restarted mid-stream, a catch-up. The
store's graph always ends equal (isomorphic) to the publisher's, never a patch lost or doubled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from lucid_hub.config import Settings
from lucid_hub.store.remote import RemoteConfig, RemoteStore
from tests import stores
from tests.conftest import RunningHub, running_hub, whole_canonical
from tests.mirror.test_mirror import DEV, G, add_mirror, mirror, publish, version, wait
from tests.stores import free_port


@pytest.fixture(scope="module")
def oxigraph(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stores.RunningStore]:
    yield from stores.oxigraph_server(tmp_path_factory.mktemp("oxigraph"))


@pytest.fixture(scope="module")
def virtuoso(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stores.RunningStore]:
    yield from stores.virtuoso(tmp_path_factory.mktemp("virtuoso"))


def store_of(env: dict[str, str]) -> RemoteStore:
    config = RemoteConfig.of(Settings.from_env(env))
    assert config is not None
    return RemoteStore(config)


def graph_of(hub: RunningHub) -> str:
    return whole_canonical(hub.runtime.store.statements(G))


def held(store: RemoteStore) -> str:
    return whole_canonical(store.statements(G))


def ready(hub: RunningHub) -> requests.Response:
    return requests.get(f"{hub.url}/readyz", timeout=30)


@pytest.mark.parametrize("kind,blank_nodes", [("oxigraph", "blank"), ("oxigraph", "skolem"), ("virtuoso", "skolem")])
def test_a_mirror_applies_into_the_partners_store_through_restarts_and_catch_up(
        tmp_path: Path, request: pytest.FixtureRequest, kind: str, blank_nodes: str) -> None:
    running: stores.RunningStore = request.getfixturevalue(kind)
    running.clear()
    env = running.env(LUCID_STORE_BLANK_NODES=blank_nodes)
    store = store_of(env)
    partner_port = free_port()
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", DEV) as publisher:
        for i in range(4):  # history before the mirror: the clone replays it
            publish(publisher, version(i))
        with running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}", {**DEV, **env},
                         port=partner_port) as partner:
            add_mirror(publisher, partner)
            wait(lambda: store.version(G) == publisher.runtime.archive.head(G),
                 show=lambda: (ready(partner).text, store.statements(G)[:2], store.versions()))
            assert held(store) == graph_of(publisher)
            for i in range(4, 7):  # followed as they come
                publish(publisher, version(i))
            wait(lambda: store.version(G) == publisher.runtime.archive.head(G))
            assert held(store) == graph_of(publisher)
            assert ready(partner).status_code == 200
        # the partner hub is down: the publisher goes on; back, it catches up, and so does its store
        heads = [publish(publisher, version(i)) for i in range(7, 10)]
        with running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}", {**DEV, **env},
                         port=partner_port) as partner:
            wait(lambda: store.version(G) == heads[-1], show=lambda: (mirror(partner), ready(partner).text))
            assert held(store) == graph_of(publisher)
            assert partner.runtime.remote is not None and partner.runtime.remote.lag() == 0
    store.close()


def test_owned_graphs_are_written_through_and_a_store_that_was_down_catches_up(
        tmp_path: Path, oxigraph: stores.RunningStore) -> None:
    oxigraph.clear()
    env = oxigraph.env()
    store = store_of(env)
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", {**DEV, **env}) as hub:
        first = publish(hub, version(0))
        wait(lambda: store.version(G) == first)
        assert held(store) == graph_of(hub)
        oxigraph.stop()
        try:
            later = [publish(hub, version(i)) for i in range(1, 4)]  # publishing does not wait for the store
            answer = ready(hub)
            assert answer.status_code == 503 and "store" in answer.text and oxigraph.update_url.split("/")[2] \
                in answer.text, answer.text
        finally:
            oxigraph.start()
        wait(lambda: store.version(G) == later[-1], show=lambda: ready(hub).text)
        assert held(store) == graph_of(hub)
        wait(lambda: ready(hub).status_code == 200, show=lambda: ready(hub).text)
        # a graph deleted from the hub is dropped from the store with its version
        assert hub.http.delete(f"{hub.url}/graphs", params={"graph": G}, timeout=30).status_code in (200, 204)
        wait(lambda: held(store) == graph_of(hub), show=lambda: (store.version(G), graph_of(hub)))
    store.close()


def test_a_graph_the_store_holds_already_is_not_overwritten(tmp_path: Path, oxigraph: stores.RunningStore) -> None:
    oxigraph.clear()
    theirs = "<http://example.org/theirs> <http://example.org/p> \"kept\" ."
    answer = requests.post(oxigraph.gsp_url, params={"graph": G}, data=theirs.encode(),
                           headers={"Content-Type": "application/n-triples"}, timeout=30)
    assert answer.status_code < 300
    env = oxigraph.env()
    store = store_of(env)
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", {**DEV, **env}) as hub:
        publish(hub, version(0))
        wait(lambda: G in (hub.runtime.remote.refused if hub.runtime.remote else {}))
        text = ready(hub).text
        assert "lucid-hub did not write" in text and G in text
        assert store.statements(G) == ['<http://example.org/theirs> <http://example.org/p> "kept"']
        assert store.version(G) is None
    store.close()


def test_a_store_that_cannot_keep_blank_nodes_is_named_with_the_setting_to_use(
        tmp_path: Path, virtuoso: stores.RunningStore) -> None:
    virtuoso.clear()
    env = virtuoso.env(LUCID_STORE_BLANK_NODES="blank")
    store = store_of(env)
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", {**DEV, **env}) as hub:
        publish(hub, version(0))
        wait(lambda: ready(hub).status_code == 503 and "SKOLEM" in ready(hub).text.upper(),
             show=lambda: ready(hub).text)
        assert "LUCID_STORE_BLANK_NODES=skolem" in ready(hub).text
        assert store.version(G) is None and store.statements(G) == []  # nothing half-written
    store.close()
