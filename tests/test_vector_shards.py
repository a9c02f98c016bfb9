"""A dense index in shards (VectorIndex shard_vectors, issue #37): a full
shard is saved and memory-mapped; searches merge every shard's k nearest,
and find what one index of the same vectors finds; replacements and
removals reach the shard holding the label; a saved sharded index loads
(mapped) and a torn or missing shard file is refused (rebuilt from the
database), never read."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from corpus.index.dense.embedding import check_models, dense_store, embed_pending, from_bytes
from corpus.index.dense.vectors import VectorIndex, index_path, remove_files, saved_shards, shard_files
from corpus.ingest.collect import collect
from corpus.models import Chunk
from tests.mcp_http import REPO, base_env
from tests.test_saved_index_load import Hashed, distinct_chunks, server_store
from tests.test_vectors import unit
from tests.test_views_later import DIM as MODEL_DIM
from tests.test_views_later import unit_text, vector

DIM = 16
STORES = ("usearch-f32", "usearch-bf16", "usearch-i8")
SHARD = 50


@pytest.fixture(params=STORES)
def store(request) -> str:
    return request.param


def pair(state, store: str, count: int = 260) -> tuple[VectorIndex, VectorIndex, np.ndarray]:
    """One index and a sharded one (shards of SHARD) of the same ``count`` vectors."""
    vectors = unit(count, seed=3)
    ids = np.arange(1, count + 1)
    one = VectorIndex(index_path(state, "text"), DIM, "m", store)
    one.add(ids, vectors)
    sharded = VectorIndex(index_path(state, "code"), DIM, "m", store, shard_vectors=SHARD)
    for start in range(0, count, 37):  # batches that straddle shards
        sharded.add(ids[start : start + 37], vectors[start : start + 37])
    return one, sharded, vectors


def same_hits(left: VectorIndex, right: VectorIndex, queries: np.ndarray, k: int) -> None:
    for query in queries:
        a, b = left.search(query, k), right.search(query, k)
        assert [hit.chunk_id for hit in a] == [hit.chunk_id for hit in b]
        assert np.allclose([hit.score for hit in a], [hit.score for hit in b], atol=1e-5)


def test_a_sharded_index_finds_what_one_index_finds(state, store) -> None:
    one, sharded, _ = pair(state, store)
    assert sharded.shards == 6 and len(sharded) == len(one) == 260
    assert len(shard_files(sharded.path)) == 5 and sharded.viewed is not None
    same_hits(one, sharded, unit(60, seed=11), 10)
    same_hits(one, sharded, unit(5, seed=12), 300)  # k past the index: every vector, once


def test_an_index_under_one_shard_is_one_index(state, store) -> None:
    index = VectorIndex(index_path(state, "code"), DIM, "m", store, shard_vectors=1000)
    index.add(np.arange(1, 201), unit(200))
    index.save()
    assert index.shards == 1 and not shard_files(index.path) and index.viewed is None


def test_replacements_and_removals_reach_the_shard_holding_the_label(state, store) -> None:
    one, sharded, vectors = pair(state, store)
    moved = np.array([3, 77, 140, 259])  # in shards 0, 1, 2 and the open one
    fresh = unit(4, seed=21)
    for index in (one, sharded):
        index.add(moved, fresh, replace=True)
        assert index.forget([10, 120, 255]) == 3
    queries = np.vstack([fresh, vectors[[9, 119, 254]], unit(30, seed=13)])
    same_hits(one, sharded, queries, 10)
    assert sharded.search(fresh[1], 1)[0].chunk_id == 77
    assert {10, 120, 255}.isdisjoint(hit.chunk_id for q in queries for hit in sharded.search(q, 20))

    sharded.save()  # changed shards written again and mapped again
    again = VectorIndex(sharded.path, DIM, "m", store)
    assert again.load() and again.shards == sharded.shards and len(again) == 257
    same_hits(one, again, queries, 10)


def test_a_saved_sharded_index_is_mapped_by_another_process(state, store) -> None:
    one, sharded, _ = pair(state, store)
    sharded.save()
    server = VectorIndex(sharded.path, DIM, "m", store)
    assert server.load(view=True) and server.shards == 6 and server.viewed == 0
    same_hits(one, server, unit(40, seed=14), 10)


@pytest.mark.parametrize("damage", ["torn", "missing"])
def test_a_torn_or_missing_shard_is_refused_never_read(state, damage) -> None:
    _, sharded, _ = pair(state, "usearch-bf16")
    sharded.save()
    file = saved_shards(sharded.path)[2]
    if damage == "torn":
        file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    else:
        file.unlink()
    again = VectorIndex(sharded.path, DIM, "m", "usearch-bf16")
    assert not again.load() and len(again) == 0  # the caller builds it from the database


def bytes_read() -> int:
    """This process's bytes read through read() so far (/proc/self/io rchar)."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


def test_a_shard_found_whole_is_not_read_again_until_its_file_changes(state) -> None:
    """A load checks each full shard's sha256; a server following its
    child's saves loads after each one, and read every unchanged shard whole
    again each time. A shard whose file kept its identity is not read again;
    one rewritten in place (same size, other bytes) is, and is refused."""
    _, sharded, _ = pair(state, "usearch-f32", count=260)
    sharded.save()
    files = saved_shards(sharded.path)
    shard_bytes = sum(file.stat().st_size for file in files)
    before = bytes_read()
    assert VectorIndex(sharded.path, DIM, "m", "usearch-f32").load(view=True)
    first = bytes_read() - before
    before = bytes_read()
    assert VectorIndex(sharded.path, DIM, "m", "usearch-f32").load(view=True)
    again = bytes_read() - before
    assert first >= shard_bytes > again

    data = bytearray(files[1].read_bytes())
    data[-64:] = bytes(64 - byte for byte in data[-64:])
    files[1].write_bytes(bytes(data))
    assert not VectorIndex(sharded.path, DIM, "m", "usearch-f32").load(quiet=True)


def test_removing_the_files_removes_every_shard(state) -> None:
    _, sharded, _ = pair(state, "usearch-bf16")
    sharded.save()
    remove_files(state)
    assert not list(state.path.glob("vectors_code.hnsw*"))


def test_the_indexing_process_refuses_a_file_of_another_layout(state) -> None:
    _, sharded, _ = pair(state, "usearch-bf16")
    sharded.save()
    for size in (100, 0):  # other shards, or one file: built again from the database
        owner = VectorIndex(sharded.path, DIM, "m", "usearch-bf16", shard_vectors=size)
        assert not owner.load()
    assert VectorIndex(sharded.path, DIM, "m", "usearch-bf16", shard_vectors=SHARD).load()
    small = VectorIndex(index_path(state, "text"), DIM, "m", "usearch-bf16")  # saved before shards
    small.add(np.arange(1, 41), unit(40))
    small.save()
    owner = VectorIndex(small.path, DIM, "m", "usearch-bf16", shard_vectors=SHARD)
    assert owner.load() and len(owner) == 40  # under one shard: as it was


@pytest.mark.django_db
def test_a_server_maps_the_shards_its_child_saved_and_finds_what_one_index_finds(state) -> None:
    check_models(Hashed(), state, vector_store="usearch-bf16", records_store=True, shard_vectors=5)
    chunks = distinct_chunks(23, "a")
    embed_pending(Hashed(), state, batch_size=4)  # the indexing process: shards of 5, saved
    assert dense_store(state).index("code").shards == 5
    server = server_store(state, follow=3600.0)
    index = server.sync("code")
    assert index is not None and index.viewed == 0 and index.shards == 5 and server.builds == 0
    rows = Chunk.objects.filter(index_kind="code").values_list("chunk_id", "embedding")
    one = VectorIndex(state.path / "one.hnsw", MODEL_DIM, "fake", "usearch-bf16")
    one.add(np.array([cid for cid, _ in rows]), np.stack([from_bytes(blob) for _, blob in rows]))
    same_hits(one, index, np.stack([vector(unit_text(chunk)) for chunk in chunks]), 7)


#: Another process (as `up`'s indexing child): vectors 1..N (unit(N, seed 3)) added in shards of 50, saved.
CHILD = (
    "import sys; from pathlib import Path; import numpy as np; "
    "from corpus.index.dense.vectors import VectorIndex; from tests.test_vectors import unit; "
    "path, count = Path(sys.argv[1]), int(sys.argv[2]); "
    "index = VectorIndex(path, 16, 'm', 'usearch-bf16', shard_vectors=50); index.load(); "
    "fresh = [n for n in range(1, count + 1) if n not in index]; "
    "index.add(np.array(fresh), unit(count, seed=3)[np.array(fresh) - 1]); index.save(); print(index.shards)"
)


def child_saves(path, count: int) -> int:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(count)],
        cwd=REPO,
        env=base_env(PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout.strip())


def test_a_server_maps_the_shards_another_process_saves_and_keeps_them_while_it_saves_again(state) -> None:
    one, _, _ = pair(state, "usearch-bf16", count=260)
    path = index_path(state, "code")
    assert child_saves(path, 180) == 4  # three full shards and the open one
    server = VectorIndex(path, DIM, "m", "usearch-bf16")
    assert server.load(view=True) and server.shards == 4 and len(server) == 180
    queries = unit(40, seed=15)
    first = [server.search(query, 10) for query in queries]

    assert child_saves(path, 260) == 6  # the open shard filled and saved over, two more
    assert [server.search(query, 10) for query in queries] == first  # the files it mapped, as they were
    again = VectorIndex(path, DIM, "m", "usearch-bf16")
    assert again.load(view=True) and again.shards == 6
    same_hits(one, again, queries, 10)


def rebuilt(path, store: str, count: int, seed: int) -> VectorIndex:
    """A build of the index at ``path`` again (as the indexing child's at a
    views pass's end): ``count`` other vectors in shards of SHARD, not saved."""
    fresh = VectorIndex(path, DIM, "m", store, shard_vectors=SHARD)
    fresh.add(np.arange(1, count + 1), unit(count, seed=seed))
    return fresh


def test_a_build_again_writes_new_shard_files_and_a_reader_keeps_the_ones_it_mapped(state) -> None:
    one, sharded, _ = pair(state, "usearch-bf16")
    sharded.save()
    before = saved_shards(sharded.path)
    reader = VectorIndex(sharded.path, DIM, "m", "usearch-bf16")
    assert reader.load(view=True)
    queries = unit(30, seed=16)
    first = [reader.search(query, 10) for query in queries]

    # stopped after its shard files are written, before its sidecar (a crash):
    # the files the sidecar lists are as they were, and load
    fresh = rebuilt(sharded.path, "usearch-bf16", 260, seed=4)
    assert fresh.shards == 6 and saved_shards(sharded.path) == before
    again = VectorIndex(sharded.path, DIM, "m", "usearch-bf16")
    assert again.load(view=True)
    same_hits(one, again, queries, 10)

    fresh.save()  # the new files, then the sidecar; the previous files removed
    assert set(saved_shards(sharded.path)).isdisjoint(before)
    assert shard_files(sharded.path) == sorted(saved_shards(sharded.path))
    assert [reader.search(query, 10) for query in queries] == first  # the unlinked files it mapped
    other = VectorIndex(index_path(state, "text"), DIM, "m", "usearch-bf16")
    other.add(np.arange(1, 261), unit(260, seed=4))
    latest = VectorIndex(sharded.path, DIM, "m", "usearch-bf16")
    assert latest.load(view=True)
    same_hits(other, latest, queries, 10)


def test_shard_files_no_sidecar_lists_do_not_pile_up(state) -> None:
    _, sharded, _ = pair(state, "usearch-bf16")
    sharded.save()
    rebuilt(sharded.path, "usearch-bf16", 260, seed=5)  # a build a crash cut short: never saved
    assert len(shard_files(sharded.path)) == 10
    for seed in (6, 7):
        rebuilt(sharded.path, "usearch-bf16", 210, seed=seed).save()
        assert shard_files(sharded.path) == sorted(saved_shards(sharded.path))
        assert len(saved_shards(sharded.path)) == 4
    owner = VectorIndex(sharded.path, DIM, "m", "usearch-bf16", shard_vectors=SHARD)
    assert owner.load()
    owner.add(np.array([3, 120]), unit(2, seed=22), replace=True)  # shards 0 and 2 written again
    owner.save()
    assert shard_files(sharded.path) == sorted(saved_shards(sharded.path))
    assert VectorIndex(sharded.path, DIM, "m", "usearch-bf16").load()


def test_a_save_keeps_the_shard_files_of_a_build_under_way_in_its_process(state) -> None:
    _, sharded, _ = pair(state, "usearch-bf16")
    sharded.save()
    fresh = rebuilt(sharded.path, "usearch-bf16", 260, seed=8)  # searches read `sharded` meanwhile
    sharded.forget([7])
    sharded.save()  # its sidecar does not list the build's files
    fresh.save()
    latest = VectorIndex(sharded.path, DIM, "m", "usearch-bf16")
    assert latest.load() and latest.shards == 6 and 7 in latest


def churned(state, store: str, rounds: int = 3) -> tuple[VectorIndex, VectorIndex]:
    """A sharded index (shards of SHARD) after ``rounds`` branch switches,
    each removing 30% of the live labels and adding as many new ones (they
    fill the open shard and new shards; the old ones turn sparse), and one
    index of the live vectors."""
    _, sharded, vectors = pair(state, store)
    live = {label: vectors[label - 1] for label in range(1, 261)}
    rng = np.random.default_rng(5)
    following = 261
    for turn in range(rounds):
        gone = rng.choice(sorted(live), size=len(live) * 3 // 10, replace=False)
        assert sharded.forget(gone.tolist()) == len(gone)
        fresh = np.arange(following, following + len(gone))
        added = unit(len(gone), seed=40 + turn)
        sharded.add(fresh, added)
        following += len(gone)
        for label in gone:
            del live[int(label)]
        live.update(zip(fresh.tolist(), added, strict=True))
    one = VectorIndex(index_path(state, "text"), DIM, "m", store)
    one.add(np.array(sorted(live)), np.stack([live[label] for label in sorted(live)]))
    return one, sharded


def test_compaction_merges_sparse_shards_and_finds_what_one_index_of_the_live_vectors_finds(
    state, store
) -> None:
    one, sharded = churned(state, store)
    queries = unit(60, seed=17)
    before = sharded.shards
    assert sharded.compact() >= 2
    assert sharded.shards < before and len(sharded) == len(one) == 260
    same_hits(one, sharded, queries, 10)
    same_hits(one, sharded, unit(5, seed=18), 300)  # every vector, once
    sharded.save()
    assert shard_files(sharded.path) == sorted(saved_shards(sharded.path))  # the merged ones' files gone
    again = VectorIndex(sharded.path, DIM, "m", store, shard_vectors=SHARD)
    assert again.load() and again.shards == sharded.shards
    same_hits(one, again, queries, 10)
    assert again.compact() == 0  # nothing sparse left to merge


def test_shards_not_sparse_are_not_merged(state) -> None:
    _, sharded = churned(state, "usearch-bf16", rounds=1)  # the old shards 70% live
    assert sharded.compact() == 0


def test_removals_in_a_full_shard_survive_a_restart_without_writing_it_again(state, store) -> None:
    """A few removals or replacements in a full shard rewrote its whole file
    at the next save (hundreds of MB at 250,000 vectors); the sidecar lists
    them instead, passed over at load."""
    one, sharded, _ = pair(state, store)
    sharded.save()
    files = saved_shards(sharded.path)
    identity = [(file.stat().st_ino, file.stat().st_mtime_ns) for file in files]
    moved, fresh = np.array([3, 77]), unit(2, seed=23)  # in shards 0 and 1
    for index in (one, sharded):
        index.add(moved, fresh, replace=True)
        assert index.forget([10, 120]) == 2
    sharded.save()
    assert saved_shards(sharded.path) == files
    assert [(file.stat().st_ino, file.stat().st_mtime_ns) for file in files] == identity
    again = VectorIndex(sharded.path, DIM, "m", store, shard_vectors=SHARD)
    assert again.load() and len(again) == 258 and 10 not in again and again.shards == sharded.shards
    queries = np.vstack([fresh, unit(30, seed=19)])
    same_hits(one, again, queries, 10)
    assert again.search(fresh[0], 1)[0].chunk_id == 3
    server = VectorIndex(sharded.path, DIM, "m", store)
    assert server.load(view=True) and server.viewed == 0  # the listed removals are not its own changes
    same_hits(one, server, queries, 10)


def test_a_file_passing_over_the_labels_near_a_query_still_finds_its_k_nearest(state) -> None:
    """A mapped file's search passed over removed labels by asking for k
    plus at most 2,000 more: 2,500 removed around a query left it short."""
    vectors = unit(3000, seed=24)
    index = VectorIndex(index_path(state, "code"), DIM, "m", "usearch-f32")
    index.add(np.arange(1, 3001), vectors)
    index.save()
    viewed = VectorIndex(index.path, DIM, "m", "usearch-f32")
    assert viewed.load(view=True)
    query = vectors[0]
    nearest = np.argsort(-(vectors @ query))
    viewed.forget((nearest[:2500] + 1).tolist())
    hits = viewed.search(query, 10)
    assert [hit.chunk_id for hit in hits] == (nearest[2500:2510] + 1).tolist()


def test_a_reader_mapping_the_merged_shards_keeps_answering(state) -> None:
    one, sharded = churned(state, "usearch-bf16")
    sharded.save()
    reader = VectorIndex(sharded.path, DIM, "m", "usearch-bf16")
    assert reader.load(view=True)
    queries = unit(30, seed=20)
    first = [reader.search(query, 10) for query in queries]
    merged = saved_shards(sharded.path)
    assert sharded.compact() and sharded.save() is None
    assert not any(file.exists() for file in merged if file not in saved_shards(sharded.path))
    assert [reader.search(query, 10) for query in queries] == first  # the unlinked files it mapped
    latest = VectorIndex(sharded.path, DIM, "m", "usearch-bf16")
    assert latest.load(view=True) and latest.shards == sharded.shards
    same_hits(one, latest, queries, 10)


#: Another process (`up`'s indexing child): the index at argv[1] loaded,
#: compacted and saved, killed (SIGKILL) at the first rename onto a name
#: argv[2] matches (a new shard's file, or the sidecar).
COMPACTING = (
    "import os, re, signal, sys; from pathlib import Path; "
    "from corpus.index.dense.vectors import VectorIndex; "
    "path, name = Path(sys.argv[1]), re.compile(sys.argv[2]); replace = os.replace\n"
    "def dying(src, dst):\n"
    "    if name.search(str(dst)): os.kill(os.getpid(), signal.SIGKILL)\n"
    "    replace(src, dst)\n"
    "os.replace = dying; index = VectorIndex(path, 16, 'm', 'usearch-bf16', shard_vectors=50)\n"
    "assert index.load(); index.compact(); index.save()"
)


@pytest.mark.parametrize("at", ["a new shard file", "the sidecar"])
def test_a_crash_mid_compaction_leaves_a_loadable_index(state, at) -> None:
    one, sharded = churned(state, "usearch-bf16")
    sharded.save()
    listed = saved_shards(sharded.path)
    name = {"a new shard file": r"\.hnsw\.\d+\.[0-9a-f]{16}$", "the sidecar": r"\.hnsw\.json$"}[at]
    done = subprocess.run(
        [sys.executable, "-c", COMPACTING, str(sharded.path), name],
        cwd=REPO,
        env=base_env(PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
    )
    assert done.returncode == -9, done.stderr
    assert saved_shards(sharded.path) == listed
    again = VectorIndex(sharded.path, DIM, "m", "usearch-bf16", shard_vectors=SHARD)
    assert again.load()
    same_hits(one, again, unit(30, seed=21), 10)
    # the next run merges them, and its save clears the strays
    assert again.compact() and again.save() is None
    assert shard_files(sharded.path) == sorted(saved_shards(sharded.path))
    assert not list(state.path.glob(".*.part"))  # nor a half-written shard the killed one left


@pytest.mark.django_db
def test_the_indexing_process_merges_the_shards_a_tombstone_collection_left_sparse(state) -> None:
    check_models(Hashed(), state, vector_store="usearch-bf16", records_store=True, shard_vectors=5)
    chunks = distinct_chunks(23, "a")
    embed_pending(Hashed(), state, batch_size=4)
    assert dense_store(state).index("code").shards == 5 and len(saved_shards(index_path(state, "code"))) == 4
    gone = [chunk.chunk_id for chunk in chunks[:12]]  # shards 0 and 1, and 2 of shard 2
    Chunk.objects.filter(chunk_id__in=gone).update(deleted=True, deleted_unix=1)
    assert collect(state, 0.0, 0.0).chunks == 12
    index = dense_store(state).index("code")
    assert index.shards == 3 and len(index) == 11
    assert shard_files(index.path) == sorted(saved_shards(index.path)) and len(saved_shards(index.path)) == 2
    server = VectorIndex(index.path, MODEL_DIM, "fake", "usearch-bf16")
    assert server.load(view=True) and server.labels == {chunk.chunk_id for chunk in chunks[12:]}
