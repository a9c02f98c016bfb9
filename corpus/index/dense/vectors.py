"""Dense indices: ``vectors_text.hnsw`` and ``vectors_code.hnsw`` (spec §6).

Two libraries can hold them (``rag.vector_store``, recorded in the
database by the indexing process and in each file's sidecar): hnswlib,
float32 only, or usearch, whose vectors are stored as float32, bfloat16
or int8 (``usearch-f32``, ``usearch-bf16``, ``usearch-i8``; the same HNSW
graph, M 16, ef_construction 200). A file of another store than the
recorded one is built again from the database, as any file that does not
match (docs/benchmarks.md, "Vector store").

The database holds every embedding (``Chunk.embedding``); an ``.hnsw`` file
is a cache of it. A file that is missing, truncated, corrupt, from another
model or behind the database is repaired from the database with a warning,
never a crash. Files are written to a temp name, fsynced and renamed, with a
sidecar recording their size and sha256, checked before hnswlib reads a byte
(hnswlib trusts its input and can crash on a damaged file).

Labels are chunk ids. Tombstoned chunks stay in an index, filtered out at
query time with oversampling (spec §6.3), so that a chunk revived keeps its
vector. A chunk removed by tombstone collection (corpus/ingest/collect.py)
has its label marked deleted (:meth:`VectorIndex.forget`): hnswlib no longer
returns it and gives its slot to the next vector added, so a file holds at
most the live and tombstoned chunks' vectors. The sidecar lists the labels
marked deleted still in the file, which hnswlib does not tell apart.

Shards (``rag.shard_vectors``, usearch stores; issue #37): the process
that owns indexing keeps at most that many vectors in one file. A full
shard is saved as ``vectors_code.hnsw.N.<the first 16 hex digits of its
sha256>`` and memory-mapped (its vectors leave the process's memory for the
page cache); the vectors after it go to the open shard, the ``.hnsw`` file
itself, whose sidecar lists every full shard's number, size and sha256. A
merged shard, or one of a build of the index again, is a new file: the
sidecar, renamed into place after them, switches to the new files at once
(a crash before leaves the previous ones loadable), and a save removes the
files it no longer lists, and those a process that died half-wrote (a
process that mapped them keeps reading them: an unlinked file stays whole
for its mappings on Linux). A search asks each shard for its ``k`` nearest
and merges them by score (one inner product: the scores compare), so an
index under one shard is the one file it always was. A removal from a
full shard is not a rewrite of its file: the label is passed over by that
shard's searches, and the sidecar lists it under the shard (``removed``),
passed over again at load; a replacement is that removal and the new
vector added to the open shard. A full shard's file is only ever written
once. New labels go to the open shard, so a branch switch or a long
history leaves old shards sparse, and a search pays for every shard:
:meth:`VectorIndex.compact` (the indexing process, after a pass and after
a tombstone collection; a stop or a full disk ends it, the shards left as
they were) builds the sparse ones' live vectors into full shards again,
new files the next save lists in their place. A shard
file that is missing or does not match the sidecar refuses the whole load:
the index is built again from the database, as any damaged file. Another
process reads any layout; the owner refuses a file of another shard size
than its own (built again once, in its shards).

A label's vector changes once at most: a code unit's own vector is replaced,
in its own slot, by the one leaning towards its signature view when that
view is embedded, later (corpus/index/dense/embedding.py; many replacements
at once rebuild the index instead, DenseStore.settle). The sidecar
records the embeddings version (``seq``) the file holds every vector of, so
a process loading it re-reads only what was stored, or replaced, after;
except the labels it lists as ``pending``, whose replacement by ``seq`` the
file does not hold yet (deferred while a views pass runs: the loader
defers them in turn). Without that list the version stayed where it was
before the first deferred replacement, and a server mapping the file
refused it as ever further behind (docs/benchmarks.md, session 31).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import threading
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import hnswlib
import numpy as np
from usearch.index import Index as USearchIndex

from kernel.jsontypes import JsonObject, JsonValue
from kernel.state import StateDir, atomic_write, pid_alive

logger = logging.getLogger(__name__)

KINDS = ("text", "code")
INITIAL_CAPACITY = 1024
EF_CONSTRUCTION = 200
M = 16
EF_SEARCH_MIN = 64
#: ``rag.vector_store``'s values: the library, and for usearch how a vector is stored
STORES = ("hnswlib", "usearch-f32", "usearch-bf16", "usearch-i8")
#: the store of an index whose sidecar names none (written before there was a choice)
LEGACY_STORE = "hnswlib"
DEFAULT_STORE = "usearch-bf16"
#: how many hex digits of a shard file's sha256 its name holds (shard_file)
SHARD_NAME_HEX = 16
#: a sidecar's shard numbers are below this (a merge numbers its shards
#: below the count of shards; a larger one is a damaged sidecar's)
SHARD_NUMBER_MAX = 1 << 31
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: no process id is larger (Linux's pid_max at most): a file naming one is no live process's
PID_MAX = 1 << 22
#: a full shard with fewer live vectors than this share of ``shard_vectors``
#: is merged with others (VectorIndex.compact; docs/benchmarks.md, "Vector
#: store", session 31)
COMPACT_BELOW = 0.5
#: vectors read from a merged shard's file at a time
COMPACT_BLOCK = 10_000
#: shard files this process wrote that no sidecar it saved lists yet, and
#: the index that wrote each (a build's, under way beside the index it
#: replaces): a save's clean-up keeps them while that index lives
_UNLISTED: weakref.WeakValueDictionary[Path, VectorIndex] = weakref.WeakValueDictionary()
_UNLISTED_LOCK = threading.Lock()


def index_path(state: StateDir, kind: str) -> Path:
    return state.path / f"vectors_{kind}.hnsw"


def shard_file(path: Path, number: int, sha256: str) -> Path:
    """The file of a sharded index's full shard ``number`` whose bytes have
    this sha256 (the open one is ``path`` itself): a shard written again,
    or by a build of the index again, has a new name, so a file a sidecar
    lists is never written over."""
    return path.with_name(f"{path.name}.{number}.{sha256[:SHARD_NAME_HEX]}")


def saved_shards(path: Path) -> list[Path]:
    """The full shards' files the sidecar of ``path`` lists, in order."""
    meta = _read_sidecar(path)
    return _listed(path, meta)


def shard_files(path: Path) -> list[Path]:
    """Every full shard's file of the index at ``path`` on disk, listed by a
    sidecar or not (a build's that was not saved; the names before
    2026-11-30's, ``vectors_code.hnsw.N``)."""
    name = re.compile(re.escape(path.name) + rf"\.\d+(\.[0-9a-f]{{{SHARD_NAME_HEX}}})?")
    return sorted(file for file in path.parent.glob(f"{path.name}.*") if name.fullmatch(file.name))


def _listed(path: Path, meta: JsonObject | None) -> list[Path]:
    listed = meta.get("shards") if meta is not None else None
    files = []
    for position, part in enumerate(listed if isinstance(listed, list) else []):
        sha = part.get("sha256") if isinstance(part, dict) else None
        number = _number(part, position)
        if not (isinstance(sha, str) and _SHA256.fullmatch(sha) and number < SHARD_NUMBER_MAX):
            # names no file there is (nor one elsewhere, a name too long): the load refuses it
            number, sha = position, "unlisted"
        files.append(shard_file(path, number, sha))
    return files


def _number(part: JsonValue, position: int) -> int:
    """The number in the file name of the shard a sidecar lists at
    ``position``: its own since a compaction (which keeps some files and
    replaces others), else its position (sidecars before it)."""
    number = part.get("number") if isinstance(part, dict) else None
    return number if isinstance(number, int) and not isinstance(number, bool) and number >= 0 else position


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


#: full shard files this process found whole, by device, inode, size,
#: mtime and the sha256 their sidecar gives: a shard's file is never
#: written over (its name carries its sha256), so one that kept its
#: identity is not read whole again at the next load (a server following
#: its child's saves loads after each; the kernel's shards are 1.8 GB)
_VERIFIED: set[tuple[int, int, int, int, str]] = set()
#: at most this many kept (a file's identity is tens of bytes)
VERIFIED_MAX = 4096


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Neighbour:
    chunk_id: int
    score: float  # inner product of normalised vectors = cosine similarity


class _Hnsw:
    """hnswlib: float32 vectors; a label marked deleted keeps its slot,
    given to the next vector added (``replace_deleted``)."""

    #: a held vector equals the one given (float32 is kept exactly)
    tolerance = 0.0

    def __init__(self, dim: int, capacity: int = INITIAL_CAPACITY) -> None:
        self.dim = dim
        self.index = hnswlib.Index(space="ip", dim=dim)
        self.index.init_index(
            max_elements=capacity, ef_construction=EF_CONSTRUCTION, M=M, allow_replace_deleted=True
        )
        self.index.set_ef(EF_SEARCH_MIN)

    @classmethod
    def read(cls, path: Path, dim: int, meta: JsonObject) -> _Hnsw:
        loaded = cls.__new__(cls)
        loaded.dim = dim
        loaded.index = hnswlib.Index(space="ip", dim=dim)
        loaded.index.load_index(
            str(path), max_elements=max(index_count(meta), INITIAL_CAPACITY), allow_replace_deleted=True
        )
        loaded.index.set_ef(EF_SEARCH_MIN)
        return loaded

    @staticmethod
    def as_kept(vectors: np.ndarray) -> np.ndarray:
        return vectors

    def ids(self) -> set[int]:
        """Every label in the index, those marked deleted too."""
        return set(int(label) for label in self.index.get_ids_list())

    def contains(self, label: int) -> bool:
        return label in self.index.get_ids_list()

    def count(self) -> int:
        return int(self.index.element_count)

    def add(self, ids: np.ndarray, vectors: np.ndarray, free: int, threads: int) -> None:
        needed = self.index.element_count + len(ids) - min(free, len(ids))
        if needed > self.index.get_max_elements():
            self.index.resize_index(max(needed, 2 * self.index.get_max_elements()))
        self.index.add_items(vectors, ids, num_threads=threads, replace_deleted=True)

    def replace(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        # In the label's own slot: added with replace_deleted, a label held
        # would move to a freed slot and leave its old one live, found twice
        # and never freed.
        self.index.add_items(vectors, ids, num_threads=1)

    def get(self, ids: list[int]) -> np.ndarray:
        return np.asarray(self.index.get_items(ids, return_type="numpy"), dtype=np.float32)

    def remove(self, label: int) -> None:
        try:
            self.index.mark_deleted(label)
        except RuntimeError:  # marked already (a file saved without its sidecar's list)
            pass

    def search(self, query: np.ndarray, k: int, free: int) -> tuple[np.ndarray, np.ndarray]:
        self.index.set_ef(max(EF_SEARCH_MIN, k))
        try:
            labels, distances = self.index.knn_query(query, k=k, num_threads=1)
        except RuntimeError:
            # Slots marked deleted can leave a search short of k: look wider.
            self.index.set_ef(max(EF_SEARCH_MIN, k) + free)
            labels, distances = self.index.knn_query(query, k=k, num_threads=1)
        # For the "ip" space hnswlib reports 1 - inner product.
        return labels[0], 1.0 - distances[0]

    def write(self, path: Path) -> None:
        self.index.save_index(str(path))


class _USearch:
    """usearch, its vectors stored as ``dtype`` (f32, bf16 or i8). A label
    removed leaves the index (its slot goes to a later vector); a vector
    replaced is removed and added again. The metric is the inner product,
    as hnswlib's, except for int8, where usearch's inner product is of the
    integers (not scaled back): there it is the cosine, the same for the
    normalised vectors of a model, not for a code unit's blend with its
    signature view (shorter than 1, corpus/index/dense/embedding.py), whose
    score is then its direction's alone."""

    def __init__(self, dim: int, dtype: str) -> None:
        self.dim = dim
        self.dtype = dtype
        self.index = self._new(dim, dtype)
        # int8 keeps a component to within 1/127, bfloat16 to 2^-8 of its size
        self.tolerance = {"f32": 0.0, "bf16": 1 / 256, "i8": 1 / 127}[dtype] + 1e-6

    @staticmethod
    def _new(dim: int, dtype: str) -> USearchIndex:
        return USearchIndex(
            ndim=dim,
            metric="cos" if dtype == "i8" else "ip",
            dtype=dtype,
            connectivity=M,
            expansion_add=EF_CONSTRUCTION,
            expansion_search=EF_SEARCH_MIN,
        )

    @classmethod
    def read(cls, path: Path, dim: int, dtype: str, *, view: bool = False) -> _USearch:
        """The file at ``path`` read into memory, or (``view``) memory-mapped
        read-only: then nothing may be added to or removed from it (usearch
        crashes), which :class:`_Viewed` sees to."""
        loaded = cls(dim, dtype)
        if view:
            loaded.index.view(str(path))
        else:
            loaded.index.load(str(path))
        if loaded.index.ndim != dim or str(loaded.index.dtype).rsplit(".", 1)[-1].lower() != dtype:
            raise ValueError(f"the file holds {loaded.index.dtype} vectors of {loaded.index.ndim} dimensions")
        loaded.index.expansion_search = EF_SEARCH_MIN  # type: ignore[misc]  # its setter is untyped
        return loaded

    def as_kept(self, vectors: np.ndarray) -> np.ndarray:
        """``vectors`` as the index keeps them, but for rounding: int8, by the
        cosine, keeps each one's direction (normalised)."""
        if self.dtype != "i8":
            return vectors
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)

    def ids(self) -> set[int]:
        return set(np.asarray(self.index.keys).tolist())

    def contains(self, label: int) -> bool:
        return bool(self.index.contains(label))

    def count(self) -> int:
        return len(self.index)

    def add(self, ids: np.ndarray, vectors: np.ndarray, free: int, threads: int) -> None:
        self.index.add(ids.astype(np.uint64), vectors, threads=threads)

    def replace(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        keys = ids.astype(np.uint64)
        self.index.remove(keys)
        self.index.add(keys, vectors, threads=1)

    def get(self, ids: list[int]) -> np.ndarray:
        if not ids:
            return np.empty((0, self.dim), dtype=np.float32)
        held = self.index.get(np.asarray(ids, dtype=np.uint64), dtype="f32")
        rows = held if isinstance(held, tuple) else (held,)
        return np.vstack([np.asarray(row, dtype=np.float32) for row in rows])

    def raw(self, ids: np.ndarray) -> np.ndarray:
        """The vectors held for these labels as stored (int8 as int8: added
        again to an int8 index, they are the same bytes; bfloat16 as float32,
        which holds it exactly)."""
        held = self.index.get(ids.astype(np.uint64), dtype="i8" if self.dtype == "i8" else "f32")
        rows = held if isinstance(held, tuple) else (held,)
        return np.vstack([np.asarray(row) for row in rows])

    def remove(self, label: int) -> None:
        self.index.remove(label)

    def search(self, query: np.ndarray, k: int, free: int) -> tuple[np.ndarray, np.ndarray]:
        self.index.expansion_search = max(EF_SEARCH_MIN, k)  # type: ignore[misc]  # its setter is untyped
        found = self.index.search(query, k, threads=1)
        # 1 - the inner product (int8: 1 - the cosine)
        scores = 1.0 - found.distances
        if self.dtype == "i8" and not np.any(query):
            # usearch's cosine of two zero vectors is 1; their inner product,
            # as every other store scores a zero query, is 0
            scores = np.zeros_like(scores)
        return found.keys.astype(np.int64), scores

    def write(self, path: Path) -> None:
        self.index.save(str(path))
        # usearch does not say a failed write of its last buffer (a full
        # disk): a short file, listed, would refuse the next load (a build)
        written, expected = path.stat().st_size, self.index.serialized_length
        if written != expected:
            raise OSError(errno.ENOSPC, f"{written} bytes of {expected} written", str(path))


class _Viewed:
    """A saved usearch file memory-mapped read-only (usearch's view: its
    pages are the file's, in the page cache, shared with the process that
    wrote it rather than copied into this one's memory), and in memory what
    changed since: vectors added or replaced (``delta``), and the file's
    labels removed or replaced (``masked``), which searches pass over."""

    def __init__(self, base: _USearch) -> None:
        self.base = base
        self.delta = _USearch(base.dim, base.dtype)
        self.masked: set[int] = set()
        #: how many of ``masked`` a sidecar lists (a full shard's removals,
        #: kept there rather than the shard written again): not this process's own
        self.listed = 0
        self.tolerance = base.tolerance

    def as_kept(self, vectors: np.ndarray) -> np.ndarray:
        return self.base.as_kept(vectors)

    def ids(self) -> set[int]:
        return (self.base.ids() - self.masked) | self.delta.ids()

    def contains(self, label: int) -> bool:
        return self.delta.contains(label) or (label not in self.masked and self.base.contains(label))

    def count(self) -> int:
        return len(self.base.index) - len(self.masked) + len(self.delta.index)

    def changed(self) -> int:
        """What this process holds itself: vectors added or replaced, and
        the file's labels passed over since its sidecar was saved."""
        return len(self.delta.index) + len(self.masked) - self.listed

    def kept(self) -> np.ndarray:
        """The file's labels not passed over, in order."""
        held = np.sort(np.asarray(self.base.index.keys, dtype=np.int64))
        if not self.masked:
            return held
        return held[~np.isin(held, np.fromiter(self.masked, dtype=np.int64, count=len(self.masked)))]

    def add(self, ids: np.ndarray, vectors: np.ndarray, free: int, threads: int) -> None:
        self.delta.add(ids, vectors, free, threads)

    def replace(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        ours = np.array([bool(self.delta.index.contains(int(label))) for label in ids], dtype=bool)
        if ours.any():
            self.delta.replace(ids[ours], vectors[ours])
        if not ours.all():
            self.masked.update(int(label) for label in ids[~ours])
            self.delta.add(ids[~ours], vectors[~ours], 0, 1)

    def get(self, ids: list[int]) -> np.ndarray:
        rows = [
            (self.delta if self.delta.index.contains(label) else self.base).get([label])[0] for label in ids
        ]
        return np.vstack(rows) if rows else np.empty((0, self.base.dim), dtype=np.float32)

    def remove(self, label: int) -> None:
        if self.delta.index.contains(label):
            self.delta.remove(label)
        if self.base.index.contains(label):
            self.masked.add(label)

    def search(self, query: np.ndarray, k: int, free: int) -> tuple[np.ndarray, np.ndarray]:
        labels, scores = self._search_file(query, k, free)
        if len(self.delta.index):
            more, more_scores = self.delta.search(query, min(k, len(self.delta.index)), free)
            labels, scores = np.concatenate([labels, more]), np.concatenate([scores, more_scores])
        best = np.argsort(-scores, kind="stable")[:k]
        return labels[best].astype(np.int64), scores[best].astype(np.float32)

    def _search_file(self, query: np.ndarray, k: int, free: int) -> tuple[np.ndarray, np.ndarray]:
        """The file's ``k`` nearest labels not passed over: it is asked for
        a quarter more than its share passed over predicts (a search again
        costs more than a wider one), or for ``k`` and every one passed
        over where they are fewer, and twice as many again while the ones
        passed over leave fewer than ``k`` (they can lie together: a
        removed file's chunks are near each other)."""
        held = len(self.base.index)
        live = held - len(self.masked)
        if live <= 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        wanted = min(k, live)
        wider = min(held, k + len(self.masked), -(-k * held * 5 // (live * 4)))
        while True:
            labels, scores = self.base.search(query, wider, free)
            if self.masked:
                masked = self.masked
                kept = np.fromiter(
                    (label not in masked for label in labels.tolist()), dtype=bool, count=len(labels)
                )
                labels, scores = labels[kept], scores[kept]
            if len(labels) >= wanted or wider >= held:
                return labels, scores
            wider = min(held, 2 * wider)

    def write(self, path: Path) -> None:
        """The file and the changes as one index (a copy in memory, written)."""
        whole = _USearch(self.base.dim, self.base.dtype)
        whole.index = self.base.index.copy()
        if self.masked:
            whole.index.remove(np.array(sorted(self.masked), dtype=np.uint64))
        changed = np.array(sorted(self.delta.ids()), dtype=np.int64)
        if len(changed):
            whole.add(changed, self.delta.get(changed.tolist()), 0, 1)
        whole.write(path)


_Ann = _Hnsw | _USearch | _Viewed


def _empty(store: str, dim: int) -> _Ann:
    if store == "hnswlib":
        return _Hnsw(dim)
    return _USearch(dim, store.removeprefix("usearch-"))


class VectorIndex:
    """One HNSW index of normalised vectors, searched by inner product
    (hnswlib or usearch: ``store``, one of STORES)."""

    def __init__(
        self,
        path: Path,
        dim: int,
        model: str,
        store: str = DEFAULT_STORE,
        *,
        shard_vectors: int | None = None,
    ) -> None:
        if store not in STORES:
            raise ValueError(f"unknown vector store {store!r}; expected one of {', '.join(STORES)}")
        self.path = path
        self.dim = dim
        self.model = model
        self.store = store
        #: the process that owns the files (``rag.shard_vectors``): 0, one
        #: index; else (usearch) the vectors a shard holds at most: a full one
        #: is saved (shard_file) and memory-mapped, the rest go to a new one;
        #: a file of another layout is refused (built again). None: any
        #: process else, which reads any layout and never starts a shard.
        self.shard_vectors = shard_vectors if store != "hnswlib" or shard_vectors is None else 0
        self._lock = threading.RLock()
        self._ann = _empty(store, dim)
        #: the full shards, each a view of its saved file and the labels
        #: passed over there (removed or replaced since it was written), oldest first
        self._shards: list[_Viewed] = []
        #: each full shard's file's number, size and sha256, as the sidecar lists them
        self._shard_meta: list[JsonObject] = []
        #: the labels searched: those in the index not marked deleted
        self._labels: set[int] = set()
        #: slots marked deleted that no vector reused yet (hnswlib)
        self._free = 0
        self.dirty = False
        #: the embeddings version this index holds every vector of (None: unknown);
        #: the caller keeps it, the file records it
        self.seq: str | None = None
        #: the labels whose vector stored by ``seq`` replaced the one held
        #: here, not applied yet (DenseStore's deferred replacements): every
        #: other vector up to ``seq`` is held; the caller keeps it, the file records it
        self.pending: frozenset[int] = frozenset()

    def __len__(self) -> int:
        return len(self._labels)

    @property
    def viewed(self) -> int | None:
        """None: the index is in this process's memory; else it is a saved
        file memory-mapped (``load(view=True)``) and this process holds this
        many changes since: vectors added or replaced, labels removed."""
        with self._lock:
            if not isinstance(self._ann, _Viewed) and not self._shards:
                return None
            return sum(ann.changed() for ann in self._all() if isinstance(ann, _Viewed))

    @property
    def shards(self) -> int:
        """How many files the index is in (1: one index)."""
        return len(self._shards) + 1

    def _all(self) -> list[_Ann]:
        return [*self._shards, self._ann]

    def _holder(self, label: int) -> _Ann:
        """The shard holding ``label`` (a label of the index)."""
        return next((ann for ann in self._shards if ann.contains(label)), self._ann)

    def __contains__(self, chunk_id: int) -> bool:
        return chunk_id in self._labels

    @property
    def labels(self) -> set[int]:
        return set(self._labels)

    def load(self, *, quiet: bool = False, view: bool = False) -> bool:
        """Read the file if it is intact and matches; False means rebuild
        (said in a warning unless ``quiet``: a process trying a file another
        one may be saving meanwhile, DenseStore.settle). ``view``, for a
        usearch store: memory-map the file rather than read it (``viewed``).

        The sidecar is read first, then the file is held open, so that the
        size and sha256 checked and the bytes the library reads are one
        file's: a save renaming a new file in between (the sidecar goes
        first, then the file) leaves a sidecar and a file that do not
        match, and nothing is read."""
        meta = _read_sidecar(self.path)
        listed = meta.get("shards") if meta is not None else None
        parts = listed if isinstance(listed, list) else []
        with contextlib.ExitStack() as held_open:
            path = held_open.enter_context(_pinned(self.path))
            pinned = [held_open.enter_context(_pinned(file)) for file in _listed(self.path, meta)]
            problem = (
                self._check_file(meta, path)
                or self._check_layout(meta, parts)
                or self._check_shards(parts, pinned)
            )
            if problem:
                if not quiet and (self.path.exists() or _sidecar(self.path).exists()):
                    logger.warning("rebuilding %s from the database: %s", self.path.name, problem)
                return False
            assert meta is not None  # _check_file reports a missing sidecar
            try:
                ann: _Ann
                # a full shard is always mapped: the file is what holds it
                shards = [self._mapped(file) for file in pinned]
                if self.store == "hnswlib":
                    ann = _Hnsw.read(path, self.dim, meta)
                elif view:
                    # The descriptor _pinned holds names the file read: a
                    # rename over the path meanwhile leaves the mapping on it.
                    ann = self._mapped(path)
                else:
                    ann = _USearch.read(path, self.dim, self.store.removeprefix("usearch-"))
            except (RuntimeError, ValueError, MemoryError) as exc:
                if not quiet:
                    logger.warning("rebuilding %s from the database: %s", self.path.name, exc)
                return False
        seq = meta.get("seq")
        pending = meta.get("pending")
        if not isinstance(pending, list):
            pending = None  # a sidecar saved before the list
        held = ann.ids()
        for shard, part in zip(shards, parts, strict=True):
            _pass_over_listed(shard, part)
            held |= shard.ids()
        shard_meta = [_file_part(part, position) for position, part in enumerate(parts)]
        deleted = held.intersection(int(label) for label in meta.get("deleted") or [])
        with self._lock:
            self._ann = ann
            self._shards = shards
            self._shard_meta = shard_meta
            self._labels = held - deleted
            self._free = len(deleted)
            self.dirty = False
            self.seq = seq if isinstance(seq, str) else None
            self.pending = frozenset(int(label) for label in pending or [] if isinstance(label, int))
        return True

    def _check_layout(self, meta: JsonObject | None, parts: list[JsonValue]) -> str:
        """For the process that owns the files: a file in shards of another
        size than ``shard_vectors``, or one file past it, is refused."""
        if self.shard_vectors is None or meta is None:
            return ""
        saved = meta.get("shard_vectors") or 0
        count = int(meta.get("count") or 0)
        if saved == self.shard_vectors or (
            not parts and (not self.shard_vectors or count <= self.shard_vectors)
        ):
            return ""
        layout = f"in shards of {saved} vectors" if saved else f"one file of {count} vectors"
        return f"it is {layout}, rag.shard_vectors is {self.shard_vectors}"

    def _check_shards(self, parts: list[JsonValue], files: list[Path]) -> str:
        """What is wrong with the full shards' files a sidecar lists (empty: nothing)."""
        for number, (part, file) in enumerate(zip(parts, files, strict=True)):
            if not isinstance(part, dict) or not file.exists():
                return f"shard {number} is missing"
            found = file.stat()
            seen = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, str(part.get("sha256")))
            if seen in _VERIFIED:
                continue
            if found.st_size != part.get("size") or _sha256(file) != part.get("sha256"):
                return f"shard {number} is truncated or corrupt"
            if len(_VERIFIED) >= VERIFIED_MAX:
                _VERIFIED.clear()
            _VERIFIED.add(seen)
        return ""

    def _check_file(self, meta: JsonObject | None, path: Path) -> str:
        if not path.exists():
            return "file is missing"
        if meta is None:
            return "its sidecar is missing or unreadable"
        if meta.get("dim") != self.dim or meta.get("model") != self.model:
            return f"it holds {meta.get('model')}/{meta.get('dim')}, expected {self.model}/{self.dim}"
        store = meta.get("store", LEGACY_STORE)
        if store != self.store:
            return f"it is a {store} index, rag.vector_store is {self.store}"
        if path.stat().st_size != meta.get("size") or _sha256(path) != meta.get("sha256"):
            return "file is truncated or corrupt"
        return ""

    def add(
        self, chunk_ids: np.ndarray, vectors: np.ndarray, *, replace: bool = False, threads: int = 1
    ) -> None:
        """Add vectors whose labels are not present yet (inserting with
        ``threads``); a label present is skipped, or with ``replace`` given
        this vector where it holds another (which costs about ten
        insertions: the label's neighbours are linked again)."""
        with self._lock:
            keep = [i for i, cid in enumerate(chunk_ids) if int(cid) not in self._labels]
            changed = self._changed(chunk_ids, vectors) if replace and len(keep) < len(chunk_ids) else []
            if changed:
                at = np.asarray(changed)
                self._replace(
                    np.asarray(chunk_ids, dtype=np.int64)[at], np.asarray(vectors, dtype=np.float32)[at]
                )
            if not keep:
                return
            ids = np.asarray(chunk_ids, dtype=np.int64)[keep]
            reused = min(self._free, len(ids))
            self._insert(ids, np.asarray(vectors, dtype=np.float32)[keep], threads)
            self._free -= reused
            self._labels.update(int(i) for i in ids)

    def _replace(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        """These labels' vectors replaced: in the open shard in place; a full
        shard's file is not written again for a few, the label is passed over
        there (the sidecar lists it) and its vector goes to the open shard."""
        moved = []
        for number, ann, where in self._grouped(labels):
            if number < 0:
                ann.replace(labels[where], vectors[where])
                continue
            for label in labels[where]:
                ann.remove(int(label))
            moved.append(where)
        if moved:
            where = np.concatenate(moved)
            self._insert(labels[where], vectors[where], 1)
        self.dirty = True

    def _insert(self, ids: np.ndarray, vectors: np.ndarray, threads: int) -> None:
        """Vectors of labels no shard holds, into the open shard (sealed as it fills)."""
        start = 0
        while start < len(ids):
            room = len(ids) - start
            if self.shard_vectors:
                room = min(room, self.shard_vectors - self._ann.count())
                if room <= 0:
                    self._seal()
                    continue
            self._ann.add(ids[start : start + room], vectors[start : start + room], self._free, threads)
            start += room
        self.dirty = True

    def _grouped(self, labels: np.ndarray) -> list[tuple[int, _Ann, np.ndarray]]:
        """(shard number, shard, positions in ``labels``) of the shards
        holding these labels (the open shard's number: -1)."""
        left = np.ones(len(labels), dtype=bool)
        found: list[tuple[int, _Ann, np.ndarray]] = []
        for number, ann in enumerate(self._shards):
            mine = left & np.array([ann.contains(int(label)) for label in labels], dtype=bool)
            if mine.any():
                found.append((number, ann, np.flatnonzero(mine)))
                left &= ~mine
        if left.any():
            found.append((-1, self._ann, np.flatnonzero(left)))
        return found

    def _mapped(self, file: Path) -> _Viewed:
        """The usearch index saved in ``file``, memory-mapped (a full shard,
        or a file read with ``view``)."""
        return _Viewed(_USearch.read(file, self.dim, self.store.removeprefix("usearch-"), view=True))

    def _seal(self) -> None:
        """Save the full open shard as the next shard's file, map it, and
        start a new open shard (its vectors leave this process's memory)."""
        file, part = _write_shard(self, self._ann, len(self._shards))
        self._shard_meta.append(part)
        self._shards.append(self._mapped(file))
        self._ann = _empty(self.store, self.dim)
        self.dirty = True

    def _changed(self, chunk_ids: np.ndarray, vectors: np.ndarray) -> list[int]:
        """Positions of the labels present whose vector is not the given one
        (as the store keeps it: bfloat16 and int8 round it)."""
        present = [i for i, cid in enumerate(chunk_ids) if int(cid) in self._labels]
        held = self.vectors([int(chunk_ids[i]) for i in present])
        given = self._ann.as_kept(np.asarray(vectors, dtype=np.float32))
        tolerance = self._ann.tolerance
        return [
            i
            for i, row in zip(present, held, strict=True)
            if (
                not np.array_equal(row, given[i])
                if tolerance == 0
                else np.abs(row - given[i]).max() > tolerance
            )
        ]

    def vectors(self, chunk_ids: Iterable[int]) -> np.ndarray:
        """The vectors held for these labels, as float32 (as the store keeps
        them: bfloat16 and int8 round them, int8 keeps their direction only)."""
        wanted = np.array([int(cid) for cid in chunk_ids], dtype=np.int64)
        with self._lock:
            if not self._shards:
                return self._ann.get(wanted.tolist())
            rows = np.empty((len(wanted), self.dim), dtype=np.float32)
            for _, ann, where in self._grouped(wanted):
                rows[where] = ann.get(wanted[where].tolist())
            return rows

    def forget(self, chunk_ids: Iterable[int]) -> int:
        """Mark these labels deleted (chunks tombstone collection removed):
        searches no longer return them, and their slots take the next
        vectors added. Returns how many were held."""
        with self._lock:
            gone = [int(cid) for cid in chunk_ids if int(cid) in self._labels]
            for _, ann, where in self._grouped(np.array(gone, dtype=np.int64)) if gone else []:
                for at in where:
                    ann.remove(gone[at])
            for label in gone:
                self._labels.discard(label)
                if isinstance(self._ann, _Hnsw):
                    self._free += 1
            if gone:
                self.dirty = True
            return len(gone)

    def search(self, vector: np.ndarray, k: int) -> list[Neighbour]:
        """The ``k`` nearest labels (live or not: callers filter tombstones)."""
        with self._lock:
            count = len(self._labels)
            if count == 0 or k <= 0:
                return []
            k = min(k, count)
            query = np.asarray(vector, dtype=np.float32)
            if not self._shards:
                labels, scores = self._ann.search(query, k, self._free)
                return [
                    Neighbour(int(label), float(score)) for label, score in zip(labels, scores, strict=True)
                ]
            # each shard's k nearest, merged: the scores are one inner product
            found: list[Neighbour] = []
            for ann in self._all():
                held = ann.count()
                if held:
                    labels, scores = ann.search(query, min(k, held), self._free)
                    found += [Neighbour(int(lb), float(sc)) for lb, sc in zip(labels, scores, strict=True)]
        found.sort(key=lambda hit: -hit.score)
        return found[:k]

    def compact(
        self, *, below: float = COMPACT_BELOW, threads: int = 1, stop: threading.Event | None = None
    ) -> int:
        """Merge the sparse full shards (fewer than ``below`` of a shard's
        vectors live, :func:`_sparse`) into full ones, built again from
        their live vectors; returns how many shards were merged (0: none
        sparse, not the owner of the files, its files not written, a full
        disk: said in a warning, or ``stop`` set: checked
        between blocks of COMPACT_BLOCK vectors, the files written removed,
        as a merge of the kernel's shards takes minutes and a stopping
        process is killed after its ``stop_wait``).

        The build reads the mapped files and writes the new shards' files
        (new names) outside the lock: searches, additions and removals go on
        meanwhile, and what was removed or replaced in a merged shard
        meanwhile is passed over in the new one. The next :meth:`save`
        lists the new files (a crash before leaves the previous sidecar's
        files loadable) and removes the merged ones; a process that mapped
        them keeps reading them."""
        with self._lock:
            if not self.shard_vectors:
                return 0
            sizes = [(len(shard.base.index), len(shard.masked)) for shard in self._shards]
            picked = _sparse(sizes, self.shard_vectors, below)
            sources = [self._shards[n] for n in picked]
            snapshot = [(shard.kept(), set(shard.masked)) for shard in sources]
            first = len(self._shards) - len(picked)
        if not sources:
            return 0
        built: list[tuple[Path, JsonObject]] = []
        try:
            packed = self._packed(sources, [kept for kept, _ in snapshot], threads, stop)
            for number, ann in enumerate(packed, start=first):
                built.append(_write_shard(self, ann, number))
            if stop is not None and stop.is_set():
                return 0
            with self._lock:
                if any(shard not in self._shards for shard in sources):
                    return 0  # loaded or built again meanwhile
                fresh = [self._mapped(file) for file, _ in built]
                passed = zip(sources, snapshot, strict=True)
                gone = set().union(*(shard.masked - masked for shard, (_, masked) in passed))
                for shard in fresh:
                    for label in gone:
                        shard.remove(label)
                keep = [n for n, shard in enumerate(self._shards) if shard not in sources]
                kept_parts = [self._shard_meta[n] for n in keep]
                _disown([_part_file(self.path, part) for part in self._shard_meta if part not in kept_parts])
                self._shards = [self._shards[n] for n in keep] + fresh
                self._shard_meta = kept_parts + [part for _, part in built]
                self.dirty = True
                built = []
        except (OSError, RuntimeError) as exc:  # usearch says a failed write (a full disk) by RuntimeError
            logger.warning("%s: sparse shards not merged: %s", self.path.name, exc)
            return 0
        finally:
            _unwritten([file for file, _ in built])
        logger.info("%s: %d sparse shards merged into %d", self.path.name, len(sources), len(fresh))
        return len(sources)

    def _packed(
        self, sources: list[_Viewed], labels: list[np.ndarray], threads: int, stop: threading.Event | None
    ) -> Iterator[_USearch]:
        """Full shards of these shards' ``labels`` (the last one maybe not
        full), their vectors read from the mapped files a block at a time
        (none more once ``stop`` is set)."""
        size = self.shard_vectors or 1
        dtype = self.store.removeprefix("usearch-")
        ann = _USearch(self.dim, dtype)
        for source, ids in zip(sources, labels, strict=True):
            start = 0
            while start < len(ids):
                if stop is not None and stop.is_set():
                    return
                part = ids[start : start + min(COMPACT_BLOCK, size - ann.count())]
                ann.add(part, source.base.raw(part), 0, threads)
                start += len(part)
                if ann.count() >= size:
                    yield ann
                    ann = _USearch(self.dim, dtype)
        if ann.count():
            yield ann

    def save(self) -> None:
        """Write the index atomically, then its sidecar."""
        with self._lock:
            if not self.dirty and self.path.exists():
                return
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            try:
                _write_synced(self._ann, tmp)
                deleted = sorted(self._ann.ids() - self._labels) if self._free else []
                meta: JsonObject = {
                    "model": self.model,
                    "dim": self.dim,
                    "store": self.store,
                    "count": len(self._labels),
                    "seq": self.seq,
                    "pending": sorted(self.pending),
                    "deleted": deleted,
                    "size": tmp.stat().st_size,
                    "sha256": _sha256(tmp),
                }
                if self._shards:
                    meta["shards"] = [
                        {**part, "removed": sorted(shard.masked)} if shard.masked else part
                        for part, shard in zip(self._shard_meta, self._shards, strict=True)
                    ]
                if self.shard_vectors:
                    meta["shard_vectors"] = self.shard_vectors
                # The full shards' files are written (new names), then the
                # sidecar: a crash before it leaves the files the previous
                # sidecar lists as they were. Then the open file: a crash
                # between these two renames leaves a mismatch that load()
                # detects and repairs.
                atomic_write(_sidecar(self.path), json.dumps(meta))
                os.replace(tmp, self.path)
            finally:
                tmp.unlink(missing_ok=True)
            for shard in self._shards:
                shard.listed = len(shard.masked)
            _clean_shards(self.path, _listed(self.path, meta))
            self.dirty = False


def _write_shard(index: VectorIndex, ann: _Ann, number: int) -> tuple[Path, JsonObject]:
    """Full shard ``number`` of ``index`` written to its own file
    (shard_file), fsynced; the file and its size and sha256."""
    path = index.path
    tmp = path.with_name(f".{path.name}.{number}.{os.getpid()}.{threading.get_ident()}.part")
    try:
        _write_synced(ann, tmp)
        sha = _sha256(tmp)
        file = shard_file(path, number, sha)
        with _UNLISTED_LOCK:
            _UNLISTED[file] = index  # before its name exists: a save's clean-up meanwhile keeps it
        os.replace(tmp, file)
    finally:
        tmp.unlink(missing_ok=True)
    return file, {"number": number, "size": file.stat().st_size, "sha256": sha}


def _sparse(shards: list[tuple[int, int]], size: int, below: float) -> list[int]:
    """Which full shards to merge, given each one's vectors in its file and
    those passed over there: the sparse ones (live vectors under ``below``
    of ``size``), when they fit in fewer files, or one of them passes over
    more than ``1 - below`` of its file (a search of it asks for that many
    more); none otherwise (a merge's last shard, not full, stays as it is
    until another turns sparse)."""
    sparse = [n for n, (held, passed) in enumerate(shards) if held - passed < below * size]
    live = sum(shards[n][0] - shards[n][1] for n in sparse)
    fewer = -(-live // size) < len(sparse)
    if fewer or any(shards[n][1] > (1 - below) * shards[n][0] for n in sparse):
        return sparse
    return []


def _unwritten(files: list[Path]) -> None:
    """Shard files a compaction wrote and did not keep, removed."""
    with _UNLISTED_LOCK:
        for file in files:
            _UNLISTED.pop(file, None)
            file.unlink(missing_ok=True)


def _disown(files: list[Path]) -> None:
    """The shard files a compaction merged, no longer kept for the index
    that wrote them: the next save's clean-up removes them whether a
    sidecar listed them or not."""
    with _UNLISTED_LOCK:
        for file in files:
            _UNLISTED.pop(file, None)


def _part_file(path: Path, part: JsonObject) -> Path:
    """The file of a full shard of the index at ``path`` as this process lists it (_file_part)."""
    return shard_file(path, _number(part, 0), str(part.get("sha256")))


def _file_part(part: JsonValue, position: int) -> JsonObject:
    """A full shard's file as a sidecar lists it at ``position``: its number, size and sha256."""
    found = part if isinstance(part, dict) else {}
    return {"number": _number(part, position), "size": found.get("size"), "sha256": found.get("sha256")}


def _pass_over_listed(shard: _Viewed, part: JsonValue) -> None:
    """The labels a sidecar lists as removed from a full shard since it was
    written, passed over by its searches (as they were by the process that
    saved it)."""
    removed = part.get("removed") if isinstance(part, dict) else None
    if not isinstance(removed, list) or not removed:
        return
    listed = {int(label) for label in removed if isinstance(label, int)}
    shard.masked = listed & shard.base.ids()
    shard.listed = len(shard.masked)


def _clean_shards(path: Path, listed: list[Path]) -> None:
    """Remove the shard files of the index at ``path`` that the sidecar just
    saved does not list (the previous save's, a build's that a crash cut
    short), but those of a build under way in this process (the index
    writing them still in use). A process that
    mapped one keeps reading it (Linux: an unlinked file stays whole for
    its mappings); one loading the previous sidecar meanwhile finds a shard
    missing and tries again at its next sync."""
    with _UNLISTED_LOCK:
        for file in listed:
            _UNLISTED.pop(file, None)
        for file in shard_files(path):
            if file not in listed and file not in _UNLISTED:
                with contextlib.suppress(OSError):  # elsewhere a mapped file may not go: the next save
                    file.unlink()
    # Half-written files a process that died left (a crash mid-save or
    # mid-merge): a shard's (_write_shard), the open file's (save: up to
    # a full shard, or the whole index in one file).
    written = re.compile(re.escape(f".{path.name}.") + r"(?:\d+\.(\d+)(?:\.\d+)?\.part|(\d+)\.tmp)")
    for file in path.parent.glob(f".{path.name}.*"):
        found = written.fullmatch(file.name)
        pid = int(found.group(1) or found.group(2)) if found else 0
        if pid and (pid > PID_MAX or not pid_alive(pid)):
            file.unlink(missing_ok=True)


def _write_synced(ann: _Ann, path: Path) -> None:
    """``ann`` written to ``path`` and fsynced."""
    ann.write(path)
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


@contextlib.contextmanager
def _pinned(path: Path) -> Iterator[Path]:
    """A name for the file ``path`` names now, for as long as the block
    runs: a rename over ``path`` meanwhile leaves it on the file it held
    (Linux: ``/proc/self/fd``, an open descriptor, which a crash cannot leak
    as a hard link would the file's whole size). Elsewhere, ``path`` itself
    (the sha256 still refuses a sidecar and a file that do not match)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # no file: the check says so
        yield path
        return
    try:
        held = Path(f"/proc/self/fd/{fd}")
        yield held if held.exists() else path
    finally:
        os.close(fd)


def saved_seq(path: Path) -> str | None:
    """The embeddings version the file at ``path`` says it holds every
    vector of (its sidecar's ``seq``; None: no such file, or unknown). Read
    before a load is worth trying: the file itself is checked by the load."""
    meta = _read_sidecar(path)
    seq = meta.get("seq") if meta is not None else None
    return seq if isinstance(seq, str) and seq.isdigit() else None


def saved_pending(path: Path) -> int:
    """How many labels the file at ``path`` holds an older vector of than
    the one stored by its ``seq`` (its sidecar's ``pending``; 0 when none
    or unknown)."""
    meta = _read_sidecar(path)
    pending = meta.get("pending") if meta is not None else None
    return len(pending) if isinstance(pending, list) else 0


def saved_store(path: Path) -> str | None:
    """The store the sidecar of the file at ``path`` names (LEGACY_STORE
    where it names none); None: no readable sidecar, or an unknown store."""
    meta = _read_sidecar(path)
    if meta is None:
        return None
    store = meta.get("store", LEGACY_STORE)
    return store if isinstance(store, str) and store in STORES else None


def saved_stamp(path: Path) -> tuple[int, int, int, int] | None:
    """What changes when the file at ``path`` is saved again (its and its
    sidecar's sizes and modification times); None: either is missing."""
    try:
        file, meta = path.stat(), _sidecar(path).stat()
    except OSError:
        return None
    return (file.st_size, file.st_mtime_ns, meta.st_size, meta.st_mtime_ns)


def index_count(meta: JsonObject) -> int:
    """The slots a file's sidecar says it holds: its labels and those marked deleted."""
    deleted = meta.get("deleted") or []
    return int(meta.get("count") or 0) + (len(deleted) if isinstance(deleted, list) else 0)


def _read_sidecar(path: Path) -> JsonObject | None:
    try:
        data = json.loads(_sidecar(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remove_files(state: StateDir) -> None:
    """Delete both indices and their sidecars (after a model change)."""
    for kind in KINDS:
        path = index_path(state, kind)
        for file in (path, _sidecar(path), *shard_files(path)):
            file.unlink(missing_ok=True)
