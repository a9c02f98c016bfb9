"""Hostile round of 2026-11-30, session 26: a hostile client against a real
``up`` (daphne, the gate, the connection bounds); see docs/security.md,
"Hostile round, 2026-11-30 (session 26)". Each test shows a way in that was
open before its fix.
"""

from __future__ import annotations

import httpx
import pytest

from tests.mcp_http import Server, write_corpus
from tests.support import wait_until
from tests.test_cli import cli
from tests.test_hostile_clients import WAIT, stateless, token_of

pytestmark = pytest.mark.slow


def rpc(srv: Server, method: str, params: dict) -> httpx.Response:
    """A stateless (2026-07-28) request with the server's token."""
    body, headers = stateless(method, params)
    return httpx.post(
        srv.url, headers={**headers, "Authorization": f"Bearer {srv.token}"}, json=body, timeout=WAIT
    )


# -- a completion of what the rules exclude now ----------------------------------------------


def complete(srv: Server, name: str, value: str) -> list[str]:
    """The values ``completion/complete`` gives for the explain prompt's argument ``name``."""
    asked = rpc(
        srv,
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "explain"}, "argument": {"name": name, "value": value}},
    )
    assert asked.status_code == 200, asked.text
    completion = asked.json()["result"]["completion"]
    assert completion["total"] == len(completion["values"]), completion
    return completion["values"]


def test_completion_offers_nothing_of_a_file_the_rules_exclude_now(tmp_path, running):
    """A symbol completion without a ``path`` offered every name the index
    knows to be defined, from a table of names alone: a file excluded since
    it was indexed (a new ``.gitignore`` line here) kept its names in the
    answer until the walk that change starts had ended, and for good under
    ``up --no-index`` (left open by session 25). A path completion judged
    its values, but kept each verdict for the table's life, which only a
    change of the index ends: under ``--no-index``, for good too. A name is
    now offered while a file defining it passes the rules as they are now,
    and a verdict is kept two seconds."""
    root = tmp_path / "corpus"
    write_corpus(root)  # src/loader.py defines parse_config_file
    (root / "src" / "kept.py").write_text("def parse_kept_value(text):\n    return text\n")
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    up = running("--dir", str(root), "--json", "--no-index")
    srv = Server(root, up.url(), token_of(root), up.proc)
    assert complete(srv, "symbol", "parse_") == ["parse_config_file", "parse_kept_value"]
    assert complete(srv, "path", "src/") == ["src/kept.py", "src/loader.py"]
    (root / ".gitignore").write_text("src/loader.py\n")
    wait_until(
        lambda: complete(srv, "path", "src/") == ["src/kept.py"],
        timeout=15,
        message="the path completion to judge src/loader.py again",  # before: never
    )
    # before: parse_config_file still offered
    assert complete(srv, "symbol", "parse_") == ["parse_kept_value"]
