"""The ``transcript`` representation of audio (spec §7.4 C, meta per §5.2)."""

from __future__ import annotations

from corpus.ingest.extracted import Extracted, Segment
from corpus.providers.stt import Transcriber

TRANSCRIPT = "transcript"


def transcribe_audio(name: str, data: bytes, stt: Transcriber) -> Extracted:
    """Transcribe with ``stt``; timed segments become one line each."""
    transcript = stt.transcribe(name, data)
    segments = tuple(Segment(start, end, text) for start, end, text in transcript.segments if text)
    text = "\n".join(s.text for s in segments) if segments else transcript.text.strip()
    meta = {
        "provider": transcript.provider,
        "model": transcript.model,
        "timestamps": bool(segments),
        "language": transcript.language,
        "duration_ms": transcript.duration_ms,
    }
    return Extracted(rep_type=TRANSCRIPT, text=text, meta=meta, segments=segments or None)
