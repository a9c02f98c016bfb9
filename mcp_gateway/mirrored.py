"""The body fields a 2026-07-28 request mirrors into HTTP headers, checked
against the body (the Streamable HTTP transport's "Server Validation").

``MCP-Protocol-Version`` must equal ``_meta``'s protocol version, ``Mcp-Method``
the method, and ``Mcp-Name`` the ``name`` (``tools/call``, ``prompts/get``) or
``uri`` (``resources/read``); a tool argument whose schema carries
``x-mcp-header: X`` travels as ``Mcp-Param-X`` as well. Leading and trailing
whitespace of a value is not part of it (RFC 9110); ``Mcp-Name`` and
``Mcp-Param-*`` may be spelled ``=?base64?...?=`` and are decoded first (a
malformed encoding is refused). A header missing where the body has the
value, a value that differs, or a value with characters a header cannot
carry is refused: 400 with -32020 (HeaderMismatch), as :class:`modern.Refusal`.

Pure functions over the message and a mapping of lower-cased header names.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from kernel.jsontypes import JsonObject
from mcp_gateway.modern import META_VERSION, RPC_HEADER_MISMATCH, Refusal
from mcp_gateway.transport import Message

#: The body field ``Mcp-Name`` mirrors, per method.
NAME_FIELDS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
PARAM_PREFIX = "mcp-param-"
_SENTINEL = ("=?base64?", "?=")


def _refuse(message: str) -> Refusal:
    return Refusal(RPC_HEADER_MISMATCH, f"Header mismatch: {message}")


def _clean(name: str, value: str) -> str:
    """The value without its surrounding whitespace; refused when it holds
    anything but visible ASCII, spaces and tabs."""
    if any(not (0x20 <= ord(c) <= 0x7E or c == "\t") for c in value):
        raise _refuse(f"{name} holds characters a header value cannot carry")
    return value.strip(" \t")


def decode(name: str, value: str) -> str:
    """A header value, its base64 sentinel form decoded (strictly: padding
    and alphabet checked, UTF-8)."""
    value = _clean(name, value)
    start, end = _SENTINEL
    if not (value.startswith(start) and value.endswith(end) and len(value) >= len(start) + len(end)):
        return value
    try:
        return base64.b64decode(value[len(start) : -len(end)], validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise _refuse(f"{name} is not valid base64 between =?base64? and ?=") from None


def check(msg: Message, headers: Mapping[str, str], input_schema: JsonObject | None = None) -> None:
    """Refuse (``Refusal`` -32020) a request whose mirrored headers disagree
    with its body. ``input_schema`` is the called tool's, for ``Mcp-Param-*``."""
    version = headers.get("mcp-protocol-version")
    if version is None:
        raise _refuse("the MCP-Protocol-Version header is required")
    fields = msg.params.get("_meta")
    body_version = fields.get(META_VERSION) if isinstance(fields, dict) else None
    if _clean("MCP-Protocol-Version", version) != body_version:
        raise _refuse(
            f"MCP-Protocol-Version header {version.strip()[:40]!r} does not match "
            f"_meta protocol version {str(body_version)[:40]!r}"
        )
    method = headers.get("mcp-method")
    if method is None:
        raise _refuse("the Mcp-Method header is required")
    if _clean("Mcp-Method", method) != msg.method:
        raise _refuse(
            f"Mcp-Method header {method.strip()[:100]!r} does not match body method {msg.method[:100]!r}"
        )
    field = NAME_FIELDS.get(msg.method)
    body_name = msg.params.get(field) if field else None
    if isinstance(body_name, str):
        name = headers.get("mcp-name")
        if name is None:
            raise _refuse(f"the Mcp-Name header is required for {msg.method}")
        if decode("Mcp-Name", name) != body_name:
            raise _refuse(f"Mcp-Name header does not match body params.{field}")
    if msg.method == "tools/call" and input_schema:
        arguments = msg.params.get("arguments")
        _check_params(headers, input_schema, arguments if isinstance(arguments, dict) else {})


def header_params(schema: JsonObject, path: tuple[str, ...] = ()) -> list[tuple[str, tuple[str, ...], str]]:
    """``(header suffix, property path, JSON type)`` of each property marked
    ``x-mcp-header``, reached through ``properties`` only."""
    found = []
    for key, sub in (schema.get("properties") or {}).items():
        if not isinstance(sub, dict):
            continue
        if isinstance(sub.get("x-mcp-header"), str):
            found.append((sub["x-mcp-header"], (*path, key), str(sub.get("type", ""))))
        if isinstance(sub.get("properties"), dict):
            found += header_params(sub, (*path, key))
    return found


def _at(arguments: JsonObject, path: tuple[str, ...]) -> object:
    value = arguments
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _check_params(headers: Mapping[str, str], schema: JsonObject, arguments: JsonObject) -> None:
    for suffix, path, _type in header_params(schema):
        header_name = f"Mcp-Param-{suffix}"
        raw = headers.get(PARAM_PREFIX + suffix.lower())
        value = _at(arguments, path)
        if raw is not None:
            raw = decode(header_name, raw)
        if value is None:
            continue  # no value in the body: no header expected
        if raw is None:
            raise _refuse(f"the {header_name} header is required when arguments.{'.'.join(path)} is given")
        if not _same(raw, value):
            raise _refuse(f"{header_name} header does not match arguments.{'.'.join(path)}")


def _same(header: str, value: object) -> bool:
    if isinstance(value, bool):
        return header == ("true" if value else "false")
    if isinstance(value, int | float):
        try:
            return float(header) == value
        except ValueError:
            return False
    return isinstance(value, str) and header == value
