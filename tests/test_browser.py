"""Headless Chromium against a real daphne: sign in, browse a document to its
chunks, and watch the status page update, without a reload, while a
re-index started from the admin runs. Every page runs under the server's
Content-Security-Policy (mcp_gateway/security_headers.py), and the browser
reports no violation of it."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.fakes.mistral import FakeMistral
from tests.mcp_http import REPO, base_env, start_daphne, stop, write_corpus
from tests.support import wait_until

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="chromium and chromedriver are not installed (apt-get install chromium chromium-driver)",
    ),
]

PASSWORD = "browser-admin-Passw0rd!"
EXTRA_FILES = 80
WAIT = 60  # seconds an element may take to appear; a ceiling, not a measurement
#: the fake Mistral holds the re-index's embedding call this long, so the job
#: is still running when the page's next update arrives (it polls every second)
EMBED_DELAY = 8.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root)
    for i in range(EXTRA_FILES):
        (root / "bulk" / f"note_{i:03}.md").parent.mkdir(exist_ok=True)
        (root / "bulk" / f"note_{i:03}.md").write_text(
            f"# Note {i}\n\n" + f"paragraph {i} about widgets.\n" * 40
        )
    subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "createadmin", "--dir", str(root), "--non-interactive"],
        env=base_env(DIR2MCP_ADMIN_PASSWORD=PASSWORD),
        check=True,
        capture_output=True,
        timeout=120,
    )
    fake = FakeMistral().start()
    env = {
        "MISTRAL_API_KEY": fake.API_KEY,
        "DIR2MCP_MISTRAL__BASE_URL": fake.url,
        "DIR2MCP_EMBED__PROVIDER": "mistral",
    }
    served = start_daphne(root, env=env)
    served.fake = fake
    yield served
    err = stop(served)
    fake.close()
    assert "Traceback" not in err, err[-3000:]


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # CSP violations land there
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


def wait_for(driver, condition):
    """``condition(driver)`` once truthy; an element not there yet counts as not yet."""
    from selenium.common.exceptions import NoSuchElementException

    def page() -> str:  # say which page the browser was left on
        body = driver.find_elements("tag name", "body")
        shown = body[0].text[:500] if body else ""
        return f"the condition on {driver.current_url} ({driver.title!r}): {shown!r}"

    return wait_until(
        lambda: condition(driver), timeout=WAIT, message=page, ignoring=(NoSuchElementException,)
    )


def find(driver, by: str, value: str):
    """The element once it is there: a click that submits a form or follows a
    link may return before the next page has loaded."""
    return wait_for(driver, lambda d: (d.find_elements(by, value) or [None])[0])


def assert_no_csp_violation(driver) -> None:
    """Nothing the pages did was refused by their Content-Security-Policy
    (the browser's console since the last call)."""
    refused = [e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e["message"]]
    assert not refused, refused


def text_of(driver, field: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f'[data-field="{field}"]').text


def sign_in(driver, base: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/admin/login/?next=/admin/")
    driver.find_element(By.NAME, "username").send_keys("admin")
    driver.find_element(By.NAME, "password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_for(driver, lambda d: d.find_elements(By.ID, "ops-status-link"))


def test_browse_a_document_to_its_chunks(browser, server):
    from selenium.webdriver.common.by import By

    sign_in(browser, server.base)
    browser.find_element(By.LINK_TEXT, "Documents").click()
    find(browser, By.LINK_TEXT, "src/loader.py").click()
    assert "def parse_config_file(path):" in find(browser, By.CSS_SELECTOR, "td.field-text_preview").text
    browser.find_element(By.ID, "document-chunks-link").click()
    wait_for(browser, lambda d: "chunk" in d.title.lower())
    assert "parse_config_file" in browser.page_source
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert rows and all("src/loader.py" in row.text for row in rows)
    assert browser.find_element(By.CSS_SELECTOR, "#result_list td.field-spans").text.startswith("lines 1-")
    assert_no_csp_violation(browser)


def test_status_page_updates_live_while_a_reindex_runs(browser, server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sign_in(browser, server.base)
    browser.find_element(By.ID, "ops-status-link").click()
    wait_for(browser, lambda d: "updated" in d.find_element(By.ID, "ops-connection").text)
    first_job = text_of(browser, "job.job_id")
    assert first_job.startswith("job_") and text_of(browser, "documents") == str(EXTRA_FILES + 3)
    browser.execute_script("window.opsMarker = 'same page';")  # lost on any reload
    status_tab = browser.current_window_handle

    # A changed file gets new chunks, whose embedding call the fake holds.
    (server.root / "bulk" / "note_000.md").write_text("# Note 0\n\nrewritten about sprockets.\n")
    server.fake.delay_next(EMBED_DELAY)
    browser.switch_to.new_window("tab")
    browser.get(f"{server.base}/admin/corpus/document/")
    browser.find_element(By.ID, "action-toggle").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("reindex_selected")
    browser.find_element(By.NAME, "index").click()
    assert "in the background" in find(browser, By.CSS_SELECTOR, "ul.messagelist").text

    browser.switch_to.window(status_tab)
    seen: set[tuple[str, str]] = set()

    def finished(driver) -> bool:
        job = text_of(driver, "job.job_id")
        seen.add((job, text_of(driver, "job.running")))
        return job != first_job and text_of(driver, "job.outcome") == "complete"

    wait_for(browser, finished)
    running = {job for job, state in seen if state == "true"}
    assert running - {first_job}, f"the page never showed the re-index running: {seen}"
    assert text_of(browser, "job.scanned") == str(EXTRA_FILES + 3)
    assert text_of(browser, "job.indexed") == str(EXTRA_FILES + 3)
    assert browser.execute_script("return window.opsMarker;") == "same page"
    assert_no_csp_violation(browser)


def test_the_api_docs_render_from_the_server_alone(browser, server):
    """Swagger UI comes from the installed package (issue #23): the page
    renders its operations, and every resource the browser fetched came from
    the server itself, never a CDN."""
    from selenium.webdriver.common.by import By  # selenium is optional: imported where used, as above

    browser.get(f"{server.base}/api/v1/docs")
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".swagger-ui .opblock"))
    assert "/api/v1/search" in browser.find_element(By.CSS_SELECTOR, ".swagger-ui").text
    fetched = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    assert any(url.endswith("/static/ninja/swagger-ui-bundle.js") for url in fetched), fetched
    assert fetched and all(url.startswith(f"{server.base}/") for url in fetched), fetched
    assert_no_csp_violation(browser)


def test_every_admin_list_and_first_record_run_under_the_csp(browser, server):
    """Each model's list and its first record's page: nothing refused by the
    Content-Security-Policy, so no admin page needs an inline script or style."""
    from selenium.webdriver.common.by import By

    sign_in(browser, server.base)
    lists = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "#content-main th a")]
    assert len(lists) >= 5, lists
    for url in lists:
        browser.get(url)
        records = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody th a, #result_list tbody td a")
        if records:
            browser.get(records[0].get_attribute("href"))
        assert_no_csp_violation(browser)
    browser.get(f"{server.base}/admin/password_change/")
    assert_no_csp_violation(browser)
