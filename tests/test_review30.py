"""Review of session 30's merge (trust round 12, dense shards, ranking):
each test shows a probe that answered otherwise before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from corpus import cursors, screen
from corpus.index.dense import embedding
from corpus.index.dense.vectors import VectorIndex, index_path, shard_files
from corpus.ingest.indexing import index_directory
from corpus.models import Representation
from corpus.navigation import names
from kernel.config import build_config
from kernel.state import StateDir
from mcp_gateway import context, indexer_process, notify
from mcp_gateway.resources import ResourceError
from tests.test_dispatch import call
from tests.test_hostile_session30 import BODY, CONFIG, SPLIT_KEY, WITHOUT_PEM, built
from tests.test_vectors import unit


def split_key_served(corpus_dir, state):
    """A context serving ``ops/deploy.txt`` (a key split across two units,
    indexed under rules without the PEM pattern: stored, its stored text
    a credential under the rules now) beside a plain ``ops/readme.txt``."""
    built(
        corpus_dir,
        state,
        {"ops/deploy.txt": SPLIT_KEY, "ops/readme.txt": "zebrafinch\n"},
        security={"secret_patterns": WITHOUT_PEM},
    )
    return context.build(root=corpus_dir, state=state, config=build_config(CONFIG, {}, {}), auth_spec="none")


@pytest.mark.django_db
def test_a_file_rewritten_in_place_is_screened_again(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reindex rewrites a representation in place (its ``rep_id`` kept,
    corpus/ingest/writer.py), so a verdict kept with the representations'
    ids alone was never judged again: a file clean when first judged, then
    rewritten with a key the indexer's rules (older than the server's) let
    through, stayed listed and searchable with the key's body quoted."""
    old = {"security": {"secret_patterns": WITHOUT_PEM}}
    built(corpus_dir, state, {"ops/deploy.txt": "zebrafinch\n", "ops/readme.txt": "zebrafinch\n"}, **old)
    now = context.build(root=corpus_dir, state=state, config=build_config(CONFIG, {}, {}), auth_spec="none")
    assert "deploy.txt" in json.dumps(call(now, "dir2mcp.list_files", {"path_prefix": "ops"}))
    reps = Representation.objects.filter(document__rel_path="ops/deploy.txt")
    rep_ids = set(reps.values_list("rep_id"))
    (corpus_dir / "ops/deploy.txt").write_text(SPLIT_KEY)
    index_directory(corpus_dir, state=state, config=build_config({**CONFIG, **old}, {}, {}))
    assert set(reps.values_list("rep_id")) == rep_ids  # rewritten in place
    monkeypatch.setattr(screen, "CHECK_SECONDS", 0.0)  # the recheck due 30 s later, now
    listed = json.dumps(call(now, "dir2mcp.list_files", {"path_prefix": "ops"}))
    searched = json.dumps(call(now, "dir2mcp.search", {"query": "zebrafinch closing"}))
    assert "readme.txt" in listed
    assert "deploy.txt" not in listed  # before: listed, its verdict kept with the same ids
    assert BODY[-3] not in searched  # before: the key's body quoted


@pytest.mark.django_db
def test_a_subscription_refuses_a_file_every_listing_leaves_out(corpus_dir: Path, state: StateDir) -> None:
    """``resources/subscribe`` judged a file by the rules and the index's
    secret verdict only: a file whose stored text holds a credential under
    the rules now, which every listing and read leaves out, was accepted
    where a missing one is refused, telling a client guessing names that
    it is indexed."""
    now = split_key_served(corpus_dir, state)
    assert notify.subscribable(now, "dir2mcp:///ops/readme.txt") == "ops/readme.txt"
    answers = []
    for uri in ("dir2mcp:///ops/deploy.txt", "dir2mcp:///ops/missing.txt"):
        with pytest.raises(ResourceError) as refused:
            notify.subscribable(now, uri)
        answers.append((refused.value.code, refused.value.data.get("code")))
    assert answers[0] == answers[1]  # before: deploy.txt accepted


def test_a_server_waits_for_its_child_through_the_supervisor_backoff() -> None:
    """A server waiting for its indexing child's dense file stopped waiting
    (and built the index itself, the memory the wait spares it) once the
    index lock was free for ``INDEXER_GONE_SECONDS`` (120 s): the supervisor
    restarts a crashed child after a backoff doubling to ``MAX_BACKOFF``
    (60 s), so the sixth crash in a row (a 32 s backoff) ended the wait
    while the child was still to be started again."""
    assert embedding.INDEXER_GONE_SECONDS > indexer_process.MAX_BACKOFF


def test_a_build_in_another_layout_leaves_no_shard_of_the_old_one(state: StateDir) -> None:
    """An index built again in another layout (``rag.shard_vectors``
    changed, or set to 0) saved a sidecar naming fewer shards than the
    files beside it: the old layout's shard files stayed on disk for good
    (only a model change removed them), as large as the index they held."""
    vectors, ids = unit(40, seed=3), np.arange(1, 41)
    path = index_path(state, "code")
    sharded = VectorIndex(path, 16, "m", "usearch-f32", shard_vectors=10)
    sharded.add(ids, vectors)
    sharded.save()
    assert len(shard_files(path)) >= 3
    one = VectorIndex(path, 16, "m", "usearch-f32", shard_vectors=0)
    assert not one.load()  # "it is in shards of 10 vectors": built again, in one file
    one.add(ids, vectors)
    one.save()
    assert one.shards == 1
    assert sorted(p.name for p in path.parent.glob(f"{path.name}*")) == [path.name, f"{path.name}.json"]
    reread = VectorIndex(path, 16, "m", "usearch-f32")
    assert reread.load() and len(reread.search(vectors[0], 40)) == 40


@pytest.mark.django_db
def test_a_sealed_cursor_tells_not_the_length_of_what_it_holds() -> None:
    """AES-GCM keeps the plaintext's length: a ``references`` cursor told
    its document id's digits, and a ``find`` cursor cut by its time budget
    (which resumes at the first row not judged, an excluded file's maybe)
    the length of that file's name."""
    find = [cursors.seal("find", {"q": "k" * 16, "p": "p" * size, "k": 0}) for size in (1, 9, 20)]
    refs = [cursors.seal("references", {"q": "k" * 16, "r": doc_id, "k": 0}) for doc_id in (7, 7_654_321)]
    assert len({len(cursor) for cursor in find}) == 1  # before: 3 lengths
    assert len({len(cursor) for cursor in refs}) == 1  # before: 2
    assert cursors.opened("find", find[1], 8192) == {"q": "k" * 16, "p": "p" * 9, "k": 0}
    assert max(len(cursor) for cursor in refs) <= names.MAX_CURSOR


@pytest.mark.django_db
def test_find_by_content_counts_no_file_every_listing_leaves_out(corpus_dir: Path, state: StateDir) -> None:
    """``find`` by content judged its candidates by the rules alone and
    screened a document's texts only at its first match: a file whose
    stored text holds a credential under the rules now, left out of every
    listing, was still counted in ``files_scanned``, so a name glob naming
    it told it from a missing one (1 file scanned against 0)."""
    now = split_key_served(corpus_dir, state)
    scanned = {
        name: call(now, "dir2mcp.find", {"content": "nowhere-at-all", "name_glob": name})[
            "structuredContent"
        ]["files_scanned"]
        for name in ("ops/readme.txt", "ops/deploy.txt", "ops/missing.txt")
    }
    assert scanned == {"ops/readme.txt": 1, "ops/deploy.txt": 0, "ops/missing.txt": 0}  # before: deploy 1
