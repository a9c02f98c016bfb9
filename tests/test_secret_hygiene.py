"""Secret hygiene: a full `up` session with known secrets, then a scan of
everything it left behind for any of them in plain text.

Secrets: the Mistral API key (the fake Mistral serves embeddings and chat
with it), the ElevenLabs API key (the fake ElevenLabs transcribes a recording
and speaks an answer with it), the bearer token (from the environment), and a
private key held in a corpus file that the secret patterns exclude. The
session covers `up --json`, indexing, successful tool calls, failing ones
(a provider refusing its key among them), a refused token, and a live change
under the watcher. Scanned: stdout, stderr (both NDJSON and
text), every file of the state directory (the database included, as bytes),
and every answer the clients received.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.fakes.elevenlabs import FakeElevenLabs
from tests.fakes.media import make_wav
from tests.support import TLS, stored_text
from tests.up_process import Up

pytestmark = pytest.mark.slow

TOKEN = "bearer-token-5d1e8b2a9c47f0e3"
PRIVATE_KEY = "AKIAQWERTYUIOPASDFGH"  # an AWS access key id: a default secret pattern
ACCEPT = "application/json, text/event-stream"


def rpc(
    http: httpx.Client, url: str, session: str | None, method: str, params: dict, msg_id=1
) -> httpx.Response:
    headers = {"Accept": ACCEPT, "Authorization": f"Bearer {TOKEN}", "MCP-Protocol-Version": "2025-11-25"}
    if session:
        headers["MCP-Session-Id"] = session
    return http.post(
        url, json={"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}, headers=headers
    )


def finished_passes(up: Up) -> int:
    return sum(1 for e in up.events() if e["event"] == "scan_progress" and e["data"].get("running") is False)


@pytest.fixture
def fake_elevenlabs():
    server = FakeElevenLabs().start()
    yield server
    server.close()


def test_no_secret_in_output_state_or_answers(tmp_path, fake_mistral, fake_elevenlabs):
    root = tmp_path / "root"
    (root / "src").mkdir(parents=True)
    (root / "src" / "loader.py").write_text("def load_config(path):\n    return open(path).read()\n")
    (root / "docs.md").write_text("# Docs\n\nThe loader reads configuration files.\n")
    (root / "deploy.env.txt").write_text(f"aws_access_key_id = {PRIVATE_KEY}\nregion = eu-west-1\n")
    (root / "standup.wav").write_bytes(make_wav([(0.0, 5.0, "The loader ships on Friday.")]))
    env = {
        "MISTRAL_API_KEY": fake_mistral.API_KEY,
        "ELEVENLABS_API_KEY": fake_elevenlabs.API_KEY,
        "DIR2MCP_STT__PROVIDER": "elevenlabs",
        "DIR2MCP_ELEVENLABS__BASE_URL": fake_elevenlabs.url,
        "DIR2MCP_MISTRAL__BASE_URL": fake_mistral.url,
        "DIR2MCP_EMBED__PROVIDER": "mistral",
        "DIR2MCP_CHAT__PROVIDER": "mistral",
        "DIR2MCP_AUTH_TOKEN": TOKEN,
    }
    up = Up("--dir", str(root), "--json", env=env)
    answers: list[str] = []
    try:
        url = up.url()
        up.event("scan_progress", lambda data: data.get("running") is False)
        with httpx.Client(timeout=60, trust_env=False, verify=TLS) as http:
            init = rpc(
                http,
                url,
                None,
                "initialize",
                {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            )
            session = init.headers["MCP-Session-Id"]
            calls = [
                ("dir2mcp.search", {"query": "loader configuration"}),
                ("dir2mcp.ask", {"question": "what reads configuration files?"}),
                ("dir2mcp.open_file", {"rel_path": "deploy.env.txt"}),  # excluded: refused
                ("dir2mcp.find", {"content": "aws_access_key_id"}),
                ("dir2mcp.open_file", {"rel_path": "../outside"}),  # an error
                ("dir2mcp.search", {"query": ""}),  # invalid arguments
                ("dir2mcp.stats", {}),
                ("dir2mcp.ask_audio", {"question": "when does the loader ship?"}),
                ("dir2mcp.ask_audio", {"question": "when does the loader ship?"}),  # refused: 401
            ]
            for i, (name, arguments) in enumerate(calls, start=2):
                if i == len(calls) + 1:
                    fake_elevenlabs.fail_next(401)
                response = rpc(http, url, session, "tools/call", {"name": name, "arguments": arguments}, i)
                answers.append(response.text)
            refused = http.post(
                url, json={"jsonrpc": "2.0", "id": 99, "method": "ping"}, headers={"Accept": ACCEPT}
            )
            answers.append(refused.text + json.dumps(dict(refused.headers)))
            (root / "docs.md").write_text("# Docs\n\nChanged while serving.\n")
            up.event(
                "scan_progress", lambda data: data.get("indexed", 0) >= 1 and data.get("running") is False
            )
        assert up.stop() == 0, up.stderr
    finally:
        up.close()

    # The session did what it claims: the key was used, the token accepted.
    assert any(r.path.endswith("/chat/completions") for r in fake_mistral.requests)
    assert json.loads(answers[0])["result"]["structuredContent"]["hits"]
    assert json.loads(answers[2])["result"]["isError"] is True
    assert refused.status_code == 401
    # The ElevenLabs key transcribed the recording and spoke one answer; the second was refused.
    assert [r.authorized for r in fake_elevenlabs.requests_to("/v1/speech-to-text")] == [True]
    assert len(fake_elevenlabs.tts_texts) == 1
    assert json.loads(answers[7])["result"]["content"][1]["type"] == "audio"
    refused_key = json.loads(answers[8])["result"]
    assert refused_key["isError"] is True and "ELEVENLABS_AUTH" in refused_key["content"][0]["text"]

    places = {"stdout": up.stdout, "stderr": up.stderr, "answers": "\n".join(answers)}
    for path in sorted((root / ".dir2mcp").rglob("*")):
        if path.is_file():
            places[str(path.relative_to(root))] = stored_text(path)
    assert any("meta.sqlite" in place for place in places) and "connection.json" in str(list(places))
    for secret in (fake_mistral.API_KEY, fake_elevenlabs.API_KEY, TOKEN, PRIVATE_KEY):
        leaks = [place for place, text in places.items() if secret in text]
        assert leaks == [], f"{secret[:6]}… found in {leaks}"


def test_payments_and_the_admin_leak_no_secret(tmp_path, running):
    """A paid session (payer key in a corpus file excluded by a secret
    pattern the config adds), then the admin's pages, the status page and
    /metrics as a signed-in operator: no secret anywhere."""
    import re

    import yaml
    from x402.http import decode_payment_required_header

    from kernel.config import DEFAULT_SECRET_PATTERNS
    from tests.fakes.facilitator import running_facilitator
    from tests.test_cli import cli
    from tests.x402_client import BASE_SEPOLIA, PAY_TO, TEST_KEY, payment_header

    root = tmp_path / "root"
    root.mkdir()
    (root / "docs.md").write_text("# Docs\n\nThe loader reads configuration files.\n")
    (root / "wallet.env.txt").write_text(f"payer_private_key = {TEST_KEY}\n")
    evm_key = r"(?i)private[_-]?key\s*[:=]\s*['\"]?0x[0-9a-f]{64}"
    config = {"security": {"secret_patterns": [*DEFAULT_SECRET_PATTERNS, evm_key]}}
    (root / ".dir2mcp.yaml").write_text(yaml.safe_dump(config))
    password = "an-Admin-passw0rd-9d2c"
    made = cli(
        "createadmin", "--dir", str(root), "--username", "ops", env={"DIR2MCP_ADMIN_PASSWORD": password}
    )
    assert made.returncode == 0, made.stderr

    with running_facilitator() as facilitator:
        flags = ["--x402", "required", "--x402-facilitator-url", facilitator.url]
        flags += ["--x402-resource-base-url", "https://files.example.com", "--x402-network", BASE_SEPOLIA]
        flags += ["--x402-price", "0.01"]
        env = {"DIR2MCP_X402_PAY_TO": PAY_TO, "DIR2MCP_AUTH_TOKEN": TOKEN}
        up = running("--dir", str(root), "--json", *flags, env=env)
        url = up.url()
        up.event("scan_progress", lambda data: data.get("running") is False)
        site = url.removesuffix("/mcp")
        pages: dict[str, str] = {}
        with httpx.Client(timeout=60, trust_env=False, follow_redirects=True, verify=TLS) as http:
            init = rpc(http, url, None, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
            session = init.headers["MCP-Session-Id"]
            call = {"name": "dir2mcp.search", "arguments": {"query": "loader"}}
            unpaid = rpc(http, url, session, "tools/call", call, 2)
            assert unpaid.status_code == 402
            decode_payment_required_header(unpaid.headers["PAYMENT-REQUIRED"])
            headers = {
                "Accept": ACCEPT,
                "Authorization": f"Bearer {TOKEN}",
                "MCP-Protocol-Version": "2025-11-25",
                "MCP-Session-Id": session,
                "PAYMENT-SIGNATURE": payment_header(unpaid.headers["PAYMENT-REQUIRED"]),
            }
            body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call}
            paid = http.post(url, json=body, headers=headers)
            assert paid.status_code == 200, paid.text
            pages["mcp"] = unpaid.text + paid.text + json.dumps(dict(paid.headers))

            login = http.get(f"{site}/admin/login/")
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
            signed_in = http.post(
                f"{site}/admin/login/?next=/admin/",
                data={
                    "username": "ops",
                    "password": password,
                    "csrfmiddlewaretoken": csrf,
                    "next": "/admin/",
                },
            )
            assert signed_in.status_code == 200 and "Log out" in signed_in.text
            for path in (
                "/admin/",
                "/admin/corpus/document/",
                "/admin/corpus/chunk/",
                "/admin/corpus/setting/",
                "/admin/mcp_gateway/mcpsession/",
                "/admin/payments/settlementlog/",
                "/ops/status/",
                "/metrics",
            ):
                page = http.get(site + path)
                assert page.status_code == 200, path
                pages[path] = page.text
        assert facilitator.count("/settle") == 1
        assert up.stop() == 0, up.stderr

    assert "settled" in pages["/admin/payments/settlementlog/"]
    places = {"stdout": up.stdout, "stderr": up.stderr, **pages}
    for path in sorted((root / ".dir2mcp").rglob("*")):
        if path.is_file():
            places[str(path.relative_to(root))] = stored_text(path)
    payer_key = TEST_KEY.removeprefix("0x")
    for secret in (TOKEN, payer_key, password):
        leaks = [place for place, text in places.items() if secret in text]
        assert leaks == [], f"{secret[:6]}… found in {leaks}"
