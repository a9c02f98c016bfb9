"""The ``dir2mcp`` console command: ``dir2mcp up`` runs ``manage.py up``."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

from dir2mcp_site import bootstrap


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    # No collections while Django and the command's modules load: they make
    # some 200,000 objects and almost no garbage, and the collector walked
    # them about 0.15 CPU-s of a command's 1.1 to start. Every dir2mcp
    # command turns it back on as it starts (corpus/management/base.py); a
    # command of Django's own (runserver, shell) keeps it on throughout.
    if len(argv) > 1 and argv[1] in own_commands():
        gc.disable()

    bootstrap.prepare(argv[1:])
    from django.core.management import execute_from_command_line

    load_settings_or_exit()
    argv[0] = "dir2mcp"
    if len(argv) == 1:
        argv.append("help")
    try:
        if argv[1] == "version":
            # Django answers `version` itself with its own version number.
            _run_own_command(argv)
            return
        execute_from_command_line(argv)
    finally:
        gc.enable()

        skip_the_last_collection()


def own_commands() -> frozenset[str]:
    """The names of dir2mcp's management commands (each a ``Dir2mcpCommand``),
    from their files: nothing is imported to know them."""
    root = Path(__file__).resolve().parents[1]
    folders = (root / "corpus" / "management" / "commands", root / "mcp_gateway" / "management" / "commands")
    return frozenset(path.stem for folder in folders for path in folder.glob("[a-z]*.py"))


def skip_the_last_collection() -> None:
    """Leave the objects alive now out of the collections the interpreter
    runs at exit.

    A command is done here: its files are written and closed, and its
    database work is committed. Yet as the interpreter exits, it walks
    every object of Django, twisted and the model's libraries (160,000 of
    them in `up`) to collect the cycles among them, and the operating system
    would free that memory anyway. Without that walk, `up` stopped in 0.5 s
    instead of 1.25 s on a 2-core machine, and its indexing child in 0.37 s
    instead of 0.63 s (docs/benchmarks.md, "The test suite"). Exit handlers still run, and
    objects freed by reference counting are still finalised, so open files
    are still flushed."""
    gc.freeze()


def load_settings_or_exit() -> None:
    """Load the settings; a bad one (e.g. no DJANGO_SECRET_KEY behind a proxy) ends
    the process with one line, ``ERROR: CONFIG_INVALID: …``, and exit status 2.

    Every entry point calls it before Django starts: this command, ``manage.py``
    and the ASGI application daphne imports (dir2mcp_site/asgi.py).
    """
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    try:
        settings.INSTALLED_APPS  # noqa: B018  (loads the settings: a bad one is a config error)
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"ERROR: CONFIG_INVALID: {exc}\n")
        sys.stderr.flush()
        raise SystemExit(2) from None


def _run_own_command(argv: list[str]) -> None:
    import django
    from django.core.management import ManagementUtility

    django.setup()
    ManagementUtility(argv).fetch_command(argv[1]).run_from_argv(argv)


if __name__ == "__main__":
    main()
