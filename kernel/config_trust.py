"""The operator's approvals of a root's own ``.dir2mcp.yaml`` (like direnv's
``allow``): the file's absolute path and the sha256 of its bytes, kept in a
per-user file outside every root, so a cloned repository cannot approve
itself. A changed file is no longer approved.

The store is ``$DIR2MCP_TRUST_DIR/trusted.json``, else
``$XDG_CONFIG_HOME/dir2mcp/trusted.json``, else ``~/.config/dir2mcp/trusted.json``
(the directory also holds the records of the user's state directories,
:mod:`kernel.state_identity`). One that is a link, another user's, or
readable by group or others is refused (CONFIG_UNTRUSTED).
:mod:`kernel.config` decides which keys need an approval.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kernel import state_identity
from kernel.state import DIR_MODE, atomic_write, read_json
from kernel.state_identity import TRUST_DIR_ENV as TRUST_DIR_ENV

STORE_NAME = "trusted.json"

#: what :func:`approval` finds for a file
APPROVED, CHANGED, UNKNOWN = "approved", "changed", "unknown"


def store_path() -> Path:
    """The per-user file holding the approvals."""
    return state_identity.trust_dir() / STORE_NAME


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _key(path: Path) -> str:
    return str(path.expanduser().resolve())


def _approvals() -> dict[str, str]:
    store = store_path()
    problem = state_identity.credential_problem(store)
    if problem:
        raise state_identity.untrusted(
            f"the store of approvals {store} {problem}: it is not one dir2mcp wrote for you",
            f"Delete it (approve your files again with `dir2mcp config trust`), or set {TRUST_DIR_ENV} "
            "to a directory of your own.",
        )
    data = read_json(store) or {}
    files = data.get("files")
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def approval(path: Path, text: str) -> str:
    """Whether the file at ``path`` holding ``text`` is approved, was approved
    with other contents (changed since), or never was."""
    recorded = _approvals().get(_key(path))
    if recorded is None:
        return UNKNOWN
    return APPROVED if recorded == digest(text) else CHANGED


def approve(path: Path, text: str) -> Path:
    """Record ``path`` with ``text`` as approved; returns the store's path."""
    store = store_path()
    files = _approvals()
    files[_key(path)] = digest(text)
    try:
        store.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        atomic_write(store, json.dumps({"version": 1, "files": files}, indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise state_identity.not_writable(f"cannot record the approval in {store}", exc) from exc
    return store
