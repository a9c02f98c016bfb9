"""A fake ElevenLabs API on 127.0.0.1 (reference/wire-formats.md §2).

``POST /v1/speech-to-text`` (Scribe; words with timestamps, spacing tokens
between them) and ``POST /v1/text-to-speech/{voice_id}`` (raw ``audio/mpeg``
bytes). Auth is the ``xi-api-key`` header; errors use the documented
``{"detail": {"status", "message"}}`` shape, validation errors the 422 detail
list. Scripting (``fail_next``, ``delay_next``, ``latency``) and the request
log work as in :class:`tests.fakes.mistral.FakeMistral`; run it as a process
with ``python -m tests.fakes.elevenlabs --port N``.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.fakes import media
from tests.fakes.mistral import FakeMistral, Recorded, _redacted, _send, serve_forever
from tests.fakes.mistral_media import parse_form

STT_FIELDS = {
    "model_id", "file", "cloud_storage_url", "source_url", "language_code", "tag_audio_events",
    "num_speakers", "timestamps_granularity", "diarize", "diarization_threshold", "additional_formats",
    "file_format", "webhook", "webhook_id", "webhook_metadata", "temperature", "seed",
    "use_multi_channel", "multichannel_output_style", "entity_detection", "entity_redaction",
    "entity_redaction_mode", "keyterms", "no_verbatim", "use_speaker_library", "detect_speaker_roles",
}  # fmt: skip
TTS_FIELDS = {
    "text", "model_id", "language_code", "voice_settings", "pronunciation_dictionary_locators", "seed",
    "previous_text", "next_text", "previous_request_ids", "next_request_ids", "apply_text_normalization",
    "apply_language_text_normalization",
}  # fmt: skip
STT_MODELS = {"scribe_v1", "scribe_v1_experimental", "scribe_v2"}
TTS_PATH = re.compile(r"^/v1/text-to-speech/([A-Za-z0-9]+)(\?.*)?$")
STT_PATH = re.compile(r"^/v1/speech-to-text(\?.*)?$")
MAX_TTS_CHARS = 10_000
OUTPUT_FORMATS = {
    "mp3_44100_128", "mp3_22050_32", "pcm_16000", "pcm_22050", "pcm_24000", "pcm_44100",
    "ulaw_8000", "alaw_8000",
}  # fmt: skip
# An MPEG-1 Layer III frame header; the body after it is filler.
MP3_FRAME = b"\xff\xfb\x90\x64"


def detail(status: str, message: str) -> dict:
    return {"detail": {"status": status, "message": message}}


DEFAULT_ERROR_BODIES = {
    401: detail("invalid_api_key", "Invalid API key"),
    429: detail("too_many_concurrent_requests", "Too many concurrent requests"),
}


def _problem(kind: str, loc: list, msg: str) -> dict:
    return {"type": kind, "loc": ["body", *loc], "msg": msg}


class FakeElevenLabs(FakeMistral):
    """The fake server; :func:`fake_elevenlabs` starts one per test."""

    API_KEY = "fake-elevenlabs-key-51d0e2"

    def __init__(self) -> None:
        super().__init__()
        self.tts_texts: list[str] = []

    def fail_next(
        self, status: int, *, count: int = 1, retry_after: str | None = None, body: Any = None
    ) -> None:
        if body is None:
            body = DEFAULT_ERROR_BODIES.get(status) or detail("system_busy", f"HTTP {status}")
        super().fail_next(status, count=count, retry_after=retry_after, body=body)

    @staticmethod
    def expected_audio(text: str, output_format: str = "mp3_44100_128") -> bytes:
        """The bytes this fake speaks for ``text``: an MP3 frame, or raw 16-bit PCM for ``pcm_*``."""
        digest = hashlib.sha256(text.encode()).digest() * 8
        return digest if output_format.startswith("pcm_") else MP3_FRAME + digest

    def _authorized(self, handler) -> bool:
        return handler.headers.get("xi-api-key") == self.api_key

    def _answer(self, handler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        content_type = handler.headers.get("Content-Type", "")
        authorized = self._authorized(handler)
        self.requests.append(
            Recorded(handler.command, handler.path, _redacted(handler), raw, time.monotonic(), authorized)
        )
        with self._lock:
            step = self._script.popleft() if self._script else None
        if step is not None and step.delay and self._stop.wait(step.delay):
            return
        if self.latency and self._stop.wait(self.latency):
            return
        if step is not None and step.status is not None:
            return _send(handler, step.status, step.body, step.headers)
        if not authorized:
            return _send(handler, 401, DEFAULT_ERROR_BODIES[401])
        if handler.command == "POST" and STT_PATH.match(handler.path):
            if not content_type.startswith("multipart/form-data"):
                return _send(handler, 422, {"detail": [_problem("missing", ["model_id"], "Field required")]})
            return _send(handler, *self._stt(parse_form(content_type, raw)))
        match = TTS_PATH.match(handler.path)
        if handler.command == "POST" and match:
            output = parse_qs(urlsplit(handler.path).query).get("output_format", ["mp3_44100_128"])[0]
            status, payload = self._tts(raw, output)
            if status != 200:
                return _send(handler, status, payload)
            mime = "audio/pcm" if output.startswith("pcm_") else "audio/mpeg"
            return _send(handler, 200, payload, {"Content-Type": mime, "request-id": "req_fake"})
        return _send(handler, 404, {"detail": "Not Found"})

    def _stt(self, form: dict[str, list]) -> tuple[int, dict]:
        problems = [_problem("extra_forbidden", [n], "Extra inputs are not permitted") for n in form]
        problems = [p for p in problems if p["loc"][1] not in STT_FIELDS]
        if "model_id" not in form:
            problems.append(_problem("missing", ["model_id"], "Field required"))
        if problems:
            return 422, {"detail": problems}
        if form["model_id"][0] not in STT_MODELS:
            return 400, detail("invalid_model_id", f"Invalid model_id: {form['model_id'][0]}")
        upload = form.get("file", [None])[0]
        if not isinstance(upload, tuple):
            return 400, detail("invalid_request", "Exactly one of file or cloud_storage_url must be provided")
        try:
            duration, script = media.wav_script(upload[1])
        except Exception:
            return 400, detail("invalid_audio", "Could not decode the audio file")
        timestamps = form.get("timestamps_granularity", ["word"])[0] != "none"
        words = self._words(script, timestamps)
        return 200, {
            "language_code": "eng",
            "language_probability": 0.98,
            "text": " ".join(s["text"] for s in script),
            "words": words,
            "audio_duration_secs": duration,
            "transcription_id": hashlib.sha256(upload[1]).hexdigest()[:20],
        }

    @staticmethod
    def _words(script: list[dict], timestamps: bool) -> list[dict]:
        words: list[dict] = []
        for segment in script:
            tokens = segment["text"].split()
            step = (segment["end"] - segment["start"]) / max(len(tokens), 1)
            for i, token in enumerate(tokens):
                if words:
                    at = segment["start"] + step * i
                    words.append({"text": " ", "start": at, "end": at, "type": "spacing", "logprob": 0})
                word = {"text": token, "type": "word", "logprob": -0.1, "speaker_id": "speaker_0"}
                if timestamps:
                    word |= {"start": segment["start"] + step * i, "end": segment["start"] + step * (i + 1)}
                words.append(word)
        if not timestamps:
            words = [{k: v for k, v in word.items() if k not in ("start", "end")} for word in words]
        return words

    def _tts(self, raw: bytes, output_format: str) -> tuple[int, Any]:
        try:
            body = json.loads(raw)
        except ValueError:
            return 422, {"detail": [_problem("json_invalid", [0], "JSON decode error")]}
        if not isinstance(body, dict) or "text" not in body:
            return 422, {"detail": [_problem("missing", ["text"], "Field required")]}
        extra = [n for n in body if n not in TTS_FIELDS]
        if extra:
            return 422, {
                "detail": [_problem("extra_forbidden", [n], "Extra inputs are not permitted") for n in extra]
            }
        if len(body["text"]) > MAX_TTS_CHARS:
            return 400, detail(
                "max_character_limit_exceeded", f"Text is longer than {MAX_TTS_CHARS} characters"
            )
        self.tts_texts.append(body["text"])
        if output_format not in OUTPUT_FORMATS:
            return 422, {"detail": [_problem("enum", ["output_format"], "Invalid output format")]}
        return 200, self.expected_audio(body["text"], output_format)


@pytest.fixture
def fake_elevenlabs() -> Iterator[FakeElevenLabs]:
    server = FakeElevenLabs().start()
    try:
        yield server
    finally:
        server.close()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Run the fake ElevenLabs API on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0 picks a free one)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer")
    args = parser.parse_args()
    server = FakeElevenLabs()
    server.latency = args.latency
    serve_forever(server, port=args.port)
