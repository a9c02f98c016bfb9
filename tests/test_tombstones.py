"""Tombstone collection keeps storage bounded as a tree keeps moving (issue #37 item 5).

A changed or deleted file's chunks are tombstoned so that switching back
revives them with their vectors (tests/test_switch_reuse.py); left alone,
every version a file ever had would stay. Here a generated tree is switched
from version to version under ``reindex --incremental`` (as live sync runs
it) with ``ingest.tombstone_share`` set low: the chunk rows, and the slots
of the ``.hnsw`` files, stay within the bound; the oldest tombstones go
first, so switching back to the tree seen last still revives its chunks
(same ids, nothing embedded again); what was collected never comes back in
a search or a look-up; and the index equals a clean build of the tree.

Mistral is the fake at the network edge (its vector depends on the text).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from corpus.index.dense.vectors import VectorIndex, index_count
from tests.support import read_only
from tests.test_cli import mistral_env
from tests.test_switch_reuse import (
    EMBED,
    check_out,
    embedded_texts,
    live_units,
    reindex,
    same_as_clean_build,
    search_only,
    tree,
)

#: one switch tombstones about 45% of the live chunks: the bound keeps the
#: last switch's tombstones, not the one before
SHARE = 0.6


def share_env(fake) -> dict[str, str]:
    return {**mistral_env(fake), "DIR2MCP_INGEST__TOMBSTONE_SHARE": str(SHARE)}


def counts(state: Path) -> tuple[int, int, int, int]:
    """Live chunks, all chunk rows, representation rows, document rows."""
    with read_only(state / "meta.sqlite") as conn:
        return tuple(
            conn.execute(sql).fetchone()[0]
            for sql in (
                "SELECT count(*) FROM chunks WHERE deleted = 0",
                "SELECT count(*) FROM chunks",
                "SELECT count(*) FROM representations",
                "SELECT count(*) FROM documents",
            )
        )


def hnsw_slots(state: Path) -> int:
    """Vectors the two ``.hnsw`` files hold, live or marked deleted."""
    total = 0
    for kind in ("text", "code"):
        sidecar = state / f"vectors_{kind}.hnsw.json"
        if sidecar.exists():
            total += index_count(json.loads(sidecar.read_text()))
    return total


def search_paths(root: Path, state: Path, env: dict, query: str) -> list[str]:
    return [hit["rel_path"] for hit in search_only(root, state, env, query)["hits"]]


def test_a_moving_tree_stays_bounded_and_the_last_tree_still_revives(tmp_path, fake_mistral):
    root, state = tmp_path / "repo", tmp_path / "state"
    root.mkdir()
    env = share_env(fake_mistral)
    # Versions a, b, c, d, e, then back to e's predecessor d: each switch
    # changes 24 files and swaps 8, about 45% of the chunks.
    seen = []
    for commit in "abcde":
        check_out(root, tree(commit))
        reindex(root, state, env)
        live, rows, reps, docs = counts(state)
        seen.append((live, rows, reps, docs, hnsw_slots(state)))
        assert rows <= live * (1 + SHARE), (commit, live, rows)
    # Without collection every version stayed: rows, representations and
    # documents grew by a version each, and the .hnsw files by its vectors.
    assert seen[-1][1:4] == seen[-2][1:4] == seen[-3][1:4]
    assert seen[-1][4] == seen[-2][4]

    # Back to d (tombstoned by the last switch, newest of all): revived, not embedded again.
    at_e = live_units(state)
    check_out(root, tree("d"))
    asked = len(fake_mistral.requests_to(EMBED))
    reindex(root, state, env)
    assert embedded_texts(fake_mistral, asked) == []
    back = live_units(state)
    # Units e shares with d kept their chunks; d's own came back with their ids (below the first of e's).
    assert all(back[key][0] == at_e[key][0] for key in back if key in at_e and back[key][1] == at_e[key][1])
    first_e = min(cid for key, (cid, _, _) in at_e.items() if key[0].startswith("only_e/"))
    assert any(cid < first_e for key, (cid, _, _) in back.items() if key[0].startswith("only_d/"))

    # a, b and c's own units were collected: no row, no search hit, no symbol.
    with read_only(state / "meta.sqlite") as conn:
        for commit in "ab":
            assert not conn.execute(
                "SELECT count(*) FROM documents WHERE rel_path LIKE ?", [f"only_{commit}/%"]
            ).fetchone()[0]
        assert not conn.execute("SELECT count(*) FROM symbols WHERE name LIKE 'onlya%'").fetchone()[0]
    assert not [path for path in search_paths(root, state, env, "onlya0_total invoices") if "only_a" in path]
    assert any("only_d" in path for path in search_paths(root, state, env, "onlyd0_total invoices"))
    same_as_clean_build(root, state, tmp_path, env)


def test_old_tombstones_go_by_age(tmp_path, fake_mistral):
    """Under the share, tombstones older than ``ingest.tombstone_days`` go."""
    root, state = tmp_path / "repo", tmp_path / "state"
    root.mkdir()
    env = mistral_env(fake_mistral)
    check_out(root, tree("a"))
    reindex(root, state, env)
    check_out(root, tree("b"))
    reindex(root, state, env)
    live, rows, _, _ = counts(state)
    assert rows > live
    # a's tombstones dated 20 days back; the next pass (nothing changed) collects them.
    with sqlite3.connect(state / "meta.sqlite") as conn:
        conn.execute("UPDATE chunks SET deleted_unix = deleted_unix - 20 * 86400 WHERE deleted = 1")
    reindex(root, state, env)
    assert counts(state)[:2] == (live, live)
    same_as_clean_build(root, state, tmp_path, env)


@pytest.mark.parametrize("reload", [False, True])
def test_a_forgotten_label_is_never_returned_and_its_slot_is_reused(tmp_path, reload):
    rng = np.random.default_rng(7)
    path = tmp_path / "vectors_text.hnsw"
    index = VectorIndex(path, 8, "m")
    vectors = rng.standard_normal((40, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index.add(np.arange(1, 41), vectors)
    assert index.forget(range(1, 31)) == 30
    if reload:
        index.save()
        index = VectorIndex(path, 8, "m")
        assert index.load()
    assert len(index) == 10
    # every live label, none forgotten, even asked for more than are live
    found = index.search(vectors[0], 40)
    assert sorted(n.chunk_id for n in found) == list(range(31, 41))
    more = rng.standard_normal((30, 8)).astype(np.float32)
    index.add(np.arange(100, 130), more)
    index.save()
    meta = json.loads(path.with_name(path.name + ".json").read_text())
    assert index_count(meta) == 40 and meta["deleted"] == []
