"""Hostile round of 2026-11-30, session 28: what session 27 left open, on a
real ``up`` (daphne, the gate) and ``mcp_stdio``; see docs/security.md,
"Hostile round, 2026-11-30 (session 28): what session 27 left open". Each
test shows a probe that answered before its fix.
"""

from __future__ import annotations

import httpx
import pytest

from kernel import errors
from tests.fakes.facilitator import running_facilitator
from tests.mcp_http import Server, write_corpus
from tests.support import wait_until
from tests.test_cli import cli, mistral_env
from tests.test_hostile_clients import WAIT, token_of
from tests.test_hostile_session27 import gated_env
from tests.test_listen import ACK, Listening
from tests.test_modern import META
from tests.test_stdio import Raw, command

pytestmark = pytest.mark.slow

#: the file a .gitignore line written while ``up --no-index`` serves
#: excludes: the one unit holding all four words of the probe, among many others
PRIVATE = "Field log: the walrus hauled out on the floe, tusk first, blubber steaming.\n" + (
    "The boat waited by the shore while the crew counted the gulls overhead.\n" * 12
)
#: a readable file holding three of the probe's four words, often: it ranks
#: above the excluded unit
KEPT = "walrus tusk blubber\nwalrus tusk blubber walrus tusk blubber\n"
#: readable files holding the fourth word of the probe and of the control alike
ICE = "Sea ice: floe and narwhal.\n"


def search(srv: Server, session: str, query: str) -> dict:
    answer = srv.call(session, "dir2mcp.search", {"query": query})["structuredContent"]
    return {"hits": sorted(hit["rel_path"] for hit in answer["hits"]), "match": answer["match"]}


def rest_search(srv: Server, query: str) -> dict:
    answer = httpx.get(
        srv.base + "/api/v1/search",
        params={"query": query},
        headers={"Authorization": f"Bearer {srv.token}"},
        timeout=WAIT,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return {"hits": sorted(hit["rel_path"] for hit in body["hits"]), "match": body["match"]}


@pytest.fixture
def embedded(tmp_path, running, fake_mistral):
    """``up --no-index`` over an index with Mistral vectors (the fake, at the
    network edge: its vectors are random, so no cosine reaches
    ``search.weak_cosine`` and ``match`` rests on the lexical matches),
    holding ``notes/private.txt``, which a ``.gitignore`` line written while
    it serves excludes."""
    root = tmp_path / "corpus"
    write_corpus(root)
    (root / "notes").mkdir()
    (root / "notes" / "private.txt").write_text(PRIVATE)
    (root / "notes" / "zoo.txt").write_text(KEPT)
    for n in range(4):
        (root / "notes" / f"ice{n}.txt").write_text(ICE)
    env = mistral_env(fake_mistral)
    indexed = cli("reindex", "--dir", str(root), "--quiet", env=env)
    assert indexed.returncode == 0, indexed.stderr
    up = running("--dir", str(root), "--json", "--no-index", env=env)
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    assert "notes/private.txt" in search(srv, session, "walrus floe")["hits"]
    (root / ".gitignore").write_text("notes/private.txt\n")
    wait_until(
        lambda: "notes/private.txt" not in search(srv, session, "walrus floe")["hits"],
        timeout=15,
        message="search to judge notes/private.txt again",
    )
    return srv, session


def test_a_long_querys_match_tells_nothing_of_a_file_the_rules_exclude_now(embedded):
    """A query of more than ``search.all_terms_first_max`` (3) terms is
    ranked by BM25 alone, and its full lexical matches were counted over the
    whole index: ``walrus tusk blubber floe``, all four words only in the
    excluded file, answered ``match: good`` (the count, 1, took the top unit
    of the ranking, a readable one holding three of them, for a full match)
    where ``walrus tusk blubber narwhal`` answered ``weak``. ``match`` is now
    judged over readable full matches alone."""
    srv, session = embedded
    probe, control = "walrus tusk blubber floe", "walrus tusk blubber narwhal"
    assert search(srv, session, probe) == search(srv, session, control)
    assert search(srv, session, control)["match"] == "weak"
    assert rest_search(srv, probe) == rest_search(srv, control)


# -- x402: subscriptions told which readable files are indexed ---------------------------------


@pytest.fixture(scope="module")
def facilitator():
    with running_facilitator() as fake:
        yield fake


INDEXED = "dir2mcp:///notes.txt"  # tests/mcp_http.py: write_corpus
UNINDEXED = "dir2mcp:///later.txt"  # readable, written after the index (``--no-index``: never indexed)


def answered(reply: dict) -> str:
    """What a subscription's answer tells: accepted, or the refusal's code."""
    return "accepted" if "result" in reply else reply["error"]["data"]["code"]


def honoured(ack: dict) -> list[str]:
    assert ack["method"] == ACK, ack
    return ack["params"]["notifications"].get("resourceSubscriptions", [])


def test_subscriptions_tell_nothing_list_files_sells(tmp_path, running, facilitator):
    """With x402 on and ``list_files`` priced, ``resources/subscribe`` and
    ``subscriptions/listen`` stayed free, and told an indexed file from a
    readable one that is not (``{}`` against ``FILE_NOT_FOUND`` "is not an
    indexed file"; the listen's acknowledgment honoured the one and left the
    other out), and a file on disk from a name made up: what ``list_files``
    sells. Both are now refused (``FORBIDDEN``, naming ``list_files``) for
    every URI while ``list_files`` is priced, over a session, a stateless
    listen and ``mcp_stdio`` (2026-07-28 has no ``resources/subscribe``);
    a listen still honours ``resourcesListChanged``."""
    root = tmp_path / "corpus"
    write_corpus(root)
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    (root / "later.txt").write_text("written after the index\n")
    env = gated_env(facilitator, "{}")  # every tool at the default price: list_files sold
    up = running("--dir", str(root), "--json", "--no-index", env=env)
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    told = {}
    for n, uri in enumerate((INDEXED, UNINDEXED, "dir2mcp:///made-up.txt")):
        body = {"jsonrpc": "2.0", "id": n, "method": "resources/subscribe", "params": {"uri": uri}}
        told[uri] = answered(srv.post(body, session=session).json())
    # before: {INDEXED: "accepted", UNINDEXED: "FILE_NOT_FOUND", made-up: "FILE_NOT_FOUND"}
    assert set(told.values()) == {errors.FORBIDDEN}, told
    asked = {"resourcesListChanged": True, "resourceSubscriptions": [INDEXED, UNINDEXED]}
    stream = Listening(srv, asked)
    try:
        ack = stream.messages.get(timeout=WAIT)
    finally:
        stream.close()
    assert honoured(ack) == [], ack  # before: [INDEXED]
    assert ack["params"]["notifications"]["resourcesListChanged"] is True
    stdio = Raw(command(root, "--no-index"), env=env)
    try:
        stdio.initialize()
        told = {
            uri: answered(stdio.request(uri, "resources/subscribe", {"uri": uri}))
            for uri in (INDEXED, UNINDEXED)
        }
        assert set(told.values()) == {errors.FORBIDDEN}, told
        listen = {"_meta": META, "notifications": {"resourceSubscriptions": [INDEXED, UNINDEXED]}}
        stdio.send({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen", "params": listen})
        ack = stdio.recv()
        assert honoured(ack) == [], ack
        assert stdio.close() == 0
    finally:
        stdio.kill()
    assert "Traceback" not in up.stderr, up.stderr


def test_subscriptions_stay_free_while_list_files_is(tmp_path, running, facilitator):
    """The control: with ``list_files`` free, subscriptions answer as without x402."""
    root = tmp_path / "corpus"
    write_corpus(root)
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    up = running(
        "--dir", str(root), "--json", "--no-index", env=gated_env(facilitator, '{dir2mcp.list_files: "0"}')
    )
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe", "params": {"uri": INDEXED}}
    assert answered(srv.post(body, session=session).json()) == "accepted"
    stream = Listening(srv, {"resourceSubscriptions": [INDEXED]})
    try:
        assert honoured(stream.messages.get(timeout=WAIT)) == [INDEXED]
    finally:
        stream.close()


# -- symbols: the rows a tier reads, counted with the rules' excluded ones -------------------

#: definitions of ``qq_`` names in the file the rules exclude: fewer than
#: ``names.PASSED_OVER`` (1,000), the rows an answer may pass over
EXCLUDED_ROWS = 999
#: definitions in a readable file: with the excluded ones, one more than
#: ``names.TIER_ROWS`` (2,000) rows in the ``prefix`` tier of ``qq_``
KEPT_ROWS = 1002


def defining(names: list[str]) -> str:
    return "".join(f"def {name}():\n    return 0\n\n\n" for name in names)


def symbols(srv: Server, session: str, arguments: dict) -> dict:
    answer = srv.call(session, "dir2mcp.symbols", arguments)["structuredContent"]
    return {"files": [hit["rel_path"] for hit in answer["symbols"]], "truncated": answer["truncated"]}


def test_symbols_never_let_an_excluded_file_crowd_out_a_readable_definition(tmp_path, running):
    """``symbols`` read each tier's first 2,001 rows (``names.TIER_ROWS``
    and one) before judging them, so the rows of a file excluded since the
    index was written took the places of readable ones: with 999 of them,
    ``qq_zebra`` (defined in ``src/a_best.py``, which sorts first) was cut
    from a tier of 2,002 rows and the answer began with ``src/zz.py``, and
    ``truncated`` counted the excluded rows with the rest. Rows of excluded
    files are now passed over as they are read (up to ``names.PASSED_OVER``)
    and the cap counts readable rows alone."""
    root = tmp_path / "corpus"
    (root / "src").mkdir(parents=True)
    (root / "src" / "m_private.py").write_text(defining([f"qq_{n:04}" for n in range(EXCLUDED_ROWS)]))
    (root / "src" / "zz.py").write_text(defining([f"qq_{n:04}" for n in range(1000, 1000 + KEPT_ROWS)]))
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    # indexed last, named last: the last row whichever order the tier is read in
    (root / "src" / "a_best.py").write_text(defining(["qq_zebra"]))
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    up = running("--dir", str(root), "--json", "--no-index")
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    (root / ".gitignore").write_text("src/m_private.py\n")
    wait_until(
        lambda: "src/m_private.py" not in symbols(srv, session, {"name": "qq_0001"})["files"],
        timeout=15,
        message="symbols to judge src/m_private.py again",
    )
    first = symbols(srv, session, {"name": "qq_", "limit": 1})
    assert first == {"files": ["src/a_best.py"], "truncated": True}, first  # before: src/zz.py
    # the readable rows alone: 1,003, no tier cut; 500 shown and more follow
    whole = symbols(srv, session, {"name": "qq_", "limit": 500})
    assert whole["files"][0] == "src/a_best.py" and whole["truncated"], whole["files"][:3]
    assert "src/m_private.py" not in whole["files"]
