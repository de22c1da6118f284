"""Linked Data Notifications inboxes (docs/streams.md, "Inboxes"): the receiver checks of the
W3C LDN test suite (csarven/ldn-tests, written out here: its runner needs a library that is
not in any package registry), a third-party LDN sender and consumer (py-ldnlib from PyPI),
who sees what, the push channel, and bad input."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from rdflib import Graph, Literal, URIRef
from rdflib.namespace import RDF
from sqlalchemy import func, select

from tests.conftest import RunningHub, running_hub

G = "https://data.example.com/orders"
LDP = "http://www.w3.org/ns/ldp#"
AS = "https://www.w3.org/ns/activitystreams#"
PARTNERS = """@prefix eccauth: <https://vocab.eccenca.com/auth/> .
<urn:test:partners> a eccauth:AccessCondition ;
    eccauth:requiresGroup "urn:test:partners" ;
    eccauth:grantReadGraphPattern "https://data.example.com/*" .
"""


def announce(n: int = 0, actor: str = "https://partner.example.com/hub") -> dict[str, Any]:
    return {"@context": "https://www.w3.org/ns/activitystreams", "id": "", "type": "Announce",
            "actor": actor, "object": f"https://hub.example.com/patches/p{n}", "target": G,
            "summary": f"applied patch {n}"}


@pytest.fixture
def inbox_hub(tmp_path: Path) -> Iterator[RunningHub]:
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}",
                     {"LUCID_INBOX_RATE": "8", "LUCID_INBOX_MAX_BYTES": "4096"}) as hub:
        answer = hub.http.post(f"{hub.url}/admin/conditions", data=PARTNERS, headers={"Content-Type": "text/turtle"})
        assert answer.status_code in (200, 201), answer.text
        answer = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=b'<http://ex/a> <http://ex/p> "1" .\n',
                              headers={"Content-Type": "application/n-triples"})
        assert answer.status_code == 201, answer.text
        yield hub


def partner(hub: RunningHub, name: str = "partner") -> requests.Session:
    return hub.session(hub.token(name, ("urn:test:partners",), ("graphs:read",)))


def inbox_url(hub: RunningHub) -> str:
    return requests.Request("GET", f"{hub.url}/inbox", params={"graph": G}).prepare().url or ""


def stored(hub: RunningHub) -> int:
    from lucid_hub.db.models import Notification

    with hub.runtime.db.session() as session:
        return int(session.scalar(select(func.count()).select_from(Notification)) or 0)


def post(session: requests.Session, hub: RunningHub, body: Any, content_type: str = "application/ld+json",
         **kwargs: Any) -> requests.Response:
    data = json.dumps(body) if isinstance(body, dict) else body
    return session.post(inbox_url(hub), data=data, headers={"Content-Type": content_type}, timeout=30, **kwargs)


def links(answer: requests.Response, rel: str) -> list[str]:
    return [link["url"] for key, link in answer.links.items() if key == rel or link.get("rel") == rel]


# --- the LDN test suite's receiver checks --------------------------------------------------

def test_the_ldn_test_suite_receiver_checks(inbox_hub: RunningHub) -> None:
    hub, sender = inbox_hub, partner(inbox_hub)
    # testReceiverOptionsResponse / OptionsAcceptPost: OPTIONS answers, Accept-Post lists JSON-LD
    options = requests.options(inbox_url(hub), timeout=30)
    assert options.status_code in (200, 204)
    assert "application/ld+json" in options.headers["Accept-Post"]
    # testReceiverPostResponse, PostLinkProfile: a profile parameter on the JSON-LD type is fine
    created = sender.post(inbox_url(hub), data=json.dumps(announce(1)), timeout=30, headers={
        "Content-Type": 'application/ld+json; profile="http://example.org/profile"; charset=utf-8'})
    # testReceiverPostCreated, PostLocation: 201 with a Location that can be retrieved
    assert created.status_code == 201, created.text
    location = created.headers["Location"]
    assert sender.get(location, timeout=30).status_code == 200
    # testReceiverGetResponse: the inbox as JSON-LD (Accept: application/ld+json)
    listing = hub.http.get(inbox_url(hub), headers={"Accept": "application/ld+json"}, timeout=30)
    assert listing.status_code == 200 and listing.headers["Content-Type"].startswith("application/ld+json")
    # testReceiverGetLDPContains: <inbox> ldp:contains <notification>
    data = Graph().parse(data=listing.text, format="json-ld", publicID=inbox_url(hub))
    assert (URIRef(inbox_url(hub)), URIRef(LDP + "contains"), URIRef(location)) in data
    assert (URIRef(inbox_url(hub)), RDF.type, URIRef(LDP + "Container")) in data
    # testReceiverGetLDPContainer, GetLDPConstrainedBy: the container's type and constraints
    assert f"{LDP}BasicContainer" in listing.headers["Link"] and f"{LDP}Container" in listing.headers["Link"]
    constraints = links(listing, f"{LDP}constrainedBy")
    assert constraints and requests.get(constraints[0], timeout=30).headers["Content-Type"].startswith("text/turtle")
    # testReceiverGetNotificationsJSONLD / RDFSource: each notification as JSON-LD (also with
    # no Accept and with */*) and in another RDF syntax
    for accept in ("application/ld+json", None, "*/*"):
        answer = sender.get(location, headers={"Accept": accept} if accept else {}, timeout=30)
        assert answer.headers["Content-Type"].startswith("application/ld+json"), accept
        notification = Graph().parse(data=answer.text, format="json-ld")
        assert (URIRef(location), RDF.type, URIRef("http://www.w3.org/ns/activitystreams#Announce")) in notification
    turtle = sender.get(location, headers={"Accept": "text/turtle"}, timeout=30)
    assert Graph().parse(data=turtle.text, format="turtle").isomorphic(notification)
    # testReceiverPostResponseConstraintsUnmet: 4xx, with ldp:constrainedBy
    unmet = post(sender, hub, {"@context": "https://www.w3.org/ns/activitystreams", "type": "Note", "content": "hi"})
    assert unmet.status_code == 400 and "actor" in unmet.text and links(unmet, f"{LDP}constrainedBy")


# --- a third-party sender and consumer --------------------------------------------------------

def test_py_ldnlib_discovers_sends_and_consumes(inbox_hub: RunningHub) -> None:
    from ldnlib import Consumer, Sender

    hub = inbox_hub
    token = hub.token("ldnlib", ("urn:test:partners",), ("graphs:read",))
    auth = {"headers": {"Authorization": f"Bearer {token}"}}
    graph_resource = requests.Request("GET", f"{hub.url}/graphs", params={"graph": G}).prepare().url
    inbox = Sender(allow_localhost=True).discover(graph_resource, **auth)  # HEAD, rel=ldp#inbox
    assert inbox == inbox_url(hub)
    Sender(allow_localhost=True).send(inbox, announce(7), **auth)  # a dict: JSON-LD
    notice = Graph()  # a graph: the sender asks OPTIONS for Accept-Post first
    activity = URIRef("https://partner.example.com/activities/8")
    notice.add((activity, RDF.type, URIRef(AS + "Announce")))
    notice.add((activity, URIRef(AS + "actor"), URIRef("https://partner.example.com/hub")))
    notice.add((activity, URIRef(AS + "object"), URIRef("https://hub.example.com/patches/p8")))
    notice.add((activity, URIRef(AS + "summary"), Literal("applied patch 8")))
    Sender(allow_localhost=True).send(inbox, notice, **auth)
    consumer = Consumer()
    seen = consumer.notifications(inbox, **auth)
    assert len(seen) == 2
    objects = set()
    for iri in seen:
        body = json.dumps(consumer.notification(iri, **auth))
        objects |= {o for o in ("patches/p7", "patches/p8") if o in body}
    assert objects == {"patches/p7", "patches/p8"}


# --- who sees what ------------------------------------------------------------------------------

def test_writers_see_every_notification_senders_their_own(inbox_hub: RunningHub) -> None:
    hub = inbox_hub
    alice, bob = partner(hub, "alice"), partner(hub, "bob")
    first = post(alice, hub, announce(1)).headers["Location"]
    second = post(bob, hub, announce(2)).headers["Location"]

    def listed(session: requests.Session) -> set[str]:
        answer = session.get(inbox_url(hub), headers={"Accept": "text/turtle"}, timeout=30)
        assert answer.status_code == 200, answer.text
        return {str(o) for o in Graph().parse(data=answer.text, format="turtle").objects(None, URIRef(LDP + "contains"))}

    assert listed(alice) == {first} and listed(bob) == {second}
    assert listed(hub.http) == {first, second}  # the graph's writer
    assert bob.get(first, timeout=30).status_code == 404  # not bob's to see, nor to learn of
    assert hub.http.get(first, timeout=30).status_code == 200
    stranger = hub.session(hub.token("stranger", (), ("graphs:read",)))
    assert stranger.get(inbox_url(hub), timeout=30).status_code == 403
    assert requests.get(inbox_url(hub), timeout=30).status_code == 401
    assert requests.get(first, timeout=30).status_code == 401


def test_size_lists_the_latest_and_next_pages_back(inbox_hub: RunningHub) -> None:
    hub = inbox_hub
    made = []
    for n in range(5):
        sender = partner(hub, f"p{n}")
        made.append(post(sender, hub, announce(n)).headers["Location"])
    answer = hub.http.get(inbox_url(hub), params={"size": 2}, headers={"Accept": "text/turtle"}, timeout=30)
    got = {str(o) for o in Graph().parse(data=answer.text, format="turtle").objects(None, URIRef(LDP + "contains"))}
    assert got == set(made[-2:])
    older = hub.http.get(answer.links["next"]["url"], headers={"Accept": "text/turtle"}, timeout=30)
    got = {str(o) for o in Graph().parse(data=older.text, format="turtle").objects(None, URIRef(LDP + "contains"))}
    assert got == set(made[1:3])
    assert hub.http.get(inbox_url(hub), params={"size": 0}, timeout=30).status_code == 400


# --- push --------------------------------------------------------------------------------------

def test_the_push_channel_delivers_and_resumes(inbox_hub: RunningHub) -> None:
    import sseclient

    hub = inbox_hub
    sender = partner(hub, "pusher")
    events: list[Any] = []
    ready = threading.Event()

    def listen() -> None:
        answer = hub.http.get(f"{hub.url}/inbox/events", params={"graph": G}, stream=True, timeout=60)
        ready.set()
        for event in sseclient.SSEClient(answer).events():
            events.append(event)
            if len(events) == 2:
                answer.close()
                return

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    assert ready.wait(30)
    # the stream starts "from now": wait for its first bytes by posting only after the listing is open
    first = post(sender, hub, announce(1)).headers["Location"]
    second = post(sender, hub, announce(2)).headers["Location"]
    thread.join(60)
    assert [json.loads(e.data)["id"] for e in events] == [first, second]
    assert all(e.event == "notification" for e in events)
    # resume after the first: the second again, at once
    answer = hub.http.get(f"{hub.url}/inbox/events", params={"graph": G}, stream=True, timeout=60,
                          headers={"Last-Event-ID": events[0].id})
    resumed = next(iter(sseclient.SSEClient(answer).events()))
    answer.close()
    assert json.loads(resumed.data)["id"] == second
    # a sender hears only of its own
    other = partner(hub, "other")
    answer = other.get(f"{hub.url}/inbox/events", params={"graph": G, "after": 0}, stream=True, timeout=60)
    post(other, hub, announce(3))
    own = next(iter(sseclient.SSEClient(answer).events()))
    answer.close()
    assert "patches/p3" in own.data


# --- discovery --------------------------------------------------------------------------------

def test_the_graph_and_its_stream_name_the_inbox(inbox_hub: RunningHub) -> None:
    hub = inbox_hub
    head = hub.http.head(f"{hub.url}/graphs", params={"graph": G}, timeout=30)
    assert links(head, f"{LDP}inbox") == [inbox_url(hub)]
    # every channel of the graph is found from its resource: the event stream, the channel document
    stream_link = links(head, "https://w3id.org/lucid-hub#eventStream")
    assert stream_link and hub.http.get(stream_link[0], timeout=30).status_code == 200
    channels = hub.http.get(links(head, "https://w3id.org/lucid-hub#channels")[0], timeout=30).json()
    assert {"ldes", "ldn-inbox", "websub", "patch-events"} <= {c["kind"] for c in channels["channels"]}
    # The representation is the graph's triples only, in every syntax (quad syntaxes: in the
    # default graph, where generic clients read a document): the inbox is named by the Link header.
    from rdflib import Dataset

    for syntax, fmt in (("application/trig", "trig"), ("application/n-quads", "nquads")):
        answer = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"Accept": syntax}, timeout=30)
        data = Dataset().parse(data=answer.text, format=fmt)
        assert len(data.default_graph) == 1 and len(list(data.quads())) == 1, syntax  # the graph's one triple
        assert links(answer, f"{LDP}inbox") == [inbox_url(hub)], syntax
    turtle = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"Accept": "text/turtle"}, timeout=30)
    assert "ldp#inbox" not in turtle.text  # a triple syntax is the graph's triples only
    stream = hub.http.get(f"{hub.url}/streams", params={"graph": G}, headers={"Accept": "text/turtle"}, timeout=30)
    assert (None, URIRef(LDP + "inbox"), URIRef(inbox_url(hub))) in Graph().parse(data=stream.text, format="turtle")


# --- bad input: a clear 4xx, nothing stored -------------------------------------------------

def test_bad_notifications_get_a_clear_4xx_and_leave_nothing(inbox_hub: RunningHub) -> None:
    hub = inbox_hub
    sender = partner(hub, "careless")
    before = stored(hub)
    cases = [
        (b"{not json", "application/ld+json", 400, "JSON"),
        (b"<a> <b> .", "text/turtle", 400, "not valid"),
        (b"hello", "text/plain", 415, "application/ld+json"),
        (json.dumps({**announce(), "@context": "https://evil.example.com/ctx"}).encode(), "application/ld+json",
         400, "not fetched"),
        (json.dumps({"@context": {"as": "https://www.w3.org/ns/activitystreams#"}, "@id": "urn:x",
                     "@graph": [{"@id": "urn:y"}]}).encode(), "application/ld+json", 400, ""),
        (b"<urn:a> <urn:b> <urn:c> .", "application/n-triples", 400, "actor"),
        (b"", "text/turtle", 400, "empty"),
        (json.dumps({**announce(), "summary": "x" * 5000}).encode(), "application/ld+json", 413, "4,096"),
    ]
    for body, content_type, status, words in cases:
        answer = post(sender, hub, body, content_type)
        assert answer.status_code == status, (body[:60], answer.status_code, answer.text)
        assert words in answer.text, (body[:60], answer.text)
    assert stored(hub) == before
    # a named graph is not one notification
    trig = b"<urn:g> { <urn:a> a <https://www.w3.org/ns/activitystreams#Announce> } ."
    assert post(sender, hub, trig, "application/ld+json").status_code == 400


def test_unauthorised_replayed_and_flooding_senders(inbox_hub: RunningHub) -> None:
    hub = inbox_hub
    assert post(requests.Session(), hub, announce()).status_code == 401
    stranger = hub.session(hub.token("stranger", (), ("graphs:read",)))
    assert post(stranger, hub, announce()).status_code == 403
    record, secret = hub.client("basic", ("urn:test:partners",), ("graphs:read",))
    basic = requests.Session()
    basic.auth = (record.client_id, secret)
    refused = post(basic, hub, announce())
    assert refused.status_code == 401 and "Basic" in refused.text  # Basic only reads
    sender = partner(hub, "replayer")
    unknown = sender.post(f"{hub.url}/inbox", params={"graph": "https://data.example.com/none"},
                          data=json.dumps(announce()), headers={"Content-Type": "application/ld+json"}, timeout=30)
    assert unknown.status_code == 404
    first = post(sender, hub, announce(1))
    assert first.status_code == 201
    count = stored(hub)
    again = post(sender, hub, announce(1))
    assert again.status_code == 409 and again.headers["Location"] == first.headers["Location"]
    assert "received before" in again.text and stored(hub) == count
    flood = partner(hub, "flood")
    answers = [post(flood, hub, announce(100 + n)).status_code for n in range(10)]
    assert answers[:8] == [201] * 8 and answers[8:] == [429, 429]
    assert stored(hub) == count + 8
    assert post(sender, hub, announce(2)).status_code == 201  # one flooding sender holds up no other


def test_offers_and_flags_are_notifications_too(inbox_hub: RunningHub) -> None:
    hub = inbox_hub
    sender = partner(hub, "reviewer")
    offer = {"@context": "https://www.w3.org/ns/activitystreams", "type": "Offer", "actor": "https://p.example/",
             "object": {"type": "Document", "url": "https://p.example/proposed-change.rq"}, "target": G}
    flag = {"@context": ["https://www.w3.org/ns/activitystreams", {"ex": "https://p.example/ns#"}], "type": "Flag",
            "actor": "https://p.example/", "object": "http://ex/a", "content": "wrong value", "ex:severity": "high"}
    for body in (offer, flag):
        assert post(sender, hub, body).status_code == 201, body
    kinds = [n.kinds for n in hub.runtime.inbox.listing(G, None)]
    assert sorted(kinds) == [("Flag",), ("Offer",)]


def test_a_mirror_posts_only_to_an_inbox_on_its_publishers_origin() -> None:
    """The inbox a publisher names is followed only on the publisher's own origin: the
    notification carries the mirror's token (callback safety, as for WebSub)."""
    import http.server

    from lucid_hub.client import HubClient

    elsewhere = "http://127.0.0.2:9/inbox"

    class Publisher(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("Link", f'<{elsewhere}>; rel="http://www.w3.org/ns/ldp#inbox"')
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Publisher)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert HubClient(base).inbox_of(G) is None
        elsewhere = f"{base}/inbox?graph=x"  # the same origin: followed
        assert HubClient(base).inbox_of(G) == elsewhere
    finally:
        server.shutdown()


# --- XML and expansion ------------------------------------------------------------------------

RDF_XML_HEAD = b'<?xml version="1.0"?>\n'
RDF_XML_ROOT = (b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
                b'xmlns:as="https://www.w3.org/ns/activitystreams#">'
                b'<as:Announce rdf:about="urn:n:1"><as:actor rdf:resource="https://partner.example.com/hub"/>'
                b'<as:object rdf:resource="https://hub.example.com/patches/p1"/><as:summary>%s</as:summary>'
                b'</as:Announce></rdf:RDF>')


def laughs(levels: int) -> bytes:
    """The billion laughs: each entity ten of the one before (eight levels: 100 MB from 672 bytes)."""
    entities = [b'<!ENTITY a0 "xxxxxxxxxx">'] + [
        b'<!ENTITY a%d "%s">' % (i, (b"&a%d;" % (i - 1)) * 10) for i in range(1, levels)]
    return RDF_XML_HEAD + b"<!DOCTYPE rdf:RDF [" + b"".join(entities) + b"]>" + RDF_XML_ROOT % (
        b"&a%d;" % (levels - 1))


def test_rdf_xml_with_a_document_type_declaration_is_refused_in_every_form(tmp_path: Path) -> None:
    """The entity expansion a partner found (672 bytes stored as 100 MB) and its siblings: an
    external entity, a parameter entity, a lower-case DOCTYPE and one inside the root element
    (oxigraph's reader takes both). Each is a 400 naming the reason; nothing is stored; plain
    RDF/XML is still accepted."""
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", {"LUCID_INBOX_RATE": "100"}) as hub:
        answer = hub.http.post(f"{hub.url}/admin/conditions", data=PARTNERS, headers={"Content-Type": "text/turtle"})
        assert answer.status_code in (200, 201), answer.text
        assert hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=b'<http://ex/a> <http://ex/p> "1" .\n',
                            headers={"Content-Type": "application/n-triples"}).status_code == 201
        sender = partner(hub)
        billion = laughs(8)
        assert len(billion) < 800
        external = RDF_XML_HEAD + b'<!DOCTYPE rdf:RDF [<!ENTITY x SYSTEM "file:///etc/passwd">]>' + RDF_XML_ROOT % b"&x;"
        parameter = (RDF_XML_HEAD + b'<!DOCTYPE rdf:RDF [<!ENTITY % p "<!ENTITY y \'z\'>"> %p;]>'
                     + RDF_XML_ROOT % b"&y;")
        lower = RDF_XML_HEAD + b'<!doctype rdf:RDF [<!ENTITY a "zz">]>' + RDF_XML_ROOT % b"&a;"
        inner = RDF_XML_ROOT.replace(b"<as:Announce", b'<!DOCTYPE x [<!ENTITY a "zz">]><as:Announce') % b"&a;"
        before = stored(hub)
        for body in (billion, laughs(3), external, parameter, lower, inner):
            answer = post(sender, hub, body, "application/rdf+xml")
            assert answer.status_code == 400, (body[:80], answer.status_code, answer.text[:300])
            reason = answer.text
            assert "document type declaration" in reason or "not well-formed XML" in reason, reason
        assert stored(hub) == before
        plain = post(sender, hub, RDF_XML_HEAD + RDF_XML_ROOT % b"applied", "application/rdf+xml")
        assert plain.status_code == 201, plain.text
        assert stored(hub) == before + 1


def test_a_small_notification_that_expands_past_its_limit_is_refused(inbox_hub: RunningHub) -> None:
    """JSON-LD terms and Turtle prefixes make long IRIs of short text: what a notification
    parses into is bounded by its limit too (4,096 bytes here), not only its raw bytes."""
    hub, sender = inbox_hub, partner(inbox_hub, "expanding")
    before = stored(hub)
    long_ns = "https://partner.example.com/" + "v" * 1500 + "#"
    document = {**announce(), "@context": ["https://www.w3.org/ns/activitystreams", {"x": long_ns}],
                **{f"x:p{i}": "1" for i in range(12)}}
    body = json.dumps(document).encode()
    assert len(body) < 4096
    answer = post(sender, hub, body)
    assert answer.status_code == 413, answer.text
    assert "LUCID_INBOX_MAX_BYTES" in answer.text
    turtle = (f"@prefix x: <{long_ns}> .\n@prefix as: <https://www.w3.org/ns/activitystreams#> .\n"
              "<urn:n> a as:Announce ; as:actor <urn:a> ; as:object <urn:o> ;\n"
              + " ;\n".join(f"  x:p{i} x:o{i}" for i in range(12)) + " .\n").encode()
    assert len(turtle) < 4096
    answer = post(sender, hub, turtle, "text/turtle")
    assert answer.status_code == 413, answer.text
    assert stored(hub) == before
