"""The web surface's defences (issue #34, "Seen 8"), on real `up` processes:
the same security headers on every route kind, whichever of the three
writers answers (the site's middleware, the REST edge, the MCP endpoint);
secure cookies and HSTS when `up` serves TLS itself; admin sign-in
throttled per client and per username before any password is hashed.
"""

from __future__ import annotations

import re

import httpx
import pytest

from mcp_gateway.security_headers import DATA_POLICY, PAGE_POLICY
from tests.mcp_http import ACCEPT, write_corpus
from tests.support import TLS
from tests.test_cli import cli
from tests.test_route_gate import INITIALIZE, PASSWORD, Site, finish, sign_in, start
from tests.test_up import self_signed
from tests.up_process import Up

pytestmark = pytest.mark.slow

FAILURES = 3  # DIR2MCP_LOGIN_FAILURES for the throttled server


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """`up` on loopback over http, with a staff user signed in."""
    up, served = start(tmp_path_factory, "headers", admin=True)
    served.session = sign_in(served)
    yield served
    finish(up)


# route kind -> (method, path, credential, JSON body); credential: bearer, session or none
ROUTES = {
    "admin login page": ("GET", "/admin/login/", "none", None),
    "admin index": ("GET", "/admin/", "session", None),
    "status page": ("GET", "/ops/status/", "session", None),
    "API docs (Swagger UI)": ("GET", "/api/v1/docs", "none", None),
    "OpenAPI document": ("GET", "/api/v1/openapi.json", "none", None),
    "REST search": ("GET", "/api/v1/search?query=loader", "bearer", None),
    "REST refusal (no token)": ("GET", "/api/v1/search?query=loader", "none", None),
    "REST unknown route": ("GET", "/api/v1/nope", "bearer", None),
    "MCP POST": ("POST", "/mcp", "bearer", INITIALIZE),
    "MCP refusal (no token)": ("POST", "/mcp", "none", INITIALIZE),
    "healthz": ("GET", "/healthz", "none", None),
    "healthz/live": ("GET", "/healthz/live", "none", None),
    "metrics": ("GET", "/metrics", "none", None),
    "unknown site page": ("GET", "/no-such-page", "none", None),
    "connection refusal (414)": ("GET", "/api/v1/search?query=" + "a" * 20_480, "bearer", None),
}
#: the routes whose answers carry (or could carry) corpus content: never stored by a cache
NO_STORE = {kind for kind, (_m, path, _c, _b) in ROUTES.items() if path.startswith(("/api/v1/", "/mcp"))}


def fetch(site: Site, method: str, path: str, credential: str, body) -> httpx.Response:
    headers = {"Accept": ACCEPT}
    if credential == "bearer":
        headers["Authorization"] = f"Bearer {site.token}"
    if credential == "session":
        headers["Cookie"] = f"sessionid={site.session}"
    with httpx.Client(timeout=60, trust_env=False, verify=TLS) as http:
        return http.request(method, site.base + path, headers=headers, json=body)


@pytest.mark.parametrize("kind", list(ROUTES), ids=list(ROUTES))
def test_every_route_kind_sends_the_security_headers(site, kind):
    response = fetch(site, *ROUTES[kind])
    assert response.status_code < 500, response.text[:300]
    assert (response.status_code == 414) is (kind == "connection refusal (414)")
    headers = response.headers
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Referrer-Policy"] == "same-origin"
    is_page = headers.get("Content-Type", "").startswith("text/html")
    assert headers["Content-Security-Policy"] == (PAGE_POLICY if is_page else DATA_POLICY)
    assert "Strict-Transport-Security" not in headers  # plain http: HSTS would mean nothing
    if kind in NO_STORE:
        assert headers["Cache-Control"] == "no-store"
    else:
        assert "no-store" in headers.get("Cache-Control", "") or kind == "unknown site page"


def test_pages_are_html_under_the_page_policy(site):
    """The table above holds: the pages really are HTML, the rest is not."""
    pages = {
        kind for kind in ROUTES if fetch(site, *ROUTES[kind]).headers["Content-Type"].startswith("text/html")
    }
    assert {"admin login page", "admin index", "status page", "API docs (Swagger UI)"} <= pages
    assert not pages & {"OpenAPI document", "REST search", "MCP POST", "healthz"}


def test_status_page_has_no_inline_script_or_style(site):
    page = fetch(site, *ROUTES["status page"]).text
    assert re.search(r"<script>|<style>|<script(?![^>]*\bsrc=)[^>]*>", page) is None, page[:2000]
    assert "/static/ops/status.js" in page and "/static/ops/status.css" in page


# -- TLS -----------------------------------------------------------------------


def test_tls_up_sends_secure_cookies_and_hsts(tmp_path):
    root = tmp_path / "corpus"
    write_corpus(root)
    made = cli(
        "createadmin", "--dir", str(root), "--username", "ops", env={"DIR2MCP_ADMIN_PASSWORD": PASSWORD}
    )
    assert made.returncode == 0, made.stderr
    cert, key = self_signed(tmp_path)
    up = Up("--dir", str(root), "--json", "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        base = up.url().removesuffix("/mcp")
        assert base.startswith("https://")
        with httpx.Client(timeout=60, trust_env=False, verify=False) as http:
            page = http.get(f"{base}/admin/login/")
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
            signed = http.post(
                f"{base}/admin/login/",
                data={
                    "username": "ops",
                    "password": PASSWORD,
                    "csrfmiddlewaretoken": token,
                    "next": "/admin/",
                },
                headers={"Referer": f"{base}/admin/login/"},
            )
            mcp = http.post(
                f"{base}/mcp",
                json=INITIALIZE,
                headers={"Accept": ACCEPT, "Authorization": f"Bearer {_token(root)}"},
            )
        assert signed.status_code == 302, signed.text[:500]
        cookies = {
            cookie.split("=", 1)[0]: cookie.lower()
            for response in (page, signed)
            for cookie in response.headers.get_list("Set-Cookie")
        }
        assert {"csrftoken", "sessionid"} <= set(cookies), cookies
        assert all("; secure" in cookie for cookie in cookies.values()), cookies
        for response in (page, signed, mcp):
            assert response.headers["Strict-Transport-Security"] == "max-age=31536000"
    finally:
        finish(up)


def _token(root) -> str:
    return (root / ".dir2mcp" / "secret.token").read_text().strip()


# -- sign-in throttling ----------------------------------------------------------------


@pytest.fixture(scope="module")
def throttled(tmp_path_factory):
    """`up` with two staff users and FAILURES tries per client and per username."""
    root = tmp_path_factory.mktemp("throttled")
    write_corpus(root)
    for name in ("ops", "ops2"):
        made = cli(
            "createadmin", "--dir", str(root), "--username", name, env={"DIR2MCP_ADMIN_PASSWORD": PASSWORD}
        )
        assert made.returncode == 0, made.stderr
    up = Up("--dir", str(root), "--json", env={"DIR2MCP_LOGIN_FAILURES": str(FAILURES)})
    base = up.url().removesuffix("/mcp")
    yield base
    finish(up)


THROTTLED = "Too many failed sign-ins"
WRONG = "Please enter the correct username and password"


def attempt(base: str, client: str, username: str, password: str) -> httpx.Response:
    """One sign-in from loopback address ``client``, in a fresh session."""
    transport = httpx.HTTPTransport(local_address=client)
    with httpx.Client(timeout=60, trust_env=False, transport=transport, verify=TLS) as http:
        page = http.get(f"{base}/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        return http.post(
            f"{base}/admin/login/",
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": token,
                "next": "/admin/",
            },
        )


def signed_in(response: httpx.Response) -> bool:
    return response.status_code == 302 and "sessionid" in response.cookies


def test_wrong_passwords_lock_the_client_and_the_username(throttled):
    wrong = [attempt(throttled, "127.0.0.2", "ops", f"guess-{i}") for i in range(FAILURES)]
    assert all(r.status_code == 200 and WRONG in r.text for r in wrong)

    # The client is locked: the right password, another username, fresh sessions.
    right = attempt(throttled, "127.0.0.2", "ops", PASSWORD)
    other_user = attempt(throttled, "127.0.0.2", "ops2", PASSWORD)
    assert not signed_in(right) and THROTTLED in right.text
    assert not signed_in(other_user) and THROTTLED in other_user.text

    # The username is locked from every client, the right password included ...
    elsewhere = attempt(throttled, "127.0.0.3", "ops", PASSWORD)
    assert not signed_in(elsewhere) and THROTTLED in elsewhere.text
    # ... but that client is not, and other users sign in from it.
    assert signed_in(attempt(throttled, "127.0.0.3", "ops2", PASSWORD))


def test_many_clients_share_one_username_budget(throttled):
    """Spreading guesses over addresses buys no more tries on a username."""
    answers = [attempt(throttled, f"127.0.1.{i}", "ops-target", "guess") for i in range(1, FAILURES + 3)]
    assert [WRONG in r.text for r in answers] == [True] * FAILURES + [False] * 2
    assert all(THROTTLED in r.text for r in answers[FAILURES:])
