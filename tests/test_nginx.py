"""A real nginx, running the documented config (deploy/nginx/dir2mcp.conf),
in front of a real daphne: MCP with an SSE progress stream, the admin login,
static files, the status stream and the metrics, all through the proxy."""

from __future__ import annotations

import http.server
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from tests.mcp_http import REPO, base_env, free_port, start_daphne, stop, write_corpus
from tests.support import TLS, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("nginx") is None, reason="nginx is not installed (apt-get install nginx)"
    ),
]

CONFIG = REPO / "deploy" / "nginx" / "dir2mcp.conf"
PASSWORD = "nginx-admin-Passw0rd!"


@dataclass
class Proxy:
    https: str
    http: str
    daphne: str
    token: str


def site_config(tmp: Path, *, upstream: int, http: int, https: int, static: Path) -> str:
    """The documented site, with only ports, names and paths of this machine changed."""
    text = CONFIG.read_text()
    for old, new in {
        "server 127.0.0.1:8000;": f"server 127.0.0.1:{upstream};",
        "listen 80;": f"listen 127.0.0.1:{http};",
        "listen [::]:80;\n": "",
        "listen 443 ssl http2;": f"listen 127.0.0.1:{https} ssl http2;",
        "listen [::]:443 ssl http2;\n": "",
        "server_name mcp.example.com;": "server_name 127.0.0.1;",
        "/etc/letsencrypt/live/mcp.example.com/fullchain.pem": str(tmp / "cert.pem"),
        "/etc/letsencrypt/live/mcp.example.com/privkey.pem": str(tmp / "key.pem"),
        "alias /srv/dir2mcp/static/;": f"alias {static}/;",
    }.items():
        assert old in text, f"the documented config no longer has {old!r}"
        text = text.replace(old, new)
    return text


def main_config(tmp: Path) -> str:
    temp = "\n".join(
        f"    {kind}_temp_path {tmp / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers must read the test's private tmp dir
    return (
        f"{user}daemon off;\nworker_processes 1;\npid {tmp / 'nginx.pid'};\n"
        f"error_log {tmp / 'error.log'} warn;\n"
        "events { worker_connections 256; }\n"
        f"http {{\n    include /etc/nginx/mime.types;\n    access_log {tmp / 'access.log'};\n{temp}\n"
        f"    include {tmp / 'dir2mcp.conf'};\n}}\n"
    )


def run_manage(*args: str, env: dict) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )


def wait_for_port(port: int, proc: subprocess.Popen) -> None:
    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited: {proc.stderr.read().decode(errors='replace')}")
        httpx.get(f"http://127.0.0.1:{port}/", timeout=1, verify=TLS)
        return True

    wait_until(answers, timeout=20, interval=0.05, message="nginx", ignoring=(httpx.TransportError,))


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nginx")
    root = tmp / "corpus"
    root.mkdir()
    write_corpus(root)
    static = tmp / "static"
    env = {"DJANGO_BEHIND_PROXY": "1", "DJANGO_SECURE_COOKIES": "1", "DIR2MCP_SERVE_STATIC": "0"}
    env["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)  # required behind a proxy
    run_manage(
        "collectstatic", "--noinput", env=base_env(DJANGO_STATIC_ROOT=str(static), DIR2MCP_ROOT=str(root))
    )
    run_manage(
        "createadmin", "--dir", str(root), "--non-interactive", env=base_env(DIR2MCP_ADMIN_PASSWORD=PASSWORD)
    )
    server = start_daphne(root, env=env)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + [
            "-keyout",
            str(tmp / "key.pem"),
            "-out",
            str(tmp / "cert.pem"),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    http, https = free_port(), free_port()
    upstream = int(server.url.rsplit(":", 1)[1].split("/")[0])
    (tmp / "dir2mcp.conf").write_text(
        site_config(tmp, upstream=upstream, http=http, https=https, static=static)
    )
    (tmp / "nginx.conf").write_text(main_config(tmp))
    nginx = ["nginx", "-p", str(tmp), "-c", str(tmp / "nginx.conf")]
    checked = subprocess.run([*nginx, "-t"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    proc = subprocess.Popen(nginx, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(http, proc)
        yield Proxy(f"https://127.0.0.1:{https}", f"http://127.0.0.1:{http}", server.base, server.token)
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
        err = stop(server)
        assert "Traceback" not in err, err[-3000:]


async def mcp_through(proxy: Proxy) -> tuple[list[float], dict, dict]:
    headers = {"Authorization": f"Bearer {proxy.token}"}
    async with httpx.AsyncClient(headers=headers, verify=False, timeout=60) as http:
        async with streamable_http_client(f"{proxy.https}/mcp", http_client=http) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                progress: list[float] = []

                async def on_progress(value, total, message):
                    progress.append(value)

                asked = await session.call_tool(
                    "dir2mcp.ask",
                    {"question": "what reads configuration files?"},
                    progress_callback=on_progress,
                )
                found = await session.call_tool("dir2mcp.search", {"query": "parse_config_file"})
                return progress, asked.structuredContent, found.structuredContent


def test_mcp_session_through_nginx_streams_progress_over_sse(proxy):
    progress, asked, found = anyio.run(mcp_through, proxy)
    assert progress and progress == sorted(set(progress))
    assert asked["citations"]
    assert found["hits"][0]["rel_path"] == "src/loader.py"


@contextmanager
def signed_in(proxy: Proxy) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy.https, verify=False, timeout=30) as client:
        yield _sign_in(client, proxy)


def _sign_in(client: httpx.Client, proxy: Proxy) -> httpx.Client:
    page = client.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = client.post(
        "/admin/login/?next=/admin/",
        data={"username": "admin", "password": PASSWORD, "csrfmiddlewaretoken": token, "next": "/admin/"},
        headers={"Referer": f"{proxy.https}/admin/login/"},  # what a browser sends over https
    )
    assert response.status_code == 302 and response.headers["location"] == "/admin/", response.text[:500]
    return client


def test_admin_login_through_nginx_over_https(proxy):
    with signed_in(proxy) as client:
        assert next(cookie for cookie in client.cookies.jar if cookie.name == "sessionid").secure
        documents = client.get("/admin/corpus/document/")
        assert documents.status_code == 200 and "src/loader.py" in documents.text


def test_django_sees_https_from_the_forwarded_proto(proxy):
    with httpx.Client(base_url=proxy.https, verify=False, timeout=30) as client:
        page = client.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        # Django checks the Referer only on requests it believes are https.
        refused = client.post(
            "/admin/login/", data={"username": "admin", "password": PASSWORD, "csrfmiddlewaretoken": token}
        )
    assert refused.status_code == 403 and "Referer" in refused.text


def test_static_files_come_from_nginx(proxy):
    via_nginx = httpx.get(f"{proxy.https}/static/admin/css/base.css", verify=False)
    assert via_nginx.status_code == 200 and via_nginx.headers["content-type"] == "text/css"
    assert httpx.get(f"{proxy.daphne}/static/admin/css/base.css", verify=TLS).status_code == 404


def test_status_stream_passes_each_event_at_once(proxy):
    with (
        signed_in(proxy) as client,
        client.stream("GET", "/ops/status/stream", timeout=httpx.Timeout(30, read=20)) as stream,
    ):
        assert stream.headers["content-type"] == "text/event-stream"
        lines = stream.iter_lines()
        # The stream stays open for minutes: a buffering proxy would time this read out.
        assert next(line for line in lines if line.startswith("event:")) == "event: status"
        assert '"documents": 3' in next(lines)


def test_plain_http_redirects_to_https(proxy):
    response = httpx.get(f"{proxy.http}/admin/", verify=TLS)
    assert response.status_code == 301 and response.headers["location"].startswith("https://127.0.0.1")


def test_health_and_metrics_through_nginx(proxy):
    health = httpx.get(f"{proxy.https}/healthz", verify=False)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    scraped = httpx.get(f"{proxy.https}/metrics", verify=False)
    assert scraped.status_code == 200
    names = {family.name for family in text_string_to_metric_families(scraped.text)}
    assert {"dir2mcp_documents", "dir2mcp_http_requests", "dir2mcp_index_jobs"} <= names


# -- prefix headers (issue #34) ----------------------------------------------------------------------

PREFIX_HEADERS = {
    "Daphne-Root-Path": "/x",
    "X-Forwarded-Prefix": "/x",
    "X-Forwarded-Path": "/x",
    "X-Script-Name": "/x",
    "Script-Name": "/x",
    "X-Original-URL": "/api/v1/stats",
    "X-Rewrite-URL": "/api/v1/stats",
}


class _Echo(http.server.BaseHTTPRequestHandler):
    """An upstream that answers with the request headers it received."""

    def do_GET(self):  # noqa: N802 - the stdlib's name
        body = json.dumps({name.lower(): value for name, value in self.headers.items()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def echo_proxy(tmp_path_factory):
    """The documented config in front of an upstream that echoes headers."""
    tmp = tmp_path_factory.mktemp("nginx-echo")
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-keyout", str(tmp / "key.pem"), "-out", str(tmp / "cert.pem"), "-days", "1", "-subj", "/CN=x"],
        check=True,
        capture_output=True,
    )
    http_port, https_port = free_port(), free_port()
    site = site_config(tmp, upstream=upstream.server_address[1], http=http_port, https=https_port, static=tmp)
    (tmp / "dir2mcp.conf").write_text(site)
    (tmp / "nginx.conf").write_text(main_config(tmp))
    proc = subprocess.Popen(
        ["nginx", "-p", str(tmp), "-c", str(tmp / "nginx.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(http_port, proc)
        yield f"https://127.0.0.1:{https_port}"
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
        upstream.shutdown()
        upstream.server_close()


@pytest.mark.parametrize("path", ["/healthz", "/mcp", "/ops/status/stream", "/x/api/v1/stats"])
def test_the_documented_proxy_passes_no_prefix_header_on(echo_proxy, path):
    sent = {**PREFIX_HEADERS, "X-Kept": "yes"}
    received = httpx.get(echo_proxy + path, headers=sent, verify=False, timeout=30)
    assert received.status_code == 200, received.text[:300]
    headers = received.json()
    assert headers["x-kept"] == "yes"  # the upstream does see what the client sends
    assert not {name.lower() for name in PREFIX_HEADERS} & set(headers), headers


def test_a_prefix_header_through_nginx_reaches_no_data(proxy):
    """The issue's request from outside: refused or not found, never served."""
    with httpx.Client(base_url=proxy.https, verify=False, timeout=30) as client:
        for path in ("/x/api/v1/files/slice?rel_path=docs/guide.md", "/x/api/v1/stats", "/x/metrics"):
            got = client.get(path, headers={"Daphne-Root-Path": "/x"})
            assert got.status_code == 404 and "loader" not in got.text, (path, got.text[:300])
        refused = client.get("/api/v1/stats", headers={"Daphne-Root-Path": "/x"})
    assert refused.status_code == 401
