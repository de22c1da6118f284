"""The console (issue 21, first pages): overview, graphs, a graph's history, a patch as a review,
in a real headless Chromium; screenshots of each page at 1280 px and at a phone's width go to
test-artifacts/console/ (ignored by git) for a person to look at; no request of a page fails
(favicon included); axe-core (shipped by the axe-core-python package) finds no serious or
critical violation."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import ADMIN_PASSWORD as PASSWORD
from tests.conftest import RunningHub
from tests.web.test_admin_ui import headless_chromium

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
G = "http://example.org/graphs/orders"
NT = {"Content-Type": "application/n-triples"}
SIZES = {"desktop": (1400, 900), "phone": (390, 844)}
# Whole words (letters only, as "active" or "Delete") that the layout broke across lines, and
# boxes whose text runs out of them. URLs, IRIs and hashes may break anywhere: they are tokens
# with other characters, so they are not looked at.
BROKEN_WORDS = r"""
const broken = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
while (walker.nextNode()) {
  const node = walker.currentNode;
  const parent = node.parentElement;
  if (!parent || parent.closest("svg, script, style") || parent.getClientRects().length === 0) { continue; }
  const token = /\S+/g;
  let found;
  while ((found = token.exec(node.textContent)) !== null) {
    if (!/^[A-Za-z]{2,24}[.,:;)]?$/.test(found[0])) { continue; }
    const range = document.createRange();
    range.setStart(node, found.index);
    range.setEnd(node, found.index + found[0].length);
    const tops = new Set(Array.from(range.getClientRects()).filter((r) => r.width > 0).map((r) => Math.round(r.top)));
    if (tops.size > 1) { broken.push(found[0] + " (in " + parent.tagName.toLowerCase() + ")"); }
  }
}
for (const box of document.querySelectorAll("td, th, dd, dt, li, p, h1, h2, h3, button, summary")) {
  if (box.clientWidth > 0 && box.scrollWidth > box.clientWidth + 1 && getComputedStyle(box).overflowX === "visible") {
    broken.push("overflowing " + box.tagName.toLowerCase() + ": " + box.textContent.trim().slice(0, 40));
  }
}
return broken.slice(0, 20);
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = headless_chromium(browser_log=True)  # failed loads are logged as SEVERE
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def axe_violations(browser: Any) -> list[dict[str, Any]]:
    """Serious and critical axe-core violations of the page."""
    from importlib.resources import files

    script = files("axe_core_python").joinpath("axe.min.js").read_text(encoding="utf-8")
    browser.execute_script(script)
    result = browser.execute_async_script("const done = arguments[0]; axe.run(document).then(done);")
    return [v for v in result["violations"] if v.get("impact") in ("serious", "critical")]


def test_the_console_pages_render_read_well_and_fail_no_request(browser: Any, ui_hub: RunningHub) -> None:
    from selenium.webdriver.common.by import By

    hub = ui_hub
    first = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, headers=NT, timeout=30, data=(
        b'<http://example.org/po/1> <http://example.org/status> "open" .\n'
        b'<http://example.org/po/1> <http://example.org/line> _:l .\n'
        b'_:l <http://example.org/sku> "SKU-1" .\n_:l <http://example.org/qty> "3" .\n')).json()["patch"]
    long_note = "delivery note " * 40
    second = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, headers=NT, timeout=30, data=(
        '<http://example.org/po/1> <http://example.org/status> "shipped" .\n'
        '<http://example.org/po/1> <http://example.org/line> _:l .\n'
        '_:l <http://example.org/sku> "SKU-1" .\n_:l <http://example.org/qty> "3" .\n'
        f'<http://example.org/po/1> <http://example.org/note> "{long_note}" .\n').encode()).json()["patch"]
    assert first and second
    made = hub.http.post(f"{hub.url}/subscriptions", timeout=30,  # (the queries page has a row, with results)
                         json={"sparql": f"SELECT ?s ?p ?o WHERE {{ GRAPH <{G}> {{ ?s ?p ?o }} }}"})
    assert made.status_code == 201, made.text
    from tests.rules.test_rules import CHAIN, add_rules

    add_rules(hub, CHAIN)  # (the rules page has rules, their triggering graph drawn, and a change)

    browser.get(f"{hub.url}/admin/ui/overview")
    assert "/admin/ui/login" in browser.current_url  # signed out: to the sign-in page
    browser.find_element(By.ID, "username").send_keys("alice")
    browser.find_element(By.ID, "password").send_keys(PASSWORD)
    browser.find_element(By.ID, "sign-in").click()
    assert shown(browser, "figure.chart") and browser.find_element(By.TAG_NAME, "h1").text == "Overview"  # back where it was going

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pages = {"overview": "/admin/ui/overview", "graphs": "/admin/ui/graphs",
             "graph": f"/admin/ui/graph?graph={requests.utils.quote(G, safe='')}",
             "patch": f"/admin/ui/patch?id={requests.utils.quote(second, safe='')}",
             "rules": "/admin/ui/rules", "rule-offers": "/admin/ui/rule-offers", "hub": "/admin/ui/hub",
             "queries": "/admin/ui/queries", "inboxes": "/admin/ui/inboxes", "subscriptions": "/admin/ui/subscriptions",
             "mirrors": "/admin/ui/mirrors", "clients": "/admin/ui/clients", "conditions": "/admin/ui/",
             "explain": "/admin/ui/explain", "history": "/admin/ui/history"}
    browser.get_log("browser")  # (what the sign-in logged)
    for name, path in pages.items():
        for size, (width, height) in SIZES.items():
            browser.set_window_size(width, height)
            browser.get(f"{hub.url}{path}")
            assert browser.find_element(By.TAG_NAME, "h1").text
            shot = ARTIFACTS / f"{name}-{size}.png"
            browser.save_screenshot(str(shot))
            assert shot.stat().st_size > 5_000
            whole = browser.execute_cdp_cmd("Page.captureScreenshot", {"captureBeyondViewport": True})  # (the page's full length)
            (ARTIFACTS / f"{name}-{size}-full.png").write_bytes(base64.b64decode(whole["data"]))
            overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{name} is wider than a {width} px window by {overflow} px"
            assert browser.execute_script(BROKEN_WORDS) == [], f"{name} at {width} px"
        failed = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert failed == [], f"{name}: {failed}"
        assert axe_violations(browser) == [], name

    # The overview counts what is there; the graph's history lists both patches, newest first.
    browser.get(f"{hub.url}{pages['overview']}")
    assert "Graphs published" in browser.page_source and G in browser.page_source
    chart = browser.find_element(By.CSS_SELECTOR, 'svg[data-chart="day"]')
    archived = sum(g.length for g in hub.runtime.archive.graphs()  # all of them made in the last minutes
                   if not g.iri.startswith("urn:lucid-hub:"))  # (the hub's own graphs are not counted)
    assert chart.get_attribute("aria-label").endswith(f": {archived} patches") and archived >= 2
    browser.get(f"{hub.url}{pages['graph']}")
    entries = browser.find_elements(By.CSS_SELECTOR, "ol.timeline li")
    assert [e.text.split()[0] for e in entries] == ["#2", "#1"]

    # The patch as a review: the subject's removed and added statements side by side, the line
    # item's blank node nested, the long note folded, the signature verified.
    browser.get(f"{hub.url}{pages['patch']}")
    (article,) = [a for a in browser.find_elements(By.CSS_SELECTOR, "article.subject")
                  if "http://example.org/po/1" in a.find_element(By.TAG_NAME, "h3").text]
    removed = article.find_element(By.CSS_SELECTOR, ".side.removed").text
    added = article.find_element(By.CSS_SELECTOR, ".side.added").text
    assert '"open"' in removed and '"shipped"' in added and '"open"' not in added
    folded = article.find_element(By.CSS_SELECTOR, ".side.added details")
    assert "…" in folded.text and folded.get_attribute("open") is None
    assert "verified" in browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    browser.get(f"{hub.url}/admin/ui/patch?id={requests.utils.quote(first, safe='')}")
    nested = browser.find_element(By.CSS_SELECTOR, ".side.added ul.nested").text
    assert '"SKU-1"' in nested and '"3"' in nested
    # Two versions compared: the graph's page links each older version to a comparison with now.
    browser.get(f"{hub.url}{pages['graph']}")
    browser.find_element(By.ID, "compare").click()  # the picker: the oldest on the page with the newest
    arrived(browser, "/admin/ui/compare")
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith("Compare two versions")
    assert first in browser.page_source
    browser.get(f"{hub.url}{pages['graph']}")
    browser.find_element(By.LINK_TEXT, "compare with now").click()
    arrived(browser, "/admin/ui/compare")
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith("Compare two versions")
    (article,) = browser.find_elements(By.CSS_SELECTOR, "article.subject")
    assert '"open"' in article.find_element(By.CSS_SELECTOR, ".side.removed").text
    assert '"shipped"' in article.find_element(By.CSS_SELECTOR, ".side.added").text
    assert axe_violations(browser) == []
    browser.get(f"{hub.url}/admin/ui/compare?graph={requests.utils.quote(G, safe='')}&from="
                f"{requests.utils.quote(second, safe='')}&to={requests.utils.quote(first, safe='')}")
    assert "swap them" in browser.find_element(By.TAG_NAME, "body").text  # 400, with the reason
    logged = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert len(logged) == 1 and "400" in logged[0]  # that answer, and nothing else failed
    browser.get(f"{hub.url}/admin/ui/patch?id={requests.utils.quote(first, safe='')}")
    raw = browser.find_element(By.LINK_TEXT, "raw RDF Patch").get_attribute("href")
    browser.get(raw)
    assert browser.find_element(By.TAG_NAME, "body").text.startswith(f"H id <{first}> .")


def test_console_pages_need_an_admin_session_and_answer_bad_input_with_4xx(ui_hub: RunningHub) -> None:
    hub = ui_hub
    plain = requests.Session()
    plain.trust_env = False
    icon = plain.get(f"{hub.url}/favicon.ico", timeout=30)  # asked for unbidden by browsers (a text page)
    assert icon.status_code == 200 and icon.headers["Content-Type"].startswith("image/svg+xml")
    for path in ("/admin/ui/overview", "/admin/ui/graphs", f"/admin/ui/graph?graph={G}", "/admin/ui/patch?id=x",
                 "/admin/ui/patch/raw?id=x"):
        answer = plain.get(f"{hub.url}{path}", allow_redirects=False, timeout=30)
        assert answer.status_code == 302 and "/admin/ui/login" in answer.headers["Location"], path
    # the partner's bearer token is no admin session either
    partner = hub.session(hub.token("Globex", ("partner",), ("graphs:read",)))
    assert partner.get(f"{hub.url}/admin/ui/overview", allow_redirects=False, timeout=30).status_code == 302
    page = plain.get(f"{hub.url}/admin/ui/login", timeout=30)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    signed = plain.post(f"{hub.url}/admin/ui/login", data={"username": "alice", "password": PASSWORD,
                                                            **({"csrf": csrf.group(1)} if csrf else {})}, timeout=30)
    assert signed.status_code == 200
    bad = {f"/admin/ui/graph?graph={G}/none": 404, "/admin/ui/patch?id=bad": 400,
           f"/admin/ui/patch?id=urn:sha256:{'0' * 64}": 404, "/admin/ui/graphs?offset=-1": 400,
           f"/admin/ui/graph?graph={G}&before=1e9": 400, "/admin/ui/patch/raw?id=nope": 400,
           f"/admin/ui/compare?graph={G}&from=nope": 400, f"/admin/ui/compare?graph={G}/none&from=urn:sha256:{'0' * 64}": 404}
    for path, status in bad.items():
        answer = plain.get(f"{hub.url}{path}", timeout=30)
        assert answer.status_code == status and answer.text.strip(), (path, answer.status_code, answer.text[:200])


def snapshot(browser: Any, name: str) -> None:
    """Screenshots of the page at both sizes, which must fit their windows; axe-core clean."""
    for size, (width, height) in SIZES.items():
        browser.set_window_size(width, height)
        browser.refresh()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / f"{name}-{size}.png"))
        overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name} is wider than a {width} px window by {overflow} px"
    browser.set_window_size(*SIZES["desktop"])
    browser.refresh()
    assert axe_violations(browser) == []


def arrived(browser: Any, path: str) -> None:
    """Until the browser has navigated to `path` (a click's navigation is not immediate)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 15).until(lambda b: path in b.current_url)


def shown(browser: Any, css: str) -> str:
    """The text of the element once the page that has it is loaded (a click posts, then navigates)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return str(WebDriverWait(browser, 15).until(ec.presence_of_element_located((By.CSS_SELECTOR, css))).text)


def sign_in(browser: Any, hub: RunningHub) -> None:
    from selenium.webdriver.common.by import By

    # What an earlier test's page left in the log, its event streams retrying to a hub that has
    # stopped: the page is left first (its streams close), then the log is read empty.
    browser.get("about:blank")
    browser.get_log("browser")
    browser.get(f"{hub.url}/admin/ui/login")
    browser.find_element(By.ID, "username").send_keys("alice")
    browser.find_element(By.ID, "password").send_keys(PASSWORD)
    browser.find_element(By.ID, "sign-in").click()
    shown(browser, "header nav")


def test_subscribers_redeliver_and_cancel_after_confirmation(browser: Any, ui_hub: RunningHub, callback: Any) -> None:
    from selenium.webdriver.common.by import By

    from tests.websub.test_websub import active, publish, subscribed

    hub = ui_hub
    subscribed(hub, callback)
    delivered = publish(hub, "2")
    callback.wait(lambda: len(callback.deliveries) == 1)
    (sid,) = [s["id"] for s in active(hub)]
    sign_in(browser, hub)
    browser.set_window_size(*SIZES["desktop"])
    browser.get(f"{hub.url}/admin/ui/subscriptions")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-id="{sid}"]')
    assert "active" in row.text and callback.url.split("?")[0] in row.text
    snapshot(browser, "subscriptions")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-id="{sid}"]')

    # Redeliver: a confirmation page first (a GET changes nothing), then the patch again.
    row.find_element(By.LINK_TEXT, "Redeliver").click()
    assert shown(browser, "#confirm") and browser.find_element(By.TAG_NAME, "h1").text == "Deliver again?" and len(callback.deliveries) == 1
    assert axe_violations(browser) == []
    browser.find_element(By.ID, "from").send_keys(delivered)
    browser.find_element(By.ID, "confirm").click()
    assert "delivering again" in shown(browser, "[role=status]")
    callback.wait(lambda: len(callback.deliveries) == 2)
    assert callback.deliveries[1][1] == callback.deliveries[0][1]  # the same patch, again

    # Cancel: confirmed, the subscription ends and its callback is told.
    browser.find_element(By.CSS_SELECTOR, f'tr[data-id="{sid}"]').find_element(By.LINK_TEXT, "Cancel").click()
    shown(browser, "#confirm")
    browser.find_element(By.ID, "confirm").click()
    assert "cancelled" in shown(browser, "[role=status]")
    assert active(hub) == []
    callback.wait(lambda: any(v.get("hub.mode") == "denied" for v in callback.verifications))
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_actions_are_refused_without_a_csrf_token_or_an_admin_session(ui_hub: RunningHub, callback: Any) -> None:
    from tests.websub.test_websub import active, subscribed

    hub = ui_hub
    subscribed(hub, callback)
    (sid,) = [s["id"] for s in active(hub)]
    form = {"action": "cancel", "id": str(sid)}
    stranger = requests.Session()
    stranger.trust_env = False
    answer = stranger.post(f"{hub.url}/admin/ui/subscriptions/act", data=form, allow_redirects=False, timeout=30)
    assert answer.status_code == 403 and "CSRF" in answer.text  # no session, no token
    partner = hub.session(hub.token("Globex", ("partner",), ("graphs:read",)))
    assert partner.post(f"{hub.url}/admin/ui/subscriptions/act", data=form, timeout=30).status_code == 403
    admin = requests.Session()
    admin.trust_env = False
    page = admin.get(f"{hub.url}/admin/ui/login", timeout=30)
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert admin.post(f"{hub.url}/admin/ui/login", data={"username": "alice", "password": PASSWORD,
                                                          **({"csrf": token.group(1)} if token else {})},
                      timeout=30).status_code == 200
    assert admin.post(f"{hub.url}/admin/ui/subscriptions/act", data=form, timeout=30).status_code == 403  # no token
    assert admin.post(f"{hub.url}/admin/ui/subscriptions/act", data={**form, "csrf": "forged"},
                      timeout=30).status_code == 403
    assert len(active(hub)) == 1  # nothing happened
    confirm = admin.get(f"{hub.url}/admin/ui/subscriptions/confirm", params={"action": "cancel", "id": sid}, timeout=30)
    real = re.search(r'name="csrf" value="([^"]+)"', confirm.text)
    assert real is not None and len(active(hub)) == 1  # the confirmation page changes nothing
    for bad, status in (({"action": "explode", "id": str(sid)}, 400), ({"action": "cancel", "id": "x"}, 400),
                        ({"action": "redeliver", "id": str(sid), "from": "urn:sha256:bad"}, 400),
                        ({"action": "cancel", "id": "999999"}, 404)):
        answer = admin.post(f"{hub.url}/admin/ui/subscriptions/act", data={**bad, "csrf": real.group(1)}, timeout=30)
        assert answer.status_code == status, (bad, answer.status_code, answer.text[:200])
    done = admin.post(f"{hub.url}/admin/ui/subscriptions/act", data={**form, "csrf": real.group(1)}, timeout=30)
    assert done.status_code == 200 and "cancelled" in done.text and active(hub) == []
    assert admin.post(f"{hub.url}/admin/ui/subscriptions/act", data={**form, "csrf": real.group(1)},
                      timeout=30).status_code == 404  # replayed: the subscription is gone


def test_the_overview_figures_move_live_when_a_patch_is_published(browser: Any, ui_hub: RunningHub) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    hub = ui_hub
    sign_in(browser, hub)
    browser.get(f"{hub.url}/admin/ui/overview")
    WebDriverWait(browser, 15).until(
        lambda b: b.find_element(By.CSS_SELECTOR, "[data-live-state]").text == "live")  # the stream is open
    day = browser.find_element(By.CSS_SELECTOR, '[data-figure="day_total"]')
    published = browser.find_element(By.CSS_SELECTOR, '[data-figure="published"]')
    before_total, before_graphs = int(day.text), int(published.text)
    answer = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, headers=NT, timeout=30,
                          data=b'<http://example.org/po/9> <http://example.org/status> "open" .\n')
    assert answer.status_code == 201
    WebDriverWait(browser, 15).until(lambda _b: int(day.text) == before_total + 1)  # no reload
    assert int(published.text) == before_graphs + 1
    # the axes: the y-axis' top mark is the highest bar's count, what it counts is said, the x-axis
    # runs from the first bar's hour to the last's (this hour)
    figure = browser.find_element(By.CSS_SELECTOR, '[data-chart-figure="day"]')
    highest = max(float(r.get_attribute("height")) for r in figure.find_elements(By.CSS_SELECTOR, "rect"))
    assert highest == 40.0 and int(figure.find_element(By.CSS_SELECTOR, '[data-axis="top"]').text) >= 1
    assert "patches an hour" in figure.text
    hour = datetime.now(UTC).strftime("%H:00")
    assert figure.find_element(By.CSS_SELECTOR, '[data-axis="last"]').text in (hour, (datetime.now(UTC) - timedelta(minutes=1)).strftime("%H:00"))
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_clients_are_created_with_the_secret_shown_once_and_deleted_after_confirmation(
        browser: Any, ui_hub: RunningHub) -> None:
    from selenium.webdriver.common.by import By

    hub = ui_hub
    sign_in(browser, hub)
    browser.set_window_size(*SIZES["desktop"])
    browser.get(f"{hub.url}/admin/ui/clients")
    browser.find_element(By.ID, "name").send_keys("Globex hub")
    browser.find_element(By.ID, "groups").send_keys("partner-globex partners")
    browser.find_element(By.ID, "callback_prefixes").send_keys("https://hub.globex.example/callback/")
    browser.find_element(By.ID, "create-client").click()
    client_id, secret = shown(browser, "#new-client-id"), shown(browser, "#new-client-secret")
    assert client_id.startswith("lc-") and len(secret) >= 32
    assert axe_violations(browser) == []
    token = requests.post(f"{hub.url}/oauth/token", data={"grant_type": "client_credentials"},
                          auth=(client_id, secret), timeout=30)
    assert token.status_code == 200  # the secret shown is the client's
    browser.get(f"{hub.url}/admin/ui/clients")
    assert secret not in browser.page_source and client_id in browser.page_source  # never shown again
    snapshot(browser, "clients")
    record = hub.runtime.clients.get(client_id)
    assert record is not None and record.groups == ("partner-globex", "partners")
    assert record.scopes == ("graphs:read", "hub:subscribe")

    browser.find_element(By.CSS_SELECTOR, f'tr[data-client="{client_id}"]').find_element(By.LINK_TEXT, "Delete").click()
    shown(browser, "#confirm")
    assert hub.runtime.clients.get(client_id) is not None  # asking changed nothing
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    for _ in range(30):  # with the keyboard alone: tab to the button, press Enter
        if browser.switch_to.active_element.get_attribute("id") == "confirm":
            break
        ActionChains(browser).send_keys(Keys.TAB).perform()
    assert browser.switch_to.active_element.get_attribute("id") == "confirm"
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    assert "deleted" in shown(browser, "[role=status]")
    assert hub.runtime.clients.get(client_id) is None
    assert requests.post(f"{hub.url}/oauth/token", data={"grant_type": "client_credentials"},
                         auth=(client_id, secret), timeout=30).status_code == 401
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_client_forms_are_refused_without_a_csrf_token_and_bad_values_say_why(ui_hub: RunningHub) -> None:
    hub = ui_hub
    admin = requests.Session()
    admin.trust_env = False
    page = admin.get(f"{hub.url}/admin/ui/login", timeout=30)
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    admin.post(f"{hub.url}/admin/ui/login", data={"username": "alice", "password": PASSWORD,
                                                   **({"csrf": token.group(1)} if token else {})}, timeout=30)
    before = len(hub.runtime.clients.list())
    assert admin.post(f"{hub.url}/admin/ui/clients", data={"name": "x"}, timeout=30).status_code == 403
    for action in ("mirrors/reverify", "mirrors/reclone", "mirrors/trust", "clients/delete", "subscriptions/act"):
        refused = admin.post(f"{hub.url}/admin/ui/{action}", data={"id": "x"}, timeout=30)
        assert refused.status_code == 403 and "CSRF" in refused.text, action  # every action needs the token
    csrf = re.search(r'name="csrf" value="([^"]+)"', admin.get(f"{hub.url}/admin/ui/clients", timeout=30).text)
    assert csrf is not None
    for form, reason in (({"name": ""}, "name"), ({"name": "x", "scopes": "root"}, "unknown scope"),
                         ({"name": "x" * 300}, "name")):
        answer = admin.post(f"{hub.url}/admin/ui/clients", data={**form, "csrf": csrf.group(1)}, timeout=30)
        assert answer.status_code == 400 and reason in answer.text, (form, answer.text[:200])
    assert len(hub.runtime.clients.list()) == before  # nothing half-made
    gone = admin.post(f"{hub.url}/admin/ui/clients/delete", data={"id": "lc-nope", "csrf": csrf.group(1)}, timeout=30)
    assert gone.status_code == 404


def test_mirrors_show_their_quarantine_and_are_verified_again_and_trusted_after_confirmation(
        browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from lucid_hub.auth.admins import AdminAccounts
    from tests.conftest import running_hub
    from tests.mirror.test_mirror import DEV, _deliver, add_mirror, canonical, mirror, publish, version, wait

    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", DEV) as publisher, \
            running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}", DEV) as partner:
        AdminAccounts(partner.runtime.db).create("alice", PASSWORD)
        first = publish(publisher, version(0))
        add_mirror(publisher, partner)
        wait(lambda: mirror(partner)["head"] == first and mirror(partner)["state"] == "active")
        foreign = publisher.runtime.archive.patch(first).body.replace(b'"W0"', b'"W9"')  # altered: id fails
        assert _deliver(partner, foreign).status_code == 202
        wait(lambda: mirror(partner)["quarantined"] == 1)

        sign_in(browser, partner)
        browser.set_window_size(*SIZES["desktop"])
        browser.get(f"{partner.url}/admin/ui/mirrors")
        card = browser.find_element(By.CSS_SELECTOR, f'article[data-mirror="{mirror(partner)["id"]}"]')
        assert "active" in card.text and publisher.url in card.text
        assert "not verified: patch bytes hash" in card.find_element(By.CSS_SELECTOR, "table").text  # why, per patch
        assert card.find_element(By.CSS_SELECTOR, "[data-lag]").text == "up to date"  # asked of the publisher

        WebDriverWait(browser, 15).until(lambda b: b.find_element(By.CSS_SELECTOR, "[data-live-state]").text == "live")
        browser.execute_script("window.notReloaded = true;")
        publisher.runtime.delivery.stop()  # the publisher delivers no more: the mirror falls behind
        second = publish(publisher, version(1))
        lag = card.find_element(By.CSS_SELECTOR, "[data-lag]")
        WebDriverWait(browser, 30).until(lambda _b: lag.text == "1 patches behind")  # live, no reload
        assert browser.execute_script("return window.notReloaded === true;")
        snapshot(browser, "mirrors")
        card = browser.find_element(By.CSS_SELECTOR, f'article[data-mirror="{mirror(partner)["id"]}"]')
        card.find_element(By.TAG_NAME, "button").click()  # verify again and catch up
        assert "1 patches verified and applied" in shown(browser, "[role=status]")
        assert mirror(partner)["head"] == second
        assert browser.find_element(By.CSS_SELECTOR, "[data-lag]").text == "up to date"

        # Trust rotated keys: the publisher rotates its key; the admin pins its JWKS anew after a
        # confirmation page (the old key stays pinned beside the new one).
        publisher.runtime.keys.rotate()
        browser.get(f"{partner.url}/admin/ui/mirrors")
        browser.find_element(By.PARTIAL_LINK_TEXT, "Trust the publisher").click()
        field = browser.find_element(By.ID, "jwks")
        assert field.get_attribute("value") == f"{publisher.url}/.well-known/jwks.json"
        assert axe_violations(browser) == []
        before = list(mirror(partner)["keys"])
        browser.find_element(By.ID, "confirm").click()
        assert "keys pinned" in shown(browser, "[role=status]")
        assert set(before) < set(mirror(partner)["keys"])  # the new key pinned beside the old one

        # Clone again (confirmed): the copy is dropped and rebuilt from the publisher, verified.
        browser.get(f"{partner.url}/admin/ui/mirrors")
        browser.find_element(By.PARTIAL_LINK_TEXT, "Clone again").click()
        shown(browser, "#confirm")
        assert mirror(partner)["head"] == second  # asking changed nothing
        browser.find_element(By.ID, "confirm").click()
        assert "cloned again, 2 patches" in shown(browser, "[role=status]")
        assert mirror(partner)["head"] == second and canonical(partner) == canonical(publisher)
        assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_bench_console_runs(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("bench", "console", "--patches", "30", "--subscriptions", "60", "--runs", "2")
    assert result.code == 0, result.err
    assert "goal: every page <= 300 ms" in result.out and "subscribers (last page)" in result.out
    assert "100 rules, 100 windows" in result.out and "queries and windows" in result.out and "rules " in result.out
    bad = run_cli("bench", "console", "--runs", "0")
    assert bad.code == 1 and "must be positive" in bad.err


def signed_in(hub: RunningHub) -> requests.Session:
    """An admin's browser session over plain HTTP (sign-in form with its CSRF token)."""
    admin = requests.Session()
    admin.trust_env = False
    page = admin.get(f"{hub.url}/admin/ui/login", timeout=30)
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    answer = admin.post(f"{hub.url}/admin/ui/login", data={"username": "alice", "password": PASSWORD,
                                                            **({"csrf": token.group(1)} if token else {})}, timeout=30)
    assert answer.status_code == 200
    return admin


def test_the_overview_names_failing_rules_an_old_signing_key_and_subscribers_behind(
        ui_hub: RunningHub, callback: Any) -> None:
    import os
    import time
    from datetime import UTC, datetime

    from lucid_hub.db.models import RuleFiring
    from tests.websub.test_websub import active, publish, subscribed

    hub = ui_hub
    admin = signed_in(hub)
    calm = admin.get(f"{hub.url}/admin/ui/overview", timeout=30).text
    assert "Nothing: every subscription delivers" in calm
    with hub.runtime.db.session() as session:
        session.add(RuleFiring(rule="urn:rule:restock", trigger="insert", graph=G, coupling="deferred", depth=0,
                               instances=1, kept=0, outcome="failed", reason="webhook answered 500", patches="",
                               attempts=5, fired_at=datetime.now(UTC)))
    key = hub.runtime.keys.active_path
    old = time.time() - 400 * 86400
    os.utime(key, (old, old))
    subscribed(hub, callback)
    callback.statuses = [503] * 50  # the subscriber's callback fails from now on
    publish(hub, "2")
    callback.wait(lambda: len(callback.statuses) < 50)
    page = admin.get(f"{hub.url}/admin/ui/overview", timeout=30).text
    assert "Rule failing" in page and "urn:rule:restock: 1 of its recent firings failed" in page
    assert "Signing key due for rotation" in page and "in use for 400 days" in page
    assert 'href="hub#keys"' in page  # where it is dealt with: the hub page says how
    keys = admin.get(f"{hub.url}/admin/ui/hub", timeout=30).text
    assert "in use for 400 days: due for rotation" in keys and "lucid-hub keys rotate" in keys
    subscribers = admin.get(f"{hub.url}/admin/ui/subscriptions", timeout=30).text
    (sid,) = [s["id"] for s in hub.runtime.hub.subscriptions()]
    row = subscribers[subscribers.index(f'data-id="{sid}"'):]
    assert "1 patches" in row[:2000] and re.search(r"for \d+ s", row[:2000]), row[:2000]
    assert active(hub)  # still active: retrying


def test_deliveries_per_minute_are_measured_live(browser: Any, ui_hub: RunningHub, callback: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.websub.test_websub import publish, subscribed

    hub = ui_hub
    subscribed(hub, callback)
    sign_in(browser, hub)
    browser.get(f"{hub.url}/admin/ui/overview")
    rate = browser.find_element(By.CSS_SELECTOR, '[data-figure="deliveries_per_minute"]')
    WebDriverWait(browser, 30).until(lambda _b: rate.text.isdigit())  # a second update measured a rate
    for value in ("2", "3", "4"):
        publish(hub, value)
    callback.wait(lambda: len(callback.deliveries) == 3)
    WebDriverWait(browser, 30).until(lambda _b: rate.text.isdigit() and int(rate.text) > 0)


def test_deliveries_are_counted_in_one_row_a_minute_by_every_process_and_a_day_is_kept(db_url: str) -> None:
    import threading
    from datetime import UTC, datetime, timedelta

    from lucid_hub.db.session import Database
    from lucid_hub.delivery.records import count_deliveries, deliveries_by_minute

    db = Database(db_url)
    db.upgrade()
    minute = datetime.now(UTC).replace(second=0, microsecond=0)
    old = minute - timedelta(days=2)
    with db.write() as conn:
        count_deliveries(db, conn, old, 7, 0)
        count_deliveries(db, conn, minute - timedelta(minutes=1), 3, 1)

    def recorder() -> None:  # as the recorders of several delivering processes, at once
        for _ in range(25):
            with db.write() as conn:
                count_deliveries(db, conn, minute, 2, 1)

    threads = [threading.Thread(target=recorder) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert deliveries_by_minute(db, old) == {old: (7, 0), minute - timedelta(minutes=1): (3, 1), minute: (200, 100)}
    with db.write() as conn:
        count_deliveries(db, conn, minute, 0, 0, prune=True)  # nothing to add: only the pruning
    assert deliveries_by_minute(db, old) == {minute - timedelta(minutes=1): (3, 1), minute: (200, 100)}
    db.engine.dispose()


def test_live_streams_need_a_session_and_refuse_bad_input(ui_hub: RunningHub) -> None:
    hub = ui_hub
    plain = requests.Session()
    plain.trust_env = False
    for path in ("overview/events", f"graph/events?graph={G}", "subscriptions/events?ids=1", "mirrors/events"):
        answer = plain.get(f"{hub.url}/admin/ui/{path}", allow_redirects=False, timeout=30)
        assert answer.status_code == 302 and "/admin/ui/login" in answer.headers["Location"], path
    admin = signed_in(hub)
    bad = {f"graph/events?graph={G}/none": (404, "unknown graph"), f"graph/events?graph={G}&seen=x": (400, "seen"),
           "subscriptions/events?ids=1,x": (400, "ids"), "subscriptions/events?ids=" + ",".join(map(str, range(51))):
           (400, "at most 50"), "subscriptions/events?ids=" + "9" * 13: (400, "ids")}
    for path, (status, reason) in bad.items():
        answer = admin.get(f"{hub.url}/admin/ui/{path}", timeout=30)
        assert answer.status_code == status and reason in answer.text, (path, answer.status_code, answer.text[:200])


def test_a_subscribers_lag_a_graphs_version_and_the_charts_move_live(
        browser: Any, ui_hub: RunningHub, callback: Any) -> None:
    """Each page's moving figures follow its stream, with no reload (a mark set on the page's
    window stays): the subscribers' lag, failures and recovery; a graph's version, length and
    subscriber; the overview's charts of patches and of deliveries a minute."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from lucid_hub.db.models import Subscription
    from tests.websub.test_websub import G as KPI
    from tests.websub.test_websub import publish, subscribed

    hub = ui_hub
    subscribed(hub, callback)
    publish(hub, "2")
    callback.wait(lambda: len(callback.deliveries) == 1)
    (sid,) = [s["id"] for s in hub.runtime.hub.subscriptions()]
    sign_in(browser, hub)
    browser.set_window_size(*SIZES["desktop"])

    def opened(path: str) -> None:
        browser.get(f"{hub.url}/admin/ui/{path}")
        WebDriverWait(browser, 15).until(lambda b: b.find_element(By.CSS_SELECTOR, "[data-live-state]").text == "live")
        browser.execute_script("window.notReloaded = true;")

    def figure(name: str) -> Any:
        return browser.find_element(By.CSS_SELECTOR, f'[data-figure="{name}"]')

    def until(check: Any) -> None:
        WebDriverWait(browser, 30).until(lambda _b: check())
        assert browser.execute_script("return window.notReloaded === true;")

    # Subscribers: the callback fails, the lag and failures grow; it recovers, the lag is gone.
    opened("subscriptions")
    assert figure(f"s{sid}.lag").text == "0 patches" and "bad" not in figure(f"s{sid}.state").get_attribute("class")
    callback.statuses = [503] * 1000
    publish(hub, "3")
    until(lambda: figure(f"s{sid}.lag").text == "1 patches" and int(figure(f"s{sid}.failures").text) >= 1)
    until(lambda: "503" in figure(f"s{sid}.error").text and figure(f"s{sid}.behind").text.startswith("for "))
    with hub.runtime.db.session() as session:  # (as after its last attempt: failed)
        session.get(Subscription, sid).state = "failed"
    until(lambda: figure(f"s{sid}.state").text == "failed" and "bad" in figure(f"s{sid}.state").get_attribute("class"))
    callback.statuses = []
    hub.runtime.delivery.redeliver(sid, None)  # (reactivates it)
    until(lambda: figure(f"s{sid}.lag").text == "0 patches" and figure(f"s{sid}.behind").text == "")
    until(lambda: figure(f"s{sid}.state").text == "active" and "bad" not in figure(f"s{sid}.state").get_attribute("class"))
    callback.wait(lambda: len(callback.deliveries) == 2)

    # A graph: its version, length and subscriber's row move; newer patches are announced.
    opened(f"graph?graph={requests.utils.quote(KPI, safe='')}")
    length = int(figure("length").text)
    assert figure("newer").text == ""
    newest = publish(hub, "4")
    until(lambda: figure("head").text == newest and int(figure("length").text) == length + 1)
    until(lambda: figure("newer").text.startswith("1 patches since this page was loaded"))
    callback.wait(lambda: len(callback.deliveries) == 3)
    until(lambda: figure(f"s{sid}.lag").text == "0 patches" and figure(f"s{sid}.last").text != "never")

    # The overview: the patches chart's current hour and the deliveries chart redraw.
    opened("overview")

    def bar_titles(chart: str) -> list[str]:
        return [str(t.get_attribute("textContent"))
                for t in browser.find_elements(By.CSS_SELECTOR, f'svg[data-chart="{chart}"] rect title')]

    def delivered() -> int:
        return sum(int(m.group(1)) for t in bar_titles("deliveries") if (m := re.search(r": (\d+) delivered", t)))

    hour, before = bar_titles("day")[-1], delivered()
    assert before >= 3 and len(bar_titles("deliveries")) == 60  # (every delivery so far, this last hour)
    publish(hub, "5")
    callback.wait(lambda: len(callback.deliveries) == 4)
    count = int(hour.split(": ")[1])
    until(lambda: bar_titles("day")[-1] == f"{hour.split(': ')[0]}: {count + 1}" or
          bar_titles("day")[-1].endswith(": 1"))  # (or the hour turned meanwhile)
    until(lambda: delivered() == before + 1)
    heights = [float(r.get_attribute("height")) for r in browser.find_elements(
        By.CSS_SELECTOR, 'svg[data-chart="deliveries"] rect')]
    assert max(heights) == 40.0 and figure("deliveries_total").text == str(before + 1)
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_subscribers_are_listed_worst_first_a_page_at_a_time_counted_by_state_and_by_graph(
        ui_hub: RunningHub) -> None:
    from datetime import UTC, datetime, timedelta

    from lucid_hub.db.models import Subscription

    hub = ui_hub
    for i in range(3):
        answer = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, headers=NT, timeout=30,
                              data=f'<http://example.org/po/1> <http://example.org/n> "{i}" .\n'.encode())
        assert answer.status_code in (200, 201)
    now = datetime.now(UTC)
    # (state, delivered_seq, failures): lags 3, 0, 1, 2 and a failed one that is up to date
    rows = [("active", 0, 1), ("active", 3, 0), ("active", 2, 4), ("active", 1, 0), ("failed", 3, 9)]
    with hub.runtime.db.session() as session:
        session.add_all([Subscription(
            graph=G, callback=f"https://partner{n}.example/cb", account=f"p{n}", endpoint_id=f"lc-{n}",
            groups="partners", secret="s" if n % 2 else None, media_type="application/rdf-patch", state=state,
            # (not due for a day: the hub's deliverer must not act on them, and deny them for want of an
            # access condition, while the pages are read: the rows are what this test counts)
            lease_expires_at=now + timedelta(days=1), delivered_seq=seq, attempts=0,
            next_attempt_at=now + timedelta(days=1),
            last_error="", delivered_total=seq, failures_total=failures, created_at=now)
            for n, (state, seq, failures) in enumerate(rows)])
    listed = hub.runtime.hub.subscriptions(worst_first=True)
    assert [(s["callback"].split(".")[0][8:], s["lag"]) for s in listed] == [
        ("partner4", 0), ("partner0", 3), ("partner3", 2), ("partner2", 1), ("partner1", 0)]
    assert [s["signed"] for s in hub.runtime.hub.subscriptions()] == [False, True, False, True, False]
    page = hub.runtime.hub.subscriptions(worst_first=True, offset=1, limit=2)
    assert [s["id"] for s in page] == [s["id"] for s in listed[1:3]]
    assert hub.runtime.hub.count(graph=G) == 5 and hub.runtime.hub.count(graph=f"{G}/other") == 0
    assert hub.runtime.hub.states() == ({"active": 4, "failed": 1}, 14)
    admin = signed_in(hub)
    only = admin.get(f"{hub.url}/admin/ui/subscriptions", params={"graph": G}, timeout=30).text
    assert only.count("<tr data-id=") == 5 and re.search(rf'subscriptions to <a href="graph\?graph=[^"]+">{G}</a>', only)
    assert admin.get(f"{hub.url}/admin/ui/subscriptions", params={"graph": f"{G}/other"},
                     timeout=30).text.count("<tr data-id=") == 0
    overview = admin.get(f"{hub.url}/admin/ui/overview", timeout=30).text
    assert '<dd data-figure="subscriptions">4 active, 1 failed</dd>' in overview
    assert '<dd data-figure="failures_ever">14</dd>' in overview  # (all time: the last hour's are recorded
    assert '<dd data-figure="failures">0</dd>' in overview  # by deliveries; these rows were made by hand)


def test_live_streams_hold_no_request_thread_are_limited_per_address_and_freed_when_a_page_closes(
        tmp_path: Path) -> None:
    """On the front a live page holds no request thread: with 3 threads, 6 pages stay open
    and the console still answers; a 7th stream over LUCID_PUSH_PER_ADDRESS is refused with
    429 at once; a page closed frees its place."""
    import time

    from lucid_hub.auth.admins import AdminAccounts
    from tests.conftest import running_hub

    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'ui.db'}",
                     {"LUCID_DEV_MODE": "true", "LUCID_WEB_THREADS": "3", "LUCID_PUSH_PER_ADDRESS": "6"}) as hub:
        AdminAccounts(hub.runtime.db).create("alice", PASSWORD)
        admin = signed_in(hub)
        pages = [admin.get(f"{hub.url}/admin/ui/overview/events", stream=True, timeout=30) for _ in range(6)]
        readers = [page.iter_lines() for page in pages]  # (kept: a reader dropped would close the connection)
        assert all(page.status_code == 200 and next(lines) == b"retry: 2000"
                   for page, lines in zip(pages, readers, strict=True))
        assert admin.get(f"{hub.url}/admin/ui/overview", timeout=30).status_code == 200  # pages are served
        refused = admin.get(f"{hub.url}/admin/ui/mirrors/events", stream=True, timeout=30)
        assert refused.status_code == 429 and "LUCID_PUSH_PER_ADDRESS" in refused.text
        assert refused.headers["Retry-After"] == "30"
        pages[0].close()  # the page is closed: its place comes back once the front hears of it
        deadline = time.monotonic() + 15
        while True:
            again = admin.get(f"{hub.url}/admin/ui/mirrors/events", stream=True, timeout=30)
            if again.status_code == 200 or time.monotonic() > deadline:
                break
            again.close()
        assert again.status_code == 200
        again.close()
        for page in pages[1:]:
            page.close()
        assert again.status_code == 200
        again.close()
