"""One gate for every route (issue #24, mcp_gateway/route_gate.py), on real
`up` processes under daphne: every route against a foreign Host, a foreign
Origin, no token, a wrong token and a good request, each cell with the
status it must get, and a refusal's body naming why. Then `up --public`,
where any Host is accepted and `/metrics` takes the bearer token.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import httpx
import pytest
from django.urls import URLResolver, get_resolver

from kernel.config import build_config
from mcp_gateway import rest, route_gate, transport
from tests.mcp_http import ACCEPT, PROTOCOL, write_corpus
from tests.support import TLS
from tests.test_cli import cli
from tests.up_process import Up

pytestmark = pytest.mark.slow

PASSWORD = "a-Gate-passw0rd-7e1f"
FOREIGN_HOST = "evil.example"
FOREIGN_ORIGIN = "http://evil.example"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "gate", "version": "1"},
    },
}


@dataclass
class Site:
    up: Up
    base: str
    token: str
    session: str = ""  # a signed-in staff member's sessionid cookie


def start(tmp_path_factory, name: str, *flags: str, admin: bool = False):
    root = tmp_path_factory.mktemp(name)
    write_corpus(root)
    if admin:
        made = cli(
            "createadmin", "--dir", str(root), "--username", "ops", env={"DIR2MCP_ADMIN_PASSWORD": PASSWORD}
        )
        assert made.returncode == 0, made.stderr
    up = Up("--dir", str(root), "--json", *flags)
    base = up.url().removesuffix("/mcp")
    up.event("scan_progress", lambda data: data.get("running") is False)  # /healthz is ready from here
    return up, Site(up, base, (root / ".dir2mcp" / "secret.token").read_text().strip())


def finish(up: Up) -> None:
    code = up.stop()
    up.close()
    assert code == 0, up.stderr[-3000:]
    assert "Traceback" not in up.stderr, up.stderr[-3000:]


def http_client() -> httpx.Client:
    return httpx.Client(timeout=60, trust_env=False, verify=TLS)


def login_form(site: Site) -> tuple[str, str]:
    """A fresh login page: its CSRF cookie and the form's token."""
    with http_client() as http:
        page = http.get(f"{site.base}/admin/login/")
        assert page.status_code == 200, page.text[:500]
        form = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        return page.cookies["csrftoken"], form


def sign_in(site: Site) -> str:
    cookie, form = login_form(site)
    with http_client() as http:
        signed = http.post(
            f"{site.base}/admin/login/",
            data={"username": "ops", "password": PASSWORD, "csrfmiddlewaretoken": form, "next": "/admin/"},
            headers={"Cookie": f"csrftoken={cookie}"},
        )
        assert signed.status_code == 302, signed.text[:500]
        return signed.cookies["sessionid"]


@pytest.fixture(scope="module")
def loopback(tmp_path_factory):
    """`up` on loopback (the default), with a staff user signed in."""
    up, site = start(tmp_path_factory, "loopback", admin=True)
    site.session = sign_in(site)
    yield site
    finish(up)


@pytest.fixture(scope="module")
def public(tmp_path_factory):
    """`up --public`: all interfaces, any Host."""
    up, site = start(tmp_path_factory, "public", "--public")
    yield site
    finish(up)


# -- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One request a client makes, and what a good one gets."""

    method: str
    path: str
    good: Callable[[httpx.Response], bool]  # what the good answer holds, beyond its status
    # What a good request sends: "bearer" (the token), "session" (signed-in staff) or "none".
    credential: str = "none"
    json: dict | None = None
    headers: dict = field(default_factory=dict)
    login: bool = False  # the admin's login form, with a fresh CSRF token
    jsonrpc: bool = False  # refusals in JSON-RPC shape, else the REST envelope


ROUTES = {
    "POST /mcp": Call(
        "POST",
        "/mcp",
        lambda r: r.headers["MCP-Session-Id"].startswith("sess_"),
        "bearer",
        json=INITIALIZE,
        headers={"Accept": ACCEPT},
        jsonrpc=True,
    ),
    "GET /api/v1/stats": Call("GET", "/api/v1/stats", lambda r: "indexing" in r.json(), "bearer"),
    "POST /api/v1/search": Call(
        "POST", "/api/v1/search", lambda r: r.json()["hits"], "bearer", json={"query": "loader"}
    ),
    "GET /api/v1/no-such-route": Call(
        "GET", "/api/v1/no-such-route", lambda r: r.json()["error"]["code"] == "NOT_FOUND", "bearer"
    ),
    "GET /api/v1/openapi.json": Call("GET", "/api/v1/openapi.json", lambda r: "paths" in r.json()),
    "GET /api/v1/docs": Call("GET", "/api/v1/docs", lambda r: "openapi.json" in r.text),
    "GET /admin/login/": Call("GET", "/admin/login/", lambda r: "csrfmiddlewaretoken" in r.text),
    "POST /admin/login/": Call(
        "POST", "/admin/login/", lambda r: r.headers["location"] == "/admin/", login=True
    ),
    "GET /admin/ (staff)": Call("GET", "/admin/", lambda r: "logout" in r.text.lower(), "session"),
    "GET /ops/status/ (staff)": Call("GET", "/ops/status/", lambda r: "dir2mcp status" in r.text, "session"),
    "GET /healthz": Call("GET", "/healthz", lambda r: r.json()["status"] == "ok"),
    "GET /healthz/live": Call("GET", "/healthz/live", lambda r: r.json() == {"status": "ok"}),
    "GET /metrics": Call("GET", "/metrics", lambda r: "dir2mcp_documents" in r.text, "bearer"),
    "GET /static/admin/css/base.css": Call(
        "GET", "/static/admin/css/base.css", lambda r: r.headers["content-type"].startswith("text/css")
    ),
    "GET /no-such-page": Call("GET", "/no-such-page", lambda r: True),
}

VARIANTS = ("foreign Host", "foreign Origin", "no token", "wrong token", "good")

# The status of every cell: route x (foreign Host, foreign Origin, no token, wrong token, good).
# The admin and /ops/ take a signed-in session, never the bearer token; health, static files
# and the API docs take nothing; /mcp and /api/v1/ take the token, and /metrics only beyond
# loopback (its good request sends the token; on loopback a missing or wrong one is ignored).
LOOPBACK = {
    "POST /mcp": (400, 403, 401, 401, 200),
    "GET /api/v1/stats": (400, 403, 401, 401, 200),
    "POST /api/v1/search": (400, 403, 401, 401, 200),
    "GET /api/v1/no-such-route": (400, 403, 401, 401, 404),
    "GET /api/v1/openapi.json": (400, 403, 200, 200, 200),
    "GET /api/v1/docs": (400, 403, 200, 200, 200),
    "GET /admin/login/": (400, 403, 200, 200, 200),
    "POST /admin/login/": (400, 403, 302, 302, 302),
    "GET /admin/ (staff)": (400, 403, 200, 200, 200),
    "GET /ops/status/ (staff)": (400, 403, 200, 200, 200),
    "GET /healthz": (400, 403, 200, 200, 200),
    "GET /healthz/live": (400, 403, 200, 200, 200),
    "GET /metrics": (400, 403, 200, 200, 200),
    "GET /static/admin/css/base.css": (400, 403, 200, 200, 200),
    "GET /no-such-page": (400, 403, 404, 404, 404),
}

# `up --public` accepts any Host; /metrics takes the bearer token there.
PUBLIC = {
    "GET /metrics": (200, 403, 401, 401, 200),
    "POST /mcp": (200, 403, 401, 401, 200),
    "GET /api/v1/stats": (200, 403, 401, 401, 200),
    "GET /api/v1/openapi.json": (200, 403, 200, 200, 200),
    "GET /admin/login/": (200, 403, 200, 200, 200),
    "GET /healthz": (200, 403, 200, 200, 200),
    "GET /healthz/live": (200, 403, 200, 200, 200),
}


def request(site: Site, route: Call, variant: str) -> httpx.Response:
    headers = dict(route.headers)
    cookies: dict[str, str] = {}
    form = None
    if route.credential == "bearer":
        headers["Authorization"] = f"Bearer {site.token}"
    if route.credential == "session":
        cookies["sessionid"] = site.session
    if route.login:
        cookies["csrftoken"], token = login_form(site)
        form = {"username": "ops", "password": PASSWORD, "csrfmiddlewaretoken": token, "next": "/admin/"}
    if variant == "foreign Host":
        headers["Host"] = FOREIGN_HOST
    elif variant == "foreign Origin":
        headers["Origin"] = FOREIGN_ORIGIN
    elif variant == "no token":
        headers.pop("Authorization", None)
    elif variant == "wrong token":
        headers["Authorization"] = "Bearer wrong-token-0123456789"
    if cookies:
        headers["Cookie"] = "; ".join(f"{name}={value}" for name, value in cookies.items())
    with http_client() as http:
        return http.request(route.method, site.base + route.path, headers=headers, json=route.json, data=form)


REFUSED = {400: "FORBIDDEN_ORIGIN", 401: "UNAUTHORIZED", 403: "FORBIDDEN_ORIGIN"}


def check_cell(response: httpx.Response, route: Call, expected: int, good: int) -> None:
    assert response.status_code == expected, response.text[:500]
    if expected == good:
        assert route.good(response), response.text[:500]
        return
    # Refused by the gate, in the surface's own JSON shape (Django's own
    # 400 or CSRF 403 would be HTML).
    assert response.headers["content-type"].startswith("application/json"), response.text[:500]
    error = response.json()["error"]
    code = error["data"]["code"] if route.jsonrpc else error["code"]
    assert code == REFUSED[expected]
    if expected == 401:
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


def cells(table: dict) -> list:
    return [
        pytest.param(name, variant, statuses[i], statuses[-1], id=f"{name} | {variant}")
        for name, statuses in table.items()
        for i, variant in enumerate(VARIANTS)
    ]


def test_the_table_covers_every_route():
    assert set(LOOPBACK) == set(ROUTES)
    assert set(PUBLIC) <= set(ROUTES)


@pytest.mark.parametrize(("name", "variant", "expected", "good"), cells(LOOPBACK))
def test_every_route_on_loopback(loopback, name, variant, expected, good):
    route = ROUTES[name]
    check_cell(request(loopback, route, variant), route, expected, good)


@pytest.mark.parametrize(("name", "variant", "expected", "good"), cells(PUBLIC))
def test_every_route_under_public(public, name, variant, expected, good):
    route = ROUTES[name]
    check_cell(request(public, route, variant), route, expected, good)


def test_a_refused_host_is_logged_on_one_line(loopback):
    """Whichever route it hits: a misconfigured proxy shows in the log. At
    most ten such lines a minute (logfilters.Throttled): the tests above
    refused many, so the request is sent again until it has its line."""

    def logged(up):
        with http_client() as http:
            refused = http.get(f"{loopback.base}/healthz/live", headers={"Host": "rebound.example"})
        assert refused.status_code == 400
        return next((line for line in up.err if "'rebound.example'" in line), None)

    line = loopback.up.wait_until(logged, "the refused Host in the log", timeout=120)
    assert "Invalid HTTP_HOST header: 'rebound.example'" in line and "Traceback" not in line


# -- Origin: allowlist, and a page's own origin ------------------------------------------------


def test_an_allowed_origin_passes_and_reads_a_refusal_on_token_routes(loopback):
    origin = "http://localhost:5173"  # loopback origins are on security.allowed_origins by default
    with http_client() as http:
        ok = http.get(f"{loopback.base}/api/v1/stats", headers={"Origin": origin, **bearer(loopback)})
        refused = http.post(
            f"{loopback.base}/mcp", json=INITIALIZE, headers={"Origin": origin, "Accept": ACCEPT}
        )
        health = http.get(f"{loopback.base}/healthz", headers={"Origin": origin})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == origin
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == origin
    assert "WWW-Authenticate" in refused.headers["access-control-expose-headers"]
    assert health.status_code == 200 and "access-control-allow-origin" not in health.headers


def test_session_routes_accept_their_own_origin_token_routes_only_the_allowlist(public):
    """Under --public the server is reached by names not on security.allowed_origins:
    the admin's login form posts with the page's own origin, and must pass."""
    port = public.base.rsplit(":", 1)[1]
    host = f"mcp.example.com:{port}"
    own = {"Host": host, "Origin": f"http://{host}"}
    other_port = {"Host": host, "Origin": "http://mcp.example.com:1"}
    with http_client() as http:
        page = http.get(f"{public.base}/admin/login/", headers=own)
        moved = http.get(f"{public.base}/admin/login/", headers=other_port)
        mcp = http.post(
            f"{public.base}/mcp", json=INITIALIZE, headers={**own, "Accept": ACCEPT, **bearer(public)}
        )
        rest = http.get(f"{public.base}/api/v1/stats", headers={**own, **bearer(public)})
    assert page.status_code == 200
    assert moved.status_code == 403 and moved.json()["error"]["code"] == "FORBIDDEN_ORIGIN"
    assert mcp.status_code == 403 and mcp.json()["error"]["data"]["code"] == "FORBIDDEN_ORIGIN"
    assert rest.status_code == 403 and rest.json()["error"]["code"] == "FORBIDDEN_ORIGIN"


def bearer(site: Site) -> dict[str, str]:
    return {"Authorization": f"Bearer {site.token}"}


# -- /metrics under --public: the token and the rate limit ----------------------------------------


def test_public_metrics_are_rate_limited_like_every_token_route(tmp_path, running):
    write_corpus(tmp_path)
    up = running(
        "--dir", str(tmp_path), "--json", "--public", env={"DIR2MCP_SERVER__RATE_LIMIT_PER_MINUTE": "6"}
    )
    base = up.url().removesuffix("/mcp")
    token = (tmp_path / ".dir2mcp" / "secret.token").read_text().strip()
    with http_client() as http:
        statuses = [
            http.get(f"{base}/metrics", headers={"Authorization": f"Bearer {token}"}).status_code
            for _ in range(6)
        ]
        limited = http.get(f"{base}/metrics", headers={"Authorization": f"Bearer {token}"})
        live = [http.get(f"{base}/healthz/live").status_code for _ in range(8)]  # takes no token: no limit
    assert up.stop() == 0, up.stderr[-3000:]
    assert statuses[:3] == [200, 200, 200] and statuses[-1] == 429
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    assert limited.json()["error"] == {
        "code": "RATE_LIMITED",
        "message": limited.json()["error"]["message"],
        "retryable": True,
    }
    assert live == [200] * 8


# -- every route Django knows, under every prefix trick (issue #34) ------------------------------------

# Headers by which a request could name a prefix or another path for itself. daphne copies
# Daphne-Root-Path into scope["root_path"], which Django strips before routing; the rest are
# read by nothing here. Each: (header, its value, the URL path sent, given the route's path P).
TRICKS = {
    "Daphne-Root-Path, prefixed path": ({"Daphne-Root-Path": "/x"}, lambda p: "/x" + p),
    "Daphne-Root-Path, plain path": ({"Daphne-Root-Path": "/x"}, lambda p: p),
    "Daphne-Root-Path, encoded": ({"Daphne-Root-Path": "%2Fx"}, lambda p: "/x" + p),
    "Daphne-Root-Path, the route itself": ({"Daphne-Root-Path": "/api/v1"}, lambda p: "/api/v1" + p),
    "X-Forwarded-Prefix": ({"X-Forwarded-Prefix": "/x"}, lambda p: "/x" + p),
    "X-Script-Name": ({"X-Script-Name": "/x"}, lambda p: "/x" + p),
    "Script-Name": ({"Script-Name": "/x"}, lambda p: "/x" + p),
    "X-Original-URL": ({"X-Original-URL": "{P}"}, lambda p: "/healthz"),
    "X-Rewrite-URL": ({"X-Rewrite-URL": "{P}"}, lambda p: "/healthz"),
    "double slash": ({}, lambda p: "/" + p),
}
# What corpus text or state looks like in an answer (write_corpus's files, the root's path).
CORPUS_MARKS = ("parse_config_file", "configuration files from disk", "hnsw index notes", ".dir2mcp")
QUERY = "?rel_path=docs/guide.md&uri=dir2mcp:///docs/guide.md&query=loader&k=5"


def _concrete(pattern: str) -> str:
    """A path a URL pattern matches: each converter or group filled with a sample."""
    pattern = re.sub(r"<(?:int:)?(\w+)>", "1", pattern)
    pattern = re.sub(r"<(?:str|path|slug|uuid):\w+>", "1", pattern)
    pattern = re.sub(r"\(\?P<path>\.\*\)", "admin/css/base.css", pattern)
    pattern = re.sub(r"\(\?P<\w+>([^)|]*)[^)]*\)", lambda m: m.group(1) or "1", pattern)
    return "/" + pattern.replace("^", "").replace("$", "").replace("\\", "")


def known_paths() -> list[str]:
    """Every route Django knows (its resolver, so a new route is walked too), and the MCP endpoint."""

    def walk(patterns, prefix=""):
        for entry in patterns:
            if isinstance(entry, URLResolver):
                yield from walk(entry.url_patterns, prefix + str(entry.pattern))
            else:
                yield prefix + str(entry.pattern)

    found = {_concrete(pattern) for pattern in walk(get_resolver().url_patterns)}
    assert "/api/v1/files/slice" in found and "/admin/login/" in found and "/metrics" in found
    return sorted(found | {"/mcp"})


def _send(http: httpx.Client, site: Site, method: str, path: str, headers: dict, token: bool):
    headers = {**headers, "Accept": ACCEPT}
    if token:
        headers.update(bearer(site))
    body = INITIALIZE if path.endswith("/mcp") else {"query": "loader", "rel_path": "docs/guide.md"}
    if method == "GET":
        return http.get(site.base + path + QUERY, headers=headers)
    return http.post(site.base + path, json=body, headers=headers)


def expected_without_token(path: str) -> set[int] | None:
    """What the gate's table says of ``path`` with no token: 401 where it takes
    the token, else None (whatever the route itself answers)."""
    route = route_gate.route_of(path)
    return {401} if route.bearer == route_gate.ALWAYS else None


_BASELINES: dict[str, dict[tuple, tuple]] = {}


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_no_header_shifts_a_route_past_the_gate(loopback, trick):
    """Every route, GET and POST, with and without the token: a request under a
    prefix header answers exactly as the same URL without the header (the header
    shifts nothing), a route that takes the token refuses without it, and no
    answer without the token carries corpus text."""
    headers, sent_path = TRICKS[trick]
    baselines = _BASELINES.setdefault(loopback.base, {})  # the same URL without a header, asked once
    with http_client() as http:
        for path in known_paths():
            url_path = sent_path(path)
            trick_headers = {name: value.replace("{P}", path) for name, value in headers.items()}
            for method in ("GET", "POST"):
                for token in (False, True):
                    got = _send(http, loopback, method, url_path, trick_headers, token)
                    key = (method, url_path, token)
                    if key not in baselines:
                        plain = _send(http, loopback, method, url_path, {}, token)
                        baselines[key] = (plain.status_code, plain.headers.get("location"))
                    where = f"{method} {url_path} token={token} under {trick_headers}: {got.text[:300]}"
                    assert (got.status_code, got.headers.get("location")) == baselines[key], where
                    if token:
                        continue
                    gate_says = expected_without_token(url_path)
                    if gate_says is not None:
                        assert got.status_code in gate_says, where
                    assert not any(mark in got.text for mark in CORPUS_MARKS), where


def test_a_prefix_header_does_not_open_the_rest_mirror(loopback):
    """The issue's own request: no token, the header, the prefixed path."""
    with http_client() as http:
        for path in ("/x/api/v1/files/slice?rel_path=docs/guide.md", "/x/api/v1/stats", "/x/metrics"):
            got = http.get(loopback.base + path, headers={"Daphne-Root-Path": "/x"})
            assert got.status_code == 404, (path, got.text[:300])
        refused = http.get(loopback.base + "/api/v1/stats", headers={"Daphne-Root-Path": "/x"})
        served = http.get(
            loopback.base + "/api/v1/stats", headers={"Daphne-Root-Path": "/x", **bearer(loopback)}
        )
    assert refused.status_code == 401
    assert served.status_code == 200 and "indexing" in served.json()


def test_under_public_a_rebinding_page_gains_nothing_from_the_header(public):
    """--public accepts any Host (a DNS-rebound page is same-origin): still 404 / 401."""
    with http_client() as http:
        shifted = http.get(
            public.base + "/x/api/v1/stats", headers={"Daphne-Root-Path": "/x", "Host": "rebound.example"}
        )
        plain = http.get(
            public.base + "/api/v1/stats", headers={"Daphne-Root-Path": "/x", "Host": "rebound.example"}
        )
    assert shifted.status_code == 404 and "indexing" not in shifted.text
    assert plain.status_code == 401


def test_a_configured_prefix_is_the_only_one_stripped(tmp_path, running):
    """DJANGO_FORCE_SCRIPT_NAME names the prefix a proxy mounts the site under:
    the gate strips it as Django does, and still takes the token under it."""
    write_corpus(tmp_path)
    up = running("--dir", str(tmp_path), "--json", env={"DJANGO_FORCE_SCRIPT_NAME": "/dir2mcp"})
    base = up.url().removesuffix("/mcp")
    token = {"Authorization": f"Bearer {(tmp_path / '.dir2mcp' / 'secret.token').read_text().strip()}"}
    with http_client() as http:
        refused = http.get(base + "/dir2mcp/api/v1/stats")
        served = http.get(base + "/dir2mcp/api/v1/stats", headers=token)
        shifted = http.get(base + "/x/api/v1/stats", headers={"Daphne-Root-Path": "/x"})
        login = http.get(base + "/dir2mcp/admin/login/")
    assert up.stop() == 0, up.stderr[-3000:]
    assert refused.status_code == 401
    assert served.status_code == 200 and "indexing" in served.json()
    assert shifted.status_code == 404
    assert login.status_code == 200 and 'action="/dir2mcp/admin/login/' in login.text


@pytest.mark.parametrize("behind_proxy", [True, False], ids=["behind-proxy", "direct"])
def test_the_rate_limit_is_per_client_behind_the_proxy(tmp_path, running, behind_proxy):
    """Behind the documented proxy every request comes from 127.0.0.1: the
    budget is kept per X-Real-IP, which nginx sets from the connection. Not
    behind one, the header is the client's own word and is ignored."""
    write_corpus(tmp_path)
    env = {"DIR2MCP_SERVER__RATE_LIMIT_PER_MINUTE": "5"}  # a burst of 5 (the least), then 429
    if behind_proxy:
        env |= {"DJANGO_BEHIND_PROXY": "1", "DJANGO_SECRET_KEY": "k" * 40 + "-route-gate-test"}
    up = running("--dir", str(tmp_path), "--json", env=env)
    base = up.url().removesuffix("/mcp")
    token = {"Authorization": f"Bearer {(tmp_path / '.dir2mcp' / 'secret.token').read_text().strip()}"}
    with http_client() as http:
        first = [
            http.get(f"{base}/api/v1/stats", headers={**token, "X-Real-IP": "192.0.2.1"}).status_code
            for _ in range(6)
        ]
        other = http.get(f"{base}/api/v1/stats", headers={**token, "X-Real-IP": "192.0.2.2"}).status_code
    assert up.stop() == 0, up.stderr[-3000:]
    assert first == [200] * 5 + [429]
    assert other == (200 if behind_proxy else 429)


# -- without a server -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "public", "beyond"),
    [
        ({}, False, False),
        ({"listen": "127.0.0.1:8765"}, False, False),
        ({"listen": "localhost:0"}, False, False),
        ({"listen": "[::1]:8080"}, False, False),
        ({"public": True}, False, True),
        ({}, True, True),
        ({"listen": "0.0.0.0:8000"}, False, True),
        ({"listen": "[::]:8000"}, False, True),
        ({"listen": "192.168.1.5:80"}, False, True),
    ],
)
def test_metrics_take_the_token_beyond_loopback(server, public, beyond):
    ctx = SimpleNamespace(public=public, config=build_config({"server": server}, {}, {}))
    assert route_gate.beyond_loopback(ctx) is beyond


@pytest.mark.parametrize(
    ("path", "surface", "bearer"),
    [
        ("/mcp", route_gate.MCP, route_gate.ALWAYS),
        ("/api/v1/stats", route_gate.REST, route_gate.ALWAYS),
        ("/api/v1/openapi.json", route_gate.REST, route_gate.NEVER),
        ("/api/v1/docs", route_gate.REST, route_gate.NEVER),
        ("/api/v1/docs/x", route_gate.REST, route_gate.ALWAYS),
        ("/metrics", route_gate.SITE, route_gate.BEYOND_LOOPBACK),
        ("/admin/", route_gate.SITE, route_gate.NEVER),
        ("/healthz", route_gate.SITE, route_gate.NEVER),
        ("/mcp/", route_gate.SITE, route_gate.NEVER),
    ],
)
def test_routes_are_classified(path, surface, bearer):
    assert route_gate.route_of(path) == route_gate.Route(surface, bearer)


@pytest.mark.parametrize("route", [route_gate.SITE_ROUTE, route_gate.METRICS_ROUTE, route_gate.MCP_ROUTE])
def test_the_rest_mirror_takes_only_the_gates_rest_decision(rf, route):
    """A request the gate passed as another surface is refused by the mirror's own check."""
    request = rf.get("/api/v1/stats", HTTP_AUTHORIZATION="Bearer anything")
    request.scope = {route_gate.PASSED: route}
    with pytest.raises(transport.HttpError) as refused:
        rest.BearerAuth()(request)
    assert (refused.value.status, refused.value.code) == (503, "CONFIG_INVALID")


def test_the_rest_mirror_refuses_a_request_that_did_not_pass_the_gate(client):
    """Served without the gate (WSGI, `runserver`), the mirror answers 503, never unchecked data."""
    response = client.get("/api/v1/stats", HTTP_AUTHORIZATION="Bearer anything")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "CONFIG_INVALID"
