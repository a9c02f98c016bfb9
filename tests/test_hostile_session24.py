"""Hostile round of 2026-11-29, session 24: a hostile client and a hostile
file in the indexed tree, against a real ``up`` (daphne, the gate, the
connection bounds); see docs/security.md, "Hostile round, 2026-11-29
(session 24)". Each test shows a way in that was open before its fix.
"""

from __future__ import annotations

import json
import os

import httpx
import pytest

from kernel import errors
from tests.mcp_http import Server, write_corpus
from tests.support import wait_until
from tests.test_branch_switch import git
from tests.test_cli import cli
from tests.test_hostile_clients import WAIT, token_of

pytestmark = pytest.mark.slow


def code_of(result: dict) -> str | None:
    return result["structuredContent"].get("error", {}).get("code")


# -- rules that change outside the watched tree -------------------------------------------


def served_anywhere(srv: Server, session: str, rel_path: str) -> list[str]:
    """The index's surfaces that still hand out ``rel_path`` (src/loader.py)."""
    answers = {
        "search": srv.call(session, "dir2mcp.search", {"query": "parse_config_file"})["structuredContent"],
        "symbols": srv.call(session, "dir2mcp.symbols", {"name": "parse_config_file"})["structuredContent"],
        "references": srv.call(session, "dir2mcp.references", {"name": "path"})["structuredContent"],
        "list_files": srv.call(session, "dir2mcp.list_files", {})["structuredContent"],
    }
    return [name for name, answer in answers.items() if json.dumps(rel_path) in json.dumps(answer)]


def exclude_by_info_exclude(root, rel_path: str, config_home) -> None:
    with open(root / ".git" / "info" / "exclude", "a") as fh:
        fh.write(f"{rel_path}\n")


def exclude_by_global_excludes(root, rel_path: str, config_home) -> None:
    (config_home / "git").mkdir(parents=True, exist_ok=True)
    (config_home / "git" / "ignore").write_text(f"{rel_path}\n")


def exclude_by_untracking(root, rel_path: str, config_home) -> None:
    git(root, "rm", "-q", "--cached", rel_path)  # .gitignore has named it all along


@pytest.mark.parametrize(
    "exclude",
    [
        pytest.param(exclude_by_info_exclude, id="info-exclude"),
        pytest.param(exclude_by_global_excludes, id="global-excludes-file"),
        pytest.param(exclude_by_untracking, id="git-rm-cached"),
    ],
)
def test_a_file_excluded_from_outside_the_tree_leaves_the_index(tmp_path, running, exclude):
    """Git's rules also come from outside the watched tree: ``.git/info/exclude``,
    the global excludes file, and what git tracks (a tracked file is never
    excluded). Every reader applies them at once, but the watch sees none of
    them (``.git`` is not watched, the global file lies elsewhere), so a
    file excluded that way stayed in the index: search snippets, symbols,
    references and list_files handed out what ``open_file`` refused, until
    a ``.gitignore`` changed or ``up`` restarted."""
    root = tmp_path / "corpus"
    write_corpus(root)
    config_home = tmp_path / "config"
    config_home.mkdir()
    git(root, "init", "-q")
    if exclude is exclude_by_untracking:
        (root / ".gitignore").write_text("src/loader.py\n")
        git(root, "add", "-f", "src/loader.py", ".gitignore")
        git(root, "commit", "-q", "-m", "tracked though ignored")
    up = running("--dir", str(root), "--json", env={"XDG_CONFIG_HOME": str(config_home)})
    up.event("watch_ready", timeout=WAIT)
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    assert served_anywhere(srv, session, "src/loader.py") == ["search", "symbols", "references", "list_files"]

    exclude(root, "src/loader.py", config_home)
    opened = srv.call(session, "dir2mcp.open_file", {"rel_path": "src/loader.py"})
    assert code_of(opened) == errors.FORBIDDEN, opened  # the readers see the rule at once
    wait_until(
        lambda: not served_anywhere(srv, session, "src/loader.py"),
        timeout=WAIT,
        message=lambda: f"still served by {served_anywhere(srv, session, 'src/loader.py')}",
    )


def test_git_rewriting_its_index_walks_nothing_and_a_path_it_stops_tracking_is_checked_alone(
    tmp_path, running
):
    """``git status``, ``add`` and ``commit`` rewrite git's index all day;
    on the kernel a walk of the tree costs tens of CPU seconds. Only the
    paths whose tracking changed are looked at again; the first version of
    the fix above walked the whole tree each time the index moved."""
    root = tmp_path / "corpus"
    write_corpus(root)
    (root / ".gitignore").write_text("src/loader.py\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "add", "-f", "src/loader.py")
    git(root, "commit", "-q", "-m", "tracked though ignored")
    up = running("--dir", str(root), "--json")
    up.event("watch_ready", timeout=WAIT)
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    seen = len(up.events())

    git(root, "update-index", "--really-refresh")  # the index rewritten, nothing tracked changed
    index = root / ".git" / "index"
    stat = index.stat()
    os.utime(index, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    exclude_by_untracking(root, "src/loader.py", None)  # one path stops being tracked: excluded now
    wait_until(
        lambda: not served_anywhere(srv, session, "src/loader.py"),
        timeout=WAIT,
        message=lambda: f"still served by {served_anywhere(srv, session, 'src/loader.py')}",
    )
    up.wait_until(
        lambda u: [
            e for e in u.events()[seen:] if e["event"] == "scan_progress" and not e["data"]["running"]
        ],
        "the pass's end",
    )
    walks = [e["data"] for e in up.events()[seen:] if e["event"] == "coverage"]  # what a walk reports
    assert walks == [], walks


def test_the_index_serves_no_file_the_rules_exclude_now(tmp_path, running):
    """The index is written by the walk, the rules are read by every reader
    at once: between a rule's change and the walk that follows it (on a
    large tree, a while), and for good under ``up --no-index``, search
    snippets, ``ask``'s passages, symbols and references (with their
    snippets) served a file that ``open_file`` refused. They now pass over
    what the rules exclude when they answer, as ``find`` and
    ``resources/list`` did."""
    root = tmp_path / "corpus"
    write_corpus(root)
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    (root / ".gitignore").write_text("src/loader.py\n")
    up = running("--dir", str(root), "--json", "--no-index")
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    opened = srv.call(session, "dir2mcp.open_file", {"rel_path": "src/loader.py"})
    assert code_of(opened) == errors.FORBIDDEN, opened
    served = served_anywhere(srv, session, "src/loader.py")
    asked = srv.call(session, "dir2mcp.ask", {"question": "parse_config_file", "mode": "search_only"})
    if json.dumps("src/loader.py") in json.dumps(asked["structuredContent"]):
        served.append("ask")
    completed = srv.post(
        {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "completion/complete",
            "params": {
                "ref": {"type": "ref/prompt", "name": "explain"},
                "argument": {"name": "symbol", "value": "parse"},
                "context": {"arguments": {"path": "src/loader.py"}},
            },
        },
        session=session,
    ).json()["result"]["completion"]
    if completed["values"]:
        served.append("completion")
    assert served == [], served  # list_files too, since session 25 (test_hostile_session25.py)
    assert "search" in served_anywhere(srv, session, "docs/guide.md")  # the others still are


# -- what a body costs before anything reads it ---------------------------------------------


def containers_body(message: dict, size: int = 4 * 1024 * 1024 - 4096) -> bytes:
    """``message`` with ``pad`` holding as many nested empty lists as fit in
    ``size`` bytes: about two million, each a tracked object to build."""
    item = b"[[[[[[[[[[]]]]]]]]]]"
    head = json.dumps({**message, "pad": None}).encode().rsplit(b"null", 1)
    return head[0] + b"[" + b",".join([item] * (size // (len(item) + 1))) + b"]" + head[1]


def test_a_body_of_millions_of_lists_is_refused_before_it_is_parsed(tmp_path, running):
    """Bodies were parsed on the server's event loop: 4 MiB of nested empty
    lists is two million lists that ``json.loads`` and the garbage
    collector took 0.6 CPU-s to build, and a client posting them over
    four connections kept the loop busy (another client's ``ping`` had no
    answer within 120 s on a loaded 2-core machine). A body of more than
    20,000 JSON tokens is now refused before it is parsed, on MCP (with a
    session or stateless) and the REST mirror; a long text is one token."""
    root = tmp_path / "corpus"
    write_corpus(root)
    up = running("--dir", str(root), "--json", "--no-index")
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()

    ping = {"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {}}
    for sent in (
        srv.post(containers_body(ping), session=session),
        srv.post(containers_body(ping), **{"MCP-Protocol-Version": "2026-07-28"}),
    ):
        assert sent.status_code == 400, sent.text
        error = sent.json()["error"]
        assert error["code"] == -32600 and error["data"]["code"] == errors.INVALID_RANGE, error
    rest = httpx.post(
        srv.base + "/api/v1/search",
        headers={"Authorization": f"Bearer {srv.token}", "Content-Type": "application/json"},
        content=containers_body({"query": "loader"}),
        timeout=WAIT,
    )
    assert rest.status_code == 400 and rest.json()["error"]["code"] == errors.INVALID_RANGE, rest.text

    # Text is a token however many brackets, commas and colons it holds.
    text = "[notes.txt:L1-L1] a, b: {c} [d], " * 2900
    verified = srv.call(session, "dir2mcp.verify", {"text": text})
    assert "error" not in verified["structuredContent"], verified
    assert srv.post(ping, session=session).json()["result"] == {}
