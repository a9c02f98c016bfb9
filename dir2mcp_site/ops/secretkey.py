"""Django's SECRET_KEY: from the environment, or one per state directory.

Django signs admin sessions, password-reset tokens and signed cookies with
``SECRET_KEY``. A value anyone can read in the source would let anyone forge
them, so there is no built-in default:

- ``DJANGO_SECRET_KEY`` set: that value. A value published in this
  repository (:data:`PUBLIC_VALUES`) is refused everywhere; behind a proxy
  it must also be at least :data:`MIN_LENGTH` characters long.
- Behind a reverse proxy (``DJANGO_BEHIND_PROXY=1``) without it: refused.
  Such a deployment is managed (systemd, several processes, maybe several
  machines sharing PostgreSQL), so its key is managed too.
- Otherwise (``up`` on loopback or ``--public`` on its own): a random key
  made once and kept in ``<state>/django.secret`` (mode 0600), read lazily
  on first use so that importing the settings writes nothing. Before the
  state directory exists, or when it cannot be written, the process uses a
  random key of its own (sessions then end with the process). A state
  directory this user's record does not know is refused first
  (:mod:`kernel.state_identity`).

This module must not import Django's settings: the settings import it.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import tempfile
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.utils.functional import lazy

from kernel import state_identity

log = logging.getLogger(__name__)

ENV = "DJANGO_SECRET_KEY"
FILENAME = "django.secret"
MIN_LENGTH = 32
#: values published in this repository: never a key
PUBLIC_VALUES = frozenset(
    {
        "change-me-to-a-long-random-string",  # deploy/dir2mcp.env.example
        "dir2mcp-embedded-not-for-public-deployments",  # the former built-in default
    }
)
MAKE_ONE = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"


class SecretKeyMissing(ImproperlyConfigured):
    """A deployment behind a proxy without a usable DJANGO_SECRET_KEY."""


def secret_key(configured: str, *, behind_proxy: bool, state_dir: Path) -> str:
    """The value for ``settings.SECRET_KEY``; raises :class:`SecretKeyMissing`."""
    configured = configured.strip()
    if configured:
        if configured in PUBLIC_VALUES:  # anyone can read it here: refused everywhere
            raise SecretKeyMissing(
                f"{ENV} is a published placeholder; set a random value of your own, e.g. from: {MAKE_ONE}"
                f" (or unset it to let dir2mcp keep a random key in its state directory)"
            )
        if behind_proxy and len(configured) < MIN_LENGTH:
            raise SecretKeyMissing(
                f"{ENV} is shorter than {MIN_LENGTH} characters; "
                f"set a random value of your own, e.g. from: {MAKE_ONE}"
            )
        return configured
    if behind_proxy:
        raise SecretKeyMissing(
            f"{ENV} is required with DJANGO_BEHIND_PROXY=1 (it signs admin sessions; every process "
            f"of the deployment needs the same value). Put one in the environment file, e.g. from: {MAKE_ONE}"
        )
    return lazy(functools.partial(_state_key, Path(state_dir)), str)()


_kept: dict[Path, str] = {}
#: until the state directory exists (it holds the session table too, unless
#: DATABASE_URL names another database), or when it cannot be written
_process_key = secrets.token_urlsafe(50)


def _state_key(state_dir: Path) -> str:
    if state_dir in _kept:
        return _kept[state_dir]
    path = state_dir / FILENAME
    if not state_dir.is_dir():
        return _process_key  # nothing to keep it in yet; asked again once it exists
    # A key in a state directory not made for this user (a shipped copy's) is never read.
    state_identity.verify(state_dir)
    try:
        key = _read(path) or _create(path)
    except OSError as exc:
        log.warning(
            "cannot keep the admin's signing key in %s (%s); using one for this process only", path, exc
        )
        key = _process_key
    _kept[state_dir] = key
    return key


def _read(path: Path) -> str:
    try:
        key = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return ""
    if key:
        os.chmod(path, 0o600)
    return key


def _create(path: Path) -> str:
    """Write a new key, unless another process got there first: then use theirs."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(secrets.token_urlsafe(50) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)  # fails if the file exists: never replaces a key in use
        except FileExistsError:
            if not _read(path):  # an empty file is no key in use
                os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return _read(path)
