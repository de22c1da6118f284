"""Access conditions: the vocabulary read and validated, decisions, and the policy graph
(seeded from files, changed by admins, its history verified)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lucid_hub.errors import PolicyError
from lucid_hub.policy.decisions import Party, PolicyEngine
from lucid_hub.policy.model import ALL_GRAPHS, Condition, parse_turtle, to_turtle
from lucid_hub.policy.policy_graph import POLICY_GRAPH, read_policy_dir

PREFIXES = "@prefix eccauth: <https://vocab.eccenca.com/auth/> .\n@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .\n"
REPO = Path(__file__).resolve().parents[2]


def party(account: str = "acct", endpoint: str = "lc-1", *groups: str) -> Party:
    return Party(account, endpoint, frozenset(groups))


def test_shipped_policies_parse() -> None:
    default, _ = read_policy_dir(REPO / "policies")
    assert [c.iri for c in default] == ["urn:lucid:conditions:hub-admins"]
    assert default[0].writeGraph == (ALL_GRAPHS,)
    examples, _ = read_policy_dir(REPO / "policies" / "examples")
    assert len(examples) == 4 and all(c.label for c in examples)
    assert [c.requiresGroup for c in examples if c.iri.endswith("open-data")] == [("urn:lucid-hub:everyone",)]


def test_turtle_and_json_round_trip() -> None:
    conditions = parse_turtle(PREFIXES + """
        <urn:c:1> a eccauth:AccessCondition ; rdfs:label "One \\"quoted\\"" ;
            eccauth:requiresGroup "g1", <urn:group:2> ; eccauth:readGraph <http://ex/g> ;
            eccauth:grantWriteGraphPattern "http://ex/w/*" .""", "test")
    (c,) = conditions
    assert c.requiresGroup == ("g1", "urn:group:2")  # literal or IRI: compared by value
    assert parse_turtle(to_turtle(conditions), "again") == conditions
    assert Condition.from_json(c.to_json()) == c


@pytest.mark.parametrize(("turtle", "message"), [
    ('<urn:c:1> a eccauth:AccessCondition ; eccauth:readGraphs <http://ex/g> .', "unknown property"),
    ('<urn:c:1> a eccauth:AccessCondition ; eccauth:requiresGroup "g" .', "grants nothing"),
    ('<urn:c:1> a eccauth:AccessCondition ; eccauth:grantReadGraphPattern "http://ex/*/x" .', "trailing '*'"),
    ('<urn:c:1> a eccauth:AccessCondition ; eccauth:grantReadGraphPattern "http://ex/" .', "trailing '*'"),
    ('_:c a eccauth:AccessCondition ; eccauth:readGraph <http://ex/g> .', "not blank nodes"),
    ('<urn:c:1> eccauth:readGraph <http://ex/g> .', "not typed"),
    ('<urn:c:1> a rdfs:Class ; eccauth:readGraph <http://ex/g> .', "only eccauth:AccessCondition"),
    ('<urn:c:1> a eccauth:AccessCondition ; eccauth:readGraph "not an iri" .', "not an absolute IRI"),
    ('<urn:c:1> a eccauth:AccessCondition ; eccauth:readGraph <http://ex/g> ', "not valid Turtle"),
])
def test_invalid_conditions_are_refused_with_the_reason(turtle: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_turtle(PREFIXES + turtle, "test")


def test_json_validation() -> None:
    with pytest.raises(PolicyError, match="unknown property 'readGraphs'"):
        Condition.from_json({"iri": "urn:c:1", "readGraphs": ["http://ex/g"]})
    with pytest.raises(PolicyError, match="not an absolute IRI"):
        Condition.from_json({"iri": "not an iri", "readGraph": ["http://ex/g"]})
    with pytest.raises(PolicyError, match="list of strings"):
        Condition.from_json({"iri": "urn:c:1", "readGraph": [1]})
    with pytest.raises(PolicyError, match="needs an iri"):
        Condition.from_json({"readGraph": ["http://ex/g"]})


def test_decisions() -> None:
    g = "http://ex/graphs/kpi"
    engine = PolicyEngine([
        Condition("urn:c:read", requiresGroup=("partner", "eu"), readGraph=(g,)),
        Condition("urn:c:write", requiresAccount=("anna",), requiresEndpointId=("lc-anna",), writeGraph=(g,)),
        Condition("urn:c:pattern", requiresGroup=("supplier",), grantReadGraphPattern=("http://ex/supply/*",),
                  grantWriteGraphPattern=("http://ex/inbound/*",)),
        Condition("urn:c:all", requiresGroup=("auditor",), readGraph=(ALL_GRAPHS,)),
    ])
    assert engine.decide(party("x", "lc", "partner", "eu"), g, "read").allowed
    assert not engine.decide(party("x", "lc", "partner"), g, "read").allowed  # all requirements must hold
    assert not engine.decide(party("x", "lc", "partner", "eu"), g, "write").allowed
    assert engine.decide(party("anna", "lc-anna"), g, "write").allowed
    assert engine.decide(party("anna", "lc-anna"), g, "read").allowed  # write implies read
    assert not engine.decide(party("anna", "lc-other"), g, "read").allowed  # wrong endpoint
    assert engine.decide(party("s", "e", "supplier"), "http://ex/supply/a/b", "read").allowed
    assert not engine.decide(party("s", "e", "supplier"), "http://ex/supply", "read").allowed  # prefix is "…/"
    assert engine.decide(party("s", "e", "supplier"), "http://ex/inbound/x", "write").allowed
    assert engine.decide(party("a", "e", "auditor"), "http://anything/at/all", "read").allowed
    assert not engine.decide(party("a", "e", "auditor"), "http://anything/at/all", "write").allowed
    assert not engine.decide(party("a", "e", "auditor"), POLICY_GRAPH, "read").allowed  # the hub's own graph
    denied = engine.decide(party("x", "lc"), g, "read")
    assert "no access condition grants account 'x'" in denied.reason and g in denied.reason
    # a change takes effect for the next decision (cached decisions are dropped)
    engine.replace([Condition("urn:c:open", readGraph=(g,))])
    assert engine.decide(party("x", "lc"), g, "read").allowed
    assert not engine.decide(party("x", "lc", "partner", "eu"), g, "write").allowed


def test_explanations() -> None:
    g = "http://ex/g"
    engine = PolicyEngine([Condition("urn:c:1", requiresGroup=("p",), readGraph=(g,)),
                           Condition("urn:c:2", requiresGroup=("q",), writeGraph=(g,))])
    assert [row["condition"] for row in engine.who_may(g)] == ["urn:c:1", "urn:c:2"]
    assert [row["access"] for row in engine.who_may(g)] == ["read", "write"]
    assert [row["condition"] for row in engine.who_may(g, "write")] == ["urn:c:2"]
    what = engine.what_may(party("a", "e", "p"))
    assert what["read"] == [g] and what["write"] == [] and what["conditions"] == ["urn:c:1"]
    why = engine.why(party("a", "e", "p"), g, "write")
    assert why["allowed"] is False and why["granting"] == []
    assert {row["condition"]: row["applies"] for row in why["conditions"]} == {"urn:c:1": True, "urn:c:2": False}


def test_policy_files_seed_the_policy_graph_and_admin_edits_survive_restarts(tmp_path: Path, db_url: str) -> None:
    from lucid_hub.config import Settings
    from lucid_hub.runtime import Runtime

    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "a.ttl").write_text(PREFIXES + '<urn:c:a> a eccauth:AccessCondition ; eccauth:readGraph <http://ex/a> .')
    env = {"LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_DATABASE_URL": db_url, "LUCID_POLICIES_DIR": str(policies)}

    def conditions() -> list[str]:
        runtime = Runtime.open(Settings.from_env(env))
        try:
            return [c.iri for c in runtime.policies.conditions()]
        finally:
            runtime.close()

    assert conditions() == ["urn:c:a"]
    runtime = Runtime.open(Settings.from_env(env))
    try:
        runtime.policies.create([Condition("urn:c:admin-made", readGraph=("http://ex/b",))], "admin alice")
        history = runtime.policies.history()
        assert [h["author"] for h in history] == [f"policies directory {policies}", "admin alice"]
        assert all(h["verified"] for h in history)
    finally:
        runtime.close()
    assert conditions() == ["urn:c:a", "urn:c:admin-made"]  # files unchanged: the admin's edit stays
    (policies / "b.ttl").write_text(PREFIXES + '<urn:c:b> a eccauth:AccessCondition ; eccauth:readGraph <http://ex/b> .')
    assert conditions() == ["urn:c:a", "urn:c:b"]  # files changed: they are the new version
    (policies / "c.ttl").write_text(PREFIXES + '<urn:c:b> a eccauth:AccessCondition ; eccauth:readGraph <http://ex/c> .')
    from lucid_hub.errors import PolicyError as Refused

    with pytest.raises(Refused, match="defined twice"):
        conditions()


def test_a_tampered_policy_patch_shows_in_the_audit(tmp_path: Path, db_url: str) -> None:
    from sqlalchemy import select

    from lucid_hub.config import Settings
    from lucid_hub.db.models import PatchRecord
    from lucid_hub.runtime import Runtime

    runtime = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_DATABASE_URL": db_url}))
    try:
        runtime.policies.create([Condition("urn:c:x", readGraph=("http://ex/x",))], "admin")
        with runtime.db.session() as session:
            row = session.scalars(select(PatchRecord).where(PatchRecord.graph == POLICY_GRAPH)
                                  .order_by(PatchRecord.seq.desc())).first()
            assert row is not None
            row.body = row.body.replace(b"http://ex/x", b"http://ex/y")
        history = runtime.policies.history()
        assert history[0]["verified"] is True
        assert history[-1]["verified"] is False and "hash" in history[-1]["problem"]
    finally:
        runtime.close()


def test_two_hub_processes_on_one_database_lose_no_policy_edit(tmp_path: Path, db_url: str) -> None:
    """Two runtimes = two processes of one hub (`serve --workers 2`): each edit starts from the
    newest version; edits racing each other both land, or the later one is refused with 409."""
    import threading

    from lucid_hub.config import Settings
    from lucid_hub.errors import ConflictError
    from lucid_hub.runtime import Runtime

    env = {"LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_DATABASE_URL": db_url, "LUCID_WEB_WORKERS": "2"}
    a = Runtime.open(Settings.from_env(env))
    b = Runtime.open(Settings.from_env(env))  # takes the second copy of the store
    try:
        assert (a.leader, b.leader) == (True, False)
        g = "http://ex/orders"
        partner = party("globex", "lc-globex", "partner")
        b.policies.decide(partner, g, "read")  # b has loaded the conditions as they were
        a.policies.create([Condition("urn:c:from-a", requiresGroup=("partner",), readGraph=(g,))], "admin a")
        b.policies.create([Condition("urn:c:from-b", readGraph=("http://ex/other",))], "admin b")
        assert {c.iri for c in b.policies.conditions()} >= {"urn:c:from-a", "urn:c:from-b"}  # a's edit kept
        b.policies.refresh(every=0)
        assert b.policies.decide(partner, g, "read").allowed is True
        a.policies.refresh(every=0)
        assert {c.iri for c in a.policies.conditions()} >= {"urn:c:from-a", "urn:c:from-b"}

        start = threading.Barrier(2)
        outcomes: dict[str, str] = {}

        def edit(runtime: Runtime, name: str) -> None:
            start.wait()
            try:
                runtime.policies.create([Condition(f"urn:c:race-{name}", readGraph=(f"http://ex/{name}",))], name)
                outcomes[name] = "created"
            except ConflictError as exc:
                assert "changed meanwhile" in str(exc)
                outcomes[name] = "409"

        threads = [threading.Thread(target=edit, args=(rt, name)) for rt, name in ((a, "a"), (b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        a.policies.refresh(every=0)
        stored = {c.iri for c in a.policies.conditions()}
        assert "created" in outcomes.values()
        for name, outcome in outcomes.items():  # what was acknowledged is there, what was refused is not
            assert (f"urn:c:race-{name}" in stored) == (outcome == "created")
        assert {"urn:c:from-a", "urn:c:from-b"} <= stored
    finally:
        b.close()
        a.close()


def test_the_readable_filter_of_a_query_dataset_records_no_denials(tmp_path: Path, db_url: str) -> None:
    """A SPARQL dataset is the graphs the caller may read: the filter keeps exactly those (and
    never the hub's own graph), and writes no denial per graph it leaves out (it had written
    one per unreadable graph on every query). A request that is refused still records one."""
    from sqlalchemy import func, select

    from lucid_hub.config import Settings
    from lucid_hub.db.models import Denial
    from lucid_hub.runtime import Runtime

    rt = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_DATABASE_URL": db_url}))

    def denials() -> int:
        with rt.db.session() as session:
            return int(session.scalar(select(func.count()).select_from(Denial)) or 0)

    try:
        rt.policies.create([Condition("urn:c:kpi", requiresGroup=("partner",), readGraph=("http://ex/kpi",))], "admin")
        partner = party("globex", "lc-globex", "partner")
        graphs = ["http://ex/kpi", "http://ex/orders", "http://ex/prices", POLICY_GRAPH]
        before = denials()
        assert rt.policies.readable(partner, graphs) == ["http://ex/kpi"]
        assert denials() == before
        assert not rt.policies.decide(partner, "http://ex/orders", "read").allowed
        assert denials() == before + 1
    finally:
        rt.close()
