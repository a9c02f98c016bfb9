"""Hostile round of 2026-11-30, session 27: counts and presence signals over
the index, against a real ``up`` (daphne, the gate); see docs/security.md,
"Hostile round, 2026-11-30 (session 27): counts". The index drops a file a
rule's change excludes only once the walk that change starts has ended, and
under ``up --no-index`` never: until then every answer that counts over the
index, or says whether more follows, must count only what the rules let
through now, or a client holding the token can spell out an excluded file's
name (or its words) one character at a time. Each test shows a probe that
answered before its fix.
"""

from __future__ import annotations

import base64
import json
import os
import re

import httpx
import pytest

from kernel import errors
from tests.mcp_http import Server, write_corpus
from tests.support import wait_until
from tests.test_cli import cli
from tests.test_hostile_clients import WAIT, token_of

pytestmark = pytest.mark.slow

#: a file the rules let through, which uses the private file's function
KEPT = "def use_it():\n    return zebra_quokka() + quokka_only()\n"
#: the file a .gitignore line written while ``up --no-index`` serves excludes
PRIVATE = "def zebra_quokka():\n    return 'walrus tusk'\n\n\ndef again():\n    return zebra_quokka()\n"


#: files newer than the private one: more than the changes prompt links (50)
MANY = 51
OLD = 946684800  # 2000-01-01


@pytest.fixture
def served(tmp_path, running):
    """``up --no-index`` over an index holding ``src/m_private.py``, which a
    ``.gitignore`` line written while it serves excludes; the server, once
    its ``list_files`` has stopped naming the file."""
    root = tmp_path / "corpus"
    write_corpus(root)  # docs/guide.md, notes.txt, src/loader.py
    (root / "src" / "m_private.py").write_text(PRIVATE)
    os.utime(root / "src" / "m_private.py", (OLD, OLD))  # older than the changes prompt shows
    (root / "src" / "zz.py").write_text(KEPT)
    for n in range(MANY):
        (root / "many" / f"{n:02}.txt").parent.mkdir(exist_ok=True)
        (root / "many" / f"{n:02}.txt").write_text(f"note {n}\n")
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    up = running("--dir", str(root), "--json", "--no-index")
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    assert "src/m_private.py" in listed(srv, session, {})
    (root / ".gitignore").write_text("src/m_private.py\n")
    wait_until(
        lambda: "src/m_private.py" not in listed(srv, session, {}),
        timeout=15,
        message="list_files to judge src/m_private.py again",
    )
    return srv, session


def list_files(srv: Server, session: str, arguments: dict) -> dict:
    return srv.call(session, "dir2mcp.list_files", arguments)["structuredContent"]


def listed(srv: Server, session: str, arguments: dict) -> list[str]:
    return [f["rel_path"] for f in list_files(srv, session, arguments)["files"]]


def rest(srv: Server, path: str, params: dict) -> dict:
    answer = httpx.get(
        srv.base + path, params=params, headers={"Authorization": f"Bearer {srv.token}"}, timeout=WAIT
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def counted(page: dict) -> dict:
    """What a page tells besides its files: its count and whether more follow."""
    return {key: page.get(key) for key in ("files", "total", "has_more", "next_offset")}


def test_list_files_counts_only_what_the_rules_let_through(served):
    """``list_files`` left an excluded file out of its page, but its
    ``total`` counted the index's entries, and its ``offset`` the index's
    positions (left open by session 26): the glob ``src/m*`` answered
    ``total: 1`` with no file where ``src/q*`` answered ``total: 0``, so
    narrowing the glob spelled the name out; and the page at offset 1 of
    ``src/*`` was empty where the excluded file sat. Both now count the
    files the rules let through, on MCP and the REST mirror alike."""
    srv, session = served
    probe, control = {"glob": "src/m*"}, {"glob": "src/q*"}
    assert counted(list_files(srv, session, probe)) == counted(list_files(srv, session, control))
    probe, control = {"path_prefix": "src/m"}, {"path_prefix": "src/q"}
    assert counted(list_files(srv, session, probe)) == counted(list_files(srv, session, control))
    whole = list_files(srv, session, {"glob": "src/*"})
    assert [f["rel_path"] for f in whole["files"]] == ["src/loader.py", "src/zz.py"], whole
    assert whole["total"] == 2, whole
    paged = [listed(srv, session, {"glob": "src/*", "limit": 1, "offset": offset}) for offset in range(3)]
    assert paged == [["src/loader.py"], ["src/zz.py"], []], paged
    for probe, control in (
        ({"glob": "src/m*"}, {"glob": "src/q*"}),
        ({"path_prefix": "src/m"}, {"path_prefix": "src/q"}),
    ):
        assert counted(rest(srv, "/api/v1/files", probe)) == counted(rest(srv, "/api/v1/files", control))
    pages = [rest(srv, "/api/v1/files", {"glob": "src/*", "limit": 1, "offset": n}) for n in range(3)]
    paged = [[f["rel_path"] for f in page["files"]] for page in pages]
    assert paged == [["src/loader.py"], ["src/zz.py"], []], paged


def search(srv: Server, session: str, arguments: dict) -> dict:
    return srv.call(session, "dir2mcp.search", arguments)["structuredContent"]


def position(cursor: str) -> int:
    """Where a search cursor resumes: a client can read it (base64 JSON)."""
    return json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))["p"]


def told(answer: dict) -> dict:
    """What a search answer tells besides its hits' text."""
    hits = [hit["rel_path"] for hit in answer["hits"]]
    return {"hits": hits, "match": answer["match"], "more": "next_cursor" in answer}


def test_search_tells_nothing_of_a_file_the_rules_exclude_now(served):
    """A search passed over the units of an excluded file, but its ``match``
    was judged over the whole ranking (``good`` for ``walrus``, a word only
    the excluded file holds, ``weak`` for a word nowhere), and its cursor
    counted the units passed over, and came whenever the ranking went on
    past the hits, readable or not. Each now depends on what the rules let
    through alone."""
    srv, session = served
    assert told(search(srv, session, {"query": "walrus"})) == told(search(srv, session, {"query": "narwhal"}))
    for path in ("/api/v1/search",):
        probe = rest(srv, path, {"query": "walrus"})
        control = rest(srv, path, {"query": "narwhal"})
        assert told(probe) == told(control)
    # zebra_quokka: the excluded file's own definition ranks above its use in src/zz.py
    first = search(srv, session, {"query": "zebra_quokka", "k": 1})
    assert [hit["rel_path"] for hit in first["hits"]] == ["src/zz.py"], first
    # src/zz.py's one unit is the only readable one holding the name: no
    # cursor (before: one, at position 2, past the excluded definition and use)
    assert told(first) == told(search(srv, session, {"query": "quokka_only", "k": 1})), first
    assert "next_cursor" not in first, (first, position(first["next_cursor"]))


def references(srv: Server, session: str, name: str) -> dict:
    answer = srv.call(session, "dir2mcp.references", {"name": name, "limit": 1})["structuredContent"]
    return {"files": [hit["rel_path"] for hit in answer["references"]], "more": "next_cursor" in answer}


def test_references_say_no_more_for_a_file_the_rules_exclude_now(served):
    """``references`` passed over the excluded file's uses, but still handed
    a cursor on (to an empty page) because the page of rows had held one:
    a name used in the excluded file and once in ``src/zz.py`` answered
    with a cursor where a name used in ``src/zz.py`` alone did not."""
    srv, session = served
    assert references(srv, session, "zebra_quokka") == references(srv, session, "quokka_only")
    probe = rest(srv, "/api/v1/references", {"name": "zebra_quokka", "limit": 1})
    control = rest(srv, "/api/v1/references", {"name": "quokka_only", "limit": 1})
    assert ("next_cursor" in probe) == ("next_cursor" in control), (probe, control)


def test_the_changes_prompt_counts_only_what_the_rules_let_through(served):
    """The ``changes`` prompt judged the 50 files it links, but counted the
    rest from the index: the private file, older than those 50, was counted
    in "These N files", so moving ``since`` told when a file excluded since
    the index was written had last changed. It now counts the files the
    rules let through (here, all that ``list_files`` lists)."""
    srv, session = served
    readable = len(list_files(srv, session, {})["files"])  # a page judges its files
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "prompts/get",
        "params": {"name": "changes", "arguments": {"since": "1990-01-01"}},
    }
    answer = srv.post(body, session=session)
    assert answer.status_code == 200, answer.text
    text = answer.json()["result"]["messages"][0]["content"]["text"]
    assert re.search(r"These (\d+) files", text).group(1) == str(readable), text
    assert "m_private" not in text


#: the tree ``list_files`` pages by cursor: 30 files, seven a page
PAGED = [f"p/{n:02}.txt" for n in range(30)]
#: excluded by a ``.gitignore`` written after the first page: the file just
#: after the second page's last, and one inside the third page
LATE = ("p/14.txt", "p/17.txt")


def refused(answer: dict) -> str | None:
    return answer["structuredContent"]["error"]["code"] if answer.get("isError") else None


def test_list_files_pages_by_cursor_past_a_rule_change(tmp_path, running):
    """``offset`` stops at 10,000 (each answer judges every file before its
    page), so a tree such as the Linux kernel's could not be listed whole:
    ``list_files`` now pages by cursor, which holds the query and the last
    file a page returned, and reads the index after it. Across a
    ``.gitignore`` written between pages, MCP and REST alike page every file
    the rules let through exactly once, in order, and no answer names an
    excluded file, in its files or its cursor; another query's cursor and a
    cursor with an offset are refused."""
    root = tmp_path / "corpus"
    for rel_path in PAGED:
        (root / rel_path).parent.mkdir(parents=True, exist_ok=True)
        (root / rel_path).write_text(f"{rel_path}\n")
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    up = running("--dir", str(root), "--json", "--no-index")
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    query = {"path_prefix": "p/", "glob": "*.txt", "limit": 7}

    def mcp(arguments: dict) -> dict:
        return srv.call(session, "dir2mcp.list_files", arguments)

    def over_rest(arguments: dict) -> dict:
        answer = httpx.get(
            srv.base + "/api/v1/files",
            params=arguments,
            headers={"Authorization": f"Bearer {srv.token}"},
            timeout=WAIT,
        )
        return {"status": answer.status_code, "raw": answer.text, "body": answer.json()}

    first = mcp(query)["structuredContent"]
    rest_first = over_rest(query)["body"]
    assert (
        [f["rel_path"] for f in first["files"]] == PAGED[:7] == [f["rel_path"] for f in rest_first["files"]]
    )
    assert first["has_more"] and first["next_cursor"] and rest_first["next_cursor"], first
    (root / ".gitignore").write_text("".join(f"{name}\n" for name in LATE))
    wait_until(
        lambda: not mcp({"glob": LATE[0]})["structuredContent"]["files"],
        timeout=15,
        message="list_files to judge the .gitignore written while it serves",
    )

    seen = {"mcp": [*first["files"]], "rest": [*rest_first["files"]]}
    cursors = {"mcp": first["next_cursor"], "rest": rest_first["next_cursor"]}
    for surface in ("mcp", "rest"):
        for _ in range(10):
            if surface == "mcp":
                answer = mcp(query | {"cursor": cursors[surface]})
                raw, page = json.dumps(answer), answer["structuredContent"]
                assert not answer.get("isError"), answer
            else:
                got = over_rest(query | {"cursor": cursors[surface]})
                assert got["status"] == 200, got
                raw, page = got["raw"], got["body"]
            assert all(name.encode() not in raw.encode() for name in LATE), raw
            assert "total" not in page, page  # what came before the cursor is not judged again
            seen[surface] += page["files"]
            if not page["has_more"]:
                assert "next_cursor" not in page, page
                break
            cursors[surface] = page["next_cursor"]
    expected = [name for name in PAGED if name not in LATE]
    assert [f["rel_path"] for f in seen["mcp"]] == expected, seen["mcp"]
    assert [f["rel_path"] for f in seen["rest"]] == expected, seen["rest"]

    cursor = first["next_cursor"]
    for other in ({"path_prefix": "p/", "glob": "*.md"}, {"path_prefix": "q/", "glob": "*.txt"}):
        assert refused(mcp(other | {"cursor": cursor})) == errors.INVALID_FIELD
        got = over_rest(other | {"cursor": cursor})
        assert (got["status"], got["body"]["error"]["code"]) == (400, errors.INVALID_FIELD), got
    assert refused(mcp(query | {"cursor": cursor, "offset": 7})) == errors.INVALID_FIELD
    got = over_rest(query | {"cursor": cursor, "offset": 7})
    assert (got["status"], got["body"]["error"]["code"]) == (400, errors.INVALID_FIELD), got
    assert "offset" in got["body"]["error"]["message"], got
    assert up.stop() == 0
    assert "Traceback" not in up.stderr, up.stderr[-3000:]


def test_search_scores_tell_nothing_of_a_file_the_rules_exclude_now(served):
    """A hit's ``score`` came from a ranking that still held the excluded
    file's units: ``zebra_quokka`` (defined and used in the excluded file)
    scored the one readable hit, ``src/zz.py``, lower than ``quokka_only``
    (used there alone), so a score told how many units of excluded files
    matched a word. Scores now come from the readable units alone."""
    srv, session = served
    probe = search(srv, session, {"query": "zebra_quokka"})
    control = search(srv, session, {"query": "quokka_only"})
    assert [hit["rel_path"] for hit in probe["hits"]] == ["src/zz.py"], probe
    assert [hit["rel_path"] for hit in control["hits"]] == ["src/zz.py"], control
    assert probe["hits"][0]["score"] == control["hits"][0]["score"], (probe, control)
