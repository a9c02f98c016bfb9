"""A real dir2mcp server for tests: daphne on a free loopback port.

Started as a subprocess over a small indexed corpus, with helpers to speak
raw MCP over HTTP. Tests that need ``up`` itself (flags, output, shutdown)
live in test_up.py; these fixtures serve the transport and tool tests.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support import TLS, wait_until, wait_until_async

REPO = Path(__file__).resolve().parents[1]
PROTOCOL = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIR2MCP_", "MISTRAL", "DJANGO_"))}
    env["DIR2MCP_EMBED__PROVIDER"] = "none"
    env.update(extra)
    return env


def write_corpus(root: Path) -> None:
    files = {
        "src/loader.py": "def parse_config_file(path):\n    '''Read a config file.'''\n    return path\n",
        "docs/guide.md": "# Guide\n\nThe loader reads configuration files from disk.\n\nIt never writes.\n",
        "notes.txt": "hnsw index notes\nsecond line\nthird line\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: ids of calls that name none, never two alike in one test process
CALL_IDS = itertools.count(1_000_000)


@dataclass
class Server:
    root: Path
    url: str
    token: str | None
    proc: subprocess.Popen

    @property
    def base(self) -> str:
        return self.url.rsplit("/", 1)[0]

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        headers.update(extra)
        return headers

    def post(self, body, *, session: str | None = None, **headers: str) -> httpx.Response:
        extra = {"MCP-Protocol-Version": PROTOCOL}
        if session:
            extra["MCP-Session-Id"] = session
        extra.update(headers)
        content = body if isinstance(body, bytes) else None
        return httpx.post(
            self.url,
            headers=self.headers(**extra),
            content=content,
            json=None if content else body,
            timeout=30,
            verify=TLS,
        )

    def initialize(self) -> str:
        response = httpx.post(
            self.url,
            headers=self.headers(),
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
            timeout=30,
            verify=TLS,
        )
        assert response.status_code == 200, response.text
        session = response.headers["MCP-Session-Id"]
        note = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session=session)
        assert note.status_code == 202
        return session

    def call(self, session: str, name: str, arguments: dict, msg_id: int | None = None) -> dict:
        body = {
            "jsonrpc": "2.0",
            # a fresh id unless one is asked for: calls made at once in one
            # session may not share an id in flight (refused -32600)
            "id": next(CALL_IDS) if msg_id is None else msg_id,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        response = self.post(body, session=session)
        assert response.status_code == 200, response.text
        return response.json()["result"]


def index(root: Path, env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "reindex", "--dir", str(root), "--quiet"],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )


def start_daphne(root: Path, *, auth: str = "auto", env: dict[str, str] | None = None) -> Server:
    """Index ``root``, then serve it under daphne; ``stop`` it when done."""
    full_env = base_env(DIR2MCP_ROOT=str(root), DIR2MCP_AUTH=auth, **(env or {}))
    index(root, full_env)
    return serve_daphne(root, full_env, auth=auth)


def serve_daphne(root: Path, full_env: dict[str, str], *, auth: str = "auto") -> Server:
    """One more daphne process on ``root``'s index (already built), on a free port."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "dir2mcp_site.asgi:application"],
        cwd=REPO,
        env=full_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    token_file = root / ".dir2mcp" / "secret.token"
    token = token_file.read_text().strip() if auth == "auto" else None
    wait_until_serving(url, proc)
    return Server(root, url, token, proc)


def wait_until_serving(url: str, proc: subprocess.Popen, timeout: float = 30) -> None:
    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode(errors='replace')[-2000:]}")
        httpx.get(url, timeout=1, verify=TLS)
        return True

    wait_until(
        answers,
        timeout=timeout,
        interval=0.05,
        message=f"a server at {url}",
        ignoring=(httpx.TransportError,),
    )


@contextlib.contextmanager
def daphne_serving(root: Path, **kwargs):
    """:func:`start_daphne` on ``root`` for a ``with`` block; stopped after,
    with no traceback in its stderr."""
    server = start_daphne(root, **kwargs)
    try:
        yield server
    finally:
        err = stop(server)
    assert "Traceback" not in err, err[-3000:]


def stop(server: Server) -> str:
    """Stop the server; its stderr, to check for tracebacks."""
    server.proc.terminate()
    try:
        _, err = server.proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        _, err = server.proc.communicate()
    return err.decode(errors="replace")


async def wait_for_index(session) -> dict:
    """Poll ``dir2mcp.stats`` over an MCP client session until the first
    indexing job has finished (never a fixed sleep)."""

    async def finished() -> dict | None:
        stats = (await session.call_tool("dir2mcp.stats", {})).structuredContent
        return stats if stats["indexing"]["job_id"] and not stats["indexing"]["running"] else None

    return await wait_until_async(finished, timeout=240, message="the first indexing job to finish")
