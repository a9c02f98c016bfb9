"""The base of every dir2mcp command: global flags (spec §2.2), the root and
state directory, the effective config, and the error → exit code mapping."""

from __future__ import annotations

import gc
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from corpus import store_faults
from corpus.events import Reporter
from corpus.index.dense.choice import announce_embedder, choose_embedder
from corpus.providers.base import ChatModel, Embedder
from corpus.providers.registry import EmbedderChoice, make_chat
from kernel import errors
from kernel.config import Config, config_named, default_config_path, load_config
from kernel.jsontypes import JsonObject
from kernel.secrets import resolve_all, resolve_secret, write_snapshot
from kernel.state import StateDir, ensure_token, resolve_root, resolve_state


@dataclass
class Runtime:
    """What a command works on, resolved from flags, env and settings."""

    root: Path
    state: StateDir
    config_path: Path
    config: Config
    reporter: Reporter
    json: bool
    quiet: bool
    interactive: bool
    #: why :meth:`embedder` made what it made (corpus.providers.registry.EmbedderChoice)
    embedder_choice: EmbedderChoice | None = None

    def secret(self, name: str) -> str | None:
        return resolve_secret(name, self.config, self.state, root=self.root).value

    def embedder(self, *, switch: bool = False, events: bool = True) -> Embedder | None:
        """The embedder to index and search with (None: lexical only).

        The configured one, unless the index was built with another: then
        the recorded one is kept (or, when it cannot be made here, search is
        lexical only), and a warning and an NDJSON event (unless not
        ``events``) say so. ``switch``: a full reindex takes the configured
        one whatever the index holds."""
        embedder, choice = choose_embedder(self.config, self.state, secrets_lookup=self.secret, switch=switch)
        self.embedder_choice = choice
        announce_embedder(choice, self.reporter if events else None)
        return embedder

    def chat(self) -> ChatModel | None:
        """The configured chat model, or None (answers become search-only)."""
        return make_chat(self.config, secrets_lookup=self.secret)


class Dir2mcpCommand(BaseCommand):
    """Adds the global flags and turns :class:`Dir2mcpError` into exit codes."""

    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        group = parser.add_argument_group("global flags")
        group.add_argument("--dir", help="Root directory to index (default: current directory).")
        group.add_argument("--config", help="Config file (default: <root>/.dir2mcp.yaml).")
        group.add_argument("--state-dir", help="State directory (default: <root>/.dir2mcp).")
        group.add_argument("--json", action="store_true", help="Emit NDJSON events instead of text.")
        group.add_argument(
            "--non-interactive", action="store_true", help="Never prompt; fail with instructions instead."
        )
        group.add_argument("--quiet", action="store_true", help="Print only errors and final results.")
        self.add_command_arguments(parser)

    def add_command_arguments(self, parser: CommandParser) -> None:
        """Subclasses add their own flags here."""

    def runtime(self, options: JsonObject, *, config_flags: JsonObject | None = None) -> Runtime:
        root = resolve_root(options.get("dir"))
        state = resolve_state(options.get("state_dir"), options.get("dir"), root)
        config_path = Path(options["config"]).absolute() if options.get("config") else None
        if config_path is None:
            config_path = default_config_path(root)
            if options.get("dir") and not os.environ.get("DIR2MCP_CONFIG"):
                config_path = root / ".dir2mcp.yaml"
        elif not config_path.is_file():
            raise errors.Dir2mcpError(
                errors.CONFIG_INVALID, f"config file {config_path} does not exist", hint="Check --config."
            )
        named = bool(options.get("config")) or config_named()
        config = load_config(config_path, flags=config_flags, named=named)
        reporter = self.reporter(options)
        interactive = not options.get("non_interactive") and sys.stdin.isatty() and sys.stdout.isatty()
        return Runtime(
            root=root,
            state=state,
            config_path=config_path,
            config=config,
            reporter=reporter,
            json=bool(options.get("json")),
            quiet=bool(options.get("quiet")),
            interactive=interactive,
        )

    def reporter(self, options: JsonObject) -> Reporter:
        """Events and lines on the command's standard output (``--json``, ``--quiet``)."""
        return Reporter(
            self.stdout._out,  # type: ignore[arg-type]  # a text stream; django-stubs types it as a callable
            json_mode=options.get("json", False),
            quiet=bool(options.get("quiet")),
        )

    def prepare_state(self, rt: Runtime) -> None:
        """Write what every indexing command leaves in the state directory:
        the config snapshot (secrets as sources only) and, with
        ``security.auth.mode: auto`` and no token from elsewhere, ``secret.token``."""
        secrets = resolve_all(rt.config, rt.state, root=rt.root)
        if rt.config.security.auth.mode == "auto" and secrets["auth_token"].source == "unset":
            ensure_token(rt.state)
            secrets = resolve_all(rt.config, rt.state, root=rt.root)
        write_snapshot(rt.config, secrets, rt.state)

    def execute(self, *args: Any, **options: Any) -> str | None:  # Any: BaseCommand.execute's signature
        # The collector was off while the command loaded (dir2mcp_site/cli.py:
        # main). What loading made lives as long as the process, so frozen,
        # the command's own collections no longer walk it.
        gc.freeze()
        gc.enable()
        try:
            return super().execute(*args, **options)
        except KeyboardInterrupt:
            # Ctrl-C: a line and the shell's code for SIGINT, not a traceback.
            # Each batch is one transaction, so what was committed stays whole
            # and the next run (``reindex --incremental``, ``up``) goes on from it.
            self.stderr.write("Interrupted.")
            raise SystemExit(130) from None
        except Exception as exc:
            # A coded error, or a store fault (a damaged database, a full
            # disk) found under whatever the failing call raised.
            found = exc if isinstance(exc, errors.Dir2mcpError) else store_faults.classify(exc)
            if found is None:
                raise
            self.report_fatal(found, json_mode=options.get("json", False))
            raise SystemExit(found.exit_code) from None

    def report_fatal(self, exc: errors.Dir2mcpError, *, json_mode: bool) -> None:
        if json_mode:
            Reporter(self.stdout._out, json_mode=True).event(  # type: ignore[arg-type]  # as in runtime()
                "fatal", {**exc.as_dict(), "hint": exc.hint}, level="error"
            )
            return
        self.stderr.write(f"ERROR: {exc.code}: {exc.message}")
        if exc.hint:
            self.stderr.write(exc.hint)
