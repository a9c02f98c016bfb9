"""``config print`` and ``config init`` (spec §2.1, §16).

``print`` shows the effective configuration with every secret replaced by
where it comes from; a key the configuration cannot take (an unknown key, a
bad value) is shown marked with where it was set, and the command then
exits 2 (CONFIG_INVALID) as every other command would. ``init`` writes ``.dir2mcp.yaml``: a short wizard on a
TTY, otherwise a commented template generated from the schema defaults (so
it cannot drift from :mod:`kernel.config`). Neither ever shows a secret.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from corpus.events import Reporter
from corpus.management.base import Dir2mcpCommand
from corpus.setup_wizard import WizardResult, run_wizard
from kernel import config_trust, errors
from kernel import secrets as secret_store
from kernel.config import (
    Config,
    ConfigProblem,
    config_named,
    default_config_path,
    describe_problems,
    load_config,
    load_config_marked,
    parse_config_text,
    read_config_text,
    untrusted_keys,
)
from kernel.config_template import render_config
from kernel.jsontypes import JsonObject
from kernel.state import StateDir, atomic_write, resolve_root, resolve_state


def _write_snapshot(config_path: Path, state: StateDir, root: Path, session: dict[str, str]) -> bool:
    effective = load_config(config_path, named=True)  # written (and approved) just now
    resolved = secret_store.resolve_all(effective, state, session=session, root=root)
    try:
        state.ensure()
        secret_store.write_snapshot(effective, resolved, state)
    except OSError:
        return False
    except errors.Dir2mcpError as exc:
        if exc.code != errors.STATE_NOT_WRITABLE:
            raise
        return False
    return True


class Command(Dir2mcpCommand):
    help = (
        "Print the effective configuration (config print), create .dir2mcp.yaml (config init), or approve "
        "the root's own .dir2mcp.yaml as it is now (config trust)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{print,init,trust}")
        called: bool | None = getattr(parser, "called_from_command_line", None)
        show = actions.add_parser(
            "print",
            help="Print the effective config (defaults + file + env) with secrets redacted.",
            called_from_command_line=called,
        )
        init = actions.add_parser(
            "init",
            help="Create .dir2mcp.yaml: a wizard on a terminal, else a commented template.",
            called_from_command_line=called,
        )
        trust = actions.add_parser(
            "trust",
            help="Approve the root's .dir2mcp.yaml as it is now: its keys that send credentials or data "
            "to a network endpoint, or weaken the gate, then apply (a later change needs a new approval).",
            called_from_command_line=called,
        )
        # Global flags go on each subcommand so `config init --dir X` parses.
        for sub in (show, init, trust):
            super().add_arguments(sub)
        init.add_argument("--force", action="store_true", help="Overwrite an existing config file.")

    def handle(self, *args: Any, **options: Any) -> None:  # Any: BaseCommand.handle's signature
        if options["action"] == "print":
            self.print_config(options)
        elif options["action"] == "trust":
            self.trust_config(options)
        else:
            self.init_config(options)

    def print_config(self, options: JsonObject) -> None:
        # Not self.runtime(): that refuses a configuration with a bad key,
        # which is what this command must show.
        root = resolve_root(options.get("dir"))
        state = resolve_state(options.get("state_dir"), options.get("dir"), root)
        path = Path(options["config"]).absolute() if options.get("config") else default_config_path(root)
        if options.get("config") and not path.is_file():
            raise errors.Dir2mcpError(
                errors.CONFIG_INVALID, f"config file {path} does not exist", hint="Check --config."
            )
        config, problems = load_config_marked(path, named=bool(options.get("config")) or config_named())
        resolved = secret_store.resolve_all(config, state, root=root)
        data = secret_store.redacted_config(config, resolved)
        if options["json"]:
            if problems:
                data["problems"] = [_problem_dict(problem) for problem in problems]
            self.stdout.write(json.dumps(data))
        else:
            self.stdout.write(marked_yaml(data, problems), ending="")
        if problems:
            found = describe_problems(problems)
            raise errors.Dir2mcpError(
                found.code,
                found.message,
                hint=f"The configuration above leaves the marked keys out. {found.hint}",
            )

    def trust_config(self, options: JsonObject) -> None:
        root = resolve_root(options.get("dir"))
        path = Path(options["config"]).absolute() if options.get("config") else default_config_path(root)
        if not path.is_file():
            raise errors.Dir2mcpError(errors.CONFIG_INVALID, f"there is no config file {path} to approve")
        text = read_config_text(path)
        sensitive = untrusted_keys(parse_config_text(path, text))
        store = config_trust.approve(path, text)
        reporter = Reporter(
            self.stdout._out,  # type: ignore[arg-type]  # a text stream; django-stubs types it as a callable
            json_mode=options["json"],
            quiet=options["quiet"],
        )
        reporter.event(
            "config_trusted",
            {"path": str(path), "sha256": config_trust.digest(text), "keys": sensitive, "store": str(store)},
        )
        keys = ", ".join(sensitive) if sensitive else "none (it needed no approval)"
        reporter.say(f"Approved {path} as it is now; the keys that needed it: {keys}")

    def init_config(self, options: JsonObject) -> None:
        # Not self.runtime(): init must work when the target file is missing
        # or broken, which runtime() rejects while loading it.
        root = resolve_root(options.get("dir"))
        state = resolve_state(options.get("state_dir"), options.get("dir"), root)
        path = Path(options["config"]).expanduser().absolute() if options.get("config") else None
        path = path or default_config_path(root)
        if path.exists() and not options["force"]:
            raise CommandError(f"{path} already exists; pass --force to overwrite it.", returncode=1)
        reporter = Reporter(
            self.stdout._out,  # type: ignore[arg-type]  # a text stream; django-stubs types it as a callable
            json_mode=options["json"],
            quiet=options["quiet"],
        )
        tty = sys.stdin.isatty() and sys.stdout.isatty()
        if tty and not options["non_interactive"] and not options["json"]:
            result = run_wizard(state, root)
        else:
            result = WizardResult(Config())
        text = render_config(result.config)
        atomic_write(path, text)
        config_trust.approve(path, text)  # the operator wrote it: no approval to ask for
        snapshot = _write_snapshot(path, state, root, result.session)
        reporter.event("config_written", {"path": str(path), "snapshot": snapshot})
        reporter.say(f"Wrote {path}")
        for note in result.notes:
            reporter.say(note)
        if not snapshot:
            reporter.warn(f"could not write the config snapshot in {state.path}")


# -- marking the keys a configuration cannot take ------------------------------------

# A key name that may hold a credential: its value is never shown.
_SECRET_NAME = re.compile(r"(?i)key|token|secret|passw|credential|auth")
_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>'[^']*'|\"[^\"]*\"|[^\s#'\"\-][^:]*?):(?= |$)")


def _shown(problem: ConfigProblem) -> object:
    """The value as it may be printed: scalars, unless the key may hold a secret."""
    value = problem.value
    if _SECRET_NAME.search(problem.key) or isinstance(value, dict | list) or len(str(value)) > 200:
        return "<not shown>"
    return value


def _problem_dict(problem: ConfigProblem) -> JsonObject:
    kind = "not approved" if problem.untrusted else "unknown key" if problem.unknown else "bad value"
    out: JsonObject = {"key": problem.key, "problem": kind}
    out |= {"source": problem.source, "value": _shown(problem)}
    return out if problem.unknown else out | {"detail": problem.detail}


def _mark_text(problem: ConfigProblem) -> str:
    if problem.untrusted:
        return f"<- {_shown(problem)!r} in {problem.source}: not approved, not applied (config trust)"
    if problem.unknown:
        return f"<- unknown key, set in {problem.source}: not applied"
    return f"<- bad value {_shown(problem)!r} in {problem.source}, not applied: {problem.detail}"


def marked_yaml(data: JsonObject, problems: list[ConfigProblem]) -> str:
    """``data`` as YAML with a comment on each problem's key (an unknown key
    is shown where it was written), under a header listing the problems."""
    marks = {}
    for problem in problems:
        parts = tuple(problem.key.split("."))
        marks[parts] = _mark_text(problem)
        parent: object = data
        for part in parts[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if problem.unknown and isinstance(parent, dict) and parts[-1] not in parent:
            parent[parts[-1]] = _shown(problem)
    text = _mark_lines(secret_store.dump_yaml(data), marks)
    if not problems:
        return text
    code = (
        errors.CONFIG_UNTRUSTED if all(problem.untrusted for problem in problems) else errors.CONFIG_INVALID
    )
    header = [f"# {code}: the marked keys are left out below; other commands refuse to start", "#"]
    header += [f"#   {problem.describe()}" for problem in problems]
    return "\n".join([*header, "", text])


def _mark_lines(text: str, marks: dict[tuple[str, ...], str]) -> str:
    """Append each mark to the line of its key (block-style YAML, 2-space indents)."""
    out: list[str] = []
    stack: list[tuple[int, str]] = []
    block = None  # the indent of a key whose value is a | or > block
    for line in text.splitlines(keepends=True):
        indent = len(line) - len(line.lstrip(" "))
        if block is not None and (not line.strip() or indent > block):
            out.append(line)
            continue
        block = None
        match = _KEY_LINE.match(line)
        if match:
            key = match["key"].strip("'\"")
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, key))
            if line[match.end() :].strip().startswith(("|", ">")):
                block = indent
            mark = marks.get(tuple(part for _, part in stack))
            if mark:
                line = f"{line.rstrip(chr(10))}  # {mark}\n"
        out.append(line)
    return "".join(out)
