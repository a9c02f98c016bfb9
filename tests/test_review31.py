"""Review of session 31's shards (a full shard's removals listed in the
sidecar, sparse shards merged): each test failed before its fix, but the
one whose docstring says it was judged fine."""

from __future__ import annotations

import json
import logging
import resource
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from corpus.index.dense.embedding import check_models, dense_store, embed_pending
from corpus.index.dense.vectors import VectorIndex, saved_shards, shard_files
from corpus.ingest.collect import collect
from corpus.models import Chunk
from tests.mcp_http import REPO, base_env
from tests.test_saved_index_load import Hashed, distinct_chunks, server_store
from tests.test_vector_shards import COMPACTING, DIM, SHARD, churned, pair, same_hits
from tests.test_vectors import unit
from tests.test_views_later import vector


@pytest.mark.parametrize(
    "damage",
    [{"number": 10**300}, {"sha256": "../../../../etc/passwd"}, {"sha256": "/etc/passwd"}, {"sha256": 7}],
)
def test_a_sidecar_naming_no_shard_file_of_its_own_is_refused_not_a_crash(state, damage) -> None:
    """A shard's number too long for a file name (OSError) or a sha256
    naming a path (ValueError) crashed the load, which refuses any damaged
    sidecar (the index is built again from the database)."""
    _, sharded, _ = pair(state, "usearch-bf16")
    sharded.save()
    sidecar = sharded.path.with_name(sharded.path.name + ".json")
    meta = json.loads(sidecar.read_text())
    meta["shards"][1].update(damage)
    sidecar.write_text(json.dumps(meta))
    assert all(file.parent == state.path for file in saved_shards(sharded.path))
    for shard_vectors in (SHARD, None):  # the owner, a server
        assert not VectorIndex(sharded.path, DIM, "m", "usearch-bf16", shard_vectors=shard_vectors).load(
            quiet=True
        )


class StopAfter(threading.Event):
    """A stop set once it has been asked ``calls`` times (a SIGTERM mid-merge)."""

    def __init__(self, calls: int) -> None:
        super().__init__()
        self.calls = calls

    def is_set(self) -> bool:
        self.calls -= 1
        return self.calls < 0 or super().is_set()


def test_a_stop_mid_merge_leaves_the_shards_as_they_were(state) -> None:
    """A merge of the kernel's shards takes minutes; it went on past a stop
    (SIGTERM) until the supervisor's SIGKILL, losing it and the pass's last save."""
    one, sharded = churned(state, "usearch-bf16")
    sharded.save()
    listed, before = saved_shards(sharded.path), sharded.shards
    assert sharded.compact(stop=StopAfter(2)) == 0
    assert sharded.shards == before and shard_files(sharded.path) == sorted(listed)
    assert not list(state.path.glob(".*.part"))
    same_hits(one, sharded, unit(20, seed=31), 10)
    assert sharded.compact() >= 2  # a run not stopped merges them


@pytest.mark.django_db
def test_a_stopped_pass_does_not_start_a_merge(state) -> None:
    check_models(Hashed(), state, vector_store="usearch-bf16", records_store=True, shard_vectors=5)
    chunks = distinct_chunks(23, "a")
    embed_pending(Hashed(), state, batch_size=4)
    index = dense_store(state).index("code")
    assert index is not None and index.shards == 5
    assert index.forget([chunk.chunk_id for chunk in chunks[:12]]) == 12  # shards 0, 1 and 2 sparse
    stopped = threading.Event()
    stopped.set()
    embed_pending(Hashed(), state, batch_size=4, stop=stopped)
    assert index.shards == 5
    embed_pending(Hashed(), state, batch_size=4)
    assert index.shards == 3


#: Another process (`up`'s indexing child): the index at argv[1] loaded and
#: merged with no file it writes allowed past argv[2] bytes (a full disk).
MERGING_ON_A_FULL_DISK = (
    "import resource, signal, sys; from pathlib import Path; "
    "from corpus.index.dense.vectors import VectorIndex\n"
    "index = VectorIndex(Path(sys.argv[1]), 16, 'm', 'usearch-bf16', shard_vectors=50)\n"
    "assert index.load(); signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))\n"
    "print(index.compact(), index.shards)"
)


def test_a_merge_that_cannot_write_its_files_leaves_the_shards_and_says_so(state) -> None:
    """usearch says a failed write by RuntimeError: a full disk at a merge
    raised out of embed_pending and the tombstone collection, failing every
    pass (each tried the merge again)."""
    _, sharded = churned(state, "usearch-bf16")
    sharded.save()
    listed = saved_shards(sharded.path)
    room = min(file.stat().st_size for file in listed) // 2
    done = subprocess.run(
        [sys.executable, "-c", MERGING_ON_A_FULL_DISK, str(sharded.path), str(room)],
        cwd=REPO,
        env=base_env(PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", str(sharded.shards)] and "not merged" in done.stderr
    assert shard_files(sharded.path) == sorted(listed) and not list(state.path.glob(".*.part"))


def test_the_open_file_a_killed_save_was_writing_is_removed_by_the_next_save(state) -> None:
    """A save writes the open shard (up to 0.3 GB; the whole index in one
    file) to a temp name first: a process killed before its rename left that
    file for good, where a shard's half-written file is cleared."""
    _, sharded = churned(state, "usearch-bf16")
    sharded.save()
    done = subprocess.run(
        [sys.executable, "-c", COMPACTING, str(sharded.path), r"\.hnsw\.json$"],
        cwd=REPO,
        env=base_env(PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
    )
    assert done.returncode == -9, done.stderr
    assert list(state.path.glob(".vectors_code.hnsw.[0-9]*.tmp"))  # the killed save's
    again = VectorIndex(sharded.path, DIM, "m", "usearch-bf16", shard_vectors=SHARD)
    assert again.load()
    again.add(np.array([9001]), unit(1, seed=32))
    again.save()
    assert not list(state.path.glob(".vectors_code.hnsw.[0-9]*.tmp"))
    assert not list(state.path.glob(".*.part"))


@pytest.mark.django_db
def test_a_save_on_a_full_disk_warns_and_keeps_the_index(state, caplog) -> None:
    """DenseStore.save caught OSError, but usearch says a failed write by
    RuntimeError: a full disk raised out of embed_pending's last save (and a
    tombstone collection's), where the next save tries again."""
    check_models(Hashed(), state, vector_store="usearch-bf16", records_store=True, shard_vectors=5000)
    distinct_chunks(8, "a")
    store = dense_store(state)
    index = store.index("code")
    assert index is not None
    index.add(np.arange(1, 1001), np.stack([vector(str(n)) for n in range(1000)]))
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limits[1]))
    try:
        with caplog.at_level(logging.WARNING):
            store.save(force=True)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    assert "cannot save vectors_code.hnsw" in caplog.text and index.dirty
    store.save(force=True)
    assert not index.dirty and 3 in dense_store(state).index("code")


def test_a_short_write_usearch_does_not_report_is_not_listed(state) -> None:
    """usearch says nothing of a small file's failed write (its last
    buffer's): on a full disk a save recorded the sha256 of the truncated
    file in the sidecar, and the next load refused both: a build of the
    whole index again, where the previous files were whole."""
    index = VectorIndex(state.path / "vectors_code.hnsw", DIM, "m", "usearch-bf16")
    index.add(np.arange(1, 41), unit(40, seed=34))
    index.save()
    size = index.path.stat().st_size
    index.add(np.array([41]), unit(1, seed=35))
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size - 64, limits[1]))  # the last buffer; the sidecar fits
    try:
        with pytest.raises(OSError):
            index.save()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    again = VectorIndex(index.path, DIM, "m", "usearch-bf16")
    assert again.load() and len(again) == 40


class Meanwhile(threading.Event):
    """A stop never set that runs ``then`` when first asked: what another
    thread does while a merge builds its shards outside the index's lock."""

    def __init__(self, then) -> None:
        super().__init__()
        self.then = then

    def is_set(self) -> bool:
        then, self.then = self.then, None
        if then is not None:
            then()
        return super().is_set()


@pytest.mark.parametrize("store", ["usearch-f32", "usearch-i8"])
def test_removals_and_replacements_during_a_merge_are_passed_over_in_its_shards(state, store) -> None:
    """Judged fine (no fix): the labels removed or replaced in a merged
    shard while the merge ran are passed over in the new shards, in memory
    and after a reload; the replacing vectors are found."""
    one, sharded = churned(state, store)
    sharded.save()
    held = sorted(sharded.labels)
    old = [label for label in held if label <= 200]  # in the old, sparse shards
    gone, moved = old[:5], np.array(old[5:8])
    fresh = unit(3, seed=36)

    def meanwhile() -> None:
        for index in (one, sharded):
            assert index.forget(gone) == 5
            index.add(moved, fresh, replace=True)

    assert sharded.compact(stop=Meanwhile(meanwhile)) >= 2
    assert sharded.viewed == 8  # the merged shards pass them over
    queries = np.vstack([fresh, unit(20, seed=37)])
    same_hits(one, sharded, queries, 10)
    assert [sharded.search(vector, 1)[0].chunk_id for vector in fresh] == moved.tolist()
    sharded.save()
    again = VectorIndex(sharded.path, DIM, "m", store, shard_vectors=SHARD)
    assert again.load() and again.labels == one.labels
    same_hits(one, again, queries, 10)
    same_hits(one, again, unit(3, seed=38), 300)  # every vector, once


@pytest.mark.django_db
def test_a_server_views_the_merged_shards_the_child_saved_at_the_same_seq(state) -> None:
    """A server viewing its child's file again skipped a file of the seq it
    viewed last ("the child saved none since"); a merge after a tombstone
    collection (or at a pass's end) saves new shards at the same seq: the
    server kept searching the sparse shards, their unlinked files held on
    disk, until the next embedding."""
    check_models(Hashed(), state, vector_store="usearch-bf16", records_store=True, shard_vectors=5)
    chunks = distinct_chunks(6, "a")
    embed_pending(Hashed(), state, batch_size=4)
    server = server_store(state, follow=3600.0)
    server.view_every, server.view_at = 0.0, 8
    assert server.sync("code") is not None
    chunks += distinct_chunks(17, "b")
    embed_pending(Hashed(), state, batch_size=4)
    viewed = server.sync("code")  # 17 of its own, past 8: the child's file viewed
    assert viewed is not None and viewed.shards == 5 and server.loads == 1
    gone = [chunk.chunk_id for chunk in chunks[:12]]  # shards 0 and 1, and 2 of shard 2
    Chunk.objects.filter(chunk_id__in=gone).update(deleted=True, deleted_unix=1)
    assert collect(state, 0.0, 0.0).chunks == 12
    assert dense_store(state).index("code").shards == 3  # the child merged them
    index = server.sync("code")  # 12 removed of its own, past 8
    assert index is not None and index.shards == 3 and server.loads == 2
    assert index.labels == {chunk.chunk_id for chunk in chunks[12:]}
