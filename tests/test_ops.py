"""Health, metrics and the status page with its live stream."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import AsyncClient
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from corpus.index import lexical
from corpus.models import Setting
from corpus.providers.annotate import annotate
from corpus.providers.http import HttpOptions, ProviderClient, ProviderError
from corpus.providers.ocr import MistralOcr
from corpus.providers.stt import ElevenLabsStt, MistralStt
from corpus.providers.tts import speak
from dir2mcp_site.ops import metrics
from kernel import observe
from kernel.config import build_config
from kernel.state import INDEX_FORMAT_VERSION, StateDir
from mcp_gateway import context, current
from tests.factories import ChunkFactory, DocumentFactory
from tests.fakes.elevenlabs import FakeElevenLabs
from tests.fakes.media import make_png, make_wav
from tests.support import TLS

pytestmark = pytest.mark.django_db

SECRET = "sk-ops-test-value-0123456789"


def scrape(client) -> dict[str, list]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    families = text_string_to_metric_families(response.content.decode())
    return {family.name: family.samples for family in families}


def sample(families: dict, name: str, **labels: str) -> float | None:
    """The value of the sample called ``name`` (``..._total``, ``..._bucket``) with these labels."""
    for samples in families.values():
        for s in samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    """How much the sample ``name`` with these labels grew between two scrapes."""
    return (sample(after, name, **labels) or 0) - (sample(before, name, **labels) or 0)


# -- /healthz -----------------------------------------------------------------


def test_healthz_is_unavailable_until_the_index_is_opened(client):
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == {"ok": False, "error": "index format missing, expected 1"}

    Setting.objects.create(key="index_format_version", value=INDEX_FORMAT_VERSION)
    ready = client.get("/healthz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ok" and body["checks"]["lexical_index"]["ok"]


def healthz_steps(client) -> int:
    """SQLite virtual-machine steps one ``/healthz`` costs (a progress handler on every step)."""
    connection.ensure_connection()
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    connection.connection.set_progress_handler(step, 1)
    try:
        assert client.get("/healthz").status_code == 200
    finally:
        connection.connection.set_progress_handler(None, 1)
    return steps[0]


def test_healthz_does_the_same_work_however_large_the_index(client):
    """/healthz asks no token: it read every full-text row on each call until
    session 21 (count(*) over FTS5), work that grew with the index for anyone."""
    Setting.objects.create(key="index_format_version", value=INDEX_FORMAT_VERSION)
    fts = lexical.SQLiteFTS5()
    fts.insert_columns([(n, "head", f"body {n}") for n in range(1, 11)])
    small = healthz_steps(client)
    fts.insert_columns([(n, "head", f"body {n} " + "word " * 20) for n in range(11, 3011)])

    assert healthz_steps(client) == small


def test_liveness_answers_without_the_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert client.get("/healthz/live").json() == {"status": "ok"}


# -- /metrics -----------------------------------------------------------------


def test_metrics_parse_as_prometheus_text_with_index_figures(client, monkeypatch):
    monkeypatch.setattr(metrics, "INDEX_FIGURES_SECONDS", 0)  # counted now, not kept from an earlier scrape
    for _ in range(3):
        ChunkFactory(representation__document=DocumentFactory(doc_type="md"))
    DocumentFactory(doc_type="pdf", status="error")
    families = scrape(client)
    assert sample(families, "dir2mcp_documents", doc_type="md", status="ok") == 3
    assert sample(families, "dir2mcp_documents", doc_type="pdf", status="error") == 1
    assert sample(families, "dir2mcp_chunks", embedding_status="pending") == 3


def test_metrics_count_the_index_once_for_scrapes_in_a_row(client, monkeypatch):
    """/metrics asks no token on loopback: each request counted every document
    and chunk (GROUP BY over both tables) until session 21; now the figures of
    one count serve the scrapes of the next INDEX_FIGURES_SECONDS."""
    monkeypatch.setattr(metrics, "INDEX_FIGURES_SECONDS", 0, raising=False)
    scrape(client)  # counted now: a scrape before this test's kept nothing for it
    monkeypatch.setattr(metrics, "INDEX_FIGURES_SECONDS", 3600, raising=False)
    with CaptureQueriesContext(connection) as queries:
        for _ in range(5):
            assert "dir2mcp_documents" in client.get("/metrics").content.decode()

    assert [q["sql"] for q in queries.captured_queries] == []


def test_metrics_count_site_requests_tool_calls_and_payments(client):
    before = scrape(client)
    client.get("/healthz/live")
    observe.observe_tool("dir2mcp.search", 0.2, False)
    observe.observe_tool("dir2mcp.search", 3.0, True)
    observe.observe_payment("settled")
    observe.observe_request("POST", 200)
    after = scrape(client)

    def grew(name, **labels):
        return delta(before, after, name, **labels)

    assert grew("dir2mcp_http_requests_total", endpoint="site", method="GET", status="200") >= 2
    assert grew("dir2mcp_http_requests_total", endpoint="mcp", method="POST", status="200") == 1
    assert grew("dir2mcp_tool_calls_total", tool="dir2mcp.search", outcome="error") == 1
    assert grew("dir2mcp_tool_call_seconds_bucket", tool="dir2mcp.search", le="0.25") == 1
    assert grew("dir2mcp_tool_call_seconds_count", tool="dir2mcp.search") == 2
    assert grew("dir2mcp_payments_total", outcome="settled") == 1


def test_metrics_count_provider_calls_and_errors(client, fake_mistral):
    provider = ProviderClient(
        fake_mistral.url,
        api_key=fake_mistral.api_key,
        prefix="MISTRAL",
        label="Mistral",
        options=HttpOptions(max_attempts=2, backoff_initial=0.01, max_wait=0.05),
    )
    body = {"model": "mistral-embed", "input": ["a"]}
    before = scrape(client)
    provider.post_json("/v1/embeddings", body)
    fake_mistral.fail_next(503, count=2)
    with pytest.raises(ProviderError):
        provider.post_json("/v1/embeddings", body)
    provider.close()
    after = scrape(client)

    def grew(outcome):
        labels = {"provider": "Mistral", "operation": "/v1/embeddings", "outcome": outcome}
        return delta(before, after, "dir2mcp_provider_calls_total", **labels)

    assert (grew("ok"), grew("http_503")) == (1, 2)


@pytest.fixture
def elevenlabs():
    server = FakeElevenLabs().start()
    yield server
    server.close()


def _ocr(config, fake) -> None:
    ocr = MistralOcr(config, api_key=fake.api_key, cache_dir=None)
    try:
        ocr.image(make_png("the ferry timetable"), "image/png")
    finally:
        ocr.close()


def _transcribe(stt_class):
    def run(config, fake) -> None:
        stt = stt_class(config, api_key=fake.api_key, cache_dir=None)
        try:
            stt.transcribe("talk.wav", make_wav([(0.0, 4.0, "The ferry leaves at noon.")]))
        finally:
            stt.close()

    return run


def _speak(config, fake) -> None:
    speak(config, api_key=fake.api_key, text="The ferry leaves at noon.", voice_id="harbour1")


def _annotate(config, fake) -> None:
    schema = {"type": "object", "properties": {"vendor": {"type": "string"}}, "required": ["vendor"]}
    annotate(config, api_key=fake.api_key, text="Invoice from Okapi.", schema=schema, cache_dir=None)


#: id: (the call, the fake it goes to, the provider and operation labels it is counted under)
MEDIA_CALLS = {
    "ocr": (_ocr, "mistral", "Mistral OCR", "/v1/ocr"),
    "mistral-stt": (_transcribe(MistralStt), "mistral", "Mistral transcription", "/v1/audio/transcriptions"),
    "elevenlabs-stt": (_transcribe(ElevenLabsStt), "elevenlabs", "ElevenLabs", "/v1/speech-to-text"),
    "tts": (_speak, "elevenlabs", "ElevenLabs", "/v1/text-to-speech/{voice_id}"),
    "annotate": (_annotate, "mistral", "Mistral annotations", "/v1/chat/completions"),
}


@pytest.mark.parametrize("call, fake, provider, operation", list(MEDIA_CALLS.values()), ids=list(MEDIA_CALLS))
def test_metrics_count_media_provider_calls_by_status(
    client, fake_mistral, elevenlabs, call, fake, provider, operation
):
    """OCR, speech and annotation calls go through the same client and metric
    as embeddings: the refused attempt and the retry that succeeded both show."""
    config = build_config(
        {"mistral": {"base_url": fake_mistral.url}, "elevenlabs": {"base_url": elevenlabs.url}}, {}, {}
    )
    server = {"mistral": fake_mistral, "elevenlabs": elevenlabs}[fake]
    server.fail_next(503, retry_after="0")
    before = scrape(client)

    call(config, server)

    after = scrape(client)
    labels = {"provider": provider, "operation": operation}
    outcomes = ("http_503", "ok")
    grown = [delta(before, after, "dir2mcp_provider_calls_total", **labels, outcome=o) for o in outcomes]
    assert grown == [1, 1]


def test_a_failing_hook_never_breaks_the_caller(caplog):
    from prometheus_client import REGISTRY

    def caller() -> str:
        observe.observe_tool("dir2mcp.failing_hook", "not-a-number", False)  # the histogram refuses it
        return "the caller's result"

    with caplog.at_level(logging.ERROR, logger=observe.log.name):
        assert caller() == "the caller's result"
    [record] = [r for r in caplog.records if r.name == observe.log.name]
    assert record.levelno == logging.ERROR and record.getMessage() == "metrics hook observe_tool failed"
    assert record.exc_info is not None and record.exc_info[0] is TypeError

    observe.observe_tool("dir2mcp.failing_hook", 0.1, False)  # and the hook still counts afterwards
    labels = {"tool": "dir2mcp.failing_hook"}
    assert REGISTRY.get_sample_value("dir2mcp_tool_call_seconds_count", labels) == 1
    assert REGISTRY.get_sample_value("dir2mcp_tool_calls_total", {**labels, "outcome": "ok"}) == 1


@pytest.mark.slow
def test_metrics_count_the_payment_outcomes_of_a_real_gated_call(tmp_path, running):
    """`up --x402 required` with the fake facilitator: one unpaid call, one paid call
    through /mcp, then the same process's /metrics."""
    import httpx
    from x402.http import decode_payment_response_header

    from tests.fakes.facilitator import running_facilitator
    from tests.mcp_http import write_corpus
    from tests.x402_client import BASE_SEPOLIA, PAY_TO, payment_header

    write_corpus(tmp_path)
    with running_facilitator() as facilitator:
        up = running(
            "--dir",
            str(tmp_path),
            "--json",
            *("--x402", "required", "--x402-facilitator-url", facilitator.url),
            *("--x402-resource-base-url", "https://files.example.com", "--x402-network", BASE_SEPOLIA),
            *("--x402-price", "0.01"),
            env={"DIR2MCP_X402_PAY_TO": PAY_TO},
        )
        url = up.url()
        up.event("scan_progress", lambda data: data.get("running") is False)
        token = (tmp_path / ".dir2mcp" / "secret.token").read_text().strip()
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
        }
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        }
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
        call["params"] = {"name": "dir2mcp.search", "arguments": {"query": "loader"}}
        with httpx.Client(timeout=60, trust_env=False, verify=TLS) as http:
            opened = http.post(
                url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}, headers=headers
            )
            headers["MCP-Session-Id"] = opened.headers["MCP-Session-Id"]
            unpaid = http.post(url, json=call, headers=headers)
            signature = payment_header(unpaid.headers["PAYMENT-REQUIRED"])
            paid = http.post(url, json=call, headers={**headers, "PAYMENT-SIGNATURE": signature})
            scraped = http.get(url.removesuffix("/mcp") + "/metrics")
        assert up.stop() == 0, up.stderr

    assert unpaid.status_code == 402
    assert (
        paid.status_code == 200 and decode_payment_response_header(paid.headers["PAYMENT-RESPONSE"]).success
    )
    assert scraped.status_code == 200
    families = {f.name: f.samples for f in text_string_to_metric_families(scraped.text)}
    outcomes = {
        outcome: sample(families, "dir2mcp_payments_total", outcome=outcome)
        for outcome in ("required", "verified", "settled", "failed")
    }
    assert outcomes == {"required": 1, "verified": 1, "settled": 1, "failed": None}
    assert sample(families, "dir2mcp_tool_calls_total", tool="dir2mcp.search", outcome="ok") == 1


# -- the status page ----------------------------------------------------------


@pytest.fixture
def installed(tmp_path, monkeypatch):
    monkeypatch.setenv("MISTRAL_API_KEY", SECRET)
    root = tmp_path / "corpus"
    root.mkdir()
    state = StateDir(root / ".dir2mcp")
    state.ensure()
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    current.install(context.build(root=root, state=state, config=config, auth_spec="none"))
    yield
    current.install(None)


def test_status_page_is_for_signed_in_staff_only(client, django_user_model):
    url = reverse("ops:status")
    assert client.get(url).status_code == 302
    client.force_login(django_user_model.objects.create_user("viewer", password="x"))
    assert client.get(url).status_code == 302
    assert client.get(reverse("ops:status-stream")).status_code == 302


def test_status_page_shows_counts_errors_and_secret_sources_only(admin_client, installed):
    DocumentFactory(doc_type="md")
    DocumentFactory(
        rel_path="scan.pdf", doc_type="pdf", status="error", error="OCR_FAILED: page 3 unreadable"
    )
    page = admin_client.get(reverse("ops:status")).content.decode()
    assert "scan.pdf" in page and "OCR_FAILED: page 3 unreadable" in page
    assert "<th>pdf</th>" in page and "<th>error</th>" in page
    assert "<th>mistral_api_key</th><td>&lt;env:MISTRAL_API_KEY&gt;</td>" in page
    assert SECRET not in page


async def _first_events(count: int, user, change) -> list[dict]:
    client = AsyncClient()
    await client.aforce_login(user)
    response = await client.get(reverse("ops:status-stream"))
    assert response["Content-Type"] == "text/event-stream"
    events, stream = [], aiter(response.streaming_content)
    while len(events) < count:
        chunk = (await asyncio.wait_for(anext(stream), 30)).decode()
        if chunk.startswith("event: status"):
            events.append(json.loads(chunk.split("data: ", 1)[1]))
            if len(events) < count:
                await sync_to_async(change)()
    await stream.aclose()
    return events


@pytest.mark.django_db(transaction=True)
def test_status_stream_sends_a_new_snapshot_when_the_index_changes(installed):
    DocumentFactory(doc_type="md")
    user = get_user_model().objects.create_superuser("ops", password="x")
    first, second = asyncio.run(_first_events(2, user, lambda: DocumentFactory(doc_type="pdf")))
    assert (first["documents"], first["by_type"]) == (1, {"md": 1})
    assert (second["documents"], second["by_type"]) == (2, {"md": 1, "pdf": 1})


def test_status_page_totals_todays_payments_by_outcome_and_tool_in_the_assets_units(admin_client, installed):
    import datetime

    from payments.models import SettlementLog
    from tests.x402_client import BASE_SEPOLIA, BASE_SEPOLIA_USDC

    def paid(tool, status, amount, asset=BASE_SEPOLIA_USDC):
        return SettlementLog.objects.create(
            tool=tool, status=status, amount=amount, asset=asset, network=BASE_SEPOLIA, request_hash="0" * 64
        )

    for status in ("required", "settled", "settled", "failed"):
        paid("dir2mcp.search", status, "10000")
    paid("dir2mcp.open_file", "settled", "2500")
    paid("dir2mcp.open_file", "settled", "7", asset="0x" + "ab" * 20)  # an asset x402 does not know
    yesterday = paid("dir2mcp.search", "settled", "990000")
    SettlementLog.objects.filter(pk=yesterday.pk).update(
        created_at=yesterday.created_at - datetime.timedelta(days=1)
    )

    page = admin_client.get(reverse("ops:status")).content.decode()
    assert "6 events: failed=1 required=1 settled=4" in page
    for outcome, tool, count, amount in (
        ("settled", "dir2mcp.search", 2, "0.02 USDC"),
        ("failed", "dir2mcp.search", 1, "0.01 USDC"),
        ("required", "dir2mcp.search", 1, "0.01 USDC"),
        ("settled", "dir2mcp.open_file", 1, "0.0025 USDC"),
        ("settled", "dir2mcp.open_file", 1, f"7 atomic units of 0x{'ab' * 20}"),
    ):
        cells = f'<td>{outcome}</td><td>{tool}</td><td class="num">{count}</td><td class="num">{amount}</td>'
        assert f"<tr>{cells}</tr>" in payments_table(page)
    assert "0.99" not in page  # yesterday's settlement is not today's


def test_status_page_says_none_when_no_payment_happened_today(admin_client, installed):
    page = admin_client.get(reverse("ops:status")).content.decode()
    assert "0 events</p>" in page and '<td colspan="4">none</td>' in payments_table(page)


def payments_table(page: str) -> str:
    start = page.index('<table class="ops" id="ops-payments">')
    return page[start : page.index("</table>", start)]


def test_multiprocess_mode_merges_every_process_counters(tmp_path):
    """With PROMETHEUS_MULTIPROC_DIR, one scrape sums what each process counted."""
    import subprocess
    import sys

    from tests.mcp_http import REPO, base_env, index

    root = tmp_path / "corpus"
    root.mkdir()
    (root / "a.md").write_text("# A\n")
    shared = tmp_path / "metrics"
    shared.mkdir()
    env = base_env(DIR2MCP_ROOT=str(root), PROMETHEUS_MULTIPROC_DIR=str(shared))
    index(root, env)
    count = "from kernel import observe; observe.observe_tool('dir2mcp.find', 0.1, False)"
    for _ in range(2):
        subprocess.run([sys.executable, "-c", count], cwd=REPO, env=env, check=True, timeout=60)
    scrape_code = (
        "import os, django; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'dir2mcp_site.settings'); "
        "django.setup(); from dir2mcp_site.ops import metrics; print(metrics.exposition().decode())"
    )
    text = subprocess.run(
        [sys.executable, "-c", scrape_code],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    families = {family.name: family.samples for family in text_string_to_metric_families(text)}
    assert sample(families, "dir2mcp_tool_calls_total", tool="dir2mcp.find", outcome="ok") == 2
    assert sample(families, "dir2mcp_documents", doc_type="md", status="ok") == 1


def test_json_log_format_writes_one_object_per_line_to_stdout(tmp_path):
    import subprocess
    import sys

    from tests.mcp_http import REPO, base_env

    code = (
        "import logging, os, django; "
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'dir2mcp_site.settings'); "
        "django.setup(); logging.getLogger('dir2mcp.test').warning('disk %s is %d%% full', 'state', 91)"
    )
    env = base_env(DIR2MCP_ROOT=str(tmp_path), DIR2MCP_LOG_FORMAT="json")
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    entry = json.loads(done.stdout.strip().splitlines()[-1])
    assert (entry["level"], entry["logger"], entry["message"]) == (
        "WARNING",
        "dir2mcp.test",
        "disk state is 91% full",
    )
    assert entry["ts"].endswith("+00:00") and done.stderr == ""


# -- Django's SECRET_KEY ------------------------------------------------------

PRINT_KEY = (
    "import os, django; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'dir2mcp_site.settings'); "
    "django.setup(); from django.conf import settings; print(str(settings.SECRET_KEY))"
)


def _key_in_a_new_process(env: dict) -> str:
    import subprocess
    import sys

    from tests.mcp_http import REPO

    done = subprocess.run(
        [sys.executable, "-c", PRINT_KEY], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_secret_key_is_random_per_state_directory_and_kept_0600(tmp_path):
    from tests.mcp_http import base_env

    root = tmp_path / "corpus"
    root.mkdir()
    env = base_env(DIR2MCP_ROOT=str(root))
    before = _key_in_a_new_process(env)
    assert not (root / ".dir2mcp").exists()  # reading the settings wrote nothing

    (root / ".dir2mcp").mkdir()
    first = _key_in_a_new_process(env)
    again = _key_in_a_new_process(env)
    other = tmp_path / "other"
    (other / ".dir2mcp").mkdir(parents=True)
    elsewhere = _key_in_a_new_process(base_env(DIR2MCP_ROOT=str(other)))

    key_file = root / ".dir2mcp" / "django.secret"
    assert first == again == key_file.read_text().strip()  # survives a restart
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert len(first) >= 50 and len({first, before, elsewhere}) == 3
    assert "dir2mcp-embedded-not-for-public-deployments" not in (first, before, elsewhere)


def test_secret_key_is_kept_once_the_state_directory_appears(tmp_path):
    from dir2mcp_site.ops import secretkey

    state = tmp_path / "state"
    key = secretkey.secret_key("", behind_proxy=False, state_dir=state)
    early = str(key)
    assert not state.exists()
    state.mkdir()  # what `up` does before it serves
    kept = str(key)
    assert kept == (state / "django.secret").read_text().strip() == str(key)
    assert kept != early


@pytest.mark.parametrize(
    "key, message",
    [
        (None, "DJANGO_SECRET_KEY is required with DJANGO_BEHIND_PROXY=1"),
        ("change-me-to-a-long-random-string", "DJANGO_SECRET_KEY is a published placeholder"),
        ("short", "shorter than 32 characters"),
    ],
)
def test_behind_a_proxy_a_missing_or_published_secret_key_refuses_to_start(tmp_path, key, message):
    from tests.test_cli import cli

    env = {"DJANGO_BEHIND_PROXY": "1"}
    if key is not None:
        env["DJANGO_SECRET_KEY"] = key
    result = cli("up", "--dir", str(tmp_path), env=env)
    assert result.returncode == 2
    assert result.stderr.startswith("ERROR: CONFIG_INVALID: DJANGO_SECRET_KEY") and message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".dir2mcp").exists()


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("DIR2MCP_CELERY_TASK_PATHS", "0", "DIR2MCP_CELERY_TASK_PATHS must be at least 1, not 0"),
        ("DIR2MCP_CELERY_TASK_PATHS", "many", "DIR2MCP_CELERY_TASK_PATHS must be a whole number, not 'many'"),
        ("DIR2MCP_CELERY_VISIBILITY_TIMEOUT", "1h", "DIR2MCP_CELERY_VISIBILITY_TIMEOUT must be a whole"),
        ("DIR2MCP_SQLITE_TIMEOUT", "-1", "DIR2MCP_SQLITE_TIMEOUT must be at least 0, not -1"),
        ("DIR2MCP_SQLITE_WAL_MIB", "0", "DIR2MCP_SQLITE_WAL_MIB must be at least 1, not 0"),
    ],
)
def test_a_malformed_number_setting_is_one_config_invalid_line(tmp_path, name, value, message):
    from tests.test_cli import cli

    result = cli("status", "--dir", str(tmp_path), env={name: value})
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert line.startswith(f"ERROR: CONFIG_INVALID: {message}")


def test_daphne_itself_refuses_a_missing_secret_key_behind_a_proxy_in_one_line(tmp_path):
    """Bare ``daphne dir2mcp_site.asgi:application`` (a systemd unit, docs/deploy.md)
    goes through the same CONFIG_INVALID line as the dir2mcp command."""
    import subprocess
    import sys

    from tests.mcp_http import REPO, base_env, free_port

    env = base_env(DIR2MCP_ROOT=str(tmp_path), DJANGO_BEHIND_PROXY="1")
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(free_port())]
    done = subprocess.run(
        [*command, "dir2mcp_site.asgi:application"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1
    assert errors[0].startswith(
        "ERROR: CONFIG_INVALID: DJANGO_SECRET_KEY is required with DJANGO_BEHIND_PROXY=1"
    )
    assert not (tmp_path / ".dir2mcp").exists()


@pytest.mark.parametrize(
    "key",
    ["change-me-to-a-long-random-string", "dir2mcp-embedded-not-for-public-deployments"],
    ids=["env-example", "former-default"],
)
def test_a_published_secret_key_is_refused_without_a_proxy_too(tmp_path, key):
    from tests.test_cli import cli

    result = cli("up", "--dir", str(tmp_path), env={"DJANGO_BEHIND_PROXY": "0", "DJANGO_SECRET_KEY": key})
    assert result.returncode == 2
    first_line = result.stderr.splitlines()[0]
    assert first_line.startswith("ERROR: CONFIG_INVALID: DJANGO_SECRET_KEY is a published placeholder")
    assert key not in result.stderr  # the message names the variable, not its value
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".dir2mcp").exists()


def test_behind_a_proxy_a_set_secret_key_is_used_as_is(tmp_path):
    from tests.mcp_http import base_env

    key = "k" * 10 + "-a-long-enough-operator-chosen-value"
    env = base_env(DIR2MCP_ROOT=str(tmp_path), DJANGO_BEHIND_PROXY="1", DJANGO_SECRET_KEY=key)
    assert _key_in_a_new_process(env) == key
