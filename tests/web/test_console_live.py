"""The console's capability pages follow the hub live (docs/console.md, "Live updates"): a
continuous query registered, a background role failing, a rule offer arriving show on the open
page without a reload, in a real headless Chromium; and their streams refuse what they must."""

from __future__ import annotations

import re
import time
from typing import Any

from tests.conftest import RunningHub
from tests.web.test_console import browser, sign_in  # noqa: F401 (the module's Chromium, and signing in)

ORDERS = "http://example.org/graphs/orders"


def _live(browser: Any, url: str) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    WebDriverWait(browser, 15).until(
        lambda b: b.find_element(By.CSS_SELECTOR, "[data-live-state]").text == "live")  # the stream is open


def test_the_queries_and_hub_pages_show_what_happens_without_a_reload(browser: Any, ui_hub: RunningHub) -> None:  # noqa: F811
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    hub = ui_hub
    assert hub.http.put(f"{hub.url}/graphs", params={"graph": ORDERS}, data=b'<http://ex/a> <http://ex/p> "1" .\n',
                        headers={"Content-Type": "application/n-triples"}).status_code == 201
    sign_in(browser, hub)
    _live(browser, f"{hub.url}/admin/ui/queries")
    page = browser.find_element(By.TAG_NAME, "h1")  # (the page itself is not loaded again)
    made = hub.http.post(f"{hub.url}/subscriptions", timeout=30,
                         json={"sparql": f"SELECT * WHERE {{ GRAPH <{ORDERS}> {{ ?s ?p ?o }} }}"})
    assert made.status_code == 201, made.text
    registered = time.monotonic()
    sid = made.json()["notification"]["spuid"]
    WebDriverWait(browser, 15, poll_frequency=0.02).until(lambda b: b.find_elements(By.CSS_SELECTOR, f'[data-query="{sid}"]'))
    print(f"a query registered showed on the open page {time.monotonic() - registered:.2f} s later")
    assert page.is_displayed()  # the same document: no reload
    row = browser.find_element(By.CSS_SELECTOR, f'[data-query="{sid}"]')
    assert "active" in row.text and row.find_element(By.CSS_SELECTOR, "td").get_attribute("data-label") == "Query"
    assert "1 row" in row.text  # its current results (one triple in the graph)
    facts = browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    assert "up to date with the store" in facts and "no party overran it lately" in facts

    # it ends (as when access is withdrawn): the page says so, and why
    hub.runtime.queries.records.end(sid, f"access to {ORDERS} was withdrawn: the query ended")
    WebDriverWait(browser, 15, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda b: "was withdrawn" in b.find_element(By.CSS_SELECTOR, f'[data-query="{sid}"]').text)

    _live(browser, f"{hub.url}/admin/ui/hub")
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-role="test-live-broken"]')

    def broken() -> None:
        raise RuntimeError("the broker is gone")

    hub.runtime.roles.add("test-live-broken", broken, every=0.05)
    WebDriverWait(browser, 15, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda b: "failing" in " ".join(e.text for e in b.find_elements(By.CSS_SELECTOR, '[data-role="test-live-broken"]')))
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_a_healthy_hub_page_is_not_fetched_again_and_the_streams_refuse_bad_requests(ui_hub: RunningHub) -> None:
    """A page's stream says "changed" only when what it shows changes: a hub whose roles run
    well sends none in two seconds (their last rounds move; the page is not fetched again for
    that); a page rendered at an older version is told at once."""
    import requests

    hub = ui_hub
    anonymous = requests.get(f"{hub.url}/admin/ui/hub/events", timeout=10, allow_redirects=False)
    assert anonymous.status_code in (302, 303, 401) and "event-stream" not in anonymous.headers.get("Content-Type", "")
    web = requests.Session()
    page = web.get(f"{hub.url}/admin/ui/login", timeout=10).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    from tests.conftest import ADMIN_PASSWORD

    web.post(f"{hub.url}/admin/ui/login", timeout=10, data={"username": "alice", "password": ADMIN_PASSWORD,
                                                             **({"csrf": csrf.group(1)} if csrf else {})})
    shown = re.search(r'data-live-page="hub/events\?shown=([0-9a-f]+)"', web.get(f"{hub.url}/admin/ui/hub", timeout=10).text)
    assert shown, "the hub page names its version"
    assert web.get(f"{hub.url}/admin/ui/nothing/events", timeout=10).status_code == 404

    def events(version: str, seconds: float) -> list[str]:
        seen: list[str] = []
        with web.get(f"{hub.url}/admin/ui/hub/events", params={"shown": version}, stream=True, timeout=10) as answer:
            assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("text/event-stream")
            ends = time.monotonic() + seconds
            for line in answer.iter_lines():
                if line.startswith(b"event:"):
                    seen.append(line.decode())
                    break
                if time.monotonic() > ends:  # (heartbeat comments come every half second)
                    break
        return seen

    assert events(shown.group(1), 2.5) == []
    assert events("0" * 16, 5) == ["event: changed"]  # an old page is told at once
    assert events("x" * 5000, 5) == ["event: changed"]  # (a junk version is an old one: cut, never trusted)


def test_the_overview_names_trouble_without_a_reload_and_clears_it(browser: Any, ui_hub: RunningHub) -> None:  # noqa: F811
    """The overview's attention list follows the hub: background work that starts failing is
    named on the open page, and the item goes when it recovers."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    hub = ui_hub
    sign_in(browser, hub)
    _live(browser, f"{hub.url}/admin/ui/overview")
    listed = lambda b: b.find_element(By.ID, "attention-part").text  # noqa: E731
    assert "Nothing" in listed(browser)
    heading = browser.find_element(By.TAG_NAME, "h1")
    broken = {"now": True}

    def work() -> None:
        if broken["now"]:
            raise RuntimeError("the broker is gone")

    hub.runtime.roles.add("test-overview-work", work, every=0.2)
    WebDriverWait(browser, 20).until(lambda b: "Background work failing: test-overview-work" in listed(b))
    assert heading.is_displayed()  # the same document: no reload
    broken["now"] = False
    WebDriverWait(browser, 20).until(lambda b: "Nothing" in listed(b))
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
