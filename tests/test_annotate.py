"""dir2mcp.annotate and dir2mcp.transcribe through the tool registry, against the fakes."""

from __future__ import annotations

import base64
import io
import json
import wave
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from corpus.ingest.indexing import index_directory
from corpus.models import Representation
from corpus.providers.annotate import flatten
from kernel import errors
from kernel.config import build_config
from mcp_gateway import tools
from mcp_gateway.context import AuthSetup, Context
from tests.fakes.elevenlabs import FakeElevenLabs
from tests.fakes.media import make_wav

pytestmark = pytest.mark.django_db

INVOICE = "Invoice 2231 from Okapi Logistics.\nTotal due: 1,250 EUR by 30 June.\n"
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"vendor": {"type": "string"}, "total": {"type": "string"}, "lines": {"type": "array"}},
    "required": ["vendor", "total"],
}
EXTRACTED = {"vendor": "Okapi Logistics", "total": "1,250 EUR", "lines": [{"sku": "ZX-9"}]}


@pytest.fixture
def ctx(corpus_dir: Path, state, fake_mistral, monkeypatch) -> Context:
    monkeypatch.setenv("MISTRAL_API_KEY", fake_mistral.api_key)
    config = build_config({"mistral": {"base_url": fake_mistral.url}, "embed": {"provider": "none"}}, {}, {})
    (corpus_dir / "invoice.txt").write_text(INVOICE)
    (corpus_dir / "talk.wav").write_bytes(
        make_wav([(0.0, 4.0, "The ferry leaves at noon."), (4.0, 9.0, "Bye.")])
    )
    index_directory(corpus_dir, state=state, config=config)
    return Context(root=corpus_dir, state=state, config=config, auth=AuthSetup(token=None, source="none"))


def call(ctx: Context, name: str, arguments: dict) -> dict:
    tool = tools.table()[name]
    result = tools.run(tool, arguments, tools.Call(ctx))
    if not result.get("isError"):
        Draft202012Validator(tool.output_schema).validate(result["structuredContent"])
    return result


def test_flatten_makes_dotted_key_value_lines() -> None:
    assert flatten({"a": {"b": 1, "c": [True, None]}, "d": "x"}) == [
        "a.b: 1",
        "a.c[0]: true",
        "a.c[1]: ",
        "d: x",
    ]


def test_annotate_stores_json_and_makes_it_searchable_at_once(ctx, fake_mistral) -> None:
    fake_mistral.chat_reply = json.dumps(EXTRACTED)

    result = call(ctx, "dir2mcp.annotate", {"rel_path": "invoice.txt", "schema_json": SCHEMA})

    out = result["structuredContent"]
    assert out["annotation_json"] == EXTRACTED and out["stored"] and out["flattened_indexed"]
    sent = fake_mistral.requests_to("/v1/chat/completions")[0].body
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["schema"] == SCHEMA
    assert "Okapi Logistics" in sent["messages"][1]["content"]
    reps = {
        r.rep_type: r for r in Representation.objects.filter(document__rel_path="invoice.txt", deleted=False)
    }
    assert json.loads(reps["annotation_json"].text) == EXTRACTED
    assert "lines[0].sku: ZX-9" in reps["annotation_text"].text
    assert "raw_text" in reps
    found = call(ctx, "dir2mcp.search", {"query": "ZX-9 sku"})["structuredContent"]["hits"]
    assert found[0]["rel_path"] == "invoice.txt" and found[0]["rep_type"] == "annotation_text"


def test_the_annotation_cache_prevents_a_second_call(ctx, fake_mistral) -> None:
    fake_mistral.chat_reply = json.dumps(EXTRACTED)
    call(ctx, "dir2mcp.annotate", {"rel_path": "invoice.txt", "schema_json": SCHEMA})

    again = call(ctx, "dir2mcp.annotate", {"rel_path": "invoice.txt", "schema_json": SCHEMA})

    assert again["structuredContent"]["annotation_json"] == EXTRACTED
    assert len(fake_mistral.requests_to("/v1/chat/completions")) == 1
    assert len(list((ctx.state.cache / "annotations").glob("*.json"))) == 1


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        pytest.param(
            {"rel_path": "invoice.txt", "schema_json": {"type": "array"}}, errors.INVALID_FIELD, id="array"
        ),
        pytest.param({"rel_path": "missing.txt", "schema_json": SCHEMA}, errors.FILE_NOT_FOUND, id="missing"),
        pytest.param({"rel_path": "../x.txt", "schema_json": SCHEMA}, errors.PATH_OUTSIDE_ROOT, id="escape"),
        pytest.param({"rel_path": "invoice.txt"}, errors.MISSING_FIELD, id="no-schema"),
    ],
)
def test_bad_annotate_calls_get_a_clear_code(ctx, arguments, code) -> None:
    result = call(ctx, "dir2mcp.annotate", arguments)

    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == code


def test_a_file_not_indexed_yet_is_index_not_ready(ctx) -> None:
    (ctx.root / "late.txt").write_text("written after the index ran\n")

    result = call(ctx, "dir2mcp.annotate", {"rel_path": "late.txt", "schema_json": SCHEMA})

    assert result["structuredContent"]["error"]["code"] == errors.INDEX_NOT_READY


def test_a_reply_that_is_not_json_is_annotate_failed(ctx, fake_mistral) -> None:
    fake_mistral.chat_reply = "sorry, no"

    result = call(ctx, "dir2mcp.annotate", {"rel_path": "invoice.txt", "schema_json": SCHEMA})

    assert result["structuredContent"]["error"]["code"] == errors.ANNOTATE_FAILED


def test_transcribe_tool_returns_segments_from_the_cache(ctx, fake_mistral) -> None:
    progress: list[tuple] = []
    tool = tools.table()["dir2mcp.transcribe"]

    result = tools.run(
        tool, {"rel_path": "talk.wav"}, tools.Call(ctx, progress=lambda *a: progress.append(a))
    )

    out = result["structuredContent"]
    assert out["segments"] == [
        {"start_ms": 0, "end_ms": 4000, "text": "The ferry leaves at noon."},
        {"start_ms": 4000, "end_ms": 9000, "text": "Bye."},
    ]
    assert (out["provider"], out["indexed"]) == ("mistral", True)
    assert "[talk.wav@t=00:00-00:04]" in result["content"][0]["text"]
    assert len(fake_mistral.requests_to("/v1/audio/transcriptions")) == 1  # indexing's call, cached
    assert progress[-1][:2] == (1, 1)


def test_retranscribe_bypasses_the_cache(ctx, fake_mistral) -> None:
    call(ctx, "dir2mcp.transcribe", {"rel_path": "talk.wav", "retranscribe": True})

    assert len(fake_mistral.requests_to("/v1/audio/transcriptions")) == 2


def test_a_cancelled_call_stops_before_the_provider(ctx, fake_mistral) -> None:
    call_ = tools.Call(ctx)
    call_.cancel.set()

    with pytest.raises(tools.Cancelled):
        tools.run(tools.table()["dir2mcp.transcribe"], {"rel_path": "talk.wav", "retranscribe": True}, call_)

    assert len(fake_mistral.requests_to("/v1/audio/transcriptions")) == 1


@pytest.fixture
def voiced(ctx, fake_mistral, monkeypatch):
    server = FakeElevenLabs().start()
    monkeypatch.setenv("ELEVENLABS_API_KEY", server.api_key)
    ctx.config = ctx.config.model_copy(
        update={"elevenlabs": ctx.config.elevenlabs.model_copy(update={"base_url": server.url})}
    )
    yield ctx, server
    server.close()


def test_ask_audio_returns_the_spoken_answer_as_wav(voiced) -> None:
    ctx, voice = voiced

    result = call(ctx, "dir2mcp.ask_audio", {"question": "who sent invoice 2231?", "format": "wav"})

    text, audio = result["content"]
    assert audio["type"] == "audio" and audio["mimeType"] == "audio/wav"
    answer = result["structuredContent"]["answer"]
    with wave.open(io.BytesIO(base64.b64decode(audio["data"]))) as spoken:
        assert spoken.getframerate() == 22050
        assert spoken.readframes(spoken.getnframes()) == voice.expected_audio(answer, "pcm_22050")
    assert result["structuredContent"]["audio"]["bytes"] == len(base64.b64decode(audio["data"]))
    assert "[invoice.txt:L1-L2]" in text["text"]


def test_ask_audio_without_an_elevenlabs_key_says_which_is_missing(ctx, monkeypatch) -> None:
    monkeypatch.delenv("ELEVENLABS_API_KEY", raising=False)

    result = call(ctx, "dir2mcp.ask_audio", {"question": "who sent invoice 2231?"})

    assert result["structuredContent"]["error"]["code"] == errors.CONFIG_INVALID
    assert "ELEVENLABS_API_KEY" in result["structuredContent"]["error"]["message"]


def test_a_rejected_voice_is_an_elevenlabs_error(voiced) -> None:
    ctx, voice = voiced
    voice.fail_next(401)

    result = call(ctx, "dir2mcp.ask_audio", {"question": "who sent invoice 2231?"})

    assert result["structuredContent"]["error"]["code"] == errors.ELEVENLABS_AUTH
    assert voice.api_key not in result["content"][0]["text"]


def test_stats_names_the_missing_key_for_ocr_and_speech(ctx, monkeypatch) -> None:
    stats = call(ctx, "dir2mcp.stats", {})
    assert stats["structuredContent"]["models"]["ocr"] == "mistral-ocr-latest"
    monkeypatch.delenv("MISTRAL_API_KEY")

    stats = call(ctx, "dir2mcp.stats", {})

    models = stats["structuredContent"]["models"]
    assert models["ocr"] == "none (needs MISTRAL_API_KEY)"
    assert models["stt_model"] == "none (needs MISTRAL_API_KEY)"
    assert "ocr=none (needs MISTRAL_API_KEY)" in stats["content"][0]["text"]


def test_transcribe_and_ask_transcribes_only_a_missing_or_stale_transcript(ctx, fake_mistral) -> None:
    def ask(rel_path: str, question: str) -> dict:
        result = call(ctx, "dir2mcp.transcribe_and_ask", {"rel_path": rel_path, "question": question})
        assert not result.get("isError"), result
        return result

    def stt_calls() -> int:
        return len(fake_mistral.requests_to("/v1/audio/transcriptions"))

    fresh = ask("talk.wav", "when does the ferry leave?")
    assert fresh["structuredContent"]["transcribed"] is False
    assert stt_calls() == 1  # indexing's call only

    (ctx.root / "talk.wav").write_bytes(make_wav([(0.0, 6.0, "The ferry now leaves at dusk.")]))
    stale = ask("talk.wav", "when does the ferry leave?")
    assert stale["structuredContent"]["transcribed"] is True
    assert stale["structuredContent"]["transcript_provider"] == "mistral"
    assert stt_calls() == 2
    assert "[talk.wav@t=00:00-00:06]" in stale["content"][0]["text"]
    transcript = Representation.objects.get(
        document__rel_path="talk.wav", rep_type="transcript", deleted=False
    )
    assert "dusk" in transcript.text and "noon" not in transcript.text

    again = ask("talk.wav", "when does the ferry leave?")
    assert again["structuredContent"]["transcribed"] is False
    assert stt_calls() == 2

    (ctx.root / "new.wav").write_bytes(make_wav([(0.0, 3.0, "A recording nobody indexed.")]))
    missing = ask("new.wav", "what was recorded?")
    assert missing["structuredContent"]["transcribed"] is True
    assert stt_calls() == 3
