"""Publisher metadata end to end: a write with `X-Lucid-Metadata` makes a format 3 patch whose
metadata is signed with it; the partner's mirror verifies and keeps it byte for byte; the
console, `lucid-hub log`, the patch's TriG and the LDES provenance show it. Bad metadata is
refused with the reason before anything is written. Two real hubs on loopback."""

from __future__ import annotations

import http.client
import json
import re
from pathlib import Path
from urllib.parse import quote, urlsplit

import requests

from lucid_hub.auth.admins import AdminAccounts
from tests.conftest import ADMIN_PASSWORD, RunningHub, running_hub
from tests.mirror.test_mirror import DEV, TTL, G, add_mirror, mirror, publish, version, wait
from tests.mirror.test_mirror import hubs as hubs  # (the fixture)

DCT = "http://purl.org/dc/terms/"
XSD = "http://www.w3.org/2001/XMLSchema#"
METADATA = {f"{DCT}source": {"@id": "https://erp.acme.example/orders/4711"},
            "https://acme.example/ns#shift": ["late", {"@value": "2", "@type": f"{XSD}integer"}]}


def put_with(hub: RunningHub, turtle: str, header: str | None) -> requests.Response:
    headers = {**TTL, **({"X-Lucid-Metadata": header} if header is not None else {})}
    body = ("@prefix ex: <https://acme.example/kpi/> .\n" + turtle).encode()
    return hub.http.put(f"{hub.url}/graphs", params={"graph": G}, headers=headers, data=body, timeout=30)


def put_twice(hub: RunningHub, turtle: str, first: str, second: str) -> tuple[int, str]:
    """A PUT carrying the metadata header twice (http.client sends each line as given)."""
    target = urlsplit(hub.url)
    connection = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
    body = ("@prefix ex: <https://acme.example/kpi/> .\n" + turtle).encode()
    connection.putrequest("PUT", f"/graphs?graph={quote(G, safe='')}")
    for name, value in (("Authorization", hub.http.headers["Authorization"]), ("Content-Type", TTL["Content-Type"]),
                        ("Content-Length", str(len(body))), ("X-Lucid-Metadata", first), ("X-Lucid-Metadata", second)):
        connection.putheader(name, value)
    connection.endheaders(body)
    answer = connection.getresponse()
    try:
        return answer.status, answer.read().decode()
    finally:
        connection.close()


def test_metadata_travels_signed_to_the_mirror_and_shows_everywhere(hubs: tuple[RunningHub, RunningHub],
                                                                      run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    publisher, partner = hubs
    first = publish(publisher, version(0))  # an old-style patch: format 2, no metadata
    answer = put_with(publisher, version(1), json.dumps(METADATA))
    assert answer.status_code == 200, answer.text
    patch_id = answer.json()["patch"]
    raw = publisher.http.get(f"{publisher.url}/patches/{patch_id}", timeout=30).text
    assert 'H format "3" .' in raw and raw.count("\nH meta ") == 3
    assert f'H meta "<{DCT}source> <https://erp.acme.example/orders/4711>" .' in raw
    assert 'H format "2" .' in publisher.http.get(f"{publisher.url}/patches/{first}", timeout=30).text
    trig = publisher.http.get(f"{publisher.url}/patches/{patch_id}", headers={"Accept": "application/trig"},
                              timeout=30).text
    assert "https://erp.acme.example/orders/4711" in trig and '"late"' in trig

    # the partner mirrors the graph: the patch verifies there and is kept byte for byte
    add_mirror(publisher, partner)
    wait(lambda: mirror(partner)["state"] == "active" and mirror(partner)["head"] == patch_id)
    assert partner.runtime.archive.patch(patch_id).body == publisher.runtime.archive.patch(patch_id).body
    later = put_with(publisher, version(2), json.dumps({f"{DCT}source": {"@id": "https://erp.acme.example/o/4712"}}))
    wait(lambda: mirror(partner)["head"] == later.json()["patch"])
    assert mirror(partner)["quarantined"] == 0

    # the LDES names it in the provenance of the patch's activity
    page = publisher.http.get(f"{publisher.url}/streams/pages", params={"graph": G, "page": "0"},
                              headers={"Accept": "application/n-triples"}, timeout=30).text
    assert re.search(rf"<[^>]*{patch_id}> <{DCT}source> <https://erp.acme.example/orders/4711> \.", page), page[:2000]

    # `lucid-hub log` prints it below the patch (beside the running hub, on its data)
    env = {"LUCID_DATA_DIR": str(publisher.runtime.settings.data_dir), "LUCID_DATABASE_URL": publisher.runtime.settings.db_url}
    log = run_cli("log", "--graph", G, env=env)
    assert log.code == 0, log.err
    lines = log.out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(patch_id))
    assert lines[at + 1:at + 4] == [  # (sorted, as the patch holds them)
        f"    meta <{DCT}source> <https://erp.acme.example/orders/4711>",
        f'    meta <https://acme.example/ns#shift> "2"^^<{XSD}integer>',
        '    meta <https://acme.example/ns#shift> "late"',
    ]
    assert not lines[1].startswith("    meta")  # (the first patch has none)

    # the console's patch page shows it, with the signature verified
    AdminAccounts(publisher.runtime.db).create("alice", ADMIN_PASSWORD)
    web = requests.Session()
    form = web.get(f"{publisher.url}/admin/ui/login", timeout=30).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    assert csrf is not None
    signed_in = web.post(f"{publisher.url}/admin/ui/login", timeout=30,
                         data={"username": "alice", "password": ADMIN_PASSWORD, "csrf": csrf.group(1)})
    assert signed_in.status_code == 200
    shown = web.get(f"{publisher.url}/admin/ui/patch", params={"id": patch_id}, timeout=30)
    assert shown.status_code == 200
    assert "https://erp.acme.example/orders/4711" in shown.text and "Metadata" in shown.text
    assert "format 3" in shown.text and "verified" in shown.text


def test_bad_metadata_is_refused_and_nothing_is_written(hubs: tuple[RunningHub, RunningHub]) -> None:
    publisher, _ = hubs
    head = publish(publisher, version(0))
    for header, reason in [("{not json", "not JSON"),
                           ('{"https://vocab.eccenca.com/revision/commitAuthor": "mallory"}', "fixed header"),
                           (json.dumps({f"https://x.example/p{i}": "v" for i in range(40)}), "at most 32"),
                           (json.dumps({f"{DCT}source": {"@id": "no iri"}}), "source")]:
        answer = put_with(publisher, version(1), header)
        assert answer.status_code == 400 and reason in answer.text, (header, answer.text)
    assert publisher.runtime.archive.head(G) == head  # nothing was published
    status, text = put_twice(publisher, version(1), json.dumps(METADATA), "{}")  # (joined by the server: not JSON)
    assert status == 400 and "X-Lucid-Metadata" in text
    assert publisher.runtime.archive.head(G) == head
    # a complete patch carries its own metadata: none can be added to it on upload
    body = publisher.http.get(f"{publisher.url}/patches/{head}", timeout=30).content
    upload = publisher.http.post(f"{publisher.url}/patches", params={"graph": G}, data=body, timeout=30,
                                 headers={"Content-Type": "application/rdf-patch", "X-Lucid-Metadata": json.dumps(METADATA)})
    assert upload.status_code == 400 and "carries its own metadata" in upload.text
    # without a token: 401 before the header is looked at
    anonymous = requests.put(f"{publisher.url}/graphs", params={"graph": G}, data=b"", timeout=30,
                             headers={**TTL, "X-Lucid-Metadata": json.dumps(METADATA)})
    assert anonymous.status_code == 401


def test_a_hub_making_format_1_refuses_metadata_with_the_reason(tmp_path: Path) -> None:
    with running_hub(tmp_path / "old", f"sqlite:///{tmp_path / 'old.db'}", {**DEV, "LUCID_PATCH_FORMAT": "1"}) as hub:
        answer = put_with(hub, version(0), json.dumps(METADATA))
        assert answer.status_code == 400 and "LUCID_PATCH_FORMAT=1" in answer.text
        assert put_with(hub, version(0), None).status_code == 201  # (and without metadata it publishes)


def test_the_cli_publishes_metadata_and_refuses_bad_values_in_one_line(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = {"LUCID_DATA_DIR": str(tmp_path / "data")}
    data = tmp_path / "kpi.ttl"
    data.write_text("@prefix ex: <https://acme.example/kpi/> .\n" + version(0))
    bad = run_cli("publish", data, "--graph", G, "--meta", f"{DCT}source", "<not an iri>", env=env)
    assert bad.code != 0 and len(bad.err.strip().splitlines()) == 1 and "metadata value" in bad.err, bad.err
    done = run_cli("publish", data, "--graph", G, "--meta", f"{DCT}source", "<https://erp.acme.example/o/1>",
                   "--meta", "https://acme.example/ns#shift", "early", env=env)
    assert done.code == 0, done.err
    log = run_cli("log", "--graph", G, env=env)
    assert log.out.splitlines()[1:] == [f"    meta <{DCT}source> <https://erp.acme.example/o/1>",
                                        '    meta <https://acme.example/ns#shift> "early"']
