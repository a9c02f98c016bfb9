"""Hostile round of 2026-11-30, session 28: what session 27 left open, on a
real ``up`` (daphne, the gate) and ``mcp_stdio``; see docs/security.md,
"Hostile round, 2026-11-30 (session 28): what session 27 left open". Each
test shows a probe that answered before its fix.
"""

from __future__ import annotations

import httpx
import pytest

from tests.mcp_http import Server, write_corpus
from tests.support import wait_until
from tests.test_cli import cli, mistral_env
from tests.test_hostile_clients import WAIT, token_of

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
