"""Choose the root and state directory before Django opens a database.

The state directory holds ``meta.sqlite``, Django's default database, so it
must be known before settings are imported. Every entry point (``manage.py``,
the ``dir2mcp`` console command, ASGI, Celery) calls :func:`prepare` first.
Flags beat environment variables: a ``--dir`` on the command line overwrites
``DIR2MCP_ROOT`` for this process only.

A process on a shared store or queue (``DATABASE_URL`` or
``CELERY_BROKER_URL`` set: a Celery worker, a server of a scaled-out
deployment) never takes its working directory as the corpus: without
``DIR2MCP_ROOT`` or ``--dir`` it stops with one ``CONFIG_INVALID`` line and
exit status 2 before anything is written (docs/scaling.md). A plain local
process takes the working directory, as it always did.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT_ENV = "DIR2MCP_ROOT"
STATE_ENV = "DIR2MCP_STATE_DIR"
CONFIG_ENV = "DIR2MCP_CONFIG"
STATE_DIRNAME = ".dir2mcp"
#: Set, they make the process part of a deployment: its root must be named.
SHARED_ENV = ("DATABASE_URL", "CELERY_BROKER_URL")
#: Commands that read no corpus (``dir2mcp help``, ``dir2mcp version``) and
#: the flags that only print: they run without a root anywhere.
_ROOTLESS_COMMANDS = frozenset({"help", "version"})
_ROOTLESS_FLAGS = frozenset({"-h", "--help", "--version"})


def _preparser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--dir")
    parser.add_argument("--state-dir")
    parser.add_argument("--config")
    return parser


def prepare(argv: list[str] | None = None) -> None:
    """Export the root, state directory and config path chosen by ``argv``.

    A process on a shared store or queue with no root named ends here, with
    one ``ERROR: CONFIG_INVALID`` line and exit status 2 (see
    :func:`missing_root`)."""
    without_httpx_cli()
    without_websocket_extensions()
    single_threaded_blas()
    known, rest = _preparser().parse_known_args(argv or [])
    if known.dir:
        os.environ[ROOT_ENV] = str(Path(known.dir).expanduser().absolute())
    if known.state_dir:
        os.environ[STATE_ENV] = str(Path(known.state_dir).expanduser().absolute())
    if known.config:
        os.environ[CONFIG_ENV] = str(Path(known.config).expanduser().absolute())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dir2mcp_site.settings")
    problem = None if _rootless(rest) else missing_root()
    if problem:
        sys.stderr.write(f"ERROR: CONFIG_INVALID: {problem}\n")
        sys.stderr.flush()
        raise SystemExit(2)  # kernel.errors.EXIT_CONFIG; corpus is not importable before the settings


def without_httpx_cli() -> None:
    """Keep httpx from loading its command-line client, which this process never runs.

    ``import httpx`` imports ``httpx._main`` (click, pygments and rich) when
    they are installed, and falls back to a stub that asks for them when the
    import fails: about 0.06 CPU-s of every process that uses a remote
    provider, the indexing child and `up` among them (docs/benchmarks.md,
    "The test suite"). Marked unimportable (None in ``sys.modules``, as
    corpus.providers.local does for OpenVINO's telemetry), it is never
    loaded; httpx's own API is unchanged. A process that imported httpx
    already keeps what it has."""
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: Python's mark for "cannot import"


def without_websocket_extensions() -> None:
    """Keep autobahn (daphne's WebSocket protocol, imported by its server
    module) from setting up its native frame validator, which `up` never
    uses: it refuses every WebSocket (mcp_gateway/route_gate.py).

    autobahn declares the validator's C functions to cffi as it is
    imported, and cffi parses them with pycparser: about 0.03 CPU-s of
    every `up` server (docs/benchmarks.md, "Test suite time").
    ``AUTOBAHN_USE_NVX=0`` is autobahn's own switch to its pure-Python
    validator; a value already set is kept."""
    os.environ.setdefault("AUTOBAHN_USE_NVX", "0")


#: What OpenBLAS reads for its thread count, in its order of precedence.
BLAS_THREAD_ENV = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def single_threaded_blas() -> None:
    """Start numpy's OpenBLAS with one thread, unless a thread count is set.

    OpenBLAS starts a thread per core as numpy loads: about 0.06 CPU-s of
    every process on a 2-core machine (0.16 -> 0.10 for ``import numpy``
    alone; docs/benchmarks.md, "Test suite time"), and its threads
    spin-wait for work. No process here runs BLAS on several threads:
    the local embedder holds OpenBLAS at one thread for its forward passes
    (corpus.providers.local: one pass per core), and the rest multiplies a
    query by a few hundred vectors. ``OPENBLAS_NUM_THREADS``,
    ``GOTO_NUM_THREADS`` or ``OMP_NUM_THREADS``, set, is kept."""
    if not any(os.environ.get(name, "").strip() for name in BLAS_THREAD_ENV):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def missing_root() -> str | None:
    """Why this process may not take its working directory as the root, or
    None: it names one (``DIR2MCP_ROOT``, ``--dir``), or it shares nothing."""
    if os.environ.get(ROOT_ENV):
        return None
    shared = [name for name in SHARED_ENV if os.environ.get(name)]
    if not shared:
        return None
    try:
        cwd = f" ({Path.cwd()})"
    except OSError:  # a working directory deleted under the process
        cwd = ""
    return (
        f"{' and '.join(shared)} {'is' if len(shared) == 1 else 'are'} set but no root is: "
        f"set {ROOT_ENV} (or pass --dir) to the corpus directory; a worker or a server of a "
        f"scaled-out deployment never takes its working directory{cwd} as the corpus"
    )


def _rootless(rest: list[str]) -> bool:
    """A command line that only prints help or the version."""
    if _ROOTLESS_FLAGS.intersection(rest):
        return True
    positional = [arg for arg in rest if not arg.startswith("-")]
    return bool(positional) and positional[0] in _ROOTLESS_COMMANDS


def root_dir() -> Path:
    return Path(os.environ.get(ROOT_ENV) or ".").expanduser().absolute()


def state_dir() -> Path:
    explicit = os.environ.get(STATE_ENV)
    if explicit:
        return Path(explicit).expanduser().absolute()
    return root_dir() / STATE_DIRNAME
