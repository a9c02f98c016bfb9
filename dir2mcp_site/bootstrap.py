"""Choose the root and state directory before Django opens a database.

The state directory holds ``meta.sqlite``, Django's default database, so it
must be known before settings are imported. Every entry point (``manage.py``,
the ``dir2mcp`` console command, ASGI, Celery) calls :func:`prepare` first.
Flags beat environment variables: a ``--dir`` on the command line overwrites
``DIR2MCP_ROOT`` for this process only.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

ROOT_ENV = "DIR2MCP_ROOT"
STATE_ENV = "DIR2MCP_STATE_DIR"
CONFIG_ENV = "DIR2MCP_CONFIG"
STATE_DIRNAME = ".dir2mcp"


def _preparser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--dir")
    parser.add_argument("--state-dir")
    parser.add_argument("--config")
    return parser


def prepare(argv: list[str] | None = None) -> None:
    """Export the root, state directory and config path chosen by ``argv``."""
    known, _ = _preparser().parse_known_args(argv or [])
    if known.dir:
        os.environ[ROOT_ENV] = str(Path(known.dir).expanduser().absolute())
    if known.state_dir:
        os.environ[STATE_ENV] = str(Path(known.state_dir).expanduser().absolute())
    if known.config:
        os.environ[CONFIG_ENV] = str(Path(known.config).expanduser().absolute())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dir2mcp_site.settings")


def root_dir() -> Path:
    return Path(os.environ.get(ROOT_ENV) or ".").expanduser().absolute()


def state_dir() -> Path:
    explicit = os.environ.get(STATE_ENV)
    if explicit:
        return Path(explicit).expanduser().absolute()
    return root_dir() / STATE_DIRNAME
