"""Dense indices: ``vectors_text.hnsw`` and ``vectors_code.hnsw`` (spec §6).

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

A label's vector changes once at most: a code unit's own vector is replaced,
in its own slot, by the one leaning towards its signature view when that
view is embedded, later (corpus/index/dense/embedding.py; many replacements
at once rebuild the index instead, DenseStore.settle). The sidecar
records the embeddings version (``seq``) the file holds every vector of, so
a process loading it re-reads only what was stored, or replaced, after.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import hnswlib
import numpy as np

from kernel.jsontypes import JsonObject
from kernel.state import StateDir, atomic_write

logger = logging.getLogger(__name__)

KINDS = ("text", "code")
INITIAL_CAPACITY = 1024
EF_CONSTRUCTION = 200
M = 16
EF_SEARCH_MIN = 64


def index_path(state: StateDir, kind: str) -> Path:
    return state.path / f"vectors_{kind}.hnsw"


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


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


class VectorIndex:
    """One hnswlib index of normalised vectors, searched by inner product."""

    def __init__(self, path: Path, dim: int, model: str) -> None:
        self.path = path
        self.dim = dim
        self.model = model
        self._lock = threading.RLock()
        self._index = self._empty(INITIAL_CAPACITY)
        #: the labels searched: those in the index not marked deleted
        self._labels: set[int] = set()
        #: slots marked deleted that no vector reused yet
        self._free = 0
        self.dirty = False
        #: the embeddings version this index holds every vector of (None: unknown);
        #: the caller keeps it, the file records it
        self.seq: str | None = None

    def _empty(self, capacity: int) -> hnswlib.Index:
        index = hnswlib.Index(space="ip", dim=self.dim)
        index.init_index(
            max_elements=capacity, ef_construction=EF_CONSTRUCTION, M=M, allow_replace_deleted=True
        )
        index.set_ef(EF_SEARCH_MIN)
        return index

    def __len__(self) -> int:
        return len(self._labels)

    def __contains__(self, chunk_id: int) -> bool:
        return chunk_id in self._labels

    @property
    def labels(self) -> set[int]:
        return set(self._labels)

    def load(self, *, quiet: bool = False) -> bool:
        """Read the file if it is intact and matches; False means rebuild
        (said in a warning unless ``quiet``: a process trying a file another
        one may be saving meanwhile, DenseStore.settle).

        The sidecar is read first, then the file is held open, so that the
        size and sha256 checked and the bytes hnswlib reads are one file's:
        a save renaming a new file in between (the sidecar goes first, then
        the file) leaves a sidecar and a file that do not match, and
        nothing is read."""
        meta = _read_sidecar(self.path)
        with _pinned(self.path) as path:
            problem = self._check_file(meta, path)
            if problem:
                if not quiet and (self.path.exists() or _sidecar(self.path).exists()):
                    logger.warning("rebuilding %s from the database: %s", self.path.name, problem)
                return False
            assert meta is not None  # _check_file reports a missing sidecar
            index = hnswlib.Index(space="ip", dim=self.dim)
            try:
                index.load_index(
                    str(path),
                    max_elements=max(index_count(meta), INITIAL_CAPACITY),
                    allow_replace_deleted=True,
                )
            except (RuntimeError, ValueError, MemoryError) as exc:
                if not quiet:
                    logger.warning("rebuilding %s from the database: %s", self.path.name, exc)
                return False
        index.set_ef(EF_SEARCH_MIN)
        seq = meta.get("seq")
        held = set(int(label) for label in index.get_ids_list())
        deleted = held.intersection(int(label) for label in meta.get("deleted") or [])
        with self._lock:
            self._index = index
            self._labels = held - deleted
            self._free = len(deleted)
            self.dirty = False
            self.seq = seq if isinstance(seq, str) else None
        return True

    def _check_file(self, meta: JsonObject | None, path: Path) -> str:
        if not path.exists():
            return "file is missing"
        if meta is None:
            return "its sidecar is missing or unreadable"
        if meta.get("dim") != self.dim or meta.get("model") != self.model:
            return f"it holds {meta.get('model')}/{meta.get('dim')}, expected {self.model}/{self.dim}"
        if path.stat().st_size != meta.get("size") or _sha256(path) != meta.get("sha256"):
            return "file is truncated or corrupt"
        return ""

    def add(
        self, chunk_ids: np.ndarray, vectors: np.ndarray, *, replace: bool = False, threads: int = 1
    ) -> None:
        """Add vectors whose labels are not present yet (hnswlib inserting
        with ``threads``); a label present is skipped, or with ``replace``
        given this vector where it holds another (which costs hnswlib about
        ten insertions: it re-links the label's neighbours)."""
        with self._lock:
            keep = [i for i, cid in enumerate(chunk_ids) if int(cid) not in self._labels]
            changed = self._changed(chunk_ids, vectors) if replace and len(keep) < len(chunk_ids) else []
            if changed:
                # In the label's own slot: added with replace_deleted, a label
                # held would move to a freed slot and leave its old one live,
                # found twice and never freed.
                at = np.asarray(changed)
                olds = np.asarray(chunk_ids, dtype=np.int64)[at]
                self._index.add_items(np.asarray(vectors, dtype=np.float32)[at], olds, num_threads=1)
                self.dirty = True
            if not keep:
                return
            ids = np.asarray(chunk_ids, dtype=np.int64)[keep]
            vecs = np.asarray(vectors, dtype=np.float32)[keep]
            reused = min(self._free, len(ids))
            needed = self._index.element_count + len(ids) - reused
            if needed > self._index.get_max_elements():
                self._index.resize_index(max(needed, 2 * self._index.get_max_elements()))
            self._index.add_items(vecs, ids, num_threads=threads, replace_deleted=True)
            self._free -= reused
            self._labels.update(int(i) for i in ids)
            self.dirty = True

    def _changed(self, chunk_ids: np.ndarray, vectors: np.ndarray) -> list[int]:
        """Positions of the labels present whose vector is not the given one."""
        present = [i for i, cid in enumerate(chunk_ids) if int(cid) in self._labels]
        held = self._index.get_items([int(chunk_ids[i]) for i in present])
        given = np.asarray(vectors, dtype=np.float32)
        return [i for i, row in zip(present, held, strict=True) if not np.array_equal(row, given[i])]

    def forget(self, chunk_ids: Iterable[int]) -> int:
        """Mark these labels deleted (chunks tombstone collection removed):
        searches no longer return them, and their slots take the next
        vectors added. Returns how many were held."""
        with self._lock:
            gone = [int(cid) for cid in chunk_ids if int(cid) in self._labels]
            for label in gone:
                try:
                    self._index.mark_deleted(label)
                except RuntimeError:  # marked already (a file saved without its sidecar's list)
                    pass
                self._labels.discard(label)
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
            self._index.set_ef(max(EF_SEARCH_MIN, k))
            try:
                labels, distances = self._index.knn_query(query, k=k, num_threads=1)
            except RuntimeError:
                # Slots marked deleted can leave a search short of k: look wider.
                self._index.set_ef(max(EF_SEARCH_MIN, k) + self._free)
                labels, distances = self._index.knn_query(query, k=k, num_threads=1)
        # For the "ip" space hnswlib reports 1 - inner product.
        return [
            Neighbour(int(label), float(1.0 - d)) for label, d in zip(labels[0], distances[0], strict=True)
        ]

    def save(self) -> None:
        """Write the index atomically, then its sidecar."""
        with self._lock:
            if not self.dirty and self.path.exists():
                return
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            try:
                self._index.save_index(str(tmp))
                with open(tmp, "rb") as handle:
                    os.fsync(handle.fileno())
                deleted = (
                    sorted(set(int(label) for label in self._index.get_ids_list()) - self._labels)
                    if self._free
                    else []
                )
                meta = {
                    "model": self.model,
                    "dim": self.dim,
                    "count": len(self._labels),
                    "seq": self.seq,
                    "deleted": deleted,
                    "size": tmp.stat().st_size,
                    "sha256": _sha256(tmp),
                }
                # The sidecar goes first: a crash between the two renames
                # leaves a mismatch that load() detects and repairs.
                atomic_write(_sidecar(self.path), json.dumps(meta))
                os.replace(tmp, self.path)
            finally:
                tmp.unlink(missing_ok=True)
            self.dirty = False


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
        for file in (path, _sidecar(path)):
            file.unlink(missing_ok=True)
