"""A graph's stream input (LDN for RDF streams, shared/seeds/001): the paper's own stream
element, sent by a third-party LDN sender (py-ldnlib), becomes a signed patch authored by
its sender; input and output are found by discovery; replays, strangers, readers and
malformed, oversized or unsigned-in elements are refused and leave nothing behind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import func, select

from tests.conftest import RunningHub, running_hub

G = "https://data.example.com/sensors"
LDNS = "http://w3id.org/rsp/ldn-s#"
CONDITIONS = """@prefix eccauth: <https://vocab.eccenca.com/auth/> .
<urn:test:sensors> a eccauth:AccessCondition ;
    eccauth:requiresGroup "urn:test:sensors" ;
    eccauth:grantReadGraphPattern "https://data.example.com/*" ;
    eccauth:grantWriteGraphPattern "https://data.example.com/*" .
<urn:test:readers> a eccauth:AccessCondition ;
    eccauth:requiresGroup "urn:test:readers" ;
    eccauth:grantReadGraphPattern "https://data.example.com/*" .
"""
# The paper's example, as printed: "a humidity observation posted as a timestamped graph".
PAPER_ELEMENT = {"prov:generatedAtTime": "2017-07-22T05:00:00.000Z", "@id": "ex:Graph1",
                 "@graph": [{"@id": "ex:humidityObservation", "ex:hasValue": 34.5}],
                 "@context": {"prov": "http://www.w3.org/ns/prov#", "ex": "http://example.org#"}}


@pytest.fixture
def sensors_hub(tmp_path: Path, db_url: str) -> Iterator[RunningHub]:
    with running_hub(tmp_path / "data", db_url, {"LUCID_INBOX_RATE": "20", "LUCID_INBOX_MAX_BYTES": "4096"}) as hub:
        answer = hub.http.post(f"{hub.url}/admin/conditions", data=CONDITIONS, headers={"Content-Type": "text/turtle"})
        assert answer.status_code in (200, 201), answer.text
        answer = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data=b'<http://ex/s> <http://ex/p> "1" .\n',
                              headers={"Content-Type": "application/n-triples"})
        assert answer.status_code == 201, answer.text
        yield hub


def sensor(hub: RunningHub, name: str = "sensor-7") -> str:
    return hub.token(name, ("urn:test:sensors",), ("graphs:read", "graphs:write"))


def input_url(hub: RunningHub) -> str:
    return requests.Request("POST", f"{hub.url}/streams/input", params={"graph": G}).prepare().url or ""


def element(n: int, value: float) -> dict[str, Any]:
    return {**PAPER_ELEMENT, "@id": f"ex:Graph{n}", "prov:generatedAtTime": f"2017-07-22T0{n}:00:00.000Z",
            "@graph": [{"@id": "ex:humidityObservation", "ex:hasValue": value}]}


def history(hub: RunningHub) -> list[Any]:
    return list(hub.runtime.archive.history(G))


def test_the_papers_element_sent_by_py_ldnlib_becomes_the_senders_signed_patch(sensors_hub: RunningHub) -> None:
    from ldnlib import Sender

    hub = sensors_hub
    # discovery, as the paper describes it: the stream (and the graph) name its input and output
    graph_resource = requests.Request("GET", f"{hub.url}/graphs", params={"graph": G}).prepare().url or ""
    head = hub.http.head(graph_resource, timeout=30)
    assert head.links[f"{LDNS}input"]["url"] == input_url(hub)
    output = head.links[f"{LDNS}output"]["url"]
    stream = hub.http.get(f"{hub.url}/streams", params={"graph": G}, headers={"Accept": "application/ld+json"},
                          timeout=30).text
    assert "ldns:input" in stream and "ldns:output" in stream
    options = requests.options(input_url(hub), timeout=30)
    assert options.headers["Allow"] == "OPTIONS, POST" and "application/ld+json" in options.headers["Accept-Post"]
    # the paper's element, sent by a third-party LDN sender
    before = len(history(hub))
    token = sensor(hub)
    Sender(allow_localhost=True).send(input_url(hub), PAPER_ELEMENT, headers={"Authorization": f"Bearer {token}"})
    chain = history(hub)
    assert len(chain) == before + 1
    patch = chain[-1]
    assert patch.author.startswith("sensor-7 (") and "http://example.org#Graph1" in patch.message
    assert "2017-07-22T05:00:00+00:00" in patch.message
    graph = hub.http.get(f"{hub.url}/graphs", params={"graph": G}, headers={"Accept": "application/n-triples"},
                         timeout=30).text
    # JSON-LD reads the number 34.5 as an xsd:double (JSON-LD 1.1, §8.6)
    assert '<http://example.org#humidityObservation> <http://example.org#hasValue> "3.45E1"^^<http://www.w3.org/2001/XMLSchema#double>' in graph
    # the patch verifies (signed, chained) and is in the output, the patch container
    signed = hub.http.get(f"{hub.url}/patches/{patch.id}", timeout=30)
    assert signed.status_code == 200 and b"H signature" in signed.content
    assert patch.id in hub.http.get(output, headers={"Accept": "application/ld+json"}, timeout=30).text
    # the element is in the graph's inbox too, naming its patch
    listed = hub.http.get(f"{hub.url}/inbox", params={"graph": G}, timeout=30)
    assert listed.status_code == 200 and "/inbox/notifications/" in listed.text


def test_trig_and_n_quads_elements_and_blank_nodes(sensors_hub: RunningHub) -> None:
    hub = sensors_hub
    http = hub.session(sensor(hub))
    trig = ('@prefix prov: <http://www.w3.org/ns/prov#> . @prefix ex: <http://example.org#> .\n'
            'ex:G2 prov:generatedAtTime "2017-07-22T06:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n'
            'ex:G2 { ex:obs2 ex:hasValue 44.5 ; ex:at [ ex:room "3" ] . }\n')
    made = http.post(input_url(hub), data=trig, headers={"Content-Type": "application/trig"}, timeout=30)
    assert made.status_code == 201, made.text
    assert made.headers["Location"].endswith(f"/patches/{made.json()['patch']}") and made.json()["added"] == 2
    quads = ('<http://example.org#G3> <http://www.w3.org/ns/prov#generatedAtTime> "2017-07-22T07:00:00Z" .\n'
             '<http://example.org#obs3> <http://example.org#hasValue> "54.5" <http://example.org#G3> .\n')
    again = http.post(input_url(hub), data=quads, headers={"Content-Type": "application/n-quads"}, timeout=30)
    assert again.status_code == 201, again.text
    # an element adding nothing new: no patch, 200, the graph's Location
    same = quads.replace("07:00:00Z", "07:00:01Z")
    nothing = http.post(input_url(hub), data=same, headers={"Content-Type": "application/n-quads"}, timeout=30)
    assert nothing.status_code == 200 and nothing.json()["patch"] is None


def test_replays_strangers_readers_and_bad_elements_leave_nothing(sensors_hub: RunningHub) -> None:
    from lucid_hub.db.models import Notification

    hub = sensors_hub
    http = hub.session(sensor(hub))
    body = json.dumps(element(1, 11.0))
    first = http.post(input_url(hub), data=body, headers={"Content-Type": "application/ld+json"}, timeout=30)
    assert first.status_code == 201, first.text
    replay = http.post(input_url(hub), data=body, headers={"Content-Type": "application/ld+json"}, timeout=30)
    assert replay.status_code == 409 and replay.headers["Location"] == first.headers["Location"]
    count = len(history(hub))

    def notifications() -> int:
        with hub.runtime.db.session() as session:
            return int(session.scalar(select(func.count()).select_from(Notification)) or 0)

    kept = notifications()
    reader = hub.session(hub.token("reader", ("urn:test:readers",), ("graphs:read", "graphs:write")))
    ld = {"Content-Type": "application/ld+json"}
    cases = [
        (requests.post(input_url(hub), data=body, headers=ld, timeout=30), 401, "access token"),
        (reader.post(input_url(hub), data=json.dumps(element(2, 1)), headers=ld, timeout=30), 403, "write"),
        (http.post(f"{hub.url}/streams/input", params={"graph": "https://data.example.com/none"},
                   data=json.dumps(element(2, 1)), headers=ld, timeout=30), 404, "no graph"),
        (http.post(input_url(hub), data="<a> <b> <c> .", headers={"Content-Type": "text/turtle"}, timeout=30), 415,
         "application/ld+json"),
        (http.post(input_url(hub), data="{not json", headers=ld, timeout=30), 400, ""),
        (http.post(input_url(hub), data=json.dumps({**element(3, 1), "prov:generatedAtTime": "yesterday"}),
                   headers=ld, timeout=30), 400, "not a date"),
        (http.post(input_url(hub), data=json.dumps({k: v for k, v in element(3, 1).items()
                                                    if k != "prov:generatedAtTime"}), headers=ld, timeout=30), 400,
         "exactly one prov:generatedAtTime"),
        (http.post(input_url(hub), data=json.dumps(element(3, 1)["@graph"][0] | {"@context": PAPER_ELEMENT["@context"]}),
                   headers=ld, timeout=30), 400, "one named graph"),
        (http.post(input_url(hub), data=json.dumps({**element(3, 1), "@context": "https://elsewhere.example/ctx"}),
                   headers=ld, timeout=30), 400, "not fetched"),
        (http.post(input_url(hub), data=json.dumps({**element(3, 1), "@graph": [{"@id": f"ex:o{i}", "ex:v": "x" * 40}
                                                                               for i in range(200)]}),
                   headers=ld, timeout=30), 413, "LUCID_INBOX_MAX_BYTES"),
        (http.get(input_url(hub), timeout=30), 405, ""),
    ]
    for answer, code, says in cases:
        assert answer.status_code == code and says in answer.text, (code, answer.status_code, answer.text[:300])
    assert len(history(hub)) == count and notifications() == kept
    # a flood: the sender's rate (20 a minute here, 7 spent: bad elements count) holds it back
    statuses = [http.post(input_url(hub), data=json.dumps(element(4 + n % 5, float(n))), headers=ld,
                          timeout=30).status_code for n in range(16)]
    assert 429 in statuses and statuses[0] == 201
    # another sensor is not held up by the flooder's limit
    other = hub.session(sensor(hub, "sensor-8"))
    assert other.post(input_url(hub), data=json.dumps(element(9, 99.0)), headers=ld, timeout=30).status_code == 201


def test_every_cut_of_an_element_is_read_or_refused_with_a_reason() -> None:
    """Elements cut anywhere (a sender's broken upload): an Element or a 4xx error, never
    anything else."""
    from lucid_hub.errors import LucidError
    from lucid_hub.streams.stream_input import parse_element
    from lucid_hub.web.errors import status_of

    trig = (b'@prefix prov: <http://www.w3.org/ns/prov#> . @prefix ex: <http://example.org#> .\n'
            b'ex:G2 prov:generatedAtTime "2017-07-22T06:00:00Z" .\nex:G2 { ex:obs2 ex:hasValue 44.5 ; ex:at [ ex:r "3" ] . }\n')
    for media_type, text in (("application/ld+json", json.dumps(PAPER_ELEMENT).encode()), ("application/trig", trig)):
        for end in range(len(text) + 1):
            for cut in (text[:end], text[end:]):
                try:
                    parse_element(cut, media_type, "http://hub.test/streams/input?graph=x", 65536)
                except LucidError as exc:
                    assert 400 <= status_of(exc) < 500, (cut[:80], exc)
