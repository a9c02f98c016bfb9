"""The dense indices, in every store (rag.vector_store): atomic saves, and repair from the database."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from corpus.index.dense.vectors import STORES, VectorIndex, index_path

DIM = 16
#: scores as the default vector store keeps vectors (rag.vector_store usearch-bf16:
#: a component within 2^-8 of its size): a vector and another apart by far more
SCORE_ATOL = 0.01


def unit(rows: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(rows, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture(params=STORES)
def store(request) -> str:
    return request.param


@pytest.fixture
def path(state):
    return index_path(state, "text")


def test_nearest_neighbour_is_the_vector_itself(path, store):
    index = VectorIndex(path, DIM, "m", store)
    vectors = unit(200)
    index.add(np.arange(1, 201), vectors)

    hits = index.search(vectors[41], 3)

    assert hits[0].chunk_id == 42
    assert hits[0].score == pytest.approx(1.0, abs=SCORE_ATOL)
    assert len(hits) == 3


def test_index_grows_past_its_initial_capacity(path, store):
    index = VectorIndex(path, DIM, "m", store)
    index.add(np.arange(5000), unit(5000))
    assert len(index) == 5000
    assert index.search(unit(5000)[4999], 1)[0].chunk_id == 4999


def test_readding_a_label_is_a_no_op(path, store):
    index = VectorIndex(path, DIM, "m", store)
    index.add(np.array([7]), unit(1))
    index.add(np.array([7]), unit(1, seed=9))
    assert len(index) == 1


def test_a_vector_replaced_beside_freed_slots_stays_in_its_own_slot(path, store):
    """A unit's vector replaced by its blend with the signature view while
    tombstone collection has freed slots: added as a new vector it would move
    to a freed slot and leave its old one live, the label found twice and
    that slot never freed again."""
    index = VectorIndex(path, DIM, "m", store)
    vectors = unit(50)
    index.add(np.arange(1, 51), vectors)
    assert index.forget([10, 11, 12]) == 3  # three slots freed
    blend = unit(1, seed=7)
    index.add(np.array([5]), blend, replace=True)

    hits = index.search(blend[0], 47)  # every live label
    assert sorted(h.chunk_id for h in hits) == sorted(set(range(1, 51)) - {10, 11, 12})
    assert hits[0].chunk_id == 5 and hits[0].score == pytest.approx(1.0, abs=SCORE_ATOL)
    assert (
        5 not in [h.chunk_id for h in index.search(vectors[4], 47)[1:]]
        or index.search(vectors[4], 1)[0].score < 0.999
    )
    index.add(np.arange(100, 103), unit(3, seed=3))  # the freed slots take new labels
    assert len(index) == 50 and {10, 11, 12}.isdisjoint(h.chunk_id for h in index.search(vectors[9], 50))


def test_saved_index_loads_back(path, store):
    index = VectorIndex(path, DIM, "m", store)
    index.add(np.arange(100), unit(100))
    index.save()

    again = VectorIndex(path, DIM, "m", store)

    assert again.load() is True
    assert again.labels == set(range(100))
    assert again.search(unit(100)[10], 1)[0].chunk_id == 10
    assert not list(path.parent.glob(".*.tmp"))
    meta = json.loads(path.with_name(path.name + ".json").read_text())
    assert meta["count"] == 100 and meta["dim"] == DIM and meta["model"] == "m"


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.unlink(), id="missing"),
        pytest.param(lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), id="truncated"),
        pytest.param(lambda p: p.write_bytes(b"\0" * p.stat().st_size), id="zeroed"),
        pytest.param(lambda p: p.with_name(p.name + ".json").unlink(), id="no-sidecar"),
        pytest.param(lambda p: p.with_name(p.name + ".json").write_text("{not json"), id="bad-sidecar"),
    ],
)
def test_damaged_file_is_refused_with_a_warning(path, store, damage, caplog):
    index = VectorIndex(path, DIM, "m", store)
    index.add(np.arange(50), unit(50))
    index.save()
    damage(path)

    again = VectorIndex(path, DIM, "m", store)
    with caplog.at_level(logging.WARNING):
        loaded = again.load()

    assert loaded is False
    assert len(again) == 0
    assert "rebuilding" in caplog.text


def test_file_from_another_model_is_refused(path, store):
    index = VectorIndex(path, DIM, "model-a", store)
    index.add(np.arange(10), unit(10))
    index.save()
    assert VectorIndex(path, DIM, "model-b", store).load() is False
    assert VectorIndex(path, DIM * 2, "model-a", store).load() is False


def test_the_store_is_recorded_and_a_file_of_another_store_is_built_again(path, store, caplog):
    index = VectorIndex(path, DIM, "m", store)
    index.add(np.arange(20), unit(20))
    index.save()
    assert json.loads(path.with_name(path.name + ".json").read_text())["store"] == store

    for other in STORES:
        again = VectorIndex(path, DIM, "m", other)
        with caplog.at_level(logging.WARNING):
            loaded = again.load()
        assert loaded is (other == store)
        assert len(again) == (20 if other == store else 0)
    assert "rag.vector_store is" in caplog.text


def test_a_sidecar_naming_no_store_is_an_hnswlib_file(path):
    index = VectorIndex(path, DIM, "m", "hnswlib")
    index.add(np.arange(20), unit(20))
    index.save()
    sidecar = path.with_name(path.name + ".json")
    meta = json.loads(sidecar.read_text())
    del meta["store"]  # as written before there was a choice
    sidecar.write_text(json.dumps(meta))

    assert VectorIndex(path, DIM, "m", "hnswlib").load() is True
    assert VectorIndex(path, DIM, "m", "usearch-bf16").load() is False


def test_a_replaced_vector_is_held_in_place_and_the_same_one_again_changes_nothing(path, store):
    index = VectorIndex(path, DIM, "m", store)
    vectors = unit(30)
    index.add(np.arange(30), vectors)
    index.save()
    blend = unit(1, seed=11)[0] * 0.8  # a blend is shorter than 1

    index.add(np.array([3]), blend[None, :], replace=True)

    assert index.dirty and len(index) == 30
    held = index.vectors([3, 4])
    # int8 is searched by the cosine (corpus/index/dense/vectors.py): it keeps a direction
    kept = blend / np.linalg.norm(blend) if store == "usearch-i8" else blend
    assert np.allclose(held[0], kept, atol=1 / 64) and np.allclose(held[1], vectors[4], atol=1 / 64)
    index.save()
    index.add(np.array([3, 4]), np.stack([blend, vectors[4]]), replace=True)  # as stored: nothing to do
    assert not index.dirty


@pytest.mark.parametrize("store", [s for s in STORES if s != "hnswlib"])
def test_a_viewed_file_takes_additions_removals_and_replacements_in_memory(path, store):
    vectors = unit(60)
    written = VectorIndex(path, DIM, "m", store)
    written.add(np.arange(1, 51), vectors[:50])
    written.save()
    index = VectorIndex(path, DIM, "m", store)
    assert index.load(view=True) and index.viewed == 0
    assert written.viewed is None  # built in memory

    index.add(np.arange(51, 54), vectors[50:53])  # added
    assert index.forget([7, 8, 52]) == 3  # two of the file's, one added
    blend = unit(1, seed=5) * 0.9
    index.add(np.array([9]), blend, replace=True)  # one of the file's, replaced

    assert index.viewed == 6 and len(index) == 50  # 3 vectors held (51, 53, 9), 3 of the file's passed over
    every = index.search(vectors[0], 60)
    assert sorted(n.chunk_id for n in every) == sorted(set(range(1, 54)) - {7, 8, 52})
    assert index.search(blend[0], 1)[0].chunk_id == 9
    assert index.search(vectors[50], 1)[0].chunk_id == 51
    kept = blend[0] / np.linalg.norm(blend[0]) if store == "usearch-i8" else blend[0]
    assert np.allclose(index.vectors([9])[0], kept, atol=1 / 64)

    # another process's save renames a new file over the path: the view stays on the one it mapped
    written.add(np.array([99]), vectors[59:60])
    written.save()
    assert index.search(vectors[59], 1)[0].chunk_id != 99

    index.save()  # the file and the changes, as one index
    again = VectorIndex(path, DIM, "m", store)
    assert again.load() and again.labels == set(range(1, 54)) - {7, 8, 52}
    assert again.search(blend[0], 1)[0].chunk_id == 9


@pytest.mark.parametrize("view", [False, True])
def test_a_zero_query_scores_a_stored_zero_vector_zero(path, store, view):
    index = VectorIndex(path, DIM, "m", store)
    index.add(np.arange(1, 4), np.vstack([np.zeros(DIM, dtype=np.float32), unit(2)]))
    if view:
        index.save()
        index = VectorIndex(path, DIM, "m", store)
        assert index.load(view=True)

    hits = index.search(np.zeros(DIM, dtype=np.float32), 3)

    assert {hit.chunk_id: hit.score for hit in hits} == {1: 0.0, 2: 0.0, 3: 0.0}
