"""``config print`` and ``config init`` (spec §2.1, §16).

``print`` shows the effective configuration with every secret replaced by
where it comes from. ``init`` writes ``.dir2mcp.yaml``: a short wizard on a
TTY, otherwise a commented template generated from the schema defaults (so
it cannot drift from :mod:`corpus.config`). Neither ever shows a secret.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import CommandError

from corpus import secrets as secret_store
from corpus.config import Config, default_config_path, load_config
from corpus.config_template import render_config
from corpus.events import Reporter
from corpus.management.base import Dir2mcpCommand, resolve_root, resolve_state
from corpus.setup_wizard import WizardResult, run_wizard
from corpus.state import StateDir, atomic_write


def _write_snapshot(config_path: Path, state: StateDir, root: Path, session: dict[str, str]) -> bool:
    effective = load_config(config_path)
    resolved = secret_store.resolve_all(effective, state, session=session, root=root)
    try:
        state.path.mkdir(parents=True, exist_ok=True)
        secret_store.write_snapshot(effective, resolved, state)
    except OSError:
        return False
    return True


class Command(Dir2mcpCommand):
    help = "Print the effective configuration (config print) or create .dir2mcp.yaml (config init)."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="{print,init}")
        cli = {"called_from_command_line": getattr(parser, "called_from_command_line", None)}
        show = actions.add_parser(
            "print", help="Print the effective config (defaults + file + env) with secrets redacted.", **cli
        )
        init = actions.add_parser(
            "init", help="Create .dir2mcp.yaml: a wizard on a terminal, else a commented template.", **cli
        )
        # Global flags go on each subcommand so `config init --dir X` parses.
        for sub in (show, init):
            super().add_arguments(sub)
        init.add_argument("--force", action="store_true", help="Overwrite an existing config file.")

    def handle(self, *args, **options):
        if options["action"] == "print":
            self.print_config(options)
        else:
            self.init_config(options)

    def print_config(self, options: dict) -> None:
        runtime = self.runtime(options)
        resolved = secret_store.resolve_all(runtime.config, runtime.state, root=runtime.root)
        data = secret_store.redacted_config(runtime.config, resolved)
        if runtime.json:
            self.stdout.write(json.dumps(data))
        else:
            self.stdout.write(secret_store.dump_yaml(data), ending="")

    def init_config(self, options: dict) -> None:
        # Not self.runtime(): init must work when the target file is missing
        # or broken, which runtime() rejects while loading it.
        root = resolve_root(options.get("dir"))
        state = resolve_state(options.get("state_dir"), options.get("dir"), root)
        path = Path(options["config"]).expanduser().absolute() if options.get("config") else None
        path = path or default_config_path(root)
        if path.exists() and not options["force"]:
            raise CommandError(f"{path} already exists; pass --force to overwrite it.", returncode=1)
        reporter = Reporter(self.stdout._out, json_mode=options["json"], quiet=options["quiet"])
        tty = sys.stdin.isatty() and sys.stdout.isatty()
        if tty and not options["non_interactive"] and not options["json"]:
            result = run_wizard(state, root)
        else:
            result = WizardResult(Config())
        atomic_write(path, render_config(result.config))
        snapshot = _write_snapshot(path, state, root, result.session)
        reporter.event("config_written", {"path": str(path), "snapshot": snapshot})
        reporter.say(f"Wrote {path}")
        for note in result.notes:
            reporter.say(note)
        if not snapshot:
            reporter.warn(f"could not write the config snapshot in {state.path}")
