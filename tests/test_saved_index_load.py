"""A server following saves (DenseStore.follow_saves, set by `up`'s refresher):
at the end of a views pass it loads the code index its indexing child built
and saved, instead of building the same index again from the database; rows
stored after the file's snapshot are still taken, rows a tombstone
collection removed are not searched, a damaged file is never loaded, and a
server that cannot read the file (another machine) builds it as before."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from corpus.index.dense.embedding import (
    DenseStore,
    check_models,
    dense_store,
    drop_store,
    embed_chunks,
    embed_pending,
    views_pending,
)
from corpus.index.dense.vectors import index_path, remove_files
from corpus.ingest.collect import collect
from corpus.models import Chunk
from corpus.providers.base import Embedder, Interrupted, ModelInfo
from kernel.state import StateDir
from mcp_gateway.indexer_process import DenseRefresher
from tests.factories import ChunkFactory
from tests.mcp_http import REPO, base_env
from tests.support import wait_until
from tests.test_views_later import (
    DIM,
    WEIGHT,
    assert_holds_blends,
    blended,
    code_chunks,
    replacing_store,
    unit_text,
    vector,
    view_text,
)


class Hashed(Embedder):
    """A text's vector is test_views_later's hash of it; ``stop_views``: its
    first call of signature views alone is interrupted, as a stop during it
    is (the units pass is over, the views pass not begun)."""

    provider = "fake"
    texts_per_call = 4
    interruptible = True

    def __init__(self, stop_views: set[str] = frozenset()) -> None:
        self.stop_views = stop_views

    def model_info(self, kind: str) -> ModelInfo:
        return ModelInfo(self.provider, "fake", DIM)

    def embed(self, texts: Sequence[str], *, kind: str, stop: threading.Event | None = None) -> np.ndarray:
        if self.stop_views and all(text in self.stop_views for text in texts):
            raise Interrupted
        return np.stack([vector(text) for text in texts])


def server_store(state: StateDir, follow: float | None) -> DenseStore:
    """A server's store (another process's: its own indices), building again
    past four replacements, as the child's does in these tests."""
    store = DenseStore(state)
    store.replace_in_place_max = 4
    store.follow_saves = follow
    return store


def units_then_views(state: StateDir, chunks: list[Chunk], fake: Embedder, *followers: DenseStore) -> None:
    """The child's units pass (stopped at its first views call), each
    follower taking it, then the child's views pass to its end (the child's
    store builds its code index again and saves it)."""
    views = {view_text(c) for c in chunks}
    embed_pending(Hashed(views), state, batch_size=4)
    for store in followers:
        store.sync("code")
    assert views_pending().count() == len(chunks)
    embed_pending(fake, state, batch_size=4)
    assert views_pending().count() == 0


def hits(store: DenseStore, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    index = store.for_search("code")
    assert index is not None
    return [(hit.chunk_id, round(hit.score, 5)) for hit in index.search(query, k)]


@pytest.mark.django_db
def test_a_server_following_saves_loads_the_childs_file_and_finds_what_a_build_finds(state) -> None:
    chunks, fake, child = replacing_store(state)
    server = server_store(state, follow=3600.0)
    elsewhere = server_store(state, follow=None)  # a server on another machine: replays
    units_then_views(state, chunks, fake, server, elsewhere)
    assert child.rebuilds == 1  # the child built its code index again, and saved it

    server.sync("code")
    elsewhere.sync("code")

    assert (server.loads, server.rebuilds) == (1, 0)
    assert (elsewhere.loads, elsewhere.rebuilds) == (0, 1)
    assert server.deferred("code") == 0 and elsewhere.deferred("code") == 0
    assert_holds_blends(server, chunks)
    assert server.index("code").labels == elsewhere.index("code").labels
    for query in [blended(c) for c in chunks] + [vector(unit_text(c)) for c in chunks[:3]]:
        assert hits(server, query, 5) == hits(elsewhere, query, 5)


@pytest.mark.django_db
def test_a_server_waits_for_the_childs_file_rather_than_build_then_loads_it(state) -> None:
    chunks, fake, child = replacing_store(state)
    server = server_store(state, follow=3600.0)
    views = {view_text(c) for c in chunks}
    embed_pending(Hashed(views), state, batch_size=4)
    server.sync("code")
    # the views are stored, the child has not built nor saved its index yet
    embed_chunks(fake, [c.chunk_id for c in chunks], batch_size=4)
    assert views_pending().count() == 0

    server.sync("code")
    assert (server.loads, server.rebuilds) == (0, 0) and server.deferred("code") == 12
    own = [vector(unit_text(c)) for c in chunks]
    assert [hits(server, q, 1)[0][0] for q in own] == [c.chunk_id for c in chunks]  # as it was

    child.sync("code")  # the child takes them: builds its index again
    child.save(force=True)
    server.settle("code")  # the server's refresher, on its next pass

    assert (server.loads, server.rebuilds) == (1, 0) and server.deferred("code") == 0
    assert_holds_blends(server, chunks)


@pytest.mark.django_db
def test_rows_stored_after_the_file_are_taken_and_rows_collected_after_it_are_not_searched(
    state, tmp_path
) -> None:
    chunks, fake, _ = replacing_store(state)
    server = server_store(state, follow=3600.0)
    units_then_views(state, chunks, fake, server)
    # after the child's save: another process stores two new units (with
    # their views at once: database only), and another machine collects one
    later = [
        ChunkFactory(
            index_kind="code", context=f"src/late{n}.py", text=f"def late_{n}(x):\n    return x * {n}"
        )
        for n in range(2)
    ]
    check_models(fake, state, signature_weight=WEIGHT)
    assert embed_chunks(fake, [c.chunk_id for c in later], batch_size=4) == 2
    gone = chunks[0]
    Chunk.objects.filter(chunk_id=gone.chunk_id).update(deleted=True)
    other = StateDir(tmp_path / "other-machine")
    other.path.mkdir()
    assert collect(other, 0.0, 0.0).chunks == 1

    server.sync("code")
    server.sync("code")  # the rows after the file's snapshot

    assert (server.loads, server.rebuilds) == (1, 0)
    labels = server.index("code").labels
    assert {c.chunk_id for c in later} <= labels
    assert gone.chunk_id not in labels
    assert gone.chunk_id not in [cid for cid, _ in hits(server, blended(gone), 14)]
    assert_holds_blends(server, chunks[1:])


@pytest.mark.django_db
def test_a_damaged_file_is_never_loaded_the_server_builds_instead(state) -> None:
    chunks, fake, _ = replacing_store(state)
    server = server_store(state, follow=0.0)  # no wait: build at once when no file will do
    units_then_views(state, chunks, fake, server)
    path = index_path(state, "code")
    data = bytearray(path.read_bytes())
    data[len(data) // 2 :] = bytes(len(data) - len(data) // 2)  # same size, half zeroed: torn
    path.write_bytes(bytes(data))

    server.sync("code")

    assert (server.loads, server.rebuilds) == (0, 1)
    assert_holds_blends(server, chunks)


@pytest.mark.django_db(transaction=True)
def test_the_refresher_loads_the_file_saved_after_the_views_pass_ended(state) -> None:
    # The refresher's store waits, deferring, once the views are all stored;
    # a later pass (no new version to sync) loads the file saved meanwhile.
    chunks = code_chunks(12)
    fake = Hashed()
    check_models(fake, state, signature_weight=WEIGHT)
    views = {view_text(c) for c in chunks}
    embed_pending(Hashed(views), state, batch_size=4)
    store = dense_store(state)  # the refresher's
    store.replace_in_place_max = 4
    stop = threading.Event()
    refresher = DenseRefresher(state, stop, every=3600, follow_saves=3600.0).start()
    try:
        refresher.wake()
        wait_until(lambda: refresher.passes >= 1, timeout=30, message="the first pass")
        embed_chunks(fake, [c.chunk_id for c in chunks], batch_size=4)  # the views, database only
        seen = refresher.passes
        refresher.wake()
        wait_until(lambda: refresher.passes > seen, timeout=30, message="a pass after the views")
        assert store.deferred("code") == 12 and (store.loads, store.rebuilds) == (0, 0)

        child = server_store(state, follow=None)  # the indexing child's, in its own process
        child.sync("code")
        child.save(force=True)
        refresher.wake()
        wait_until(lambda: store.loads == 1, timeout=30, message="the refresher to load the file")
    finally:
        stop.set()
        refresher.wake()
        refresher.join(10)
    assert store.rebuilds == 0
    assert_holds_blends(store, chunks)


def distinct_chunks(count: int, tag: str) -> list[Chunk]:
    return [
        ChunkFactory(
            index_kind="code", context=f"src/{tag}{n}.py", text=f"def {tag}_{n}(x):\n    return x + {n}"
        )
        for n in range(count)
    ]


@pytest.mark.django_db
def test_a_server_holding_many_vectors_itself_views_the_childs_file_instead(state) -> None:
    check_models(Hashed(), state, vector_store="usearch-bf16", records_store=True)
    chunks = distinct_chunks(6, "a")
    embed_pending(Hashed(), state, batch_size=4)  # the child stores and saves
    server = server_store(state, follow=None)
    server.view_every = 0.0
    server.view_at = 8
    assert server.sync("code").viewed is None  # read into memory: not following yet
    server.follow_saves = 3600.0  # the refresher of `up`, whose child shares the state directory

    chunks += distinct_chunks(6, "b")
    embed_pending(Hashed(), state, batch_size=4)
    index = server.sync("code")  # 12 of its own, past 8: the child's file viewed
    assert index.viewed == 0 and server.loads == 1 and len(index) == 12

    chunks += distinct_chunks(4, "c")
    embed_pending(Hashed(), state, batch_size=4)
    index = server.sync("code")
    assert index.viewed == 4 and server.loads == 1  # 4 added since, under 8
    elsewhere = server_store(state, follow=None)
    for chunk in chunks:
        query = vector(unit_text(chunk))
        assert hits(server, query, 5) == hits(elsewhere, query, 5)
        assert hits(server, query, 1)[0][0] == chunk.chunk_id


@pytest.mark.django_db
def test_a_server_following_saves_searches_its_old_file_while_the_child_builds_the_new_store(state) -> None:
    check_models(Hashed(), state, vector_store="hnswlib", records_store=True)
    chunks = distinct_chunks(6, "a")
    embed_pending(Hashed(), state, batch_size=4)  # the child stores and saves an hnswlib file
    # an upgrade: the child starts with another store (the new default) and records it
    check_models(Hashed(), state, vector_store="usearch-bf16", records_store=True)
    server = server_store(state, follow=3600.0)  # `up`'s, whose child shares the state directory
    index = server.sync("code")
    assert index is not None and index.store == "hnswlib" and len(index) == 6  # the old file, searched
    assert server.builds == 0
    query = vector(unit_text(chunks[2]))
    assert hits(server, query, 1)[0][0] == chunks[2].chunk_id
    assert server.sync("code") is index and server.builds == 0  # the same file: not tried again

    child = server_store(state, follow=None)  # the indexing child builds the recorded store's
    child.sync("code")
    child.save(force=True)
    assert child.builds == 1
    index = server.sync("code")
    assert index is not None and index.store == "usearch-bf16" and index.viewed == 0 and len(index) == 6
    assert server.builds == 0
    assert hits(server, query, 1)[0][0] == chunks[2].chunk_id


@pytest.mark.django_db
def test_a_server_following_saves_without_a_file_waits_for_the_childs_instead_of_building(state) -> None:
    check_models(Hashed(), state, vector_store="usearch-bf16", records_store=True)
    chunks = distinct_chunks(6, "a")
    embed_pending(Hashed(), state, batch_size=4)
    remove_files(state)  # lost, or never saved: the child builds it again from the database
    server = server_store(state, follow=3600.0)
    assert server.sync("code") is None and server.builds == 0  # dense search waits (lexical only)
    assert server.sync("code") is None and server.builds == 0

    child = server_store(state, follow=None)
    child.sync("code")
    child.save(force=True)
    index = server.sync("code")
    assert index is not None and index.viewed == 0 and len(index) == 6 and server.builds == 0
    query = vector(unit_text(chunks[4]))
    assert hits(server, query, 1)[0][0] == chunks[4].chunk_id

    alone = server_store(state, follow=None)  # a server with no child on this machine builds as before
    remove_files(state)
    assert alone.sync("code") is not None and alone.builds == 1


@pytest.mark.django_db
def test_ups_refresher_follows_saves_from_its_start_before_its_first_pass(state) -> None:
    check_models(Hashed(), state, vector_store="hnswlib", records_store=True)
    chunks = distinct_chunks(6, "a")
    embed_chunks(Hashed(), [c.chunk_id for c in chunks], batch_size=4)  # the database only
    child = server_store(state, follow=None)
    child.sync("code")
    child.save(force=True)  # the child's hnswlib file
    check_models(Hashed(), state, vector_store="usearch-bf16", records_store=True)  # its next start
    stop = threading.Event()
    answered = threading.Event()  # never: the refresher's first pass waits for it
    refresher = DenseRefresher(state, stop, every=0.05, after=answered, follow_saves=3600.0).start()
    try:
        store = dense_store(state)
        index = store.for_search("code")  # a search before the first pass syncs for itself
        assert index is not None and index.store == "hnswlib" and store.builds == 0
    finally:
        stop.set()
        refresher.join(10)
    assert not refresher.passes and dense_store(state).follow_saves is None


#: A process that takes the state directory's index lock, as `up`'s indexing child does, says so and sleeps.
HOLD_LOCK = (
    "import sys, time; from pathlib import Path; from kernel.state import IndexLock, StateDir; "
    "IndexLock(StateDir(Path(sys.argv[1]))).acquire(); print('locked', flush=True); time.sleep(600)"
)


@pytest.mark.django_db
def test_a_server_waiting_for_the_file_of_a_child_that_was_killed_builds_the_index_itself(state) -> None:
    check_models(Hashed(), state, vector_store="usearch-bf16", records_store=True)
    chunks = distinct_chunks(6, "a")
    embed_pending(Hashed(), state, batch_size=4)
    remove_files(state)  # lost: the child would build it again from the database
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(state.path)],
        cwd=REPO,
        env=base_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        server = server_store(state, follow=3600.0)
        server.indexer_gone_after = 0.0  # at once: no waiting in a test
        for _ in range(3):  # the child holds the lock: it builds the file, the server waits for it
            assert server.sync("code") is None and server.builds == 0
        assert server.waiting() == ["code"]
    finally:
        child.kill()
        child.communicate()  # reaped (a zombie's pid still answers) and its pipe closed
    index = server.sync("code")  # the lock is free: the child is gone
    assert index is not None and len(index) == 6 and server.builds == 1 and server.waiting() == []
    assert hits(server, vector(unit_text(chunks[2])), 1)[0][0] == chunks[2].chunk_id


@pytest.mark.django_db
def test_a_server_keeps_viewing_the_childs_file_while_the_child_holds_early_replacements(state) -> None:
    # A search's hit files are embedded first (EmbedFirst): their views are
    # stored while the views pass has not begun, and the child defers those
    # replacements; its saves must still say what they hold, so the server
    # maps each one rather than copy every later vector into its own index.
    check_models(Hashed(), state, signature_weight=WEIGHT, vector_store="usearch-bf16", records_store=True)
    child = dense_store(state)
    chunks = distinct_chunks(6, "a")
    embed_pending(Hashed({view_text(c) for c in chunks}), state, batch_size=4)  # units, views not begun
    server = server_store(state, follow=3600.0)
    server.view_every = 0.0
    server.view_at = 8
    server.sync("code")

    embed_chunks(Hashed(), [c.chunk_id for c in chunks[:2]], batch_size=4)  # the hit files' views
    child.sync("code")
    assert child.deferred("code") == 2
    viewed = []
    for round in range(6):
        chunks += distinct_chunks(6, f"r{round}x")
        embed_pending(Hashed({view_text(c) for c in chunks}), state, batch_size=4)  # the child saves
        viewed.append(server.sync("code").viewed)
    assert all(own is not None and own <= 8 for own in viewed), viewed  # mapped, not copied
    assert server.deferred("code") == 2  # the file's list: the server applies them in turn

    # the views pass to its end; the server's last try came before the
    # child's last save, and nothing is stored after it
    server.view_every = 3600.0
    embed_pending(Hashed(), state, batch_size=4)
    server.sync("code")
    server.settle("code")
    server.view_every = 0.0
    index = server.sync("code")  # the refresher's next pass: nothing new stored
    assert index.viewed == 0 and server.deferred("code") == 0
    assert_holds_blends(server, chunks)


@pytest.mark.django_db
def test_a_server_views_the_childs_last_file_though_nothing_is_stored_after_it(state) -> None:
    # The child's last save came after the server's last try (tries are
    # spaced: view_every); the refresher's passes after it find nothing new
    # stored, and still map that file rather than keep their own copy.
    check_models(Hashed(), state, vector_store="usearch-bf16", records_store=True)
    distinct_chunks(6, "a")
    embed_pending(Hashed(), state, batch_size=4)
    server = server_store(state, follow=3600.0)
    server.view_at = 8
    server.view_every = 0.0
    server.sync("code")
    distinct_chunks(12, "b")
    embed_pending(Hashed(), state, batch_size=4)
    assert server.sync("code").viewed == 0 and server.loads == 1  # a try: the file viewed
    server.view_every = 3600.0
    distinct_chunks(12, "c")
    embed_pending(Hashed(), state, batch_size=4)  # the child's last save
    assert server.sync("code").viewed == 12  # tried before: not yet again

    server.view_every = 0.0  # the time between tries has passed
    index = server.sync("code")

    assert index.viewed == 0 and server.loads == 2 and len(index) == 30


@pytest.mark.django_db
def test_a_child_restarted_on_a_file_listing_replacements_applies_them(state) -> None:
    # The file says it holds every vector up to its seq but the listed
    # replacements (stored before that seq): a process starting on it
    # defers them again, else it would keep their older vectors for good.
    chunks, fake, child = replacing_store(state)
    embed_pending(Hashed({view_text(c) for c in chunks}), state, batch_size=4)
    embed_chunks(fake, [c.chunk_id for c in chunks[:2]], batch_size=4)  # embedded first
    child.sync("code")
    later = distinct_chunks(4, "later")
    embed_pending(Hashed({view_text(c) for c in chunks + later}), state, batch_size=4)  # saves
    assert child.deferred("code") == 2
    drop_store(state)  # the child restarts

    restarted = dense_store(state)
    restarted.sync("code")
    assert restarted.deferred("code") == 2 and restarted.builds == 0  # loaded, with its list
    embed_pending(fake, state, batch_size=4)
    assert_holds_blends(restarted, chunks + later)
