"""Embedding chunks and keeping the dense indices in step with the database.

Pending chunks are embedded in batches; each batch's vectors are written to
``Chunk.embedding`` in one transaction, then added to the in-memory index,
which is saved (atomically) every few seconds, less often the longer a
save takes (SAVE_SHARE), and at the end of a run. The
provider, model and dimension per index kind are recorded in ``settings``;
``check_models`` refuses to mix vectors of two models (INDEX_VERSION_MISMATCH)
unless the caller is a full reindex, which starts the vectors over; the
commands never reach that refusal, since corpus.index.dense.choice.choose_embedder
keeps the recorded embedder over a different configured one.

Views later: a code unit's stored vector leans towards its signature view
(``embed.signature_weight``, corpus/index/dense/views.py), a second text to
embed, about a fifth of a pass's CPU. A run embeds every pending unit's own
text first and stores that vector alone (``Chunk.view_pending``), so every
unit of a tree is found by dense search sooner; then it embeds the views of
those units and replaces their vectors with the blend, the same vector the
two embedded together make (to the model's rounding for the batch's shape).
Files a client asked about (``embed_first``) get both at once, and a file
asked about after its units were stored alone gets its views before the
next unit (they waited for every unit of the tree before). Until the views
pass ends, ``stats`` and ``status`` count the views still to come, and the
time to full coverage in ``stats`` counts them (views_to_come; the pass
reports the views it stores beside its chunks).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.db.models import QuerySet

from corpus import slices
from corpus.index.dense.vectors import (
    DEFAULT_STORE,
    KINDS,
    STORES,
    VectorIndex,
    index_path,
    remove_files,
    saved_pending,
    saved_seq,
    saved_stamp,
    saved_store,
)
from corpus.index.dense.views import MEMBER_VIEW_WEIGHT, VIEW_VERSION, embedding_text, signature_view
from corpus.index.tables import marks
from corpus.models import Chunk, EmbeddingStatus, Setting
from corpus.providers.base import Embedder, Interrupted, ModelInfo
from corpus.store import get_json_setting, get_setting, set_setting
from kernel import errors
from kernel.jsontypes import JsonObject
from kernel.state import StateDir, index_lock_holder, pid_alive

logger = logging.getLogger(__name__)

SAVE_EVERY_SECONDS = 5.0
#: the most of the embedding run's time the index saves may take: a save
#: writes the whole file, fsyncs it and reads it back for its sha256 (a
#: 63,000-unit code index is 106 MB: 0.2 CPU s and 0.5-1.8 s of wall a
#: save, measured while other work wrote to the disk), on the thread that
#: feeds the model, which waits meanwhile; so after a save taking S seconds
#: the next waits at least S / SAVE_SHARE (docs/benchmarks.md, "Time to
#: dense", session 27)
SAVE_SHARE = 0.05
LAST_ERROR_KEY = "embed_last_error"
#: moved by each tombstone collection (corpus/ingest/collect.py): a process
#: seeing it move marks the labels of chunks no longer stored deleted
COLLECTED_KEY = "tombstones_collected"
SIGNATURE_KEY = "embed_code_signature_weight"
VIEW_KEY = "embed_code_view_version"
#: A chunk to embed: (chunk_id, context, text), as slices.texts gives it.
# Any: its rows are values_list tuples of several columns, typed tuple[Any, ...] by django-stubs.
TextRow = tuple[Any, ...]
#: One stored batch: (kind, chunk ids, their vectors, chunks stored, the version they
#: committed under, whether they replace vectors stored before: a views batch).
Batch = tuple[str, np.ndarray, np.ndarray, int, str, bool]


def to_bytes(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def from_bytes(blob: bytes | memoryview) -> np.ndarray:
    return np.frombuffer(bytes(blob), dtype="<f4")


# -- recorded models ----------------------------------------------------------


def recorded_model(kind: str) -> ModelInfo | None:
    model = get_setting(f"embed_{kind}_model")
    if not model:
        return None
    return ModelInfo(
        provider=get_setting("embed_provider") or "",
        model=model,
        dim=int(get_setting(f"embed_{kind}_dim") or 0),
    )


def recorded_models() -> dict[str, ModelInfo]:
    """The models the index's vectors came from, by kind (empty before any)."""
    found = {kind: recorded_model(kind) for kind in KINDS}
    return {kind: info for kind, info in found.items() if info is not None}


def same_model(found: ModelInfo, wanted: ModelInfo) -> bool:
    """Whether ``wanted`` makes vectors that mix with ``found``'s: same
    provider and model, and the same dimension where both are known."""
    return (found.provider, found.model) == (wanted.provider, wanted.model) and (
        not wanted.dim or not found.dim or found.dim == wanted.dim
    )


def _record(info: ModelInfo, kind: str) -> None:
    set_setting("embed_provider", info.provider)
    set_setting(f"embed_{kind}_model", info.model)
    set_setting(f"embed_{kind}_dim", str(info.dim))


def check_models(
    embedder: Embedder,
    state: StateDir,
    *,
    reset: bool = False,
    signature_weight: float | None = None,
    vector_store: str | None = None,
    records_store: bool = False,
    shard_vectors: int | None = None,
) -> None:
    """Record the embedder's models, or refuse to mix vectors from two models.

    The commands never get here with another embedder than the recorded one
    unless they mean to switch (``reset``, a full reindex): they keep the
    recorded one (corpus.index.dense.choice.choose_embedder). This refusal guards
    every other caller. ``signature_weight`` (the configured
    ``embed.signature_weight``) is recorded with new vectors only: an index
    keeps the recipe its vectors were made with until a full reindex.
    ``vector_store`` (the configured ``rag.vector_store``) is recorded at
    once by the process that owns indexing (``records_store``: it holds the
    index lock; `up`'s child, ``index``, ``reindex``): every process's dense
    indices follow it (:func:`recorded_store`), built again from the stored
    vectors. Any other process (``ask``, the server) uses the recorded one,
    its own only while none is recorded (DenseStore.configured_store), so a
    one-off command with another store leaves a running ``up`` alone.
    ``shard_vectors`` (``rag.shard_vectors``): the most vectors a file of
    the indices this process saves holds, for the process that owns
    indexing only (any process reads any layout)."""
    if shard_vectors is not None and records_store:
        dense_store(state).shard_vectors = shard_vectors
    if vector_store is not None:
        if records_store:
            if get_setting(STORE_KEY) != vector_store:
                set_setting(STORE_KEY, vector_store)
        else:
            dense_store(state).configured_store = vector_store
    fresh_code = recorded_model("code") is None
    for kind in KINDS:
        wanted = embedder.model_info(kind)
        found = recorded_model(kind)
        if found is None:
            _record(wanted, kind)
            continue
        if same_model(found, wanted):
            if wanted.dim and not found.dim:
                _record(wanted, kind)
            continue
        if not reset:
            raise errors.Dir2mcpError(
                errors.INDEX_VERSION_MISMATCH,
                f"the {kind} index was built with {found.provider}/{found.model} ({found.dim} dims); "
                f"the configured embedder is {wanted.provider}/{wanted.model}",
                hint="Run `dir2mcp reindex` to re-embed with the new model, or restore embed.provider.",
            )
        forget_vectors(state)
        for each in KINDS:
            _record(embedder.model_info(each), each)
        fresh_code = True
        break
    _record_recipe(state, signature_weight, fresh=fresh_code, reset=reset)


def _record_recipe(state: StateDir, weight: float | None, *, fresh: bool, reset: bool) -> None:
    """Record how code vectors are made (``embed.signature_weight`` and the
    signature view's version, ``views.VIEW_VERSION``): the configured
    weight and the current view for vectors starting now; weight 0 and view
    1 for an index made before each was recorded. A different configured
    weight, or a newer view, takes effect at a full reindex, which then
    re-embeds every chunk (never a mix)."""
    if weight is None:
        return
    recorded = get_setting(SIGNATURE_KEY)
    if not fresh and recorded is None:
        recorded = "0.0"
        set_setting(SIGNATURE_KEY, recorded)
    view = get_setting(VIEW_KEY)
    if not fresh and view is None:
        view = "1"
        set_setting(VIEW_KEY, view)
    # the view's version matters only to vectors that lean towards it
    stale = recorded is not None and (
        float(recorded) != float(weight) or (float(weight) > 0 and view != str(VIEW_VERSION))
    )
    if fresh or (reset and stale):
        if not fresh:
            forget_vectors(state)
        set_setting(SIGNATURE_KEY, repr(float(weight)))
        set_setting(VIEW_KEY, str(VIEW_VERSION))


#: the setting recording ``rag.vector_store`` (vectors.STORES)
STORE_KEY = "vector_store"


def recorded_store(value: str | None = None, configured: str = DEFAULT_STORE) -> str:
    """The recorded ``rag.vector_store`` (``value``: the setting as read
    already); ``configured`` before any was recorded."""
    if value is None:
        value = get_setting(STORE_KEY)
    return value if value in STORES else configured


def signature_weight() -> float:
    """The recorded ``embed.signature_weight`` of the index's code vectors."""
    return float(get_setting(SIGNATURE_KEY) or 0.0)


def view_version() -> int:
    """The recorded version of the signature view of the index's code vectors
    (the current one before any vector)."""
    return int(get_setting(VIEW_KEY) or VIEW_VERSION)


def recipe_summary(configured: float) -> JsonObject:
    """How the index's code vectors are made against the configuration (for
    ``stats`` and ``status``): ``recorded`` is null before any vector; the
    note says how to apply a changed recipe, or how many units wait for
    their signature views (views later)."""
    found = get_setting(SIGNATURE_KEY)
    recorded = float(found) if found is not None else None
    note = ""
    if recorded is not None and recorded != float(configured):
        note = (
            f"code vectors lean {recorded:g} towards the signature view; embed.signature_weight is "
            f"{float(configured):g}: run `dir2mcp reindex` to re-embed with it"
        )
    elif recorded and view_version() != VIEW_VERSION:
        note = (
            f"code vectors were made with signature view {view_version()} (this version makes "
            f"{VIEW_VERSION}): run `dir2mcp reindex` to re-embed with it"
        )
    elif recorded and (waiting := views_pending().count()):
        note = (
            f"{waiting} code vectors are their unit's alone for now: their signature views are "
            "embedded after every unit has a vector"
        )
    return {"recorded": recorded, "configured": float(configured), "note": note}


def forget_vectors(state: StateDir) -> None:
    """Drop every embedding and both index files (a model change)."""
    Chunk.objects.update(
        embedding=None,
        embedding_status=EmbeddingStatus.PENDING,
        embedding_error=None,
        embed_seq=None,
        view_pending=False,
    )
    # A fresh, never-seen version, so no process mistakes its old index for current.
    for kind in KINDS:
        set_setting(_version_key(kind), str(time.time_ns()))
    remove_files(state)
    drop_store(state)


# -- the per-process dense store ----------------------------------------------


#: hnswlib's threads when the embedding process builds its code index again
#: (its model waits meanwhile); a server's refresher builds with one
EMBED_THREADS = max(1, os.cpu_count() or 1)
#: replacements of held vectors applied one by one up to this many; past it
#: the index is built again from the database instead. hnswlib re-links a
#: replaced vector's neighbours: 1.9 ms of CPU a vector against 0.2 ms to
#: insert one (M 16, ef_construction 200, 384 dimensions, this processor),
#: and the views pass replaces every code unit's vector, two thirds of its
#: CPU (docs/benchmarks.md, session 25)
REPLACE_IN_PLACE_MAX = 1000
#: a server following its child's saves (DenseStore.follow_saves) swaps its
#: index for a memory-mapped view of the child's newer file once it holds
#: more than this many vectors itself (all of an index it built or read; of
#: a view, the changes since: VectorIndex.viewed), trying at most every
#: VIEW_EVERY_SECONDS:
#: the two processes then share one copy of the vectors, the file's pages
#: (issue #37; docs/benchmarks.md, "Vector store")
VIEW_AT = 20_000
VIEW_EVERY_SECONDS = 60.0
#: a server waiting for its indexing child's file (DenseStore.follow_saves)
#: stops waiting once no process has held the index lock for this long (the
#: child exited or was killed, and was not started again: a crash leaves the
#: lock free for the supervisor's backoff, up to its MAX_BACKOFF of a
#: minute, and the child takes it a few seconds after its start, so twice
#: that), and builds the index itself
INDEXER_GONE_SECONDS = 120.0
#: the setting where a server records the kinds whose dense search waits
#: for its indexing child's file, and its pid (``status`` reads it)
WAITING_KEY = "dense_waiting_for_file"


def recorded_waiting() -> list[str]:
    """The kinds whose dense search a server running here waits for its
    indexing child's file for, as it recorded them (DenseStore.waiting);
    empty when the server that recorded them is gone."""
    found = get_json_setting(WAITING_KEY)
    pid, kinds = (found.get("pid"), found.get("kinds")) if found is not None else (None, None)
    if not (isinstance(pid, int) and pid_alive(pid) and isinstance(kinds, list)):
        return []
    return [kind for kind in kinds if kind in KINDS]


class DenseStore:
    """The two indices of one state directory, loaded once per process.

    Replacements (a code unit's own vector by the blend with its signature
    view: views later) are deferred while a views pass runs: the index
    keeps the unit's own vector, as before its view, and the replacements
    are applied when no view is pending any more or, outside the embedding
    process, they reach half the index (:meth:`settle`): a few in place, many by building the index
    again, which costs what inserting every vector once does, instead of
    ten times that for each one replaced."""

    def __init__(self, state: StateDir) -> None:
        self.state = state
        self._lock = threading.Lock()
        self._settling = threading.Lock()
        self._indices: dict[str, VectorIndex] = {}
        # The embeddings version each index was last reconciled with.
        self._synced: dict[str, str] = {}
        # Labels whose stored vector replaced the one the index holds, not
        # applied yet; the index's file lists them (VectorIndex.pending)
        # beside its seq, which holds every other vector (_mark).
        self._deferred: dict[str, set[int]] = {}
        #: see REPLACE_IN_PLACE_MAX
        self.replace_in_place_max = REPLACE_IN_PLACE_MAX
        # The tombstone collection (COLLECTED_KEY) each index last followed.
        self._collected: dict[str, str | None] = {}
        self._last_save = time.monotonic()
        #: see SAVE_SHARE; the saves so far and the seconds they took
        self.save_share = SAVE_SHARE
        self.saves = 0
        self.save_seconds = 0.0
        self._save_interval = SAVE_EVERY_SECONDS
        # A thread keeping the indices in step with the store (a server whose
        # indexer is another process: mcp_gateway.indexer_process.DenseRefresher);
        # while one runs, searches read the indices as they are.
        self.refresher: object | None = None  # mcp_gateway.indexer_process.DenseRefresher
        #: None: replacements past REPLACE_IN_PLACE_MAX build the index again
        #: here. Else, at the end of a views pass, the index file another
        #: process of this machine saved is loaded in place of that build
        #: once it holds all but REPLACE_IN_PLACE_MAX of the stored vectors,
        #: waited for up to this many seconds before building anyway (set by
        #: the refresher of a server whose indexing child shares its state
        #: directory; a server on another machine cannot read that file)
        self.follow_saves: float | None = None
        #: index files loaded in place of a build, and builds (:meth:`settle`)
        self.loads = 0
        self.rebuilds = 0
        # When a build at a views pass's end first waited for a saved file.
        self._due: dict[str, float] = {}
        #: see VIEW_AT; when each kind last tried a view
        self.view_at = VIEW_AT
        self.view_every = VIEW_EVERY_SECONDS
        self._viewed_at: dict[str, float] = {}
        # the file (saved_stamp) each kind last loaded or viewed by _load_saved
        self._viewed_stamp: dict[str, tuple[int, int, int, int] | None] = {}
        #: the store used while none is recorded (this process's
        #: ``rag.vector_store``, never recorded by it: check_models)
        self.configured_store = DEFAULT_STORE
        #: indices built here from every stored vector (no file to load: sync)
        self.builds = 0
        #: the most vectors a file of this process's indices holds (0: one
        #: file; set for the process that owns indexing, check_models; None:
        #: another process, which reads any layout: VectorIndex.shard_vectors)
        self.shard_vectors: int | None = None
        # With follow_saves: the store and file stamp (saved_stamp) of the
        # last load refused, not tried again until the file is saved again;
        # and whether dense search waits for the child's file (_meanwhile).
        self._refused: dict[str, tuple[str, tuple[int, int, int, int] | None]] = {}
        self._waiting: dict[str, bool] = {}
        #: the waiting kinds last recorded (_record_waiting)
        self._recorded_waiting: list[str] = []
        #: see INDEXER_GONE_SECONDS; since when no process was seen holding the index lock
        self.indexer_gone_after = INDEXER_GONE_SECONDS
        self._lock_free_since: float | None = None

    def index(self, kind: str, store: str | None = None) -> VectorIndex | None:
        """The index for ``kind``, loaded or rebuilt; None before any model.
        ``store``: the recorded ``rag.vector_store`` as the caller read it
        (else the index's own, or read now); another than the index's
        replaces it by its file, or a build from the database."""
        found = self._index(kind, store)
        self._record_waiting()
        return found

    def _record_waiting(self) -> None:
        """Record the kinds whose dense search waits for the indexing
        process's file, when they changed, with this process's pid, for
        ``status`` in another process (:func:`recorded_waiting`)."""
        kinds = self.waiting()
        with self._lock:
            if kinds == self._recorded_waiting:
                return
            self._recorded_waiting = kinds
        try:
            set_setting(WAITING_KEY, json.dumps({"pid": os.getpid(), "kinds": kinds}))
        except Exception:  # a store that cannot be written: stats still says so
            logger.warning("cannot record that dense search waits", exc_info=True)

    def _index(self, kind: str, store: str | None) -> VectorIndex | None:
        with self._lock:
            info = recorded_model(kind)
            current = self._indices.get(kind)
            if info is None or not info.dim:
                return None
            if store is None:
                store = (
                    current.store if current is not None else recorded_store(configured=self.configured_store)
                )
            if current is None or (current.model, current.dim, current.store) != (
                info.model,
                info.dim,
                store,
            ):
                path = index_path(self.state, kind)
                following = self.follow_saves is not None
                if following and self._refused.get(kind) == (store, saved_stamp(path)):
                    # the file is as it was refused
                    kept = self._meanwhile(kind, current, info)
                    if kept is not None or self._waiting.get(kind):
                        return kept
                    # the indexing child is gone: its file is tried once more, then built here
                fresh = VectorIndex(path, info.dim, info.model, store, shard_vectors=self.shard_vectors)
                loaded = fresh.load(quiet=following, view=following)
                if not loaded and following:
                    self._refused[kind] = (store, saved_stamp(path))
                    kept = self._meanwhile(kind, current, info)
                    if kept is not None or current is None and self._waiting.get(kind):
                        return kept
                self._refused.pop(kind, None)
                self._waiting.pop(kind, None)
                current = fresh
                if loaded and current.seq is not None:
                    # what the file holds every vector of: sync re-reads only what is newer
                    self._synced[kind] = current.seq
                    self._deferred[kind] = set(current.pending)
                else:
                    self._synced.pop(kind, None)
                self._indices[kind] = current
            return current

    def _meanwhile(self, kind: str, current: VectorIndex | None, info: ModelInfo) -> VectorIndex | None:
        """With ``follow_saves``, when the file of the recorded store cannot be
        loaded (another store's: an upgrade, a change of ``rag.vector_store``;
        missing, or behind): the index searched until the indexing child,
        which builds that store's index from the database, saves it (loaded by
        the next sync after the save), rather than a second build here. The
        index held (another store's, of the same model: its vectors are the
        same), else the file in the store its sidecar names, else None
        (dense search waits: lexical only). None also when the database
        holds no more than REPLACE_IN_PLACE_MAX vectors of ``kind``: built
        here then (the caller), at once. Called under ``self._lock``."""
        if current is not None and (current.model, current.dim) == (info.model, info.dim):
            return current
        path = index_path(self.state, kind)
        older = saved_store(path) if current is None and kind not in self._waiting else None
        if older is not None:
            held = VectorIndex(path, info.dim, info.model, older)
            if held.load(quiet=True, view=True):
                if held.seq is not None:
                    self._synced[kind] = held.seq
                    self._deferred[kind] = set(held.pending)
                self._indices[kind] = held
                logger.info(
                    "%s index: searching the saved %s file until the indexing process saves its new one",
                    kind,
                    older,
                )
                return held
        if kind not in self._waiting:
            stored = Chunk.objects.filter(index_kind=kind, embedding_status=EmbeddingStatus.OK)
            self._waiting[kind] = stored.count() > self.replace_in_place_max
            if self._waiting[kind]:
                logger.info("%s index: dense search waits for the file the indexing process builds", kind)
        elif self._waiting[kind] and self.indexer_gone():
            self._waiting[kind] = False
            logger.warning(
                "%s index: no indexing process holds the index lock any more; building it here", kind
            )
        return None

    def waiting(self) -> list[str]:
        """The kinds whose dense search waits for the file the indexing
        process builds (:meth:`_meanwhile`: lexical only meanwhile)."""
        with self._lock:
            return [kind for kind in KINDS if self.follow_saves is not None and self._waiting.get(kind)]

    def indexer_gone(self) -> bool:
        """Whether no process has held the index lock for
        ``indexer_gone_after`` seconds, as seen by this call and the ones
        before it (the child whose file a server waits for exited or was
        killed: kernel.state.index_lock_holder)."""
        now = time.monotonic()
        if index_lock_holder(self.state) is not None:
            self._lock_free_since = None
            return False
        if self._lock_free_since is None:
            self._lock_free_since = now
        return now - self._lock_free_since >= self.indexer_gone_after

    def for_search(self, kind: str) -> VectorIndex | None:
        """The index a search reads: as it is while a refresher keeps it in
        step (the search never waits for inserts), else synced first."""
        if self.refresher is not None and kind in self._synced:
            return self.index(kind)
        return self.sync(kind)

    def sync(self, kind: str, *, slice_size: int = 2000) -> VectorIndex | None:
        """Add embeddings the database has and the index lacks (other
        processes' work, or what a crash kept out of the file), at most
        ``slice_size`` per hold of the index's lock.

        A tombstone collection since the last call (the ``collected``
        setting moved) has the labels of chunks no longer stored marked
        deleted first (corpus/ingest/collect.py).

        Cheap when nothing changed: two settings rows are compared with what
        this process last reconciled."""
        recorded, collected, stored_in = _settings(_version_key(kind), COLLECTED_KEY, STORE_KEY)
        version = recorded or "0"
        store = recorded_store(stored_in, self.configured_store)
        current = self._indices.get(kind)
        if (
            current is not None
            and len(current)
            and self._synced.get(kind) == version
            and self._collected.get(kind) == collected
            and current.store == store
        ):
            # nothing stored since: the child's file may still be viewed
            # (its last save came after this process's last try)
            return self._view(kind, current) or current
        index = self.index(kind, store)
        if index is None:
            return None
        rows = Chunk.objects.filter(index_kind=kind, embedding_status=EmbeddingStatus.OK).values_list(
            "chunk_id", "embedding"
        )
        synced = self._synced.get(kind)
        whole = synced is None or not len(index)
        held: set[int] = set()
        if whole or self._collected.get(kind) != collected:
            # Every stored id: what the index holds that is no longer stored
            # goes, and (the first time) what it lacks comes.
            held = set(rows.values_list("chunk_id", flat=True).iterator())
            index.forget([label for label in index.labels if label not in held])
            self._collected[kind] = collected
        if whole:
            known = index.labels
            wanted = sorted(cid for cid in held if cid not in known)
        else:
            # Only what was stored since: every batch carries the version it
            # committed under, and versions commit in order (_store_vectors).
            # A vector stored again since (a unit's, with its view) replaces
            # the one the index holds.
            since = rows.filter(embed_seq__gt=int(synced or 0)).values_list("chunk_id", flat=True)
            wanted = sorted(since.iterator())
        built = whole and not len(index) and len(wanted) > 0
        for start in range(0, len(wanted), 2000):
            part = rows.filter(chunk_id__in=wanted[start : start + 2000])
            ids, vecs = _stack(part)
            for at in range(0, len(ids), slice_size):
                if whole:
                    index.add(ids[at : at + slice_size], vecs[at : at + slice_size])
                else:
                    self._add_or_defer(kind, index, ids[at : at + slice_size], vecs[at : at + slice_size])
        with self._lock:
            if self._indices.get(kind) is not index:
                # Built again meanwhile (settle, in another thread) from what
                # was stored before this read: the next sync reads again from
                # the version the new one holds, and checks its labels.
                self._collected.pop(kind, None)
                return self._indices.get(kind)
            self._synced[kind] = version
            self._mark(kind, index, version)
            if built:
                self.builds += 1
        if built:
            logger.info(
                "%s index built from the database with %d vectors (%s)", kind, len(index), index.store
            )
        return self.settle(kind) or self._view(kind, index) or index

    def _view(self, kind: str, index: VectorIndex) -> VectorIndex | None:
        """With ``follow_saves``: ``index`` swapped for a view of the file the
        indexing child saved, when this process holds more than VIEW_AT
        vectors itself and the file lacks fewer than that of the store
        (:meth:`_load_saved`); None: kept."""
        own = index.viewed if index.viewed is not None else len(index)
        if self.follow_saves is None or own <= self.view_at or index.store == "hnswlib":
            return None
        now = time.monotonic()
        if kind in self._viewed_at and now - self._viewed_at[kind] < self.view_every:
            return None
        self._viewed_at[kind] = now
        return self._load_saved(kind, index, behind=own)

    def _mark(self, kind: str, index: VectorIndex, version: str | None) -> None:
        """What ``index``'s file will say it holds: every vector stored by
        ``version`` but the deferred replacements, which it lists. Under
        ``self._lock``. The list first: a save between the two (another
        thread) writes the older version with a list that may be longer,
        which a loader applies again, never a newer version without its list."""
        index.pending = frozenset(self._deferred.get(kind) or ())
        index.seq = version

    def _add_or_defer(
        self, kind: str, index: VectorIndex, chunk_ids: np.ndarray, vectors: np.ndarray, threads: int = 1
    ) -> None:
        """Add the vectors of labels the index lacks; defer those of labels it
        holds (replacements, applied by :meth:`settle`)."""
        held = np.array([int(cid) in index for cid in chunk_ids], dtype=bool)
        if held.any():
            with self._lock:
                self._deferred.setdefault(kind, set()).update(int(cid) for cid in chunk_ids[held])
        if not held.all():
            index.add(chunk_ids[~held], vectors[~held], threads=threads)

    def deferred(self, kind: str) -> int:
        """How many replaced vectors ``kind``'s index does not hold yet."""
        return len(self._deferred.get(kind) or ())

    def settle(self, kind: str, *, threads: int = 1, halfway: bool = True) -> VectorIndex | None:
        """Apply ``kind``'s deferred replacements once no signature view is
        pending (the views pass is over) or, ``halfway``, they reach half the
        index: up to REPLACE_IN_PLACE_MAX in place, more by building the
        index again from the database (with ``threads``; searches read the
        old one meanwhile). The embedding process passes ``halfway=False``:
        its pass's end applies them all, and a build half-way through cost
        that build twice (docs/benchmarks.md, "Time to dense", session 27).
        With ``follow_saves``, a build at the pass's end is a load of the
        file the embedding process saved after its own build, when there is
        one that holds nearly everything stored (:meth:`_load_saved`), or
        waits for one. Returns the index then held (None: nothing was
        applied)."""
        deferred = self._deferred.get(kind)
        index = self._indices.get(kind)
        if not deferred or index is None:
            return None
        pending = views_pending().exists()
        if pending:
            self._due.pop(kind, None)  # a pass under way again: a wait starts at its end
        if (not halfway or len(deferred) * 2 < len(index)) and pending:
            return None
        if not self._settling.acquire(blocking=False):
            return None  # another thread is at it
        try:
            # Another thread may defer more meanwhile (a search's sync while
            # the embedding thread settles): only what was applied is taken
            # off, and what came meanwhile is applied in turn.
            while labels := sorted(self._deferred.get(kind) or ()):
                if len(labels) > self.replace_in_place_max:
                    if self.follow_saves is not None and not pending:
                        loaded = self._load_saved(kind, index)
                        if loaded is not None:
                            return loaded
                        first = self._due.setdefault(kind, time.monotonic())
                        if time.monotonic() - first < self.follow_saves:
                            return None  # the embedding process is building and saving it
                    return self._rebuild(kind, index, threads)
                rows = Chunk.objects.filter(embedding_status=EmbeddingStatus.OK)
                for start in range(0, len(labels), 2000):
                    ids, vecs = _stack(
                        rows.filter(chunk_id__in=labels[start : start + 2000]).values_list(
                            "chunk_id", "embedding"
                        )
                    )
                    index.add(ids, vecs, replace=True)
                with self._lock:
                    left = self._deferred[kind]
                    left.difference_update(labels)
                    if self._indices.get(kind) is index:
                        self._mark(kind, index, self._synced.get(kind))
            return index
        finally:
            self._settling.release()

    def _load_saved(self, kind: str, index: VectorIndex, behind: int | None = None) -> VectorIndex | None:
        """The file another process saved for ``kind``, loaded in place of
        ``index`` (searches read it until the swap), when it is intact and
        holds all but REPLACE_IN_PLACE_MAX of the vectors stored (those
        after its ``seq``, which the next sync reads as it would after a
        start, and the replacements it lists as not applied yet, deferred
        here in turn); None (``index`` kept) otherwise, or when it is the
        file loaded last. What a tombstone collection
        removed after the file was saved is marked deleted before the swap.
        Loading costs a read of the file (about 0.2 s for 50,000 vectors)
        where a build inserts every vector again (docs/benchmarks.md).
        ``behind``: how many stored vectors the file may lack (default
        REPLACE_IN_PLACE_MAX). A usearch file is memory-mapped (a view: the
        pages shared with the process that saved it), not read."""
        seq = saved_seq(index.path)
        if seq is None:
            return None
        stamp = saved_stamp(index.path)
        if kind in self._viewed_stamp and self._viewed_stamp[kind] == stamp:
            # the file loaded last: the child saved none since (a save of the
            # same seq is another file: a merge of its shards, a collection)
            return None
        pending = saved_pending(index.path)
        if behind is None and pending > self.replace_in_place_max:
            return None  # its own deferred replacements: a build would follow the load
        rows = Chunk.objects.filter(index_kind=kind, embedding_status=EmbeddingStatus.OK)
        limit = self.replace_in_place_max if behind is None else behind
        if rows.filter(embed_seq__gt=int(seq)).count() > limit:
            return None  # too far behind the store: a build would follow the load
        (collected,) = _settings(COLLECTED_KEY)
        fresh = VectorIndex(index.path, index.dim, index.model, index.store)
        # quiet: a save may be under way (the file is checked against its sidecar)
        if not fresh.load(quiet=True, view=True) or fresh.seq is None:
            return None
        held = set(rows.values_list("chunk_id", flat=True).iterator())
        fresh.forget([label for label in fresh.labels if label not in held])
        with self._lock:
            if self._indices.get(kind) is not index:
                return None  # built again meanwhile
            self._indices[kind] = fresh
            self._synced[kind] = fresh.seq
            self._deferred[kind] = set(fresh.pending) & held
            self._collected[kind] = collected
            self._due.pop(kind, None)
            self._viewed_stamp[kind] = stamp
            self.loads += 1
        logger.info("%s index loaded from the saved file with %d vectors", kind, len(fresh))
        return fresh

    def _rebuild(self, kind: str, old: VectorIndex, threads: int) -> VectorIndex:
        """``kind``'s index built again from every stored vector, in place of
        ``old`` (read by searches until then). What is stored after the
        version read first is read again by the next sync."""
        (recorded,) = _settings(_version_key(kind))
        version = recorded or "0"
        fresh = VectorIndex(old.path, old.dim, old.model, old.store, shard_vectors=self.shard_vectors)
        rows = Chunk.objects.filter(index_kind=kind, embedding_status=EmbeddingStatus.OK)
        ids_all = sorted(rows.values_list("chunk_id", flat=True).iterator())
        for start in range(0, len(ids_all), 10_000):
            part = rows.filter(chunk_id__in=ids_all[start : start + 10_000]).values_list(
                "chunk_id", "embedding"
            )
            ids, vecs = _stack(part)
            if len(ids):
                fresh.add(ids, vecs, threads=threads)
        fresh.seq = version
        with self._lock:
            self._indices[kind] = fresh
            self._synced[kind] = version
            self._deferred[kind] = set()
            self._due.pop(kind, None)
            self.rebuilds += 1
        logger.info("%s index built again with %d vectors (views pass)", kind, len(fresh))
        return fresh

    def add(
        self, kind: str, chunk_ids: np.ndarray, vectors: np.ndarray, *, version: str, replace: bool = False
    ) -> None:
        """Add vectors this process just stored (``replace``: in place of the
        ones stored before); ``version`` is the one their transaction wrote,
        so a store already in step stays in step."""
        index = self.index(kind)
        if index is None:
            return
        was_current = self._synced.get(kind) == str(int(version) - 1)
        if replace:
            self._add_or_defer(kind, index, chunk_ids, vectors)
        else:
            index.add(chunk_ids, vectors)
        with self._lock:
            if was_current and self._indices.get(kind) is index:  # not built again meanwhile (sync's note)
                self._synced[kind] = version
                self._mark(kind, index, version)
        if replace:
            self.settle(kind, threads=EMBED_THREADS, halfway=False)

    def compact(self, stop: threading.Event | None = None) -> None:
        """Merge the sparse full shards of the indices this process owns
        (VectorIndex.compact: a branch switch, or tombstone collection,
        leaves old shards sparse, and a search asks every shard), until
        ``stop`` is set. The indexing process calls it after a pass and
        after a collection; another process (``shard_vectors`` None) never does."""
        if not self.shard_vectors:
            return
        for index in list(self._indices.values()):
            index.compact(threads=EMBED_THREADS, stop=stop)

    def save(self, *, force: bool = False) -> None:
        """Write the indices that changed (``force``: now; else at most every
        SAVE_EVERY_SECONDS, and the longer a save took the longer the next
        waits: SAVE_SHARE)."""
        if not force and time.monotonic() - self._last_save < self._save_interval:
            return
        start = time.monotonic()
        for index in list(self._indices.values()):
            try:
                index.save()
            except (OSError, RuntimeError) as exc:  # usearch: a failed write (a full disk) is a RuntimeError
                logger.warning("cannot save %s: %s", index.path.name, exc)
        self._last_save = time.monotonic()
        took = self._last_save - start
        self.saves += 1
        self.save_seconds += took
        self._save_interval = max(SAVE_EVERY_SECONDS, took / self.save_share)


def _settings(*keys: str) -> list[str | None]:
    """The values of these settings in one query (None where unset): a
    search reads them each time."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, value FROM settings WHERE key IN ({marks(keys)})", keys)
        found = dict(cursor.fetchall())
    return [found.get(key) for key in keys]


def _stack(rows: Iterable[tuple[int, bytes | memoryview | None]]) -> tuple[np.ndarray, np.ndarray]:
    pairs = [(cid, from_bytes(blob)) for cid, blob in rows if blob]
    if not pairs:
        return np.empty(0, dtype=np.int64), np.empty((0, 0), dtype=np.float32)
    return np.array([p[0] for p in pairs], dtype=np.int64), np.vstack([p[1] for p in pairs])


_STORES: dict[Path, DenseStore] = {}
_STORES_LOCK = threading.Lock()


def dense_store(state: StateDir) -> DenseStore:
    """The process-wide store for ``state`` (ingestion and search share it)."""
    with _STORES_LOCK:
        store = _STORES.get(state.path)
        if store is None:
            store = _STORES[state.path] = DenseStore(state)
        return store


def drop_store(state: StateDir) -> None:
    """Forget this process's store for ``state``: its indices are read again
    (from their files, or built) at the next use, as a process starting."""
    with _STORES_LOCK:
        _STORES.pop(state.path, None)


# -- embedding pending chunks -----------------------------------------------


def embed_pending(
    embedder: Embedder,
    state: StateDir,
    *,
    stop: threading.Event | None = None,
    progress: Callable[[int], None] | None = None,
    batch_size: int = 32,
    views_progress: Callable[[int], None] | None = None,
) -> int:
    """Embed every live pending chunk into the database and this process's
    dense index, then the signature views of the code units stored without
    them (views later); returns how many chunks were stored (``progress``
    counts them too; ``views_progress`` counts the views stored).

    A provider failure stops the run and leaves the rest pending (they are
    retried next time); the error is recorded for ``status``.
    """
    store = dense_store(state)
    for kind in KINDS:
        store.sync(kind)
    done = 0
    try:
        for kind, ids, vectors, stored, version, views in _embed_batches(
            embedder, _pending, views_pending, batch_size=batch_size, stop=stop
        ):
            store.add(kind, ids, vectors, version=version, replace=views)
            store.save()
            if views:  # chunks counted when their own vectors were stored
                if views_progress and stored:
                    views_progress(stored)
                continue
            done += stored
            if progress and stored:
                progress(stored)
        store.settle("code", threads=EMBED_THREADS)  # the views pass is over
        store.compact(stop)
    finally:
        store.save(force=True)
    if done:
        set_setting(LAST_ERROR_KEY, "")
    return done


def embed_chunks(
    embedder: Embedder,
    chunk_ids: list[int],
    *,
    batch_size: int = 32,
    on_stored: Callable[[int], None] | None = None,
) -> int:
    """Embed these chunks where they are live and still pending (a Celery
    worker's share). Vectors go to the database only: every server process
    adds them to its own dense index when it sees the version move
    (DenseStore.sync). ``on_stored(n)`` runs inside each batch's
    transaction, so a count commits with its vectors. Returns how many were
    stored."""

    def among(kind: str) -> QuerySet[Chunk]:
        return _pending(kind).filter(chunk_id__in=chunk_ids)

    def views_among() -> QuerySet[Chunk]:
        return views_pending().filter(chunk_id__in=chunk_ids)

    batches = _embed_batches(embedder, among, views_among, batch_size=batch_size, on_stored=on_stored)
    return sum(stored for _, _, _, stored, _, views in batches if not views)


class EmbedFirst:
    """Files a client asked about (a search hit, ``open_file``), whose pending
    chunks this process embeds before the rest (issue #17); the server sends
    them to its indexing child (mcp_gateway.indexer_process). The latest ask
    goes first (a file asked again moves up; one ask's files in the order
    given): taken in chunk id order instead, a file a client opened waited
    behind every file asked before or after it with lower ids, for good
    while searches kept asking (issue #37: 5 minutes and more on the
    kernel's drivers/net with a search a second). A file asked again keeps
    its place unless ``again`` (a file opened): moved up on every search
    that hit it, a client searching in circles kept everything else
    waiting. Bounded: the most recent ``limit`` paths."""

    def __init__(self, limit: int = 256) -> None:
        self._paths: deque[str] = deque(maxlen=limit)  # the latest ask last
        self._lock = threading.Lock()

    def add(self, rel_paths: Iterable[str], *, again: bool = False) -> None:
        with self._lock:
            for path in reversed(list(dict.fromkeys(rel_paths))):
                if path in self._paths:
                    if not again:
                        continue
                    self._paths.remove(path)
                self._paths.append(path)

    def pick(self, queues: Mapping[str, QuerySet[Chunk]], size: int) -> tuple[str, list[TextRow]] | None:
        """(kind, up to ``size`` pending (chunk_id, context, text)) of the
        latest asked file with any in ``queues``; None when none has. Files
        with nothing pending are forgotten."""
        with self._lock:
            paths = list(reversed(self._paths))
        if not paths:
            return None
        waiting: dict[str, list[tuple[int, str]]] = {}
        for kind, queue in queues.items():
            found = queue.filter(representation__document__rel_path__in=paths).values_list(
                "chunk_id", "representation__document__rel_path"
            )
            for chunk_id, path in found:
                waiting.setdefault(path, []).append((chunk_id, kind))
        with self._lock:
            for path in paths:
                if path not in waiting:
                    with contextlib.suppress(ValueError):
                        self._paths.remove(path)
        if not waiting:
            return None
        # The latest asked file alone: filled up with other asked files, its
        # batch took as long as any (a minute at 5 chunks/s on a loaded machine).
        latest = waiting[next(p for p in paths if p in waiting)]
        first = min(latest)[1]
        ids = sorted(cid for cid, kind in latest if kind == first)[:size]
        rows = slices.texts(
            queues[first]
            .filter(chunk_id__in=ids)
            .order_by("chunk_id")
            .values_list("chunk_id", "context", *slices.FIELDS),
            2,
        )
        return (first, rows) if rows else None


#: This process's files to embed first.
embed_first = EmbedFirst()


def _pending(kind: str) -> QuerySet[Chunk]:
    return Chunk.objects.filter(deleted=False, index_kind=kind, embedding_status=EmbeddingStatus.PENDING)


def views_pending() -> QuerySet[Chunk]:
    """Live code units whose stored vector is their own alone: their signature
    views are still to be embedded (views later, module docstring)."""
    return Chunk.objects.filter(
        view_pending=True, deleted=False, index_kind="code", embedding_status=EmbeddingStatus.OK
    )


def views_to_come() -> int:
    """Signature views still to be embedded: those of the units stored alone,
    and, while the index's code vectors lean towards their views, those of
    the code units still pending (each is stored alone first)."""
    waiting = views_pending().count()
    if signature_weight() > 0:
        waiting += _pending("code").count()
    return waiting


def _embed_batches(
    embedder: Embedder,
    queue_for: Callable[[str], QuerySet[Chunk]],
    views_queue: Callable[[], QuerySet[Chunk]],
    *,
    batch_size: int,
    stop: threading.Event | None = None,
    on_stored: Callable[[int], None] | None = None,
) -> Iterator[Batch]:
    """Embed and store ``queue_for(kind)`` batch by batch, for each kind,
    then the signature views of ``views_queue()``'s units: yields (kind, ids,
    vectors, stored, version, views) after each commit.

    A code unit is embedded alone at first, its vector stored as its own
    (``view_pending``); once every kind's queue is empty, its signature view
    is embedded and its vector replaced by the blend (views later, module
    docstring). A batch of files a client asked about is embedded with its
    views at once.

    An embedder that sorts its texts into forward passes of like lengths
    (the local one) says how many it wants a call (``texts_per_call``): 32
    chunks in id order leave it 6% padding, 256 leave 1%. Such a call takes
    seconds, so one that is ``interruptible`` is handed ``stop`` too: a stop
    ends the run after the forward pass under way, and that call's chunks
    stay pending.

    The embedding runs one call ahead, on a thread of its own: while it
    embeds a batch, this thread reads the next one and stores the one
    before (the database's writes, and the caller's index inserts between
    two yields). Done one after the other, those left the model's cores idle
    for a tenth of a 65,000-chunk run (docs/benchmarks.md, "Time to dense",
    session 23). Everything that reads or writes the database stays on this
    thread; the embedding thread only embeds."""
    per_call = max(batch_size, getattr(embedder, "texts_per_call", 0))
    queues = {kind: queue_for(kind) for kind in KINDS}
    ahead: _Ahead | None = None

    def flying() -> list[int]:
        return [row[0] for row in ahead.batch] if ahead else []

    def units() -> Iterator[_Ahead]:
        for kind in KINDS:
            queue = queues[kind]
            last_id = 0
            while not (stop and stop.is_set()):
                # Files a client asked about go first, whichever index they
                # are in, but not the chunks being embedded meanwhile
                # (an asked file whose units were stored alone before the ask:
                # its views, which waited for every other unit in id order)
                asked = {name: among.exclude(chunk_id__in=flying()) for name, among in queues.items()}
                asked[ASKED_VIEWS] = views_queue().exclude(chunk_id__in=flying())
                picked = embed_first.pick(asked, per_call)
                if picked is not None and picked[0] == ASKED_VIEWS:
                    yield _submit_views(pool, embedder, picked[1], stop=stop)
                    continue
                if picked is not None:
                    yield _submit(pool, embedder, *picked, stop=stop, views=True)
                    continue
                batch = _after(queue, last_id, per_call)
                if not batch:
                    break
                last_id = batch[-1][0]
                yield _submit(pool, embedder, kind, batch, stop=stop, views=False)

    def views() -> Iterator[_Ahead]:
        # a unit of an asked file first, as above; else in chunk id order
        queue = views_queue()
        last_id = 0
        while not (stop and stop.is_set()):
            picked = embed_first.pick({"code": queue.exclude(chunk_id__in=flying())}, per_call)
            batch = picked[1] if picked is not None else []
            if not batch:
                batch = _after(queue, last_id, per_call)
                if not batch:
                    return
                last_id = batch[-1][0]
            yield _submit_views(pool, embedder, batch, stop=stop)

    with ThreadPoolExecutor(1, thread_name_prefix="embed") as pool:
        try:
            # the views pass reads the units the last pass stored: each is drained first
            for tasks in (units, views):
                for task in tasks():
                    if ahead is not None:
                        yield _store_batch(ahead, on_stored)
                    ahead = task
                if ahead is not None:
                    yield _store_batch(ahead, on_stored)
                    ahead = None
        except Interrupted:
            return
        finally:
            # a call not started yet is dropped; one under way is waited for
            pool.shutdown(wait=True, cancel_futures=True)


#: the key of the views queue among the queues an asked file is looked for in
ASKED_VIEWS = "views"


def _after(queue: QuerySet[Chunk], last_id: int, size: int) -> list[TextRow]:
    """The next ``size`` chunks of ``queue`` after ``last_id`` in id order, as (id, context, text)."""
    rows = queue.filter(chunk_id__gt=last_id).order_by("chunk_id")
    return slices.texts(rows.values_list("chunk_id", "context", *slices.FIELDS)[:size], 2)


@dataclass(frozen=True)
class _Ahead:
    """A batch handed to the embedding thread: its kind and rows, the call
    under way, and what storing it does: ``pending`` marks code vectors made
    without their views; ``replace`` stores a views batch over them."""

    kind: str
    batch: list[TextRow]
    task: Future[np.ndarray]
    pending: bool = False
    replace: bool = False


def _submit(
    pool: ThreadPoolExecutor,
    embedder: Embedder,
    kind: str,
    batch: list[TextRow],
    *,
    stop: threading.Event | None,
    views: bool,
) -> _Ahead:
    """Hand a batch of pending chunks to the embedding thread: code units
    with their signature views (``views``) or, views later, alone."""
    # the recipe is read here: the embedding thread has no database
    weight = signature_weight() if kind == "code" else 0.0
    later = weight > 0 and not views
    task = pool.submit(_vectors, embedder, kind, batch, 0.0 if later else weight, view_version(), stop)
    return _Ahead(kind, batch, task, pending=later)


def _submit_views(
    pool: ThreadPoolExecutor, embedder: Embedder, batch: list[TextRow], *, stop: threading.Event | None
) -> _Ahead:
    """Hand the signature views of code units stored alone to the embedding
    thread, with their stored vectors to blend them into."""
    stored = {
        cid: from_bytes(blob)
        for cid, blob in Chunk.objects.filter(chunk_id__in=[row[0] for row in batch]).values_list(
            "chunk_id", "embedding"
        )
        if blob
    }
    batch = [row for row in batch if row[0] in stored]
    own = np.stack([stored[row[0]] for row in batch]) if batch else np.zeros((0, 0), np.float32)
    task = pool.submit(_with_views, embedder, batch, own, signature_weight(), view_version(), stop)
    return _Ahead("code", batch, task, replace=True)


def _store_batch(ahead: _Ahead, on_stored: Callable[[int], None] | None) -> Batch:
    """Store a batch once its embedding task is done (Interrupted if a stop cut it short)."""
    try:
        vectors = ahead.task.result()
    except errors.Dir2mcpError as exc:
        set_setting(LAST_ERROR_KEY, str(exc))
        logger.warning("embedding stopped: %s", exc)
        raise
    ids = np.array([row[0] for row in ahead.batch], dtype=np.int64)
    if ahead.replace:
        stored, version = _store_views(ids, vectors)
    else:
        stored, version = _store_vectors(
            ahead.kind, ids, vectors, on_stored=on_stored, view_pending=ahead.pending
        )
    return ahead.kind, ids, vectors, stored, version, ahead.replace


def _options(embedder: Embedder, stop: threading.Event | None) -> dict[str, threading.Event]:
    """``embed``'s keywords: ``stop`` for an embedder that takes it."""
    return {"stop": stop} if stop is not None and getattr(embedder, "interruptible", False) else {}


def _vectors(
    embedder: Embedder,
    kind: str,
    batch: list[TextRow],
    weight: float,
    version: int,
    stop: threading.Event | None = None,
) -> np.ndarray:
    """The stored vectors of a batch of (id, context, text): each unit's,
    and for code, leaning towards its signature view (of this ``version``)
    by ``weight`` (one call for both views, so a length-sorting embedder
    packs them); weight 0: the unit's own."""
    texts = [embedding_text(context, text, kind, embedder.window_chars) for _, context, text in batch]
    options = _options(embedder, stop)
    if weight <= 0:
        return embedder.embed(texts, kind=kind, **options)
    signatures = [signature_view(context, text, version) for _, context, text in batch]
    views = embedder.embed(texts + [view for view, _ in signatures], kind=kind, **options)
    views = np.asarray(views, dtype=np.float32)
    return _blend(views[: len(batch)], views[len(batch) :], [member for _, member in signatures], weight)


def _with_views(
    embedder: Embedder,
    batch: list[TextRow],
    own: np.ndarray,
    weight: float,
    version: int,
    stop: threading.Event | None = None,
) -> np.ndarray:
    """The stored vectors of code units whose own vectors ``own`` were stored
    alone: leaning towards their signature views by ``weight``, as
    :func:`_vectors` makes them in one go."""
    if not batch:
        return own
    signatures = [signature_view(context, text, version) for _, context, text in batch]
    views = embedder.embed([view for view, _ in signatures], kind="code", **_options(embedder, stop))
    return _blend(own, np.asarray(views, dtype=np.float32), [member for _, member in signatures], weight)


def _blend(own: np.ndarray, views: np.ndarray, members: list[bool], weight: float) -> np.ndarray:
    """Units' vectors leaning towards their signature views: ``(own + w *
    view) / (1 + w)``, where a declaration file member's view weighs at
    least MEMBER_VIEW_WEIGHT (views.py)."""
    weights = np.array([max(weight, MEMBER_VIEW_WEIGHT) if member else weight for member in members])
    column = weights.astype(np.float32)[:, None]
    blended: np.ndarray = (own + column * views) / (1 + column)
    return blended


def _version_key(kind: str) -> str:
    return f"embed_version_{kind}"


def _store_vectors(
    kind: str,
    ids: np.ndarray,
    vectors: np.ndarray,
    *,
    on_stored: Callable[[int], None] | None = None,
    view_pending: bool = False,
) -> tuple[int, str]:
    """Write a batch's vectors under a new version of the kind, atomically;
    returns (chunks stored, that version). ``view_pending``: code units'
    own vectors, whose signature views are embedded later.

    The version is taken first, with its row locked until the commit, so
    batches commit in version order and each chunk carries the version it
    was stored under (``embed_seq``): a server that has read version V has
    everything up to V. Only chunks still pending are written, so two
    processes embedding one chunk store it once; ``on_stored(n)`` runs
    inside the transaction with the number written (a job's counter commits
    with them).
    """
    with transaction.atomic():
        version = _bump_version(kind)
        # Under the version's lock (on SQLite the write lock, on PostgreSQL
        # the settings row, which every storing process takes first) the
        # pending set cannot change before the commit; one prepared UPDATE
        # then runs over the batch (executemany binds in C): an ORM update()
        # a chunk was about 0.3 ms of Python each, 20 s of a 65,000-chunk tree
        # on the thread that feeds the model (docs/benchmarks.md, "Time to dense").
        wanted = [int(cid) for cid in ids]
        pending = set(
            Chunk.objects.filter(chunk_id__in=wanted, embedding_status=EmbeddingStatus.PENDING).values_list(
                "chunk_id", flat=True
            )
        )
        rows = [
            (
                to_bytes(vec),
                EmbeddingStatus.OK.value,
                int(version),
                view_pending,
                cid,
                EmbeddingStatus.PENDING.value,
            )
            for cid, vec in zip(wanted, vectors, strict=True)
            if cid in pending
        ]
        if rows:
            with connection.cursor() as cursor:
                cursor.executemany(_STORE_SQL, rows)
        stored = len(rows)
        if on_stored is not None and stored:
            on_stored(stored)
    return stored, version


def _store_views(ids: np.ndarray, vectors: np.ndarray) -> tuple[int, str]:
    """Write code units' vectors leaning towards their views over their own,
    under a new version of the code kind, where a unit still holds its own
    (not re-embedded, nor stored by another process meanwhile); returns
    (units stored, that version), as :func:`_store_vectors` does."""
    with transaction.atomic():
        version = _bump_version("code")
        wanted = [int(cid) for cid in ids]
        waiting = set(views_pending().filter(chunk_id__in=wanted).values_list("chunk_id", flat=True))
        rows = [
            (to_bytes(vec), int(version), False, cid, EmbeddingStatus.OK.value)
            for cid, vec in zip(wanted, vectors, strict=True)
            if cid in waiting
        ]
        if rows:
            with connection.cursor() as cursor:
                cursor.executemany(_VIEWS_SQL, rows)
    return len(rows), version


#: One stored vector: (embedding, status ok, embed_seq, view pending, chunk_id, status pending).
_STORE_SQL = (
    f"UPDATE {Chunk._meta.db_table} SET embedding = %s, embedding_status = %s, embedding_error = NULL,"
    " embed_seq = %s, view_pending = %s WHERE chunk_id = %s AND embedding_status = %s"
)
#: One unit's vector with its view: (embedding, embed_seq, view pending: false, chunk_id, status ok).
_VIEWS_SQL = (
    f"UPDATE {Chunk._meta.db_table} SET embedding = %s, embed_seq = %s, view_pending = %s"
    " WHERE chunk_id = %s AND embedding_status = %s"
)


def _bump_version(kind: str) -> str:
    """Increment the kind's embeddings version in one locking UPDATE, so two
    processes committing batches at once never write the same number (each
    server process re-reads the embeddings when the number moves)."""
    key = _version_key(kind)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE settings SET value = CAST(CAST(value AS BIGINT) + 1 AS TEXT) WHERE key = %s", [key]
        )
        if cursor.rowcount == 0:
            Setting.objects.get_or_create(key=key, defaults={"value": "0"})
            cursor.execute(
                "UPDATE settings SET value = CAST(CAST(value AS BIGINT) + 1 AS TEXT) WHERE key = %s", [key]
            )
        cursor.execute("SELECT value FROM settings WHERE key = %s", [key])
        row = cursor.fetchone()
        assert row is not None  # the UPDATE above found the row or it was just made
        return str(row[0])
