"""On-demand transcripts and annotations are screened as the indexer screens
what it stores (issue #32, review): a recording whose transcript holds a
credential (every one-line shape of the positive corpus, spoken into a WAV
the fake STT reads back) is refused ``FORBIDDEN`` in exclude mode and comes
back redacted in redact mode, through ``dir2mcp.transcribe``,
``transcribe_and_ask``, ``annotate`` and ``ask_audio`` on a real server (daphne) with the
fake Mistral; no answer, and no file of the state directory (the
transcript cache included), holds a piece of any credential.

The indexer's audio pass is off on these servers, so whatever the state
directory holds of a recording was put there by the on-demand path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corpus.ingest import ondemand
from corpus.models import Document, Representation
from corpus.security import ExclusionEngine
from kernel import errors
from kernel.config import build_config
from tests.fakes.elevenlabs import FakeElevenLabs
from tests.fakes.media import make_scanned_pdf, make_wav
from tests.fakes.mistral import FakeMistral
from tests.test_redact import leaks, windows
from tests.test_secret_routes import call, serving, state_traces
from tests.test_secret_rules import CONTENT_SECRETS

INTRO = "Welcome to the quagga briefing."
STT_PATH = "/v1/audio/transcriptions"
# one recording per credential shape that fits on one spoken line
SPOKEN = {
    name: (text.strip(), secret)
    for name, (_, text, secret) in sorted(CONTENT_SECRETS.items())
    if "\n" not in text.strip()
}
TOKEN = CONTENT_SECRETS["github-ghp"][2]
# a "Key: value" line, which the fake's structured extraction fills a field from
MEMO = [(0.0, 10.0, INTRO), (10.0, 20.0, f"Token: {TOKEN}"), (20.0, 30.0, "Vendor: Okapi Logistics")]
SCHEMA = {"type": "object", "properties": {"token": {"type": "string"}, "vendor": {"type": "string"}}}
SECRETS = [secret for _, secret in SPOKEN.values()]
FRAGMENTS = sorted({piece for secret in SECRETS for piece in windows(secret)})


def recordings() -> dict[str, bytes]:
    files = {
        f"audio/{name}.wav": make_wav([(0.0, 10.0, INTRO), (10.0, 20.0, line)])
        for name, (line, _) in SPOKEN.items()
    }
    files["audio/memo.wav"] = make_wav(MEMO)
    files["audio/clean.wav"] = make_wav([(0.0, 10.0, INTRO), (10.0, 20.0, "The ferry leaves at nine.")])
    return files


def serve(root: Path, mode: str):
    """A real server on the recordings in ``mode``, with the fake Mistral
    (STT, chat, annotations) and the fake ElevenLabs (speech) as ``srv.tts``."""
    for rel, data in recordings().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    mistral, elevenlabs = FakeMistral().start(), FakeElevenLabs().start()
    env = {
        "MISTRAL_API_KEY": mistral.api_key,
        "DIR2MCP_MISTRAL__BASE_URL": mistral.url,
        "ELEVENLABS_API_KEY": elevenlabs.api_key,
        "DIR2MCP_ELEVENLABS__BASE_URL": elevenlabs.url,
        "DIR2MCP_INGEST__AUDIO__MODE": "off",
        "DIR2MCP_SECURITY__SECRET_MODE": mode,
    }
    try:
        for srv in serving(root, FRAGMENTS, env=env):
            srv.tts = elevenlabs
            yield srv
    finally:
        mistral.close()
        elevenlabs.close()


@pytest.fixture(scope="module")
def excluding(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("corpus"), "exclude")


@pytest.fixture(scope="module")
def redacting(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("corpus"), "redact")


def code(result: dict) -> str | None:
    return result["structuredContent"]["error"]["code"] if result.get("isError") else None


def test_exclude_mode_refuses_a_transcript_holding_a_credential_and_keeps_none(excluding):
    clean = call(excluding, "dir2mcp.transcribe", {"rel_path": "audio/clean.wav"})
    assert [s["text"] for s in clean["structuredContent"]["segments"]] == [INTRO, "The ferry leaves at nine."]
    answers, codes = [], {}
    for name in SPOKEN:
        rel = f"audio/{name}.wav"
        made = call(excluding, "dir2mcp.transcribe", {"rel_path": rel})
        codes[name] = code(made)
        answers.append(json.dumps(made))
        opened = call(excluding, "dir2mcp.open_file", {"rel_path": rel, "start_ms": 0, "end_ms": 20_000})
        codes[f"{name} open_file"] = code(opened)
        answers.append(json.dumps(opened))
    asked = call(
        excluding, "dir2mcp.transcribe_and_ask", {"rel_path": "audio/memo.wav", "question": "token?"}
    )
    annotated = call(excluding, "dir2mcp.annotate", {"rel_path": "audio/memo.wav", "schema_json": SCHEMA})
    searched = call(excluding, "dir2mcp.search", {"query": "quagga briefing", "k": 50})
    spoken = call(excluding, "dir2mcp.ask_audio", {"question": "what was said at the quagga briefing?"})
    answers += [json.dumps(asked), json.dumps(annotated), json.dumps(searched), json.dumps(spoken)]
    answers += excluding.tts.tts_texts

    assert set(codes.values()) == {"FORBIDDEN"}, codes
    assert (code(asked), code(annotated), code(spoken)) == ("FORBIDDEN", "FORBIDDEN", None)
    assert excluding.tts.tts_texts  # the answer was spoken
    assert [hit["rel_path"] for hit in searched["structuredContent"]["hits"]] == ["audio/clean.wav"]
    assert leaks("\n".join(answers), SECRETS) == []
    assert state_traces(excluding.root, FRAGMENTS) == {}


def test_redact_mode_returns_and_stores_the_transcript_redacted(redacting):
    answers, unredacted = [], []
    for name in SPOKEN:
        rel = f"audio/{name}.wav"
        made = call(redacting, "dir2mcp.transcribe", {"rel_path": rel})
        assert code(made) is None, made
        segments = [s["text"] for s in made["structuredContent"]["segments"]]
        if segments[0] != INTRO or "[REDACTED:" not in segments[1]:
            unredacted.append((name, segments))
        opened = call(redacting, "dir2mcp.open_file", {"rel_path": rel, "start_ms": 10_000, "end_ms": 20_000})
        assert "[REDACTED:" in opened["structuredContent"]["content"], (name, opened)
        answers += [json.dumps(made), json.dumps(opened)]
    searched = call(redacting, "dir2mcp.search", {"query": "quagga briefing", "k": 50})
    asked = call(
        redacting, "dir2mcp.transcribe_and_ask", {"rel_path": "audio/memo.wav", "question": "token?"}
    )
    spoken = call(redacting, "dir2mcp.ask_audio", {"question": "what token was read out at the briefing?"})
    answers += [json.dumps(searched), json.dumps(asked), json.dumps(spoken)] + redacting.tts.tts_texts

    assert unredacted == []
    assert (code(asked), code(spoken)) == (None, None), (asked, spoken)
    assert "[REDACTED:" in "\n".join(redacting.tts.tts_texts + [json.dumps(asked)])
    found = {hit["rel_path"] for hit in searched["structuredContent"]["hits"]}
    assert found == {f"audio/{name}.wav" for name in SPOKEN}
    assert leaks("\n".join(answers), SECRETS) == []
    assert state_traces(redacting.root, FRAGMENTS) == {}


def test_redact_mode_annotates_the_redacted_text(redacting):
    made = call(redacting, "dir2mcp.transcribe", {"rel_path": "audio/memo.wav"})
    annotated = call(redacting, "dir2mcp.annotate", {"rel_path": "audio/memo.wav", "schema_json": SCHEMA})

    assert code(made) is None, made
    fields = annotated["structuredContent"]["annotation_json"]
    assert fields == {"token": "[REDACTED:token-assignment]", "vendor": "Okapi Logistics"}, annotated
    assert annotated["structuredContent"]["stored"] is True
    assert leaks(json.dumps(annotated), SECRETS) == []
    assert state_traces(redacting.root, FRAGMENTS) == {}


# -- one function for the indexer and the tool ---------------------------------------------


def keyed(fake_mistral, monkeypatch, mode: str):
    monkeypatch.setenv("MISTRAL_API_KEY", fake_mistral.api_key)
    return build_config({"mistral": {"base_url": fake_mistral.url}, "embed": {"provider": "none"},
                         "security": {"secret_mode": mode}}, {}, {})  # fmt: skip


def recorded(rel: str) -> tuple:
    doc = Document.objects.get(rel_path=rel)
    reps = Representation.objects.filter(document=doc, deleted=False)
    return doc.status, doc.error, doc.policy_hash, [(r.text, r.meta_json.get("redacted")) for r in reps]


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["exclude", "redact"])
def test_the_tool_records_what_the_indexer_records(corpus_dir, state, index, fake_mistral, monkeypatch, mode):
    config = keyed(fake_mistral, monkeypatch, mode)
    index({"memo.wav": make_wav(MEMO)}, config=config)
    by_indexer = recorded("memo.wav")
    engine = ExclusionEngine.from_config(corpus_dir, config, state_dir=state.path)
    ws = ondemand.Workspace(config=config, state=state, engine=engine, secret=lambda _: fake_mistral.api_key)

    try:
        made = ondemand.transcribe_file(ws, "memo.wav", refresh=True)
    except errors.Dir2mcpError as exc:
        made = exc.code

    assert recorded("memo.wav") == by_indexer
    if mode == "exclude":
        assert made == errors.FORBIDDEN
        # Asked again (not retranscribe): refused without sending the recording again.
        sent = len(fake_mistral.requests_to(STT_PATH))
        with pytest.raises(errors.Dir2mcpError) as again:
            ondemand.transcribe_file(ws, "memo.wav")
        assert again.value.code == errors.FORBIDDEN
        assert (sent, len(fake_mistral.requests_to(STT_PATH))) == (2, 2)
        assert by_indexer[0] == "skipped" and by_indexer[1].startswith("SECRET_DETECTED: content matches")
        assert by_indexer[3] == []
    else:
        [(text, redacted)] = by_indexer[3]
        assert "Token: [REDACTED:token-assignment]" in text and TOKEN not in text
        assert redacted == {"rules": ["token-assignment"], "count": 1}
        assert "\n".join(s["text"] for s in made["segments"]) == text


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["exclude", "redact"])
def test_the_indexer_caches_no_transcript_or_ocr_text_holding_a_credential(
    corpus_dir, state, index, fake_mistral, monkeypatch, mode
):
    config = keyed(fake_mistral, monkeypatch, mode)
    scans = {
        "memo.pdf": make_scanned_pdf(["cover page", f"Token: {TOKEN}"]),
        "clean.pdf": make_scanned_pdf(["cover page", "the pangolin inventory"]),
    }
    index({"memo.wav": make_wav(MEMO), "clean.wav": make_wav([(0.0, 10.0, INTRO)])} | scans, config=config)

    cache = state.path / "cache"
    cached = [path.read_text() for kind in ("transcribe", "ocr") for path in (cache / kind).glob("*.json")]
    held = [p.name for p in state.path.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert len(cached) == 2 and [text for text in cached if "Token" in text] == []  # the clean ones
    assert held == []
