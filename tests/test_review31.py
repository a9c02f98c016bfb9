"""Review of session 31's shards (a full shard's removals listed in the
sidecar, sparse shards merged): each test failed before its fix."""

from __future__ import annotations

import json

import pytest

from corpus.index.dense.vectors import VectorIndex, saved_shards
from tests.test_vector_shards import DIM, SHARD, pair


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
