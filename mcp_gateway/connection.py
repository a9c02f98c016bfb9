"""What clients are told: the connection event, ``connection.json`` and
the §3.1 block, each with the token's source and never its value."""

from __future__ import annotations

import logging
import os

from corpus import store
from kernel.jsontypes import JsonObject
from kernel.state import StateDir, write_json
from mcp_gateway.context import Context
from mcp_gateway.listen import ListenAddress
from mcp_gateway.modern import VERSION as STATELESS_VERSION

log = logging.getLogger(__name__)

TRANSPORT = "mcp_streamable_http"
PROTOCOL_VERSION = "2025-11-25"
SESSION_HEADER = "MCP-Session-Id"

# -- what clients are told ------------------------------------------------------


def token_placeholder(ctx: Context) -> str:
    return {
        "secret.token": "<token-from-secret.token>",
        "env": "<token-from-env>",
        "file": "<token-from-file>",
    }.get(ctx.auth.source, "<token>")


def headers(ctx: Context, placeholder: str = "<token>") -> dict[str, str]:
    out = {"MCP-Protocol-Version": PROTOCOL_VERSION}
    if ctx.auth.required:
        out["Authorization"] = f"Bearer {placeholder}"
    return out


def connection_data(ctx: Context, url: str) -> JsonObject:
    """``connection.data`` (spec §3.2): never the token itself."""
    data = {
        "transport": TRANSPORT,
        "url": url,
        "headers": headers(ctx),
        "token_source": ctx.auth.source,
    }
    if ctx.auth.source == "file":
        data["token_file"] = ctx.auth.token_file
    elif ctx.auth.source == "env":
        data["token_env"] = ctx.config.security.auth.token_env
    return data


def connection_document(ctx: Context, url: str, address: ListenAddress) -> JsonObject:
    """``connection.json`` (spec §4.3), plus where the token is and who serves."""
    doc: JsonObject = {
        "transport": TRANSPORT,
        "url": url,
        "headers": headers(ctx, token_placeholder(ctx)),
        "session": {
            "uses_mcp_session_id": True,
            "header_name": SESSION_HEADER,
            "assigned_on_initialize": True,
        },
        # 2026-07-28: no initialize and no session; every request says its version.
        "protocol_versions": {"stateless": [STATELESS_VERSION], "session": [PROTOCOL_VERSION]},
        "token_source": ctx.auth.source,
    }
    if ctx.auth.source in ("file", "secret.token"):
        doc["token_file"] = ctx.auth.token_file
    elif ctx.auth.source == "env":
        doc["token_env"] = ctx.config.security.auth.token_env
    doc["listen"] = str(address)
    doc["pid"] = os.getpid()
    return doc


def write_connection_json(state: StateDir, document: JsonObject) -> None:
    write_json(state.connection_json, document)


def auth_line(ctx: Context, spec: str = "") -> str:
    """The human ``Auth:`` value: where the token is, never what it is."""
    auth = ctx.auth
    if not auth.required:
        return "none (no token required)"
    if auth.source == "env":
        return f"Bearer (source=env, from ${ctx.config.security.auth.token_env})"
    if auth.source == "file":
        origin = f"--auth {spec}" if spec.startswith("file:") else "security.auth.token_file"
        return f"Bearer (source=file, {auth.token_file}, from {origin})"
    return f"Bearer (source=secret.token, stored in {auth.token_file})"


def connection_block(ctx: Context, url: str, spec: str = "") -> list[str]:
    """The §3.1 MCP endpoint block."""
    lines = ["MCP endpoint:", f"  URL:    {url}", f"  Auth:   {auth_line(ctx, spec)}", "  Headers:"]
    lines += [f"    {name}: {value}" for name, value in headers(ctx).items()]
    lines.append(f"    {SESSION_HEADER}: (assigned after initialize response)")
    lines.append(f"  {STATELESS_VERSION} clients: no initialize and no {SESSION_HEADER} (stateless)")
    return lines


# -- what `up` says once it listens ---------------------------------------------


def started_data(ctx: Context, url: str, address: ListenAddress) -> JsonObject:
    """The ``server_started`` event's data."""
    return {
        "listen": str(address),
        "url": url,
        "pid": os.getpid(),
        "tls": url.startswith("https:"),
        "public": ctx.public,
        "read_only": ctx.read_only,
        "mcp_path": ctx.mcp_path,
        "x402_mode": ctx.config.x402.mode,
        "admin_url": url.removesuffix(ctx.mcp_path) + "/admin/",
    }


def index_lines(ctx: Context, *, indexing: bool) -> list[str]:
    """Where the index is, what it holds, and whether it is kept in sync."""
    files = store.describe(ctx.state, dense=ctx.embedder is not None)
    mode = (
        "Mode: incremental  (server-first; indexing in background)"
        if indexing
        else "Mode: serving the index as it is  (--no-index: no scan, no live sync)"
    )
    return [f"Index: {ctx.state.path}  ({files})", mode]


def started_block(ctx: Context, url: str, address: ListenAddress, spec: str = "") -> list[str]:
    """The §3.1 block with where it listens, the payments, the admin and the status page."""
    block = connection_block(ctx, url, spec)
    if address.wildcard:
        block.insert(2, f"  Listen: {address}  (all interfaces)")
    mode = ctx.config.x402.mode
    if mode != "off":
        state = "enforced" if ctx.gate is not None else "NOT enforced: configuration incomplete"
        block.append(f"  Payments: x402 {mode} ({state})")
    site = url.removesuffix(ctx.mcp_path)
    return [
        *block,
        f"  Admin:  {site}/admin/  (first user: dir2mcp createadmin --dir {ctx.root})",
        f"  Status: {site}/ops/status/",
    ]
