"""``state adopt``: make a state directory dir2mcp did not make for this user
its own (docs/security.md, "A root's own configuration and state").

A ``.dir2mcp/`` shipped in a root (a cloned repository, an unpacked archive)
is refused by every command until it is deleted or adopted. Adopting sets
aside whatever it holds, which a copy can carry (a known token and signing
key, a database with its writer's admin users and sessions and index entries
the files do not hold, caches of extracted text, a secrets file, logs), in a
``set-aside-<time>/`` directory in it that dir2mcp never reads; the next run
makes a new token, key and index from the files. Then the directory is recorded in
the user's trust directory as theirs (:mod:`kernel.state_identity`).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from corpus.management.base import Dir2mcpCommand
from kernel.state import resolve_root, resolve_state
from kernel.state_identity import records_dir


class Command(Dir2mcpCommand):
    help = (
        "Make a state directory yours (state adopt): set aside what it holds (token, signing key, "
        "database, index, caches) and record it; the next run rebuilds it from the files."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{adopt}")
        called: bool | None = getattr(parser, "called_from_command_line", None)
        adopt = actions.add_parser(
            "adopt",
            help="Set aside what the state directory (--state-dir, else <root>/.dir2mcp) holds and "
            "record it as yours.",
            called_from_command_line=called,
        )
        super().add_arguments(adopt)

    def handle(self, *args: Any, **options: Any) -> None:  # Any: BaseCommand.handle's signature
        root = resolve_root(options.get("dir"))
        state = resolve_state(options.get("state_dir"), options.get("dir"), root)
        moved, aside = state.adopt()
        reporter = self.reporter(options)
        reporter.event(
            "state_adopted",
            {
                "path": str(state.path),
                "set_aside": moved,
                "set_aside_in": str(aside) if aside else None,
                "records": str(records_dir()),
            },
        )
        where = (
            f"moved the {moved} entries it held to {aside}, which dir2mcp never reads" if aside else "empty"
        )
        reporter.say(
            f"Adopted {state.path} ({where}); the next run makes a new token, signing key and index "
            "from the files."
        )
