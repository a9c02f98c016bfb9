"""``dir2mcp up``: serve a directory over MCP while it is indexed (spec §2.3–§3)."""

from __future__ import annotations

import os
from pathlib import Path

from django.urls import resolve

from corpus import errors
from corpus.management.base import Dir2mcpCommand, Runtime
from mcp_gateway import context, server


class Command(Dir2mcpCommand):
    help = (
        "Start the MCP server (Streamable HTTP) for a directory and index it in the background, "
        "following file changes until interrupted."
    )

    def add_command_arguments(self, parser) -> None:
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
        group.add_argument("--read-only", action="store_true", help="Refuse any tool that would write.")
        pay = parser.add_argument_group("x402 payments")
        pay.add_argument("--x402", choices=("off", "on", "required"), help="x402 mode (default off).")
        pay.add_argument("--x402-facilitator-url", help="Facilitator that verifies and settles payments.")
        pay.add_argument("--x402-resource-base-url", help="Public base URL used in payment requirements.")
        pay.add_argument("--x402-network", help="CAIP-2 network id, e.g. eip155:8453.")
        pay.add_argument("--x402-price", help="Default price per paid call.")

    def handle(self, *args, **options):
        rt = self.runtime(options, config_flags=config_flags(options))
        cfg = rt.config
        address = server.parse_listen(cfg.server.listen)
        public = cfg.server.public
        if public:
            address = server.public_address(address)
        spec = auth_spec(options, cfg)
        if spec == "none" and (public or not address.loopback):
            raise errors.Dir2mcpError(
                errors.CONFIG_INVALID,
                f"serving {address} (beyond loopback) requires a bearer token; --auth none is refused",
                hint="Drop --auth none (a token is generated in secret.token), or use --auth file:<path>.",
            )
        if cfg.x402.mode != "off":
            # Refused rather than announced: nothing would charge for the calls yet.
            raise errors.Dir2mcpError(
                errors.CONFIG_INVALID,
                f"x402 mode {cfg.x402.mode!r} is not available in this build: payments are not enforced yet",
                hint="Use --x402 off (the default); payment enforcement comes with the payments feature.",
            )
        tls = tls_files(rt)
        if spec.startswith("file:"):  # a missing or empty token file fails before any state is written
            context.resolve_auth(spec, cfg, rt.state, root=rt.root)
        ctx = server.serving_context(
            rt,
            self.prepare_state,
            auth_spec=spec,
            read_only=bool(options["read_only"]),
            public=public,
            mcp_path=normalize_path(cfg.server.mcp_path),
        )
        if not address.loopback and not ctx.auth.required:
            rt.reporter.warn(f"serving {address} with no authentication")
        server.allow_hosts(address, public=public)
        # Load the request path now (URLconf, endpoint, tool registry), so the
        # first request does not pay for imports while the indexer starts.
        resolve(ctx.mcp_path)
        rt.reporter.event("index_loaded", {"state_dir": str(rt.state.path), "documents": _document_count()})

        server.serve(
            ctx,
            address,
            reporter=rt.reporter,
            tls=tls,
            announce=lambda listening: self.announce(rt, ctx, listening, spec, ctx.embedder is not None),
        )
        rt.reporter.say("Stopped.")

    def announce(self, rt: Runtime, ctx, listening: server.Listening, spec: str, dense: bool) -> None:
        """The server listens: write connection.json, tell the user how to connect."""
        server.write_connection_json(
            rt.state, server.connection_document(ctx, listening.url, listening.address)
        )
        reporter = rt.reporter
        if rt.json:
            reporter.event(
                "server_started",
                {
                    "listen": str(listening.address),
                    "url": listening.url,
                    "pid": os.getpid(),
                    "tls": listening.url.startswith("https:"),
                    "public": ctx.public,
                    "read_only": ctx.read_only,
                    "mcp_path": ctx.mcp_path,
                    "x402_mode": rt.config.x402.mode,
                },
            )
            reporter.event("connection", server.connection_data(ctx, listening.url))
            return
        files = "meta.sqlite + vectors_text.hnsw + vectors_code.hnsw" if dense else "meta.sqlite"
        lines = (
            []
            if rt.quiet
            else [
                f"Index: {rt.state.path}  ({files})",
                "Mode: incremental  (server-first; indexing in background)",
                "",
            ]
        )
        block = server.connection_block(ctx, listening.url, spec)
        if listening.address.wildcard:
            block.insert(2, f"  Listen: {listening.address}  (all interfaces)")
        if rt.config.x402.mode != "off":
            block.append(f"  Payments: x402 {rt.config.x402.mode}")
        lines += [*block, ""]
        reporter.stream.write("\n".join(lines) + "\n")
        reporter.stream.flush()


def config_flags(options: dict) -> dict:
    """The flags as config keys (flags beat env and file, spec §16.1)."""
    flags: dict = {}

    def put(dotted: str, value) -> None:
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


def auth_spec(options: dict, cfg) -> str:
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
    raw = os.environ.get(context.AUTH_ENV, "").strip()
    if raw:
        return raw
    auth = cfg.security.auth
    if auth.mode == "file" and auth.token_file:
        return f"file:{auth.token_file}"
    return auth.mode


def tls_files(rt: Runtime) -> server.TlsFiles | None:
    tls = rt.config.server.tls
    if not (tls.enabled or tls.cert_file or tls.key_file):
        return None
    found = server.check_tls(_under(rt.root, tls.cert_file), _under(rt.root, tls.key_file))
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
    from corpus.models import Document

    return Document.objects.filter(deleted=False).count()
