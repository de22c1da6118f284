"""Hubs that keep their graphs in the operator's own triple store: a publisher's owned graphs
written through, and a partner's mirror applied into its store; blank-node structures added,
changed and removed; the store down and back, the hub restarted mid-stream, a catch-up. The
store's graph always ends equal (isomorphic) to the publisher's, never a patch lost or doubled."""

from __future__ import annotations

from pathlib import Path

import pyoxigraph as ox
import pytest
import requests

from lucid_hub.config import Settings
from lucid_hub.store.remote import RemoteConfig, RemoteStore
from tests import stores
from tests.conftest import RunningHub, running_hub, whole_canonical
from tests.mirror.test_mirror import DEV, G, add_mirror, mirror, publish, version, wait
from tests.stores import free_port

# One Oxigraph server and one Virtuoso for the module, on one worker (conftest.XDIST_GROUPS).
pytestmark = pytest.mark.xdist_group("stores")


def store_of(env: dict[str, str]) -> RemoteStore:
    config = RemoteConfig.of(Settings.from_env(env))
    assert config is not None
    return RemoteStore(config)


def graph_of(hub: RunningHub) -> str:
    return whole_canonical(hub.runtime.store.statements(G))


def held(store: RemoteStore) -> str:
    return whole_canonical(store.statements(G))


def console(hub: RunningHub) -> requests.Session:
    """An admin signed in to the console."""
    from lucid_hub.auth.admins import AdminAccounts
    from tests.conftest import ADMIN_PASSWORD
    from tests.web.test_console import signed_in

    if not AdminAccounts(hub.runtime.db).verify("alice", ADMIN_PASSWORD):
        AdminAccounts(hub.runtime.db).create("alice", ADMIN_PASSWORD)
    return signed_in(hub)


def metrics(hub: RunningHub) -> str:
    return hub.http.get(f"{hub.url}/metrics", timeout=30).text


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
            (sync,) = partner.runtime.remotes
            assert sync.lag() == 0
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
            wait(lambda: 'lucid_store_up{store="default"} 0.0' in metrics(hub))
            overview = console(hub).get(f"{hub.url}/admin/ui/overview", timeout=30).text
            assert "Your store default is not written" in overview and "does not answer" in overview
            assert 'href="hub#stores"' in overview  # where it is dealt with: the hub page's stores
            page = console(hub).get(f"{hub.url}/admin/ui/hub", timeout=30).text
            assert 'data-store="default"' in page and "not written: " in page and "does not answer" in page
        finally:
            oxigraph.start()
        wait(lambda: store.version(G) == later[-1], show=lambda: ready(hub).text)
        assert held(store) == graph_of(hub)
        wait(lambda: ready(hub).status_code == 200, show=lambda: ready(hub).text)
        wait(lambda: 'lucid_store_up{store="default"} 1.0' in metrics(hub)
             and 'lucid_store_behind_patches{store="default"} 0.0' in metrics(hub))
        assert 'lucid_store_written_patches_total{store="default"} 4.0' in metrics(hub)
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
        wait(lambda: G in hub.runtime.remotes[0].refused)
        text = ready(hub).text
        assert "lucid-hub did not write" in text and G in text
        overview = console(hub).get(f"{hub.url}/admin/ui/overview", timeout=30).text  # the console says so too
        assert "Graph not written to your store" in overview and "lucid-hub did not write" in overview
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


def edit_directly(running: stores.RunningStore) -> None:
    """What another application of the store does to the hub's graph: a ground triple and a
    blank-node structure added, one of the hub's blank-node structures removed."""
    update = (f'INSERT DATA {{ GRAPH <{G}> {{ <https://acme.example/kpi/otif> <https://acme.example/kpi/note> "direct" }} }} ;\n'
              f'INSERT {{ GRAPH <{G}> {{ <https://acme.example/kpi/otif> <https://acme.example/kpi/by> _:who . '
              f'_:who <https://acme.example/kpi/name> "editor" }} }} WHERE {{}} ;\n'
              f'DELETE {{ GRAPH <{G}> {{ ?s <https://acme.example/kpi/measuredAt> ?m . ?m ?p ?o }} }} '
              f'WHERE {{ GRAPH <{G}> {{ ?s <https://acme.example/kpi/measuredAt> ?m . ?m ?p ?o }} }}')
    answer = requests.post(running.update_url, data={"update": update}, timeout=30)
    assert answer.status_code < 300, answer.text


@pytest.mark.parametrize("kind,blank_nodes", [("oxigraph", "blank"), ("virtuoso", "skolem")])
def test_direct_edits_in_the_store_are_captured_as_a_signed_patch_and_reach_partners(
        tmp_path: Path, request: pytest.FixtureRequest, kind: str, blank_nodes: str) -> None:
    running: stores.RunningStore = request.getfixturevalue(kind)
    running.clear()
    env = running.env(LUCID_STORE_BLANK_NODES=blank_nodes)
    store = store_of(env)
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", {**DEV, **env}) as hub, \
            running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}", DEV) as partner:
        first = publish(hub, version(1))
        wait(lambda: store.version(G) == first)
        add_mirror(hub, partner)
        edit_directly(running)
        edited = held(store)
        captured = hub.http.post(f"{hub.url}/admin/store/capture", params={"graph": G}, timeout=60)
        assert captured.status_code == 200, captured.text
        body = captured.json()
        assert body["patch"] and body["removed"] == 1 and body["added"] == 2, body
        record = hub.runtime.archive.patch(body["patch"])
        assert record.author == "capture" and record.prev == first
        assert graph_of(hub) == edited  # the hub's graph is what the store held
        assert store.version(G) == body["patch"] and held(store) == edited  # nothing doubled
        # the partner's mirror gets the captured patch like any other
        wait(lambda: whole_canonical(partner.runtime.store.statements(G)) == edited)
        again = hub.http.post(f"{hub.url}/admin/store/capture", params={"graph": G}, timeout=60).json()
        assert again["patch"] is None
        # the hub's own next change removes the blank-node structures the capture rewrote
        later = publish(hub, version(2))
        wait(lambda: store.version(G) == later)
        assert held(store) == graph_of(hub)
    store.close()


def test_capture_refuses_what_it_cannot_do_with_a_reason(tmp_path: Path, oxigraph: stores.RunningStore) -> None:
    oxigraph.clear()
    env = oxigraph.env(LUCID_STORE_GRAPHS="https://acme.example/graphs/*")
    with running_hub(tmp_path / "plain", f"sqlite:///{tmp_path / 'plain.db'}", DEV) as plain:
        answer = plain.http.post(f"{plain.url}/admin/store/capture", params={"graph": G}, timeout=30)
        assert answer.status_code == 404 and "no graphs in a store" in answer.text
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", {**DEV, **env}) as hub:
        for params, status, reason in (({}, 400, "graph=IRI is required"), ({"graph": "not an iri"}, 400, "IRI"),
                                       ({"graph": "https://other.example/g"}, 400, "LUCID_STORE_GRAPHS")):
            answer = hub.http.post(f"{hub.url}/admin/store/capture", params=params, timeout=30)
            assert answer.status_code == status and reason in answer.text, answer.text
        anonymous = requests.post(f"{hub.url}/admin/store/capture", params={"graph": G}, timeout=30)
        assert anonymous.status_code == 401
        reader = hub.session(hub.token("reader", (), ("graphs:read",)))
        assert reader.post(f"{hub.url}/admin/store/capture", params={"graph": G}, timeout=30).status_code == 403
        (state,) = hub.http.get(f"{hub.url}/admin/store", timeout=30).json()["stores"]
        assert state["store"] == oxigraph.update_url and state["problem"] is None and state["name"] == "default"
        assert "password" not in str(state).lower()


def test_the_capture_command_and_the_schedule(tmp_path: Path, oxigraph: stores.RunningStore, run_cli) -> None:  # type: ignore[no-untyped-def]
    oxigraph.clear()
    env = oxigraph.env()
    store = store_of(env)
    data, db = tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}"
    with running_hub(data, db, {**DEV, **env}) as hub:
        first = publish(hub, version(1))
        wait(lambda: store.version(G) == first)
    edit_directly(oxigraph)
    edited = held(store)
    cli_env = {"LUCID_DATA_DIR": str(data), "LUCID_DATABASE_URL": db, **env}
    done = run_cli("capture", "--graph", G, env=cli_env)
    assert done.code == 0, done.err
    assert "captured as urn:sha256:" in done.out and "(-1 +2)" in done.out
    assert held(store) == edited and store.version(G) != first
    unchanged = run_cli("capture", env=cli_env)  # every owned graph the store keeps
    assert unchanged.code == 0 and "holds what the hub published" in unchanged.out
    refused = run_cli("capture", "--graph", G, env={"LUCID_DATA_DIR": str(tmp_path / "none"),
                                                    "LUCID_DATABASE_URL": f"sqlite:///{tmp_path / 'none.db'}"})
    assert refused.code != 0 and "no graphs in a store" in refused.err and len(
        refused.err.strip().splitlines()) == 1
    # on a schedule: the leader captures every LUCID_STORE_CAPTURE_SECONDS
    with running_hub(data, db, {**DEV, **env, "LUCID_STORE_CAPTURE_SECONDS": "0.2"}) as hub:
        requests.post(oxigraph.update_url, timeout=30, data={"update": f'INSERT DATA {{ GRAPH <{G}> {{ '
                      f'<https://acme.example/kpi/x> <https://acme.example/kpi/y> "scheduled" }} }}'})
        wait(lambda: hub.runtime.archive.history(G)[-1].author == "capture" and "scheduled" in graph_of(hub))
    store.close()


def test_credentials_the_store_refuses_are_named_and_never_shown(tmp_path: Path, virtuoso: stores.RunningStore) -> None:
    virtuoso.clear()
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    env = virtuoso.env(LUCID_STORE_BLANK_NODES="skolem", LUCID_STORE_PASSWORD_FILE=str(wrong))
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", {**DEV, **env}) as hub:
        publish(hub, version(0))
        wait(lambda: "401" in ready(hub).text, show=lambda: ready(hub).text)
        answer = ready(hub)
        assert answer.status_code == 503 and "not-the-password" not in answer.text
        (state,) = hub.http.get(f"{hub.url}/admin/store", timeout=30).json()["stores"]
        assert "401" in state["problem"] and "not-the-password" not in str(state)
    anonymous = virtuoso.env(LUCID_STORE_BLANK_NODES="skolem", LUCID_STORE_USER="", LUCID_STORE_PASSWORD_FILE="",
                             LUCID_STORE_AUTH="basic")
    store = store_of(anonymous)
    assert store.version(G) is None  # nothing was written with the wrong password
    store.close()


def test_a_purged_mirror_leaves_the_partners_store(tmp_path: Path, oxigraph: stores.RunningStore) -> None:
    oxigraph.clear()
    env = oxigraph.env()
    store = store_of(env)
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", DEV) as publisher, \
            running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}",
                        {**DEV, **env, "LUCID_MIRROR_ON_REVOKE": "purge"}) as partner:
        first = publish(publisher, version(0))
        add_mirror(publisher, partner)
        wait(lambda: store.version(G) == first)
        assert publisher.http.delete(f"{publisher.url}/admin/conditions", params={"iri": "urn:c:globex-reads-kpi"},
                                     timeout=30).status_code == 204
        publish(publisher, version(1))  # its delivery finds the access withdrawn
        wait(lambda: mirror(partner)["state"] == "revoked")
        wait(lambda: store.version(G) is None and store.statements(G) == [])
    store.close()


@pytest.mark.slow
def test_a_large_graph_is_captured_with_the_spark_diff(tmp_path: Path, oxigraph: stores.RunningStore,
                                                      spark) -> None:  # type: ignore[no-untyped-def]
    from lucid_hub.commands.publish_file import spark_diff

    oxigraph.clear()
    env = oxigraph.env()
    store = store_of(env)
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", {**DEV, **env}) as hub:
        first = publish(hub, version(3))
        wait(lambda: store.version(G) == first)
        edit_directly(oxigraph)
        edited = held(store)
        assert hub.runtime.capture is not None and hub.runtime.remotes
        done = hub.runtime.capture.graph(G, spark_diff(hub.runtime.settings, spark))
        assert done.patch is not None and (done.removed, done.added) == (1, 2)
        assert hub.runtime.archive.patch(done.patch).author == "capture"
        assert graph_of(hub) == edited and held(store) == edited and store.version(G) == done.patch
    store.close()


def by_value(statements: list[str]) -> str:
    """The graph with typed literals by value, as a store that normalises them holds it."""
    scratch = ox.Store()
    scratch.load("".join(f"{s} .\n" for s in statements).encode(), format=ox.RdfFormat.N_TRIPLES)
    return whole_canonical([str(q.triple) for q in scratch])


def test_a_previous_releases_archive_is_written_into_the_store_patch_by_patch(
        tmp_path: Path, oxigraph: stores.RunningStore, run_cli) -> None:  # type: ignore[no-untyped-def]
    """Data outlives versions: hubs of the previous release, upgraded in place, given a store."""
    import json
    import shutil

    release = Path(__file__).resolve().parents[1] / "upgrade" / "release-7af9ae9"
    expected = json.loads((release / "expected.json").read_text())
    for name in ("acme", "globex"):
        oxigraph.clear()
        shutil.copytree(release / name, tmp_path / name)
        upgraded = run_cli("db", "upgrade", env={"LUCID_DATA_DIR": str(tmp_path / name)})
        assert upgraded.code == 0, upgraded.err
        env = oxigraph.env(LUCID_STORE_BLANK_NODES="blank" if name == "acme" else "skolem")
        store = store_of(env)
        with running_hub(tmp_path / name, f"sqlite:///{tmp_path / name / 'lucid-hub.db'}", {**DEV, **env}) as hub:
            for graph, text in expected[name]["graphs"].items():
                head = hub.runtime.archive.head(graph)
                wait(lambda graph=graph, head=head, store=store: store.version(graph) == head,  # type: ignore[misc]
                     show=lambda: ready(hub).text)
                published = [str(q.triple) for q in ox.parse(text.encode(), format=ox.RdfFormat.N_TRIPLES)]
                assert by_value(store.statements(graph)) == by_value(published), graph
        store.close()


def test_graphs_go_to_the_stores_that_keep_them(tmp_path: Path, oxigraph: stores.RunningStore,
                                               virtuoso: stores.RunningStore) -> None:
    import json

    oxigraph.clear()
    virtuoso.clear()
    orders = "https://acme.example/graphs/orders"
    erp = {"name": "erp", "graphs": [orders], "blank_nodes": "skolem",
           **{key[len("LUCID_STORE_"):].lower(): value for key, value in virtuoso.env().items()}}
    (tmp_path / "stores.json").write_text(json.dumps([erp]))
    env = oxigraph.env(LUCID_STORE_GRAPHS=G, LUCID_STORES_FILE=str(tmp_path / "stores.json"))
    kpi_store = store_of(oxigraph.env())
    erp_store = store_of(virtuoso.env(LUCID_STORE_BLANK_NODES="skolem"))
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", {**DEV, **env}) as hub:
        kpi = publish(hub, version(1))
        answer = hub.http.put(f"{hub.url}/graphs", params={"graph": orders}, headers={"Content-Type": "text/turtle"},
                              data=b'<http://example.org/o1> <http://example.org/lines> [ <http://example.org/q> "2" ] .',
                              timeout=30)
        assert answer.status_code in (200, 201), answer.text
        order = answer.json()["patch"]
        wait(lambda: kpi_store.version(G) == kpi and erp_store.version(orders) == order, show=lambda: ready(hub).text)
        assert kpi_store.version(orders) is None and erp_store.version(G) is None  # each only its own
        assert whole_canonical(erp_store.statements(orders)) == whole_canonical(hub.runtime.store.statements(orders))
        states = hub.http.get(f"{hub.url}/admin/store", timeout=30).json()["stores"]
        assert [s["name"] for s in states] == ["default", "erp"] and "dba" not in str(states)
        assert 'lucid_store_up{store="erp"} 1.0' in metrics(hub)
        edit = requests.post(virtuoso.query_url, timeout=30, data={  # (another application of the store)
            "update": f'INSERT DATA {{ GRAPH <{orders}> {{ <http://example.org/o1> <http://example.org/note> "x" }} }}'})
        assert edit.status_code < 300
        captured = hub.http.post(f"{hub.url}/admin/store/capture", params={"graph": orders}, timeout=60).json()
        assert captured["store"] == "erp" and (captured["removed"], captured["added"]) == (0, 1)
    kpi_store.close()
    erp_store.close()


def test_a_stores_file_that_is_wrong_is_refused_with_a_reason(tmp_path: Path) -> None:
    import json

    from lucid_hub.errors import ConfigError

    def refused(content: str) -> str:
        path = tmp_path / "stores.json"
        path.write_text(content)
        with pytest.raises(ConfigError) as caught:
            RemoteConfig.all(Settings.from_env({"LUCID_STORES_FILE": str(path)}))
        return str(caught.value)

    good = {"name": "erp", "query_url": "http://s/q", "update_url": "http://s/u"}
    assert "not readable as JSON" in refused("[{")
    assert "JSON list of stores" in refused('{"name": "erp"}')
    assert "lowercase letters" in refused(json.dumps([{**good, "name": "ERP store"}]))
    assert "two stores are named 'erp'" in refused(json.dumps([good, good]))
    assert "unknown key 'pasword'" in refused(json.dumps([{**good, "pasword": "x"}]))
    assert "store 'erp': update_url is not set" in refused(json.dumps([{**good, "update_url": ""}]))
    assert "password_file: cannot read" in refused(json.dumps([{**good, "user": "u", "password_file": "/nonexistent"}]))
    assert "must be positive" in refused(json.dumps([{**good, "timeout": 0}]))
    with pytest.raises(ConfigError, match="LUCID_STORES_FILE: no file"):
        RemoteConfig.all(Settings.from_env({"LUCID_STORES_FILE": str(tmp_path / "missing.json")}))
    (tmp_path / "secret").write_text("s3cret\n")
    (tmp_path / "stores.json").write_text(json.dumps([{**good, "user": "u", "password_file": str(tmp_path / "secret"),
                                                       "graphs": ["http://x/*"]}]))
    (store,) = RemoteConfig.all(Settings.from_env({"LUCID_STORES_FILE": str(tmp_path / "stores.json")}))
    assert store.name == "erp" and store.password == "s3cret" and store.keeps("http://x/g") and "s3cret" not in repr(store)
