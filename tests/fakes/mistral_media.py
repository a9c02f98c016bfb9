"""The fake Mistral's OCR and transcription routes (wire-formats.md §1.2, §1.3).

Requests are validated like the real API (unknown fields are 422
``extra_forbidden``; the documented OCR limits of pages and bytes are 400),
and answers have the documented shapes. What a page or recording "says" comes
from the fixture (see :mod:`tests.fakes.media`).
"""

from __future__ import annotations

import base64
import binascii
import email.parser
import email.policy
import json
from typing import Any

from tests.fakes import media

OCR_FIELDS = {
    "model", "id", "document", "pages", "include_image_base64", "image_limit", "image_min_size",
    "bbox_annotation_format", "document_annotation_format", "document_annotation_prompt",
    "table_format", "extract_header", "extract_footer", "include_blocks", "confidence_scores_granularity",
}  # fmt: skip
TRANSCRIBE_FIELDS = {
    "model", "file", "file_url", "file_id", "language", "temperature", "stream", "diarize",
    "context_bias", "timestamp_granularities",
}  # fmt: skip
OCR_MODELS = {"mistral-ocr-latest": "mistral-ocr-2512", "mistral-ocr-2512": "mistral-ocr-2512"}
STT_MODELS = {"voxtral-mini-latest", "voxtral-mini-2602", "voxtral-mini-2507"}


def _problem(kind: str, loc: list, msg: str, value: Any) -> dict:
    return {"type": kind, "loc": ["body", *loc], "msg": msg, "input": value}


def parse_form(content_type: str, raw: bytes) -> dict[str, list]:
    """multipart/form-data fields: name -> values (str, or (filename, bytes) for files)."""
    header = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(header + raw)
    fields: dict[str, list] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        filename = part.get_filename()
        value = (filename, payload) if filename is not None else payload.decode("utf-8")
        fields.setdefault(name, []).append(value)
    return fields


def _data_url(url: Any) -> tuple[str, bytes] | None:
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url:
        return None
    mime, _, b64 = url[5:].partition(";base64,")
    try:
        return mime, base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        return None


def _selected(pages: Any, count: int) -> list[int] | None:
    if pages is None:
        return list(range(count))
    if isinstance(pages, list):
        return pages if all(isinstance(p, int) and 0 <= p < count for p in pages) else None
    chosen: list[int] = []
    for part in str(pages).split(","):
        first, _, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            return None
        chosen.extend(range(int(first), int(last or first) + 1))
    return chosen if all(p < count for p in chosen) else None


def _page(index: int, markdown: str) -> dict:
    return {
        "index": index,
        "markdown": markdown,
        "images": [],
        "tables": [],
        "hyperlinks": [],
        "header": None,
        "footer": None,
        "dimensions": {"dpi": 200, "height": 2200, "width": 1700},
    }


def ocr(fake, body: Any) -> tuple[int, dict]:
    from tests.fakes.mistral import _check_fields, error_body, validation_error

    problems = _check_fields(body, OCR_FIELDS, required=("model", "document"))
    if problems:
        return 422, validation_error(problems)
    model = OCR_MODELS.get(body["model"])
    if model is None:
        return 400, error_body(f"Invalid model: {body['model']}", param="model", code="unknown_model")
    document = body["document"]
    if not isinstance(document, dict):
        return 422, validation_error([_problem("model_type", ["document"], "Invalid document", document)])
    kind = document.get("type", "image_url" if "image_url" in document else "document_url")
    decoded = _data_url(document.get("document_url") if kind == "document_url" else document.get("image_url"))
    if decoded is None:
        return 422, validation_error([_problem("value_error", ["document"], "Invalid data URL", "...")])
    mime, data = decoded
    if len(data) > fake.ocr_max_bytes:
        return 400, error_body(f"Document is too large: max {fake.ocr_max_bytes} bytes", code="3002")
    texts = media.pdf_page_texts(data) if mime == "application/pdf" else [media.image_text(data)]
    if len(texts) > fake.ocr_max_pages:
        return 400, error_body(f"Document has too many pages: max {fake.ocr_max_pages}", code="3003")
    chosen = _selected(body.get("pages"), len(texts))
    if chosen is None:
        return 422, validation_error([_problem("value_error", ["pages"], "Invalid pages", body["pages"])])
    fake.ocr_pages_served += len(chosen)
    pages = [_page(i, f"# Page {i + 1}\n\n{texts[i]}" if texts[i] else "") for i in chosen]
    usage = {"pages_processed": len(pages), "doc_size_bytes": len(data)}
    return 200, {"pages": pages, "model": model, "document_annotation": None, "usage_info": usage}


def transcribe(fake, form: dict[str, list]) -> tuple[int, dict]:
    from tests.fakes.mistral import error_body, validation_error

    problems = [
        _problem("extra_forbidden", [n], "Extra inputs are not permitted", v) for n, v in form.items()
    ]
    problems = [p for p in problems if p["loc"][1] not in TRANSCRIBE_FIELDS]
    if "model" not in form:
        problems.append(_problem("missing", ["model"], "Field required", None))
    if problems:
        return 422, validation_error(problems)
    model = form["model"][0]
    if model not in STT_MODELS:
        return 400, error_body(f"Invalid model: {model}", param="model", code="unknown_model")
    granularity = form.get("timestamp_granularities", [])
    if granularity and "language" in form:
        return 400, error_body("timestamp_granularities is not compatible with language")
    upload = form.get("file", [None])[0]
    if not isinstance(upload, tuple):
        return 422, validation_error([_problem("missing", ["file"], "Field required", None)])
    try:
        duration, script = media.wav_script(upload[1])
    except Exception:
        return 400, error_body("Invalid audio file")
    segments = [
        {"text": s["text"], "start": s["start"], "end": s["end"], "speaker_id": None, "score": None,
         "type": "transcription_segment"}
        for s in script
    ] if "segment" in granularity else []  # fmt: skip
    text = " ".join(s["text"] for s in script)
    usage = {"prompt_audio_seconds": round(duration), "prompt_tokens": 4, "total_tokens": 4 + len(text) // 4,
             "completion_tokens": len(text) // 4}  # fmt: skip
    language = form.get("language", [None])[0]
    return 200, {"model": model, "text": text, "language": language, "segments": segments, "usage": usage}


def schema_reply(response_format: Any, messages: list[dict]) -> str | None:
    """A structured-output reply: the schema's fields, filled from ``Key: value`` lines of the prompt.

    Stands in for the model's extraction so a fake run can check where the
    fields end up; ``None`` when the request asks for no JSON schema.
    """
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    schema = (response_format.get("json_schema") or {}).get("schema") or {}
    text = "\n".join(m["content"] for m in messages if isinstance(m.get("content"), str))
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            found.setdefault(key.strip().lower(), value.strip())
    return json.dumps(_fill(schema, found, ""))


def _fill(schema: dict, found: dict[str, str], name: str) -> Any:
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        return {key: _fill(sub, found, key) for key, sub in props.items() if isinstance(sub, dict)}
    if kind == "array":
        return [found[name.lower()]] if name.lower() in found else []
    if kind in ("number", "integer"):
        try:
            return (int if kind == "integer" else float)(found.get(name.lower(), "0").replace(",", ""))
        except ValueError:
            return 0
    if kind == "boolean":
        return found.get(name.lower(), "").lower() in ("yes", "true")
    return found.get(name.lower(), "")
