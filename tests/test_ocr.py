"""OCR of scanned PDFs and images through the fake Mistral ``/v1/ocr``."""

from __future__ import annotations

import base64
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from corpus.ingest.prepare import RETRYABLE_NOTE
from corpus.models import Chunk, Document, Representation
from corpus.providers.http import HttpOptions, ProviderError
from corpus.providers.media_http import MediaClient
from corpus.retrieval import Searcher
from corpus.status import summarize
from kernel import errors
from kernel.config import build_config
from tests.fakes.media import make_mixed_pdf, make_png, make_scanned_pdf, make_text_pdf
from tests.support import TLS, wait_until
from tests.up_process import logged_event

pytestmark = pytest.mark.django_db
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def keyed(monkeypatch, fake_mistral):
    monkeypatch.setenv("MISTRAL_API_KEY", fake_mistral.api_key)
    return fake_mistral


def config_for(fake, **sections):
    return build_config(
        {"mistral": {"base_url": fake.url}, "embed": {"provider": "none"}, **sections}, {}, {}
    )


def page_spans(rel_path: str) -> list[tuple[int, str]]:
    chunks = Chunk.objects.filter(representation__document__rel_path=rel_path, deleted=False)
    return [(c.spans.get().start, c.text) for c in chunks.prefetch_related("spans").order_by("ordinal")]


def test_scanned_pdf_becomes_page_aware_ocr_markdown(corpus_dir, state, keyed, index) -> None:
    (corpus_dir / "scan.pdf").write_bytes(make_scanned_pdf(["first page intro", "the pangolin ledger"]))
    config = config_for(keyed)

    index(config=config)

    rep = Representation.objects.get(document__rel_path="scan.pdf", deleted=False)
    assert rep.rep_type == "ocr_markdown"
    assert rep.meta_json["provider"] == "mistral"
    assert rep.meta_json["model"] == "mistral-ocr-2512"
    assert [page for page, _ in page_spans("scan.pdf")] == [1, 2]
    assert "pangolin ledger" in page_spans("scan.pdf")[1][1]
    hit = Searcher(state, config, None).search("pangolin", k=3).hits[0]
    assert (hit.rel_path, hit.span.kind, hit.span.start) == ("scan.pdf", "page", 2)
    sent = keyed.requests_to("/v1/ocr")[0].body
    assert sent["model"] == "mistral-ocr-latest"
    assert sent["document"]["document_url"].startswith("data:application/pdf;base64,")


def test_auto_mode_ocrs_only_pages_without_a_text_layer(corpus_dir, state, keyed, index) -> None:
    data = make_mixed_pdf([("typed narwhal page", False), ("scanned okapi page", True)])
    (corpus_dir / "mixed.pdf").write_bytes(data)

    index(config=config_for(keyed, ingest={"pdf": {"mode": "auto"}}))

    assert keyed.ocr_pages_served == 1
    spans = page_spans("mixed.pdf")
    assert spans[0][0] == 1 and "typed narwhal page" in spans[0][1]
    assert spans[1][0] == 2 and "scanned okapi page" in spans[1][1]
    rep = Representation.objects.get(document__rel_path="mixed.pdf", deleted=False)
    assert rep.meta_json["ocr_pages"] == [2]


def test_auto_mode_keeps_a_full_text_layer_without_calling_ocr(corpus_dir, state, keyed, index) -> None:
    (corpus_dir / "typed.pdf").write_bytes(make_text_pdf(["all typed here", "and here too"]))

    index(config=config_for(keyed, ingest={"pdf": {"mode": "auto"}}))

    assert keyed.requests_to("/v1/ocr") == []
    assert Representation.objects.get(document__rel_path="typed.pdf").rep_type == "raw_text"


def test_png_is_ocred_into_one_page(corpus_dir, state, keyed, index) -> None:
    (corpus_dir / "shot.png").write_bytes(make_png("whiteboard says capybara"))

    index(config=config_for(keyed))

    assert page_spans("shot.png") == [(1, "# Page 1\n\nwhiteboard says capybara")]
    assert keyed.requests_to("/v1/ocr")[0].body["document"]["image_url"].startswith("data:image/png;base64,")


def test_the_cache_prevents_a_second_ocr_call_across_reindexes(corpus_dir, state, keyed, index) -> None:
    (corpus_dir / "scan.pdf").write_bytes(make_scanned_pdf(["cached words"]))
    config = config_for(keyed)
    index(config=config)
    assert len(keyed.requests_to("/v1/ocr")) == 1

    index(config=config, mode="full")

    assert len(keyed.requests_to("/v1/ocr")) == 1
    assert list((state.cache / "ocr").glob("*-mistral-ocr-latest.json"))
    assert "cached words" in page_spans("scan.pdf")[0][1]


def test_pdfs_over_the_page_limit_are_split(corpus_dir, state, keyed, index) -> None:
    keyed.ocr_max_pages = 2
    texts = [f"page number {i} marmot" for i in range(1, 6)]
    (corpus_dir / "long.pdf").write_bytes(make_scanned_pdf(texts))

    index(config=config_for(keyed, ocr={"max_pages_per_call": 2}))

    assert len(keyed.requests_to("/v1/ocr")) == 3
    spans = page_spans("long.pdf")
    assert [page for page, _ in spans] == [1, 2, 3, 4, 5]
    assert all(f"page number {page} marmot" in text for page, text in spans)


def test_without_a_key_scans_and_images_need_one_and_text_pdfs_still_work(
    corpus_dir, state, monkeypatch, fake_mistral, index
) -> None:
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    (corpus_dir / "scan.pdf").write_bytes(make_scanned_pdf(["hidden"]))
    (corpus_dir / "shot.png").write_bytes(make_png("hidden too"))
    (corpus_dir / "typed.pdf").write_bytes(make_text_pdf(["visible text layer"]))

    index(config=config_for(fake_mistral))

    for name in ("scan.pdf", "shot.png"):
        doc = Document.objects.get(rel_path=name)
        assert (doc.status, doc.error) == ("skipped", "needs MISTRAL_API_KEY")
    assert Document.objects.get(rel_path="typed.pdf").status == "ok"
    assert fake_mistral.requests_to("/v1/ocr") == []
    assert summarize().needs_provider == {"needs MISTRAL_API_KEY": 2}


def test_an_outage_marks_the_file_retryable_and_keeps_what_was_indexed(
    corpus_dir, state, keyed, index
) -> None:
    path = corpus_dir / "scan.pdf"
    path.write_bytes(make_scanned_pdf(["version one quetzal"]))
    config = config_for(keyed)
    index(config=config)
    path.write_bytes(make_scanned_pdf(["version two quetzal"]))
    keyed.fail_next(429, count=5, retry_after="0")

    index(config=config)

    doc = Document.objects.get(rel_path="scan.pdf")
    assert doc.status == "error"
    assert doc.error.startswith(errors.MISTRAL_RATE_LIMIT) and "retryable" in doc.error
    assert "version one quetzal" in page_spans("scan.pdf")[0][1]

    index(config=config)

    assert Document.objects.get(rel_path="scan.pdf").status == "ok"
    assert "version two quetzal" in page_spans("scan.pdf")[0][1]


def test_fake_rejects_unknown_fields_and_the_client_maps_errors(keyed) -> None:
    png = "data:image/png;base64," + base64.b64encode(make_png("x")).decode()
    body = {"model": "mistral-ocr-latest", "document": {"type": "image_url", "image_url": png}, "bogus": 1}
    headers = {"Authorization": f"Bearer {keyed.api_key}"}

    answer = httpx.post(f"{keyed.url}/v1/ocr", json=body, headers=headers, verify=TLS)

    assert answer.status_code == 422
    assert answer.json()["message"]["detail"][0]["type"] == "extra_forbidden"
    client = MediaClient(keyed.url, api_key="wrong", prefix="MISTRAL", label="Mistral", options=HttpOptions())
    with pytest.raises(ProviderError) as caught:
        client.post_json("/v1/ocr", {"model": "mistral-ocr-latest", "document": body["document"]})
    assert caught.value.code == errors.MISTRAL_AUTH
    assert "wrong" not in caught.value.message


def test_ocr_calls_in_flight_never_exceed_the_concurrency_limit(corpus_dir, state, keyed, index) -> None:
    keyed.latency = 0.2
    for i in range(6):
        (corpus_dir / f"scan_{i}.pdf").write_bytes(make_scanned_pdf([f"document {i}"]))

    counters = index(config=config_for(keyed, ocr={"concurrency": 2}))

    assert counters.indexed == 6
    assert keyed.max_in_flight == 2


def test_a_call_that_outlives_its_timeout_fails_as_retryable_for_the_file(
    corpus_dir, state, keyed, index
) -> None:
    (corpus_dir / "scan.pdf").write_bytes(make_scanned_pdf(["slow"]))
    keyed.delay_next(5.0, count=2)

    index(config=config_for(keyed, ocr={"timeout_seconds": 0.3, "max_attempts": 2}))

    doc = Document.objects.get(rel_path="scan.pdf")
    assert doc.status == "error"
    assert doc.error.startswith(errors.MISTRAL_FAILED) and "timed out" in doc.error
    assert doc.error.endswith(RETRYABLE_NOTE)
    assert len(keyed.requests_to("/v1/ocr")) == 2


def test_server_errors_that_outlast_the_retries_are_retryable_and_keep_what_was_indexed(
    corpus_dir, state, keyed, index
) -> None:
    path = corpus_dir / "scan.pdf"
    path.write_bytes(make_scanned_pdf(["first draft ibis"]))
    config = config_for(keyed, ocr={"max_attempts": 2})
    index(config=config)
    path.write_bytes(make_scanned_pdf(["second draft ibis"]))
    keyed.fail_next(502, count=2, retry_after="0")

    index(config=config)

    doc = Document.objects.get(rel_path="scan.pdf")
    assert doc.status == "error"
    assert doc.error.startswith(errors.MISTRAL_FAILED) and "HTTP 502" in doc.error
    assert doc.error.endswith(RETRYABLE_NOTE)
    assert "first draft ibis" in page_spans("scan.pdf")[0][1]


def test_refused_connections_and_5xx_are_retryable_but_bad_requests_are_not(keyed) -> None:
    options = HttpOptions(max_attempts=1)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    body = {"model": "mistral-ocr-latest", "document": {"type": "image_url", "image_url": "x"}}

    def failure(url: str) -> ProviderError:
        client = MediaClient(url, api_key=keyed.api_key, prefix="MISTRAL", label="Mistral", options=options)
        try:
            with pytest.raises(ProviderError) as caught:
                client.post_json("/v1/ocr", body)
        finally:
            client.close()
        return caught.value

    refused = failure(closed)
    assert (refused.code, refused.retryable) == (errors.MISTRAL_FAILED, True)
    keyed.fail_next(500)
    assert failure(keyed.url).retryable is True
    rejected = failure(keyed.url)  # the fake answers the bad data URL with 422
    assert (rejected.status, rejected.retryable) == (422, False)


def test_a_server_error_is_retried_and_the_file_indexed(corpus_dir, state, keyed, index) -> None:
    (corpus_dir / "scan.pdf").write_bytes(make_scanned_pdf(["after a hiccup"]))
    keyed.fail_next(503, retry_after="0")

    index(config=config_for(keyed))

    assert Document.objects.get(rel_path="scan.pdf").status == "ok"
    assert [r.authorized for r in keyed.requests_to("/v1/ocr")] == [True, True]


def test_pdfs_over_the_size_limit_are_split_into_smaller_pdfs(corpus_dir, state, keyed, index) -> None:
    data = make_scanned_pdf(["heavy page one", "heavy page two", "heavy page three"])
    one_page = len(make_scanned_pdf(["heavy page one"]))
    limit = one_page + 500
    assert len(data) > limit
    keyed.ocr_max_bytes = limit
    (corpus_dir / "heavy.pdf").write_bytes(data)

    index(config=config_for(keyed, ocr={"max_mb_per_call": limit / (1024 * 1024)}))

    sent = keyed.requests_to("/v1/ocr")
    assert len(sent) == 3
    assert all(len(r.body["document"]["document_url"]) * 3 / 4 <= limit + 100 for r in sent)
    assert [text.split("\n")[-1] for _, text in page_spans("heavy.pdf")] == [
        "heavy page one",
        "heavy page two",
        "heavy page three",
    ]


def _scan_state(root: Path) -> tuple[str, str, str] | None:
    """(status, error, live chunk text) of scan.pdf, read from the watcher's own database."""
    db = root / ".dir2mcp" / "meta.sqlite"
    if not db.exists():
        return None
    query = (
        "SELECT d.status, coalesce(d.error, ''), coalesce(group_concat(c.text, ' '), '') FROM documents d "
        "LEFT JOIN representations r ON r.document_id = d.doc_id AND r.deleted = 0 "
        "LEFT JOIN chunks c ON c.representation_id = r.rep_id AND c.deleted = 0 "
        "WHERE d.rel_path = 'scan.pdf' AND d.deleted = 0 GROUP BY d.doc_id"
    )
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
            return conn.execute(query).fetchone()
    except sqlite3.OperationalError:
        return None  # not created yet


@pytest.mark.slow
def test_a_running_watcher_retries_an_outage_by_itself_and_keeps_the_old_text_meanwhile(
    corpus_dir, tmp_path, keyed
) -> None:
    path = corpus_dir / "scan.pdf"
    path.write_bytes(make_scanned_pdf(["version one heron"]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIR2MCP_", "MISTRAL_", "ELEVENLABS_"))}
    env |= {
        "MISTRAL_API_KEY": keyed.api_key,
        "DIR2MCP_MISTRAL__BASE_URL": keyed.url,
        "DIR2MCP_EMBED__PROVIDER": "none",
        "DIR2MCP_OCR__MAX_ATTEMPTS": "1",
        "DIR2MCP_RETRY_SECONDS": "0.5",
    }
    log = (tmp_path / "watch.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "watch", "--dir", str(corpus_dir), "--json"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    seen: list[tuple[str, str, str]] = []

    def running() -> None:
        if proc.poll() is not None:
            pytest.fail(f"the watcher exited: {(tmp_path / 'watch.log').read_text()[-2000:]}")

    def until(predicate, what: str, deadline: float = 60.0) -> None:
        def reached() -> bool:
            running()
            state = _scan_state(corpus_dir)
            if state is not None:
                seen.append(state)
            return state is not None and predicate(state)

        wait_until(reached, timeout=deadline, message=lambda: f"{what}; last state {seen[-1:]}")

    try:
        until(lambda s: s[0] == "ok" and "version one heron" in s[2], "the first index")
        # The OS watch starts after the first index; write once it is in place.
        # The database is not read meanwhile: reads touch the state directory,
        # and the watcher announces itself once that has been quiet a moment.
        wait_until(
            lambda: running() or logged_event(tmp_path / "watch.log", "watch_ready"),
            timeout=60,
            message=lambda: f"a watch_ready event: {(tmp_path / 'watch.log').read_text()[-2000:]}",
        )
        # The provider goes down for three calls, then recovers; the file is
        # written once and never touched again.
        keyed.fail_next(503, count=3)
        path.write_bytes(make_scanned_pdf(["version two heron"]))
        until(lambda s: s[0] == "error", "the outage to mark the file")
        until(lambda s: s[0] == "ok" and "version two heron" in s[2], "the retry after the outage")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        log.close()

    errored = [s for s in seen if s[0] == "error"]
    assert errored and all(s[1].startswith(errors.MISTRAL_FAILED) for s in errored)
    assert all(s[1].endswith(RETRYABLE_NOTE) for s in errored)
    # Never lost meanwhile: every observation still held one version's text.
    assert all("heron" in s[2] for s in seen)
    assert all("version one heron" in s[2] for s in errored)
    assert len(keyed.requests_to("/v1/ocr")) >= 5  # first index, three refusals, the recovery
