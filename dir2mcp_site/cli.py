"""The ``dir2mcp`` console command: ``dir2mcp up`` runs ``manage.py up``."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    from dir2mcp_site import bootstrap

    bootstrap.prepare(argv[1:])
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018  (loads the settings: a bad one is a config error)
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"ERROR: CONFIG_INVALID: {exc}\n")
        raise SystemExit(2) from None

    argv[0] = "dir2mcp"
    if len(argv) == 1:
        argv.append("help")
    if argv[1] == "version":
        # Django answers `version` itself with its own version number.
        _run_own_command(argv)
        return
    execute_from_command_line(argv)


def _run_own_command(argv: list[str]) -> None:
    import django
    from django.core.management import ManagementUtility

    django.setup()
    ManagementUtility(argv).fetch_command(argv[1]).run_from_argv(argv)


if __name__ == "__main__":
    main()
