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
