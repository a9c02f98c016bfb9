"""Speech-to-text through the fake Mistral and ElevenLabs servers; time-window chunking."""

from __future__ import annotations

import pytest

from corpus.ingest.chunking import chunk_segments
from corpus.ingest.extracted import Segment
from corpus.models import Chunk, Document, Representation
from corpus.providers.stt import group_words
from corpus.retrieval import Searcher
from kernel import errors
from kernel.config import build_config
from tests.fakes.elevenlabs import FakeElevenLabs
from tests.fakes.media import make_wav

pytestmark = pytest.mark.django_db

SCRIPT = [
    (0.0, 12.0, "Welcome to the harbour report."),
    (12.0, 25.5, "Ferries run every hour."),
    (25.5, 41.0, "The lighthouse keeper retires in June."),
    (41.0, 58.0, "Questions go to the harbour master."),
    (58.0, 70.0, "Thank you for listening."),
]


@pytest.fixture
def fake_elevenlabs():
    server = FakeElevenLabs().start()
    yield server
    server.close()


def config_for(mistral, elevenlabs=None, **sections):
    base = {"mistral": {"base_url": mistral.url}, "embed": {"provider": "none"}}
    if elevenlabs is not None:
        base["elevenlabs"] = {"base_url": elevenlabs.url}
    return build_config({**base, **sections}, {}, {})


def time_spans(rel_path: str) -> list[tuple[str, int, int, str]]:
    chunks = Chunk.objects.filter(representation__document__rel_path=rel_path, deleted=False)
    return [
        (span.span_kind, span.start, span.end, chunk.text)
        for chunk in chunks.prefetch_related("spans").order_by("ordinal")
        for span in chunk.spans.all()
    ]


def test_segments_are_grouped_into_overlapping_time_windows() -> None:
    segments = [Segment(int(s * 1000), int(e * 1000), t) for s, e, t in SCRIPT]

    drafts = chunk_segments(segments, segment_ms=30_000, overlap_ms=5_000)

    assert [(d.span_kind, d.start, d.end) for d in drafts] == [
        ("time", 0, 25_500),
        ("time", 25_500, 41_000),
        ("time", 41_000, 70_000),
    ]
    overlapping = chunk_segments(segments, segment_ms=30_000, overlap_ms=20_000)
    assert [(d.start, d.end) for d in overlapping] == [
        (0, 25_500),
        (12_000, 41_000),
        (25_500, 41_000),
        (41_000, 70_000),
    ]


def test_mistral_transcript_is_chunked_with_time_spans_and_meta(
    corpus_dir, state, fake_mistral, monkeypatch, index
):
    monkeypatch.setenv("MISTRAL_API_KEY", fake_mistral.api_key)
    (corpus_dir / "talk.wav").write_bytes(make_wav(SCRIPT))
    config = config_for(fake_mistral)

    index(config=config)

    rep = Representation.objects.get(document__rel_path="talk.wav", deleted=False)
    assert rep.rep_type == "transcript"
    assert rep.meta_json == {
        "provider": "mistral",
        "model": "voxtral-mini-latest",
        "timestamps": True,
        "language": None,
        "duration_ms": 70_000,
    }
    assert [s[:3] for s in time_spans("talk.wav")] == [
        ("time", 0, 25_500),
        ("time", 25_500, 41_000),
        ("time", 41_000, 70_000),
    ]
    hit = Searcher(state, config, None).search("lighthouse keeper", k=3).hits[0]
    assert (hit.span.kind, hit.span.start, hit.span.end) == ("time", 25_500, 41_000)
    sent = fake_mistral.requests_to("/v1/audio/transcriptions")[0]
    assert sent.headers["content-type"].startswith("multipart/form-data")
    assert sent.body["model"] == ["voxtral-mini-latest"]
    assert sent.body["timestamp_granularities"] == ["segment"]


def test_without_timestamps_the_transcript_falls_back_to_size_chunks(
    corpus_dir, state, fake_mistral, monkeypatch, index
):
    monkeypatch.setenv("MISTRAL_API_KEY", fake_mistral.api_key)
    (corpus_dir / "talk.wav").write_bytes(make_wav(SCRIPT))

    index(config=config_for(fake_mistral, stt={"mistral": {"timestamps": False}}))

    rep = Representation.objects.get(document__rel_path="talk.wav", deleted=False)
    assert rep.meta_json["timestamps"] is False
    spans = time_spans("talk.wav")
    assert {kind for kind, *_ in spans} == {"lines"}
    assert "lighthouse keeper" in spans[0][3]


def test_elevenlabs_words_are_grouped_into_timed_segments(
    corpus_dir,
    state,
    fake_mistral,
    fake_elevenlabs,
    monkeypatch,
    index,
):
    monkeypatch.setenv("ELEVENLABS_API_KEY", fake_elevenlabs.api_key)
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    (corpus_dir / "talk.wav").write_bytes(make_wav(SCRIPT))

    index(config=config_for(fake_mistral, fake_elevenlabs, stt={"provider": "elevenlabs"}))

    rep = Representation.objects.get(document__rel_path="talk.wav", deleted=False)
    assert rep.meta_json["provider"] == "elevenlabs"
    assert rep.meta_json["language"] == "eng"
    assert rep.meta_json["duration_ms"] == 70_000
    assert rep.text.split("\n")[2] == "The lighthouse keeper retires in June."
    assert time_spans("talk.wav")[0][:3] == ("time", 0, 25_500)
    sent = fake_elevenlabs.requests_to("/v1/speech-to-text")[0]
    assert sent.headers["xi-api-key"] == "<redacted>"


def test_the_transcript_cache_prevents_a_second_call(corpus_dir, state, fake_mistral, monkeypatch, index):
    monkeypatch.setenv("MISTRAL_API_KEY", fake_mistral.api_key)
    (corpus_dir / "talk.wav").write_bytes(make_wav(SCRIPT))
    config = config_for(fake_mistral)
    index(config=config)

    index(config=config, mode="full")

    assert len(fake_mistral.requests_to("/v1/audio/transcriptions")) == 1
    assert list((state.cache / "transcribe").glob("*-mistral-voxtral-mini-latest.json"))


@pytest.mark.parametrize(
    ("stt", "env", "reason"),
    [
        pytest.param({}, {}, "needs MISTRAL_API_KEY", id="mistral-no-key"),
        pytest.param(
            {"provider": "elevenlabs"}, {"MISTRAL_API_KEY": "x"}, "needs ELEVENLABS_API_KEY", id="11labs"
        ),
    ],
)
def test_audio_without_its_key_is_skipped_with_the_reason(
    corpus_dir, state, fake_mistral, monkeypatch, stt, env, reason, index
):
    for name in ("MISTRAL_API_KEY", "ELEVENLABS_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (corpus_dir / "talk.wav").write_bytes(make_wav(SCRIPT))

    index(config=config_for(fake_mistral, stt=stt, ingest={"pdf": {"mode": "off"}}))

    doc = Document.objects.get(rel_path="talk.wav")
    assert (doc.status, doc.error) == ("skipped", reason)


def test_audio_mode_off_skips_without_calling(corpus_dir, state, fake_mistral, monkeypatch, index):
    monkeypatch.setenv("MISTRAL_API_KEY", fake_mistral.api_key)
    (corpus_dir / "talk.wav").write_bytes(make_wav(SCRIPT))

    index(config=config_for(fake_mistral, ingest={"audio": {"mode": "off"}}))

    assert Document.objects.get(rel_path="talk.wav").error == "disabled by ingest.audio.mode=off"
    assert fake_mistral.requests_to("/v1/audio/transcriptions") == []


def test_a_rejected_elevenlabs_key_is_an_error_without_the_key(
    corpus_dir,
    state,
    fake_mistral,
    fake_elevenlabs,
    monkeypatch,
    index,
):
    monkeypatch.setenv("ELEVENLABS_API_KEY", "sk-wrong-key-123456")
    (corpus_dir / "talk.wav").write_bytes(make_wav(SCRIPT))

    index(config=config_for(fake_mistral, fake_elevenlabs, stt={"provider": "elevenlabs"}))

    doc = Document.objects.get(rel_path="talk.wav")
    assert doc.status == "error"
    assert doc.error.startswith(errors.ELEVENLABS_AUTH)
    assert "sk-wrong-key-123456" not in doc.error


def test_elevenlabs_rate_limits_are_retried_after_retry_after(
    corpus_dir, state, fake_mistral, fake_elevenlabs, monkeypatch, index
):
    monkeypatch.setenv("ELEVENLABS_API_KEY", fake_elevenlabs.api_key)
    (corpus_dir / "talk.wav").write_bytes(make_wav(SCRIPT))
    fake_elevenlabs.fail_next(429, count=2, retry_after="0")

    index(config=config_for(fake_mistral, fake_elevenlabs, stt={"provider": "elevenlabs"}))

    assert Document.objects.get(rel_path="talk.wav").status == "ok"
    assert len(fake_elevenlabs.requests_to("/v1/speech-to-text")) == 3


def test_elevenlabs_rate_limit_that_persists_is_retryable_for_the_file(
    corpus_dir, state, fake_mistral, fake_elevenlabs, monkeypatch, index
):
    monkeypatch.setenv("ELEVENLABS_API_KEY", fake_elevenlabs.api_key)
    (corpus_dir / "talk.wav").write_bytes(make_wav(SCRIPT))
    fake_elevenlabs.fail_next(429, count=2, retry_after="0")
    config = config_for(fake_mistral, fake_elevenlabs, stt={"provider": "elevenlabs", "max_attempts": 2})

    index(config=config)

    doc = Document.objects.get(rel_path="talk.wav")
    assert doc.status == "error"
    assert doc.error.startswith(errors.ELEVENLABS_RATE_LIMIT) and "retryable" in doc.error
    index(config=config)
    assert Document.objects.get(rel_path="talk.wav").status == "ok"


def test_scribe_words_split_at_sentence_ends_and_pauses() -> None:
    def word(text, start, end):
        return {"text": text, "start": start, "end": end, "type": "word", "logprob": -0.1}

    words = [
        word("Hello", 0.0, 0.4),
        {"text": " ", "start": 0.4, "end": 0.4, "type": "spacing", "logprob": 0},
        word("there.", 0.4, 0.9),
        word("Long", 1.0, 1.3),
        word("pause", 1.3, 1.7),
        {"text": "(laughs)", "start": 1.7, "end": 2.0, "type": "audio_event", "logprob": 0},
        word("then", 4.0, 4.3),
        word("more", 4.3, 4.6),
    ]

    assert group_words(words) == [
        (0, 900, "Hello there."),
        (1000, 1700, "Long pause"),
        (4000, 4600, "then more"),
    ]
    assert group_words([{"text": "untimed", "type": "word", "logprob": 0}]) == []
