"""``config print`` and ``config init`` (spec §2.1, §16).

``print`` shows the effective configuration with every secret replaced by
where it comes from. ``init`` writes ``.dir2mcp.yaml``: a short wizard on a
TTY, otherwise a commented template generated from the schema defaults (so
it cannot drift from :mod:`corpus.config`). Neither ever shows a secret.
"""

from __future__ import annotations

import getpass
import json
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import CommandError
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from corpus import secrets as secret_store
from corpus.config import Config, default_config_path, load_config, parse_duration
from corpus.events import Reporter
from corpus.management.base import Dir2mcpCommand, resolve_root, resolve_state
from corpus.state import StateDir, atomic_write

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
    "security.auth.token_file": "used when mode=file",
    "security.auth.token_env": "variable holding the bearer token",
    "secrets.file.path": "relative to the root directory",
    "ingest.max_file_mb_by_type": "per doc_type ceiling in MB",
}
_SECRET_LABELS = {"mistral_api_key": "Mistral API key", "elevenlabs_api_key": "ElevenLabs API key"}


# -- template rendering ------------------------------------------------------


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


def _scalar(value: Any) -> str:
    return yaml.safe_dump(value, width=10**6, allow_unicode=True).removesuffix("\n...\n").rstrip("\n")


def _block_lines(pad: str, key: str, value: str, comment: str) -> list[str]:
    chomp = "+" if value.endswith("\n\n") else ("" if value.endswith("\n") else "-")
    body = [f"{pad}  {line}" if line else "" for line in value.splitlines()]
    return [f"{pad}{key}: |{chomp}{comment}", *body]


def _render(model: type[BaseModel] | None, data: dict, prefix: str, lines: list[str]) -> None:
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
            is_model = isinstance(child, type) and issubclass(child, BaseModel)
            _render(child if is_model else None, value, dotted, lines)
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


# -- the wizard --------------------------------------------------------------


@dataclass
class WizardResult:
    """What the wizard decided: the config to write and where secrets went."""

    config: Config
    session: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _choose(prompt: str, choices: list[str], default: str) -> str:
    while True:
        answer = input(f"{prompt} [{'/'.join(choices)}] (default {default}): ").strip().lower()
        if not answer:
            return default
        if answer in choices:
            return answer
        print(f"Please answer one of: {', '.join(choices)}.")


def _ask_key(label: str) -> str:
    # getpass turns terminal echo off: the key is never shown (§2.5).
    return getpass.getpass(f"{label} (input hidden; Enter to skip): ").strip()


def _stored_note(label: str, secret: secret_store.Secret) -> str:
    if secret.source == "env":
        return f"{label} not stored: before running dir2mcp, export {secret.detail}=<your key>"
    if secret.source == "session":
        return f"{label} kept for this session only; dir2mcp will ask again next time."
    where = "the OS keychain" if secret.source == "keychain" else "the secret file"
    return f"{label} stored in {where} ({secret.detail})."


def run_wizard(state: StateDir, root: Path) -> WizardResult:
    """Ask for keys, STT provider and secret store; store the keys."""
    keys = {"mistral_api_key": _ask_key("Mistral API key")}
    stt = _choose("Speech-to-text provider", ["mistral", "elevenlabs"], "mistral")
    if stt == "elevenlabs":
        keys["elevenlabs_api_key"] = _ask_key("ElevenLabs API key")
    keys = {name: value for name, value in keys.items() if value}
    store = "auto"
    if keys:
        stores = [s for s in secret_store.STORES if s != "keychain" or secret_store.keychain_available()]
        store = _choose("Store secrets in", stores, stores[0])
    config = Config.model_validate({"stt": {"provider": stt}, "secrets": {"provider": store}})
    result = WizardResult(config)
    for name, value in keys.items():
        secret = secret_store.store_secret(name, value, config, state, provider=store, root=root)
        if secret.source == "session":
            result.session[name] = value
        result.notes.append(_stored_note(_SECRET_LABELS[name], secret))
    if not keys:
        result.notes.append("No API key entered: set MISTRAL_API_KEY, or run `config init --force` again.")
    return result


# -- the command -------------------------------------------------------------


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
