"""Speech-to-text: Mistral Voxtral (§1.3) and ElevenLabs Scribe (§2.1), one transcript shape.

Both providers answer with timed text; Scribe's words are grouped into
segments. Transcripts are cached in ``<state>/cache/transcribe/`` keyed by
content hash, provider and model.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from corpus.providers.media_http import limits, media_client
from kernel.config import Config
from kernel.jsontypes import JsonObject

# Scribe returns words; a segment ends at a sentence end, a pause or this length.
MAX_SEGMENT_MS = 30_000
PAUSE_MS = 1_000
_AUDIO_MIME = {
    "mp3": "audio/mpeg", "wav": "audio/wav", "m4a": "audio/mp4", "ogg": "audio/ogg", "oga": "audio/ogg",
    "flac": "audio/flac", "webm": "audio/webm", "aac": "audio/aac", "opus": "audio/opus",
}  # fmt: skip


@dataclass
class Transcript:
    provider: str
    model: str
    text: str
    language: str | None = None
    duration_ms: int | None = None
    #: (start_ms, end_ms, text); empty when the provider gave no timestamps
    segments: list[tuple[int, int, str]] = field(default_factory=list)

    @property
    def timestamps(self) -> bool:
        return bool(self.segments)


def _ms(seconds: float | str) -> int:
    return int(round(float(seconds) * 1000))


class Transcriber(Protocol):
    """What transcribing audio asks of a speech-to-text provider."""

    def transcribe(self, name: str, data: bytes) -> Transcript: ...


class _CachedStt:
    """A transcription provider's client and its transcript cache; ``provider``
    names its section of ``stt`` (model, timestamps) and its limit key."""

    provider = ""
    default_model = ""

    def __init__(self, config: Config, *, api_key: str | None, cache_dir: Path | None) -> None:
        stt = config.stt
        own = getattr(stt, self.provider)
        self.model = own.model or self.default_model
        self.client = media_client(config, api_key, f"{self.provider}/stt", **limits(stt))
        self.cache_dir = cache_dir
        self.calls = 0
        self.timestamps = own.timestamps
        #: ISO language code hint; None lets the provider detect it
        self.language: str | None = None
        #: ``holds_secret(text)`` truthy: a transcript with that text is not
        #: cached, so the state directory keeps no credential it holds
        self.holds_secret: Callable[[str], object] | None = None

    def close(self) -> None:
        self.client.close()

    def transcribe(self, name: str, data: bytes, *, refresh: bool = False) -> Transcript:
        """The transcript of ``data``; ``refresh`` ignores (and replaces) a cached one."""
        path = self._cache_path(data)
        if path is not None and path.exists() and not refresh:
            try:
                raw = json.loads(path.read_text("utf-8"))
                raw["segments"] = [tuple(s) for s in raw["segments"]]
                return Transcript(**raw)
            except (OSError, ValueError, TypeError, KeyError):
                pass  # a damaged entry is not a hit
        self.calls += 1
        mime = _AUDIO_MIME.get(name.rsplit(".", 1)[-1].lower(), "application/octet-stream")
        transcript = self._call(name, data, mime)
        if path is not None and not self._held_back(transcript):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.{id(transcript)}.tmp")
            tmp.write_text(json.dumps(asdict(transcript)), "utf-8")
            os.replace(tmp, path)
        return transcript

    def _held_back(self, transcript: Transcript) -> bool:
        if self.holds_secret is None:
            return False
        timed = "\n".join(text for _, _, text in transcript.segments)
        return bool(self.holds_secret(transcript.text) or self.holds_secret(timed))

    def _cache_path(self, data: bytes) -> Path | None:
        if self.cache_dir is None:
            return None
        options = "" if self.timestamps else "-untimed"
        if self.language:
            options += f"-{self.language}"
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in self.model + options)
        return self.cache_dir / f"{hashlib.sha256(data).hexdigest()}-{self.provider}-{safe}.json"

    def _call(self, name: str, data: bytes, mime: str) -> Transcript:  # pragma: no cover
        raise NotImplementedError


class MistralStt(_CachedStt):
    provider = "mistral"
    default_model = "voxtral-mini-latest"

    def _call(self, name: str, data: bytes, mime: str) -> Transcript:
        form: JsonObject = {"model": self.model}
        # The API takes one or the other (wire-formats.md §1.3).
        if self.timestamps:
            form["timestamp_granularities"] = ["segment"]
        elif self.language:
            form["language"] = self.language
        body = self.client.post_form("/v1/audio/transcriptions", form, {"file": (name, data, mime)})
        if not isinstance(body.get("text"), str):
            raise self.client.fail("Mistral transcription returned no text")
        segments = [
            (_ms(s["start"]), _ms(s["end"]), str(s.get("text", "")).strip())
            for s in body.get("segments") or []
            if isinstance(s, dict) and "start" in s and "end" in s
        ]
        usage = body.get("usage") or {}
        seconds = usage.get("prompt_audio_seconds")
        duration = (
            _ms(seconds) if isinstance(seconds, int | float) else (segments[-1][1] if segments else None)
        )
        return Transcript(
            "mistral",
            str(body.get("model") or self.model),
            body["text"],
            body.get("language"),
            duration,
            segments,
        )


class ElevenLabsStt(_CachedStt):
    provider = "elevenlabs"
    default_model = "scribe_v1"

    def _call(self, name: str, data: bytes, mime: str) -> Transcript:
        form = {"model_id": self.model, "timestamps_granularity": "word" if self.timestamps else "none"}
        if self.language:
            form["language_code"] = self.language
        body = self.client.post_form("/v1/speech-to-text", form, {"file": (name, data, mime)})
        if not isinstance(body.get("text"), str) or not isinstance(body.get("words"), list):
            raise self.client.fail("ElevenLabs speech-to-text returned no text or words")
        seconds = body.get("audio_duration_secs")
        duration = _ms(seconds) if isinstance(seconds, int | float) else None
        segments = group_words(body["words"])
        if duration is None and segments:
            duration = segments[-1][1]
        return Transcript(
            "elevenlabs", self.model, body["text"], body.get("language_code"), duration, segments
        )


def group_words(words: list[JsonObject]) -> list[tuple[int, int, str]]:
    """Scribe words (with ``start``/``end`` seconds) as segments; none without timestamps."""
    segments: list[tuple[int, int, str]] = []
    current: list[str] = []
    start = end = 0
    for word in words:
        if not isinstance(word, dict) or word.get("type") != "word":
            continue
        if "start" not in word or "end" not in word:
            return []
        w_start, w_end = _ms(word["start"]), _ms(word["end"])
        if current and (w_start - end > PAUSE_MS or w_end - start > MAX_SEGMENT_MS):
            segments.append((start, end, " ".join(current)))
            current = []
        if not current:
            start = w_start
        current.append(str(word.get("text", "")).strip())
        end = w_end
        if current[-1].endswith((".", "?", "!")):
            segments.append((start, end, " ".join(current)))
            current = []
    if current:
        segments.append((start, end, " ".join(current)))
    return segments
