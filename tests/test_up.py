"""`dir2mcp up` as a user runs it: a real server process, real HTTP requests."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from corpus.state import IndexLock, StateDir
from tests.test_cli import REPO, base_env, cli, make_tree

pytestmark = pytest.mark.slow

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test_up", "version": "1"},
    },
}
ACCEPT = "application/json, text/event-stream"


class Up:
    """A running `up` process whose output is collected line by line."""

    def __init__(self, *args: str, env: dict | None = None):
        full_env = base_env()
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "manage.py"), "up", *args],
            cwd=REPO,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.err: list[str] = []
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _pump(self, stream, into: list[str]) -> None:
        for line in stream:
            with self._changed:
                into.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def stdout(self) -> str:
        return "\n".join(self.lines)

    @property
    def stderr(self) -> str:
        return "\n".join(self.err)

    def events(self) -> list[dict]:
        return [json.loads(line) for line in list(self.lines) if line.startswith("{")]

    def wait_until(self, predicate, what: str, timeout: float = 90):
        """Wait for ``predicate(self)`` to be truthy as output arrives."""
        end = time.monotonic() + timeout
        with self._changed:
            while True:
                value = predicate(self)
                if value:
                    return value
                if self.proc.poll() is not None and not any(r.is_alive() for r in self._readers):
                    pytest.fail(
                        f"`up` exited ({self.proc.returncode}) before {what}:\n{self.stdout}\n{self.stderr}"
                    )
                if time.monotonic() > end:
                    pytest.fail(f"timed out waiting for {what}:\n{self.stdout}\n{self.stderr}")
                self._changed.wait(0.2)

    def event(self, name: str, where=lambda data: True, timeout: float = 90) -> dict:
        def found(up):
            return next((e["data"] for e in up.events() if e["event"] == name and where(e["data"])), None)

        return self.wait_until(found, f"a {name} event", timeout)

    def url(self) -> str:
        """The endpoint URL, from the NDJSON connection event or the human block."""

        def found(up):
            for line in list(up.lines):
                if line.startswith("{"):
                    record = json.loads(line)
                    if record["event"] == "connection":
                        return record["data"]["url"]
                elif line.strip().startswith("URL:"):
                    return line.split("URL:", 1)[1].strip()
            return None

        return self.wait_until(found, "the endpoint URL")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 90) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        finally:
            self.kill()
        for reader in self._readers:
            reader.join(10)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def close(self) -> None:
        self.kill()
        for reader in self._readers:
            reader.join(10)
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def running():
    """Start `up` processes; whatever a test leaves running is killed."""
    started: list[Up] = []

    def start(*args: str, **kw) -> Up:
        up = Up(*args, **kw)
        started.append(up)
        return up

    yield start
    for up in started:
        up.close()


def client(**kw) -> httpx.Client:
    return httpx.Client(timeout=60, trust_env=False, **kw)


def initialize(url: str, token: str | None = None, **kw) -> httpx.Response:
    headers = {"Accept": ACCEPT}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    with client(**kw) as http:
        return http.post(url, json=INITIALIZE, headers=headers)


def secret_token(root: Path) -> str:
    return (root / ".dir2mcp" / "secret.token").read_text().strip()


def final_progress(data: dict) -> bool:
    return data.get("running") is False


def latest_job(root: Path) -> dict | None:
    db = root / ".dir2mcp" / "meta.sqlite"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT * FROM index_jobs ORDER BY started_unix DESC LIMIT 1").fetchone()
    return dict(row) if row else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def many_files(root: Path, count: int = 3000) -> None:
    for i in range(count):
        folder = root / f"pkg{i % 30}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod{i}.py").write_text(f"def function_{i}():\n    return {i}\n# words for file {i}\n")


# -- the happy path -----------------------------------------------------------


def test_json_events_connection_json_and_auth(corpus_dir, running):
    make_tree(corpus_dir, files=3)
    up = running("--dir", str(corpus_dir), "--json")

    url = up.url()
    token = secret_token(corpus_dir)
    ok = initialize(url, token)
    refused = initialize(url)
    wrong = initialize(url, "not-the-token")
    done = up.event("scan_progress", final_progress)
    up.event("embed_progress")
    code = up.stop()

    assert code == 0, up.stderr
    names = [e["event"] for e in up.events()]
    assert names.index("index_loaded") < names.index("server_started") < names.index("connection")
    assert names.count("index_loaded") == 1
    started = next(e["data"] for e in up.events() if e["event"] == "server_started")
    assert started["url"] == url and started["pid"] == up.proc.pid
    host, port = started["listen"].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    assert url == f"http://127.0.0.1:{port}/mcp"
    connection = next(e["data"] for e in up.events() if e["event"] == "connection")
    assert connection == {
        "transport": "mcp_streamable_http",
        "url": url,
        "headers": {"MCP-Protocol-Version": "2025-11-25", "Authorization": "Bearer <token>"},
        "token_source": "secret.token",
    }
    assert done["scanned"] == 5 and done["indexed"] == 4
    assert ok.status_code == 200 and ok.headers.get("MCP-Session-Id")
    assert ok.json()["result"]["protocolVersion"] == "2025-11-25"
    assert refused.status_code == 401 and wrong.status_code == 401

    state = corpus_dir / ".dir2mcp"
    saved = json.loads((state / "connection.json").read_text())
    assert saved["url"] == url and saved["transport"] == "mcp_streamable_http"
    assert saved["headers"]["Authorization"] == "Bearer <token-from-secret.token>"
    assert saved["session"] == {
        "uses_mcp_session_id": True,
        "header_name": "MCP-Session-Id",
        "assigned_on_initialize": True,
    }
    assert oct((state / "secret.token").stat().st_mode & 0o777) == "0o600"
    for text in (
        up.stdout,
        up.stderr,
        (state / "connection.json").read_text(),
        (state / ".dir2mcp.yaml.snapshot").read_text(),
    ):
        assert token not in text


def test_human_output_block(corpus_dir, running):
    make_tree(corpus_dir, files=2)
    up = running("--dir", str(corpus_dir))

    url = up.url()
    response = initialize(url, secret_token(corpus_dir))
    up.wait_until(lambda u: "Progress: scanned=4" in u.stdout, "the final progress line")
    code = up.stop(signal.SIGINT)

    assert code == 0, up.stderr
    assert response.status_code == 200
    lines = up.lines
    state = corpus_dir / ".dir2mcp"
    assert lines[0].startswith(f"Index: {state}  (meta.sqlite")
    assert lines[1] == "Mode: incremental  (server-first; indexing in background)"
    block = lines[lines.index("MCP endpoint:") :]
    assert block[1] == f"  URL:    {url}"
    assert block[2] == f"  Auth:   Bearer (source=secret.token, stored in {state / 'secret.token'})"
    assert block[3:7] == [
        "  Headers:",
        "    MCP-Protocol-Version: 2025-11-25",
        "    Authorization: Bearer <token>",
        "    MCP-Session-Id: (assigned after initialize response)",
    ]
    assert lines[-1] == "Stopped."
    assert secret_token(corpus_dir) not in up.stdout + up.stderr


def test_server_answers_before_indexing_completes(corpus_dir, running):
    many_files(corpus_dir, 3000)
    up = running("--dir", str(corpus_dir), "--json")

    url = up.url()
    first = initialize(url, secret_token(corpus_dir))
    job_at_first_answer = latest_job(corpus_dir)
    done = up.event("scan_progress", final_progress, timeout=240)
    code = up.stop()

    assert first.status_code == 200
    # The server answered while the initial pass had not finished (or begun).
    assert job_at_first_answer is None or job_at_first_answer["running"] == 1
    assert job_at_first_answer is None or job_at_first_answer["scanned"] < 3000
    assert done["scanned"] == 3000 and done["indexed"] == 3000
    assert code == 0, up.stderr


def test_sigterm_mid_index_exits_0_and_leaves_a_consistent_index(corpus_dir, running):
    many_files(corpus_dir, 3000)
    up = running("--dir", str(corpus_dir), "--json")
    up.url()

    def indexing(_):
        job = latest_job(corpus_dir)
        return job if job and job["running"] and job["scanned"] > 0 else None

    up.wait_until(indexing, "the initial pass to be under way")
    code = up.stop()

    assert code == 0, up.stderr
    job = latest_job(corpus_dir)
    assert job["running"] == 0 and job["outcome"] == "interrupted" and job["finished_unix"]
    status = cli("status", "--dir", str(corpus_dir), "--json")
    report = json.loads(status.stdout)
    assert report["indexing"]["running"] is False and report["indexing"]["outcome"] == "interrupted"
    assert 0 < report["documents"] < 3000
    assert report["chunks"] == report["representations"] == report["documents"]
    db = corpus_dir / ".dir2mcp" / "meta.sqlite"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        (bare_docs,) = conn.execute(
            "SELECT count(*) FROM documents d WHERE d.deleted = 0 AND NOT EXISTS "
            "(SELECT 1 FROM representations r WHERE r.document_id = d.doc_id AND r.deleted = 0)"
        ).fetchone()
    assert bare_docs == 0

    resumed = cli("reindex", "--dir", str(corpus_dir), "--incremental", timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    after = json.loads(cli("status", "--dir", str(corpus_dir), "--json").stdout)
    assert after["documents"] == after["chunks"] == 3000
    assert after["indexing"]["outcome"] == "complete"


# -- auth sources -------------------------------------------------------------


def test_a_missing_token_file_exits_2_before_writing_state(corpus_dir, tmp_path):
    result = cli("up", "--dir", str(corpus_dir), "--auth", f"file:{tmp_path / 'nope.token'}")
    assert result.returncode == 2
    assert "CONFIG_INVALID" in result.stderr and "nope.token" in result.stderr
    assert not (corpus_dir / ".dir2mcp").exists()


def test_auth_file_reports_file_source(corpus_dir, tmp_path, running):
    make_tree(corpus_dir, files=1)
    token_file = tmp_path / "dir2mcp.token"
    token_file.write_text("file-token-0123456789abcdef\n")
    token_file.chmod(0o600)
    up = running("--dir", str(corpus_dir), "--json", "--auth", f"file:{token_file}")

    url = up.url()
    ok = initialize(url, "file-token-0123456789abcdef")
    refused = initialize(url)
    code = up.stop()

    assert code == 0, up.stderr
    connection = next(e["data"] for e in up.events() if e["event"] == "connection")
    assert connection["token_source"] == "file" and connection["token_file"] == str(token_file)
    assert ok.status_code == 200 and refused.status_code == 401
    saved = (corpus_dir / ".dir2mcp" / "connection.json").read_text()
    assert json.loads(saved)["token_file"] == str(token_file)
    assert not (corpus_dir / ".dir2mcp" / "secret.token").exists()
    assert "file-token-0123456789abcdef" not in up.stdout + up.stderr + saved


def test_env_token_reports_env_source(corpus_dir, running):
    make_tree(corpus_dir, files=1)
    up = running("--dir", str(corpus_dir), "--json", env={"DIR2MCP_AUTH_TOKEN": "env-token-abcdef0123456789"})

    url = up.url()
    ok = initialize(url, "env-token-abcdef0123456789")
    code = up.stop()

    assert code == 0, up.stderr
    connection = next(e["data"] for e in up.events() if e["event"] == "connection")
    assert connection["token_source"] == "env"
    assert "Authorization" in connection["headers"]
    assert ok.status_code == 200
    saved = (corpus_dir / ".dir2mcp" / "connection.json").read_text()
    snapshot = (corpus_dir / ".dir2mcp" / ".dir2mcp.yaml.snapshot").read_text()
    assert "env-token-abcdef0123456789" not in up.stdout + up.stderr + saved + snapshot


def test_auth_none_on_loopback_omits_the_header(corpus_dir, running):
    make_tree(corpus_dir, files=1)
    up = running("--dir", str(corpus_dir), "--auth", "none")

    url = up.url()
    ok = initialize(url)
    code = up.stop()

    assert code == 0, up.stderr
    assert ok.status_code == 200
    assert "  Auth:   none (no token required)" in up.lines
    assert not any("Authorization" in line for line in up.lines)
    saved = json.loads((corpus_dir / ".dir2mcp" / "connection.json").read_text())
    assert saved["token_source"] == "none" and "Authorization" not in saved["headers"]


# -- refusals -----------------------------------------------------------------


@pytest.mark.parametrize("where", [("--public",), ("--listen", "0.0.0.0:0")])
def test_auth_none_beyond_loopback_exits_2(corpus_dir, where):
    result = cli("up", "--dir", str(corpus_dir), *where, "--auth", "none")
    assert result.returncode == 2
    assert "CONFIG_INVALID" in result.stderr and "requires a bearer token" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (corpus_dir / ".dir2mcp").exists()


@pytest.mark.parametrize("mode", ["on", "required"])
def test_x402_modes_are_refused_until_payments_are_enforced(corpus_dir, mode):
    result = cli("up", "--dir", str(corpus_dir), "--x402", mode)
    assert result.returncode == 2
    assert "CONFIG_INVALID" in result.stderr and "not enforced" in result.stderr
    assert not (corpus_dir / ".dir2mcp").exists()


def test_token_on_the_command_line_is_refused(corpus_dir):
    result = cli("up", "--dir", str(corpus_dir), "--auth", "sekrit-token-value")
    assert result.returncode == 2
    assert "--auth must be auto, none or file:<path>" in result.stderr


def test_port_in_use_exits_4_before_indexing(corpus_dir):
    make_tree(corpus_dir, files=1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        human = cli("up", "--dir", str(corpus_dir), "--listen", f"127.0.0.1:{port}")
        scripted = cli("up", "--dir", str(corpus_dir), "--listen", f"127.0.0.1:{port}", "--json")

    assert human.returncode == 4
    assert human.stderr.startswith(
        f"ERROR: BIND_FAILED: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
    assert "Traceback" not in human.stderr and "MCP endpoint" not in human.stdout
    assert scripted.returncode == 4
    fatal = json.loads(scripted.stdout.strip().splitlines()[-1])
    assert fatal["event"] == "fatal" and fatal["level"] == "error"
    assert fatal["data"]["code"] == "BIND_FAILED"
    assert latest_job(corpus_dir) is None  # nothing was indexed
    assert not (corpus_dir / ".dir2mcp" / "connection.json").exists()


def _drop_net_bind_service() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, cap_net_bind_service = 24, 10
    if libc.prctl(pr_capbset_drop, cap_net_bind_service, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def test_privileged_port_without_permission_exits_4(corpus_dir):
    start = Path("/proc/sys/net/ipv4/ip_unprivileged_port_start")
    if not start.exists() or int(start.read_text()) <= 1:
        pytest.skip("every port is unprivileged here")
    if os.geteuid() == 0:
        try:
            _drop_net_bind_service_probe()
        except OSError:
            pytest.skip("cannot drop CAP_NET_BIND_SERVICE here")
    env = base_env()
    result = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "up", "--dir", str(corpus_dir), "--listen", "127.0.0.1:1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_drop_net_bind_service if os.geteuid() == 0 else None,
    )
    assert result.returncode == 4, result.stderr
    assert "ERROR: BIND_FAILED: cannot listen on 127.0.0.1:1: Permission denied" in result.stderr


def _drop_net_bind_service_probe() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import socket; socket.socket().bind(('127.0.0.1', 1))"],
        preexec_fn=_drop_net_bind_service,
        capture_output=True,
    )
    if probe.returncode == 0:
        raise OSError("binding port 1 still works without CAP_NET_BIND_SERVICE")


# -- TLS ------------------------------------------------------------------------


def self_signed(folder: Path, name: str = "server") -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def test_tls_serves_https(corpus_dir, tmp_path, running):
    make_tree(corpus_dir, files=1)
    cert, key = self_signed(tmp_path)
    up = running("--dir", str(corpus_dir), "--json", "--tls-cert", str(cert), "--tls-key", str(key))

    url = up.url()
    ok = initialize(url, secret_token(corpus_dir), verify=False)
    code = up.stop()

    assert url.startswith("https://127.0.0.1:")
    assert ok.status_code == 200 and ok.headers.get("MCP-Session-Id")
    assert code == 0, up.stderr


def test_bad_tls_files_exit_2(corpus_dir, tmp_path):
    cert, key = self_signed(tmp_path, "a")
    other_cert, _ = self_signed(tmp_path, "b")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")

    only_cert = cli("up", "--dir", str(corpus_dir), "--tls-cert", str(cert))
    unreadable = cli(
        "up", "--dir", str(corpus_dir), "--tls-cert", str(tmp_path / "nope.crt"), "--tls-key", str(key)
    )
    invalid = cli("up", "--dir", str(corpus_dir), "--tls-cert", str(garbage), "--tls-key", str(key))
    mismatched = cli("up", "--dir", str(corpus_dir), "--tls-cert", str(other_cert), "--tls-key", str(key))

    for result in (only_cert, unreadable, invalid, mismatched):
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("ERROR: TLS_CONFIG_INVALID:"), result.stderr
        assert "Traceback" not in result.stderr
    assert "--tls-key is missing" in only_cert.stderr
    assert not (corpus_dir / ".dir2mcp").exists()


# -- more than one server, flags ------------------------------------------------


def test_second_up_on_the_same_dir_serves_and_takes_over_indexing(corpus_dir, running):
    make_tree(corpus_dir, files=2)
    first = running("--dir", str(corpus_dir), "--json")
    first.url()
    first.event("scan_progress", final_progress)
    second = running("--dir", str(corpus_dir), "--json")

    url = second.url()
    locked = second.event("warning", lambda d: d.get("code") == "INDEX_LOCKED")
    ok = initialize(url, secret_token(corpus_dir))
    assert ok.status_code == 200
    assert not [e for e in second.events() if e["event"] == "scan_progress"]
    assert first.stop() == 0, first.stderr
    # With the first gone, the second acquires the lock and indexes.
    second.event("scan_progress", final_progress)
    code = second.stop()

    assert "another indexer" in locked["message"] and locked["code"] == "INDEX_LOCKED"
    assert code == 0, second.stderr
    assert json.loads((corpus_dir / ".dir2mcp" / "connection.json").read_text())["url"] == url


def test_a_held_index_lock_is_reported_and_taken_over_when_freed(corpus_dir, running):
    """What a running `reindex` does to `up`: the lock is held elsewhere
    (here by this test process, so the ordering is certain)."""
    make_tree(corpus_dir, files=2)
    lock = IndexLock(StateDir(corpus_dir / ".dir2mcp"))
    lock.acquire()
    try:
        up = running("--dir", str(corpus_dir), "--json")
        url = up.url()
        locked = up.event("warning", lambda d: d.get("code") == "INDEX_LOCKED")
        ok = initialize(url, secret_token(corpus_dir))
        indexed_while_locked = [e for e in up.events() if e["event"] == "scan_progress"]
    finally:
        lock.release()
    done = up.event("scan_progress", final_progress)
    code = up.stop()

    assert f"pid {os.getpid()}" in locked["message"]
    assert ok.status_code == 200
    assert indexed_while_locked == []
    assert done["scanned"] == 4
    assert code == 0, up.stderr


def test_missing_provider_key_exits_2_before_anything_is_written(corpus_dir):
    result = cli("up", "--dir", str(corpus_dir), env={"DIR2MCP_EMBED__PROVIDER": "mistral"})
    assert result.returncode == 2
    assert "ERROR: CONFIG_INVALID: Missing MISTRAL_API_KEY" in result.stderr
    assert not (corpus_dir / ".dir2mcp").exists()


def test_public_accepts_any_host_and_loopback_keeps_the_allowlist(corpus_dir, running):
    make_tree(corpus_dir, files=1)
    public = running("--dir", str(corpus_dir), "--public", "--listen", f"127.0.0.1:{free_port()}")
    public_url = public.url()
    token = secret_token(corpus_dir)
    with client() as http:
        foreign = http.post(
            public_url,
            json=INITIALIZE,
            headers={"Accept": ACCEPT, "Authorization": f"Bearer {token}", "Host": "mcp.example.com"},
        )
    assert public.stop() == 0, public.stderr

    local = running("--dir", str(corpus_dir))
    local_url = local.url()
    with client() as http:
        rebound = http.post(
            local_url,
            json=INITIALIZE,
            headers={"Accept": ACCEPT, "Authorization": f"Bearer {token}", "Host": "evil.example"},
        )
    assert local.stop() == 0, local.stderr

    assert public_url.startswith("http://127.0.0.1:")
    assert any(line.startswith("  Listen: 0.0.0.0:") for line in public.lines)
    assert foreign.status_code == 200
    assert rebound.status_code in (400, 403)


def test_flags_reach_the_config_and_the_endpoint(corpus_dir, running):
    make_tree(corpus_dir, files=1)
    up = running(
        "--dir",
        str(corpus_dir),
        "--json",
        "--mcp-path",
        "/rpc/mcp",
        "--read-only",
        "--x402",
        "off",
        "--x402-facilitator-url",
        "https://facilitator.example",
        "--x402-resource-base-url",
        "https://files.example",
        "--x402-network",
        "eip155:84532",
        "--x402-price",
        "0.05",
    )

    url = up.url()
    ok = initialize(url, secret_token(corpus_dir))
    code = up.stop()

    assert url.endswith("/rpc/mcp")
    assert ok.status_code == 200
    started = next(e["data"] for e in up.events() if e["event"] == "server_started")
    assert started["read_only"] is True and started["x402_mode"] == "off"
    assert code == 0, up.stderr
    import yaml

    snapshot = yaml.safe_load((corpus_dir / ".dir2mcp" / ".dir2mcp.yaml.snapshot").read_text())
    x402 = snapshot["x402"]
    assert x402["mode"] == "off" and x402["enabled"] is False
    assert x402["facilitator_url"] == "https://facilitator.example"
    assert x402["resource_base_url"] == "https://files.example"
    assert x402["route_policy"]["tools_call"]["network"] == "eip155:84532"
    assert x402["route_policy"]["tools_call"]["price"] == "0.05"
    assert snapshot["server"]["mcp_path"] == "/rpc/mcp"


def test_bad_listen_value_exits_2(corpus_dir):
    result = cli("up", "--dir", str(corpus_dir), "--listen", "localhost")
    assert result.returncode == 2
    assert "--listen must be host:port" in result.stderr
