"""Structured extraction through Mistral chat completions with a ``json_schema`` response format (§1.4).

Results are cached in ``<state>/cache/annotations/`` keyed by the text, the
schema and the model, so asking again for the same extraction costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from corpus.providers.media_http import media_client
from kernel import errors
from kernel.config import Config
from kernel.jsontypes import JsonObject

SYSTEM_PROMPT = (
    "Extract the requested fields from the document as JSON matching the schema. "
    "Use only what the document says; use empty values for anything it does not contain."
)


def _cache_key(model: str, schema: JsonObject, text: str) -> str:
    blob = json.dumps([model, schema, text], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def annotate(
    config: Config, *, api_key: str, text: str, schema: JsonObject, cache_dir: Path | None
) -> tuple[JsonObject, bool]:
    """The extracted object, and whether it came from the cache."""
    model = config.annotations.model
    text = text[: config.annotations.max_input_chars]
    path = cache_dir / f"{_cache_key(model, schema, text)}.json" if cache_dir is not None else None
    if path is not None and path.exists():
        try:
            return json.loads(path.read_text("utf-8")), True
        except (OSError, ValueError):
            pass  # a damaged entry is not a hit
    # Bounded by ocr.concurrency, shared by every annotation call of the process.
    client = media_client(
        config,
        api_key,
        "mistral/annotations",
        timeout=config.ocr.timeout_seconds,
        concurrency=config.ocr.concurrency,
    )
    try:
        body = client.post_json(
            "/v1/chat/completions",
            {
                "model": model,
                "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}],
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "annotation", "schema": schema, "strict": True},
                },
                "temperature": 0,
            },
        )
    finally:
        client.close()
    result = _parse(body)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(result, ensure_ascii=False), "utf-8")
        os.replace(tmp, path)
    return result, False


def _parse(body: JsonObject) -> JsonObject:
    try:
        content = body["choices"][0]["message"]["content"]
        result = json.loads(content)
    except (KeyError, IndexError, TypeError, ValueError):
        raise errors.Dir2mcpError(
            errors.ANNOTATE_FAILED, "the model did not return JSON for the schema"
        ) from None
    if not isinstance(result, dict):
        raise errors.Dir2mcpError(errors.ANNOTATE_FAILED, "the model returned JSON that is not an object")
    return result


def flatten(value: object, prefix: str = "") -> list[str]:
    """``key: value`` lines; nested keys are dotted, list items indexed (``authors[0]``)."""
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            lines += flatten(item, f"{prefix}.{key}" if prefix else str(key))
        return lines
    if isinstance(value, list):
        lines = []
        for i, item in enumerate(value):
            lines += flatten(item, f"{prefix}[{i}]")
        return lines
    shown = "" if value is None else (json.dumps(value) if isinstance(value, bool) else str(value))
    return [f"{prefix}: {shown}"]
