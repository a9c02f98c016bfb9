"""The commented ``.dir2mcp.yaml`` template, generated from the schema.

Walking :class:`kernel.config.Config` means the template holds every key
with its default and can never drift from the schema.
"""

from __future__ import annotations

import typing

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from kernel import secrets as secret_store
from kernel.config import Config, parse_duration
from kernel.jsontypes import JsonObject

_HEADER = """\
# dir2mcp configuration (spec §16).
# Precedence: command-line flags > environment (DIR2MCP_<SECTION>__<KEY>) > this file > defaults.
# API keys are ${VAR} references: keep the keys themselves in the environment, the OS keychain
# or the secret file (secrets.file.path); `dir2mcp config init` on a terminal stores them for you.
"""
_DURATION_HINT = "duration: 90s, 30m, 24h, 1h30m; 0 = no limit"
_SECRET_HINT = "reference only; never write the key here"
_NOTES = {
    "server.listen": "host:port; port 0 picks a free port",
    "server.protocol_version": "fixed: each client's MCP version is agreed at initialize",
    "security.auth.token_file": "used when mode=file",
    "security.auth.token_env": "variable holding the bearer token",
    "secrets.file.path": "relative to the root directory",
    "ingest.max_file_mb_by_type": "per doc_type ceiling in MB",
    "ingest.prepare_processes": "auto|0|N processes preparing files beside the writer (auto: cores-1, max 4)",
}


def _field_comment(dotted: str, info: FieldInfo | None) -> str:
    if info is None:
        return ""
    notes = []
    choices = typing.get_args(info.annotation) if typing.get_origin(info.annotation) is typing.Literal else ()
    if len(choices) > 1:
        notes.append("|".join(str(choice) for choice in choices))
    if any(getattr(meta, "func", None) is parse_duration for meta in info.metadata):
        notes.append(_DURATION_HINT)
    if any(dotted in fields for fields in secret_store.SECRET_FIELDS.values()):
        notes.append(_SECRET_HINT)
    if dotted in _NOTES:
        notes.append(_NOTES[dotted])
    return f"  # {'; '.join(notes)}" if notes else ""


def _scalar(value: object) -> str:
    return yaml.safe_dump(value, width=10**6, allow_unicode=True).removesuffix("\n...\n").rstrip("\n")


def _block_lines(pad: str, key: str, value: str, comment: str) -> list[str]:
    chomp = "+" if value.endswith("\n\n") else ("" if value.endswith("\n") else "-")
    body = [f"{pad}  {line}" if line else "" for line in value.splitlines()]
    return [f"{pad}{key}: |{chomp}{comment}", *body]


def _render(model: type[BaseModel] | None, data: JsonObject, prefix: str, lines: list[str]) -> None:
    depth = prefix.count(".") + 1 if prefix else 0
    pad = "  " * depth
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else key
        info = model.model_fields.get(key) if model else None
        comment = _field_comment(dotted, info)
        if isinstance(value, dict) and value:
            if depth == 0:
                lines.append("")
            lines.append(f"{pad}{key}:{comment}")
            child = info.annotation if info else None
            submodel = child if isinstance(child, type) and issubclass(child, BaseModel) else None
            _render(submodel, value, dotted, lines)
        elif isinstance(value, list) and value:
            lines.append(f"{pad}{key}:{comment}")
            lines.extend(f"{pad}  - {_scalar(item)}" for item in value)
        elif isinstance(value, str) and "\n" in value and value[:1] not in " \t":
            lines.extend(_block_lines(pad, key, value, comment))
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}{comment}")


def render_config(config: Config) -> str:
    """``config`` as a commented ``.dir2mcp.yaml`` holding every key."""
    lines = [_HEADER.rstrip("\n")]
    _render(Config, config.model_dump(mode="json"), "", lines)
    return "\n".join(lines) + "\n"
