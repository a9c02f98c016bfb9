"""ElevenLabs text-to-speech (``POST /v1/text-to-speech/{voice_id}``, wire-formats.md §2.2)."""

from __future__ import annotations

import io
import re
import wave

from corpus.providers.media_http import media_client
from kernel import errors
from kernel.config import Config

_VOICE = re.compile(r"^[A-Za-z0-9]{1,64}$")
# ElevenLabs sends WAV-ready audio only as raw 16-bit mono PCM; we add the header.
_PCM_RATE = 22050


def speak(
    config: Config, *, api_key: str, text: str, voice_id: str | None = None, fmt: str = "mp3"
) -> tuple[bytes, str]:
    """Audio bytes and their MIME type for ``text``."""
    cfg = config.elevenlabs
    voice = voice_id or cfg.voice_id
    if not _VOICE.match(voice):
        raise errors.Dir2mcpError(errors.INVALID_FIELD, "voice_id must be 1-64 letters or digits")
    output = f"pcm_{_PCM_RATE}" if fmt == "wav" else cfg.output_format
    # Speech calls are bounded by stt.concurrency, shared by every TTS call of the process.
    client = media_client(
        config, api_key, "elevenlabs/tts", timeout=cfg.timeout_seconds, concurrency=config.stt.concurrency
    )
    try:
        audio, _ = client.post_for_bytes(
            f"/v1/text-to-speech/{voice}?output_format={output}",
            {"text": text, "model_id": cfg.tts_model},
            operation="/v1/text-to-speech/{voice_id}",  # one metric series, whatever the voice
        )
    finally:
        client.close()
    if fmt == "wav":
        return _wav(audio), "audio/wav"
    return audio, "audio/mpeg"


def _wav(pcm: bytes) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(_PCM_RATE)
        handle.writeframes(pcm[: len(pcm) - len(pcm) % 2])
    return out.getvalue()
