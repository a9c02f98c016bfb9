"""``dir2mcp up``: serve a directory over MCP while it is indexed (spec §2.3–§3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandParser

from corpus.management.base import Dir2mcpCommand, Runtime
from corpus.models import Document
from kernel import errors
from kernel.config import Config
from kernel.jsontypes import JsonObject
from mcp_gateway import background, connection, context, listen, preflight, server
from mcp_gateway.context import Context


class Command(Dir2mcpCommand):
    help = (
        "Start the MCP server (Streamable HTTP) for a directory and index it in the background, "
        "following file changes until interrupted."
    )

    def add_command_arguments(self, parser: CommandParser) -> None:
        group = parser.add_argument_group("server")
        group.add_argument("--listen", help="host:port to bind (default: server.listen, 127.0.0.1:0).")
        group.add_argument("--mcp-path", help="Path of the MCP endpoint (default: /mcp).")
        group.add_argument(
            "--public", action="store_true", help="Bind all interfaces (0.0.0.0); requires a bearer token."
        )
        group.add_argument(
            "--auth",
            help="auto | none | file:<path>. Never pass a token itself on the command line; "
            "use file:<path> or DIR2MCP_AUTH_TOKEN.",
        )
        group.add_argument("--tls-cert", help="PEM certificate (with --tls-key): serve https.")
        group.add_argument("--tls-key", help="PEM private key for --tls-cert.")
        group.add_argument(
            "--read-only",
            action="store_true",
            help="Refuse (FORBIDDEN) any tool that would store something, such as annotate's result or "
            "transcribe's transcript; indexing goes on.",
        )
        group.add_argument(
            "--no-index",
            action="store_true",
            help="Serve the index as it is: no scan and no live sync (an index built by `reindex`).",
        )
        pay = parser.add_argument_group("x402 payments")
        pay.add_argument("--x402", choices=("off", "on", "required"), help="x402 mode (default off).")
        pay.add_argument("--x402-facilitator-url", help="Facilitator that verifies and settles payments.")
        pay.add_argument("--x402-resource-base-url", help="Public base URL used in payment requirements.")
        pay.add_argument("--x402-network", help="CAIP-2 network id, e.g. eip155:8453.")
        pay.add_argument("--x402-price", help="Default price per paid call.")

    def handle(self, *args: Any, **options: Any) -> None:  # Any: BaseCommand.handle's signature
        rt = self.runtime(options, config_flags=config_flags(options))
        cfg = rt.config
        address = listen.serving_address(cfg.server)
        spec = auth_spec(options, cfg)
        preflight.check_reach(spec, address, public=cfg.server.public)
        warning = preflight.payments_warning(cfg)  # before anything is written
        if warning:
            rt.reporter.warn(warning)
        tls = tls_files(rt)
        if options["no_index"]:
            background.serve_read_only_state(rt)
        if spec.startswith("file:"):  # a missing or empty token file fails before any state is written
            context.resolve_auth(spec, cfg, rt.state, root=rt.root)
        ctx = background.serving_context(
            rt,
            self.prepare_state,
            auth_spec=spec,
            check_later=True,  # a large index once serving (mcp_gateway/server.py)
            read_only=bool(options["read_only"]),
            public=cfg.server.public,
            mcp_path=normalize_path(cfg.server.mcp_path),
        )
        if not address.loopback and not ctx.auth.required:
            rt.reporter.warn(f"serving {address} with no authentication")
        server.allow_hosts(address, public=cfg.server.public)
        rt.reporter.event("index_loaded", {"state_dir": str(rt.state.path), "documents": _document_count()})
        indexing = not options["no_index"]
        server.serve(
            ctx,
            address,
            reporter=rt.reporter,
            tls=tls,
            announce=lambda listening: self.announce(rt, ctx, listening, spec, indexing=indexing),
            index=indexing,
        )
        rt.reporter.say("Stopped.")

    def announce(
        self, rt: Runtime, ctx: Context, listening: server.Listening, spec: str, *, indexing: bool
    ) -> None:
        """The server listens: write connection.json, tell the user how to connect."""
        connection.write_connection_json(
            rt.state, connection.connection_document(ctx, listening.url, listening.address)
        )
        if rt.json:
            rt.reporter.event(
                "server_started", connection.started_data(ctx, listening.url, listening.address)
            )
            rt.reporter.event("connection", connection.connection_data(ctx, listening.url))
            return
        lines = [] if rt.quiet else [*connection.index_lines(ctx, indexing=indexing), ""]
        lines += [*connection.started_block(ctx, listening.url, listening.address, spec), ""]
        rt.reporter.stream.write("\n".join(lines) + "\n")
        rt.reporter.stream.flush()


def config_flags(options: JsonObject) -> JsonObject:
    """The flags as config keys (flags beat env and file, spec §16.1)."""
    flags: JsonObject = {}

    def put(dotted: str, value: object) -> None:
        node = flags
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value

    if options.get("listen"):
        put("server.listen", options["listen"])
    if options.get("mcp_path"):
        put("server.mcp_path", options["mcp_path"])
    if options.get("public"):
        put("server.public", True)
    if options.get("tls_cert") or options.get("tls_key"):
        put("server.tls.enabled", True)
        put("server.tls.cert_file", _absolute(options.get("tls_cert")))
        put("server.tls.key_file", _absolute(options.get("tls_key")))
    auth = (options.get("auth") or "").strip()
    if auth.startswith("file:") and auth != "file:":
        put("security.auth.mode", "file")
        put("security.auth.token_file", _absolute(auth[len("file:") :]))
    elif auth in ("auto", "none"):
        put("security.auth.mode", auth)
    if options.get("x402"):
        put("x402.mode", options["x402"])
        put("x402.enabled", options["x402"] != "off")
    for flag, key in (
        ("x402_facilitator_url", "x402.facilitator_url"),
        ("x402_resource_base_url", "x402.resource_base_url"),
        ("x402_network", "x402.route_policy.tools_call.network"),
        ("x402_price", "x402.route_policy.tools_call.price"),
    ):
        if options.get(flag):
            put(key, options[flag])
    return flags


def auth_spec(options: JsonObject, cfg: Config) -> str:
    """``auto``, ``none`` or ``file:<absolute path>``: flag, then DIR2MCP_AUTH, then config."""
    raw = (options.get("auth") or "").strip()
    if raw.startswith("file:") and raw != "file:":
        return "file:" + _absolute(raw[len("file:") :])
    if raw in ("auto", "none"):
        return raw
    if raw:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"--auth must be auto, none or file:<path>, not {raw!r}",
            hint="Never pass the token itself: put it in a file (chmod 600) and use --auth file:<path>.",
        )
    return context.default_auth_spec(cfg)


def tls_files(rt: Runtime) -> listen.TlsFiles | None:
    tls = rt.config.server.tls
    if not (tls.enabled or tls.cert_file or tls.key_file):
        return None
    found = listen.check_tls(_under(rt.root, tls.cert_file), _under(rt.root, tls.key_file))
    if found is None:
        raise errors.Dir2mcpError(
            errors.TLS_CONFIG_INVALID,
            "server.tls.enabled is set but no certificate and key are configured",
            hint="Pass --tls-cert and --tls-key, or set server.tls.cert_file and key_file.",
        )
    return found


def normalize_path(path: str) -> str:
    path = (path or "/mcp").strip()
    return path if path.startswith("/") else f"/{path}"


def _absolute(path: str | None) -> str:
    return str(Path(path).expanduser().absolute()) if path else ""


def _under(root: Path, path: str) -> Path | None:
    if not path:
        return None
    found = Path(path).expanduser()
    return found if found.is_absolute() else root / found


def _document_count() -> int:
    return Document.objects.filter(deleted=False).count()
