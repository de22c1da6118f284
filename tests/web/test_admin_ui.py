"""The admin page: end to end in headless Chromium (Debian's chromium + chromedriver, driven
by selenium), and its cookie and CSRF protections over plain HTTP."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from lucid_hub.auth.admins import AdminAccounts
from tests.conftest import ADMIN_PASSWORD, RunningHub, running_hub

G = "http://example.org/graphs/kpi"
OTHER = "http://example.org/graphs/other"
NT = {"Content-Type": "application/n-triples"}
PASSWORD = ADMIN_PASSWORD


def _chromium() -> tuple[str, str]:
    """Paths of chromium and chromedriver; installed from Debian's packages when missing."""
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (browser and driver) and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium", "chromium-driver"], check=False,
                       capture_output=True, timeout=600)
        browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (browser and driver):
        pytest.skip("chromium and chromedriver are not installed and apt-get could not install them")
    return browser, driver


def headless_chromium(*, browser_log: bool = False) -> Any:
    """A selenium driver of headless Chromium; `browser_log`: the page's failed loads and
    console errors readable with get_log("browser")."""
    pytest.importorskip("selenium", reason="selenium is not installed: pip install -e '.[test]'")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--hide-scrollbars"):
        options.add_argument(flag)
    if browser_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=options)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = headless_chromium()
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def test_an_admin_edits_a_condition_in_the_browser_and_a_clients_access_changes(browser: Any,
                                                                                  ui_hub: RunningHub) -> None:
    from selenium.webdriver.common.by import By

    hub = ui_hub
    hub.http.put(f"{hub.url}/graphs", params={"graph": G}, data='<http://ex/a> <http://ex/p> "1" .\n', headers=NT,
                 timeout=30)
    partner = hub.session(hub.token("Globex", ("partner-globex",), ("graphs:read",)))

    def partner_reads(graph: str = G) -> int:
        return int(partner.get(f"{hub.url}/graphs", params={"graph": graph}, timeout=30).status_code)

    assert partner_reads() == 403

    def field(element_id: str) -> Any:
        return browser.find_element(By.ID, element_id)

    def shown(css: str) -> str:
        """The text of the element once the page that has it is loaded (a form posts, then navigates)."""
        from selenium.webdriver.support import expected_conditions as ec
        from selenium.webdriver.support.ui import WebDriverWait

        return str(WebDriverWait(browser, 15).until(ec.presence_of_element_located((By.CSS_SELECTOR, css))).text)

    browser.get(f"{hub.url}/admin/ui/")
    assert "/admin/ui/login" in browser.current_url  # signed out: to the sign-in page
    field("username").send_keys("alice")
    field("password").send_keys("wrong password!")
    field("sign-in").click()
    assert "wrong username or password" in shown("[role=alert]")
    field("username").send_keys("alice")
    field("password").send_keys(PASSWORD)
    field("sign-in").click()
    assert shown("#new-condition") == "Add a condition"
    assert "urn:lucid:conditions:hub-admins" in browser.page_source

    field("new-condition").click()
    field("iri").send_keys("urn:lucid:conditions:globex-kpi")
    field("label").send_keys("Globex reads the KPIs")
    field("requiresGroup").send_keys("partner-globex")
    field("readGraph").send_keys(G)
    field("save").click()
    assert "saved urn:lucid:conditions:globex-kpi" in shown("[role=status]")
    assert partner_reads() == 200  # the next request is decided on the new condition

    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-iri="urn:lucid:conditions:globex-kpi"]')
    row.find_element(By.CLASS_NAME, "edit").click()
    shown("#condition-form")
    graphs = field("readGraph")
    graphs.clear()
    graphs.send_keys(OTHER)
    field("save").click()
    assert "saved" in shown("[role=status]")
    assert partner_reads() == 403 and partner_reads(OTHER) == 404  # moved to the other (not yet existing) graph

    # a bad edit is refused with the reason, and changes nothing
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-iri="urn:lucid:conditions:globex-kpi"]')
    row.find_element(By.CLASS_NAME, "edit").click()
    shown("#condition-form")
    patterns = field("grantReadGraphPattern")
    patterns.send_keys("http://example.org/*/broken")
    field("save").click()
    assert "trailing '*'" in shown("[role=alert]")
    assert partner_reads(OTHER) == 404

    browser.get(f"{hub.url}/admin/ui/explain?graph={G}")
    assert "urn:lucid:conditions:hub-admins" in shown("#result")
    browser.get(f"{hub.url}/admin/ui/history")
    shown("tbody tr")
    rows = browser.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == 3 and all("yes" in r.text for r in rows)  # loaded, created, updated; verified
    assert "admin alice (admin page)" in rows[0].text
    browser.find_element(By.CSS_SELECTOR, "header button").click()  # sign out
    assert shown("#sign-in") == "Sign in" and "/admin/ui/login" in browser.current_url


def test_hostile_values_stay_text_and_no_inline_script_runs_in_the_browser(browser: Any, ui_hub: RunningHub) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    hub = ui_hub
    iri = "urn:x:'+alert(document.domain)+'"  # closed the quote of the old inline onsubmit
    label = '<img src=x onerror=alert(1)><script>alert(2)</script>'
    created = hub.http.post(f"{hub.url}/admin/conditions", timeout=30, json={
        "iri": iri, "label": label, "requiresGroup": ['"><script>alert(3)</script>'], "readGraph": [G]})
    assert created.status_code == 201, created.text
    page = requests.get(f"{hub.url}/admin/ui/login", timeout=30)
    policy = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "default-src 'none'" in policy
    assert "<script>" not in page.text.replace('<script src="/admin/ui/static/admin.js" defer></script>', "")
    assert "style=" not in page.text and "<style" not in page.text and "onsubmit" not in page.text

    browser.get(f"{hub.url}/admin/ui/login")
    browser.find_element(By.ID, "username").send_keys("alice")
    browser.find_element(By.ID, "password").send_keys(PASSWORD)
    browser.find_element(By.ID, "sign-in").click()
    WebDriverWait(browser, 15).until(ec.presence_of_element_located((By.ID, "new-condition")))
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-iri="{iri}"]')
    assert label in row.text and '"><script>alert(3)</script>' in row.text  # shown as text
    assert browser.execute_script("return getComputedStyle(document.body).backgroundColor") == "rgb(246, 247, 249)"

    row.find_element(By.CLASS_NAME, "delete").click()
    asked = WebDriverWait(browser, 15).until(ec.alert_is_present())
    assert asked.text == f"Delete {iri}?"  # the question, not the value run as script
    asked.dismiss()
    assert iri in [c.iri for c in hub.runtime.policies.conditions()]  # dismissed: nothing deleted
    browser.find_element(By.CSS_SELECTOR, f'tr[data-iri="{iri}"] .delete').click()
    WebDriverWait(browser, 15).until(ec.alert_is_present()).accept()
    assert f"deleted {iri}" in WebDriverWait(browser, 15).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, "[role=status]"))).text
    assert iri not in [c.iri for c in hub.runtime.policies.conditions()]


def test_session_cookie_flags_csrf_and_sign_in_limits(tmp_path: Path) -> None:
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'ui.db'}", {"LUCID_AUTH_RATE_LIMIT": "3"}) as hub:
        AdminAccounts(hub.runtime.db).create("alice", PASSWORD)
        secret_file = tmp_path / "data" / "keys" / "session-secret"
        assert secret_file.stat().st_mode & 0o777 == 0o600  # the cookie-signing secret is private
        web = requests.Session()
        page = web.get(f"{hub.url}/admin/ui/login", timeout=30)
        cookie = page.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" in cookie  # not in dev mode
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        # requests keeps Secure cookies off plain HTTP, as a browser would: send it explicitly
        session_cookie = cookie.split(";")[0]
        forged = requests.post(f"{hub.url}/admin/ui/login", data={"username": "alice", "password": PASSWORD},
                               headers={"Cookie": session_cookie}, timeout=30, allow_redirects=False)
        assert forged.status_code == 403 and "CSRF" in forged.text  # no token in the form
        ok = requests.post(f"{hub.url}/admin/ui/login", timeout=30, allow_redirects=False,
                           data={"username": "alice", "password": PASSWORD, "csrf": csrf.group(1)},
                           headers={"Cookie": session_cookie})
        assert ok.status_code == 302 and ok.headers["Location"].endswith("/admin/ui/")
        signed_in = ok.headers["Set-Cookie"].split(";")[0]
        delete = requests.post(f"{hub.url}/admin/ui/delete", data={"iri": "urn:lucid:conditions:hub-admins"},
                               headers={"Cookie": signed_in}, timeout=30, allow_redirects=False)
        assert delete.status_code == 403  # signed in, but no CSRF token: nothing deleted
        assert [c.iri for c in hub.runtime.policies.conditions()] == ["urn:lucid:conditions:hub-admins"]
        for _ in range(3):
            bad = requests.post(f"{hub.url}/admin/ui/login", timeout=30, headers={"Cookie": session_cookie},
                                data={"username": "alice", "password": "guess", "csrf": csrf.group(1)})
            assert bad.status_code == 401
        limited = requests.post(f"{hub.url}/admin/ui/login", timeout=30, headers={"Cookie": session_cookie},
                                data={"username": "alice", "password": PASSWORD, "csrf": csrf.group(1)})
        assert limited.status_code == 429 and int(limited.headers["Retry-After"]) > 0


def test_admin_create_cli(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = {"LUCID_DATA_DIR": str(tmp_path / "data")}
    assert run_cli("admin", "create", "--username", "bob", "--password-stdin", env=env,
                   stdin=b"long enough password\n").code == 0
    short = run_cli("admin", "create", "--username", "eve", "--password-stdin", env=env, stdin=b"short\n")
    assert short.code == 1 and "at least 12 characters" in short.err
    again = run_cli("admin", "create", "--username", "bob", "--password-stdin", env=env, stdin=b"long enough password\n")
    assert again.code == 1 and "exists" in again.err
