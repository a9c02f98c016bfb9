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
import time
from pathlib import Path

import httpx
import pytest

from kernel.state import IndexLock, StateDir
from tests.support import read_only
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
    with read_only(db) as conn:
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
        # one unit each: the comment belongs to the function below it
        (folder / f"mod{i}.py").write_text(f"# words for file {i}\ndef function_{i}():\n    return {i}\n")


# -- the happy path -----------------------------------------------------------


def test_json_events_connection_json_and_auth(corpus_dir, running):
    make_tree(corpus_dir, files=3)
    up = running("--dir", str(corpus_dir), "--json")

    url = up.url()
    token = secret_token(corpus_dir)
    ok = initialize(url, token)
    refused = initialize(url)
    wrong = initialize(url, "not-the-token")
    site = url.removesuffix("/mcp")
    with client() as http:
        admin_page = http.get(f"{site}/admin/")
        css = http.get(f"{site}/static/admin/css/base.css")
        missing = http.get(f"{site}/static/admin/css/no-such-file.css")
    done = up.event("scan_progress", final_progress)
    up.event("embed_progress")
    code = up.stop()

    assert code == 0, up.stderr
    names = [e["event"] for e in up.events()]
    assert names.index("index_loaded") < names.index("server_started") < names.index("connection")
    assert names.count("index_loaded") == 1
    started = next(e["data"] for e in up.events() if e["event"] == "server_started")
    assert started["url"] == url and started["pid"] == up.proc.pid
    assert started["admin_url"] == f"{site}/admin/"
    # The admin is served by this process, its CSS too (no nginx, no collectstatic).
    assert admin_page.status_code == 302 and "/admin/login/" in admin_page.headers["location"]
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert "body" in css.text
    assert missing.status_code == 404
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
    assert saved["protocol_versions"] == {"stateless": ["2026-07-28"], "session": ["2025-11-25"]}
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
    assert block[7] == "  2026-07-28 clients: no initialize and no MCP-Session-Id (stateless)"
    site = url.removesuffix("/mcp")
    assert f"  Admin:  {site}/admin/  (first user: dir2mcp createadmin --dir {corpus_dir})" in block
    assert f"  Status: {site}/ops/status/" in block
    assert lines[-1] == "Stopped."
    assert secret_token(corpus_dir) not in up.stdout + up.stderr


def test_no_index_serves_the_index_as_it_is(corpus_dir, running):
    make_tree(corpus_dir, files=2)
    first = running("--dir", str(corpus_dir), "--json")
    first.event("scan_progress", final_progress)
    assert first.stop() == 0, first.stderr
    job = latest_job(corpus_dir)
    (corpus_dir / "added-later.md").write_text("a file the index has not seen\n")

    up = running("--dir", str(corpus_dir), "--no-index")
    response = initialize(up.url(), secret_token(corpus_dir))
    time.sleep(1.5)  # the behaviour under test is an absence: a window in which a scan would have started
    code = up.stop()

    assert code == 0, up.stderr
    assert response.status_code == 200
    assert "Mode: serving the index as it is  (--no-index: no scan, no live sync)" in up.lines
    assert latest_job(corpus_dir) == job  # no indexing job ran


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


def test_auth_none_on_loopback_omits_the_header_and_jsonschema_waits_for_a_call(corpus_dir, running):
    make_tree(corpus_dir, files=1)
    # and what the server and its indexing child import (on stderr): jsonschema
    # only validates tool calls (mcp_gateway.registry), about 0.06 CPU-s of
    # every `up` that never has one; pycparser only parses the C declarations
    # of autobahn's native WebSocket validator, and `up` refuses WebSockets
    # (dir2mcp_site/bootstrap.py), 0.03
    up = running("--dir", str(corpus_dir), "--auth", "none", env={"PYTHONPROFILEIMPORTTIME": "1"})

    url = up.url()
    ok = initialize(url)
    up.wait_until(lambda u: "Progress: scanned=3" in u.stdout, "the final progress line")
    code = up.stop()

    assert code == 0, up.stderr
    assert ok.status_code == 200
    assert "  Auth:   none (no token required)" in up.lines
    assert not any("Authorization" in line for line in up.lines)
    saved = json.loads((corpus_dir / ".dir2mcp" / "connection.json").read_text())
    assert saved["token_source"] == "none" and "Authorization" not in saved["headers"]
    loaded = {line.rsplit("|", 1)[1].strip() for line in up.err if line.startswith("import time:")}
    assert {"mcp_gateway.tools", "corpus.ingest.indexing"} <= loaded
    assert "daphne.server" in loaded
    assert sorted(name for name in loaded if name.split(".")[0] in ("jsonschema", "pycparser")) == []


# -- refusals -----------------------------------------------------------------


@pytest.mark.parametrize("where", [("--public",), ("--listen", "0.0.0.0:0")])
def test_auth_none_beyond_loopback_exits_2(corpus_dir, where):
    result = cli("up", "--dir", str(corpus_dir), *where, "--auth", "none")
    assert result.returncode == 2
    assert "CONFIG_INVALID" in result.stderr and "requires a bearer token" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (corpus_dir / ".dir2mcp").exists()


def test_x402_required_without_a_complete_policy_exits_2_before_writing(corpus_dir):
    result = cli("up", "--dir", str(corpus_dir), "--x402", "required")
    assert result.returncode == 2
    assert "CONFIG_INVALID" in result.stderr and "complete payment configuration" in result.stderr
    assert not (corpus_dir / ".dir2mcp").exists()


def test_x402_on_without_a_complete_policy_serves_free_and_says_so(corpus_dir, running):
    make_tree(corpus_dir, files=1)
    up = running("--dir", str(corpus_dir), "--json", "--x402", "on")
    warning = up.event("warning", lambda data: "payments are NOT enforced" in data.get("message", ""))
    assert "facilitator" in warning["message"]
    assert initialize(up.url(), secret_token(corpus_dir)).status_code == 200


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
    state = StateDir(corpus_dir / ".dir2mcp")
    state.ensure()  # a state directory of dir2mcp's own (kernel/state_identity.py)
    lock = IndexLock(state)
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


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"DIR2MCP_INGEST__IMAGES__MODE": "ocr_on"}, "MISTRAL_API_KEY"),
        ({"DIR2MCP_INGEST__AUDIO__MODE": "on"}, "MISTRAL_API_KEY"),
        ({"DIR2MCP_INGEST__AUDIO__MODE": "on", "DIR2MCP_STT__PROVIDER": "elevenlabs"}, "ELEVENLABS_API_KEY"),
        ({"DIR2MCP_CHAT__PROVIDER": "mistral"}, "MISTRAL_API_KEY"),
    ],
)
def test_a_mode_that_requires_a_missing_key_exits_2_with_remediation(corpus_dir, env, variable):
    result = cli("up", "--dir", str(corpus_dir), "--non-interactive", env=env)
    assert result.returncode == 2
    assert f"ERROR: CONFIG_INVALID: Missing {variable}" in result.stderr
    assert f"Set {variable} in the environment" in result.stderr
    assert not (corpus_dir / ".dir2mcp").exists()


def test_modes_that_only_use_a_provider_start_without_its_key(corpus_dir, running):
    make_tree(corpus_dir, files=1)
    up = running("--dir", str(corpus_dir), "--json", env={"DIR2MCP_INGEST__PDF__MODE": "ocr"})
    assert initialize(up.url(), secret_token(corpus_dir)).status_code == 200


def test_on_a_tty_a_missing_key_is_asked_for_hidden_and_kept_for_the_session(corpus_dir):
    import pty

    make_tree(corpus_dir, files=1)
    key = "typed-key-3b9e1f"
    env = base_env()
    env["DIR2MCP_INGEST__IMAGES__MODE"] = "ocr_on"
    pid, fd = pty.fork()
    if pid == 0:  # the child: up on a terminal
        os.chdir(REPO)
        os.execve(sys.executable, [sys.executable, "manage.py", "up", "--dir", str(corpus_dir)], env)
    seen = b""
    try:
        seen = read_until(fd, b"input hidden")
        os.write(fd, key.encode() + b"\n")
        seen += read_until(fd, b"MCP endpoint:")
    finally:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
        os.close(fd)
    assert b"MISTRAL_API_KEY (ingest.images.mode is ocr_on" in seen
    assert key.encode() not in seen  # never echoed
    state = corpus_dir / ".dir2mcp"
    assert all(key not in path.read_bytes().decode("latin-1") for path in state.rglob("*") if path.is_file())


def read_until(fd: int, marker: bytes, timeout: float = 60) -> bytes:
    import select

    data = b""
    end = time.monotonic() + timeout
    while marker not in data:
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {marker!r}; got {data[-2000:]!r}")
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                data += os.read(fd, 4096)
            except OSError:
                break
    return data


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
