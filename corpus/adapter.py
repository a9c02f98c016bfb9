"""The query-side adapter: a square matrix applied to a query's vector before
the code index is searched (issue #36, docs/retrieval.md).

A question and the code that answers it are far apart in the small local
model's space (a docstring's words against a body's identifiers). The
adapter moves the query, never the corpus: ``unit(W · q)``, so no unit is
re-embedded and turning it off gives the old ranking back exactly. ``W``
was fitted from the identity on docstring → definition pairs mined from
public packages (``bench/query_adapter.py``; never a standard library or a
benchmark corpus) and ships as data beside its provenance
(``corpus/data/query_adapter.npy`` and ``.json``: sources and counts, seed,
date, model, digest).

``search.query_adapter`` chooses it: ``builtin`` (that file), ``off``, or
the path of another ``.npy`` (with its ``.json`` beside it, naming the
model). It applies only to a code index whose vectors came from the model
it was fitted for; ``stats`` and ``status`` show which adapter searches use
against the one recorded when the index was last built.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus.store import get_setting, set_setting
from kernel import errors
from kernel.jsontypes import JsonObject

BUILTIN = Path(__file__).resolve().parent / "data" / "query_adapter.npy"
#: settings key: the adapter (``name`` and digest) the latest indexing run was configured with
RECORD_KEY = "search_query_adapter"
OFF = "off"
#: the largest matrix file read: a 4,096-dimension model's, in float32
MAX_MATRIX_BYTES = 4096 * 4096 * 4 + 4096
#: the largest provenance file read
MAX_PROVENANCE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class QueryAdapter:
    """A matrix, the model whose query vectors it adapts, and its digest."""

    matrix: np.ndarray
    model: str
    sha256: str
    name: str

    def applies_to(self, model: str) -> bool:
        """Whether vectors of ``model`` are what this adapter was fitted on
        (a precision variant of it, such as ``…-int8``, counts)."""
        return model == self.model or model.startswith(f"{self.model}-")

    def apply(self, vector: np.ndarray) -> np.ndarray:
        """``unit(W · vector)``: the adapted query, unit length like every query."""
        moved = self.matrix @ np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(moved))
        return (moved / norm).astype(np.float32) if norm > 0 else np.asarray(vector, dtype=np.float32)

    def label(self) -> str:
        return f"{self.name}:{self.sha256[:12]}"


def path_of(setting: str) -> Path | None:
    """The ``.npy`` that ``search.query_adapter`` names, or None when off."""
    if setting == OFF:
        return None
    return BUILTIN if setting == "builtin" else Path(setting).expanduser()


def _read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes
    (ValueError otherwise): the key may come from the root's own
    ``.dir2mcp.yaml``, so a FIFO must not hang a search, nor a device feed
    one endlessly. Opened without blocking and checked on the descriptor."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path.name} is not a regular file")
        if info.st_size > limit:
            raise ValueError(f"{path.name} is over {limit} bytes")
        return file.read(limit + 1)[:limit]


def _read_matrix(blob: bytes) -> np.ndarray:
    """One ``.npy`` array (an ``.npz`` archive or a pickle is refused)."""
    loaded = np.load(io.BytesIO(blob), allow_pickle=False)
    if not isinstance(loaded, np.ndarray):
        loaded.close()
        raise ValueError("not a .npy array (an .npz archive?)")
    return loaded.astype(np.float32)


@functools.cache
def _load(path: Path) -> QueryAdapter:
    try:
        blob = _read_regular(path, MAX_MATRIX_BYTES)
        provenance = json.loads(_read_regular(path.with_suffix(".json"), MAX_PROVENANCE_BYTES))
        matrix = _read_matrix(blob)
    except (OSError, ValueError) as exc:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"search.query_adapter: cannot read {path} and its .json ({exc})",
            hint="Set search.query_adapter to builtin, off, or a .npy with its .json beside it.",
        ) from exc
    if (
        matrix.ndim != 2
        or matrix.shape[0] != matrix.shape[1]
        or not isinstance(provenance, dict)
        or not isinstance(provenance.get("model"), str)
    ):
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"search.query_adapter: {path} is not a square matrix with a model in its .json",
        )
    name = "builtin" if path == BUILTIN else path.name
    return QueryAdapter(matrix, provenance["model"], hashlib.sha256(blob).hexdigest(), name)


def load(setting: str) -> QueryAdapter | None:
    """The adapter ``search.query_adapter`` names (read once per process), or None when off."""
    path = path_of(setting)
    return None if path is None else _load(path)


def for_query(setting: str, model: str, dim: int) -> QueryAdapter | None:
    """The adapter to apply to a query for an index of ``model`` vectors of
    ``dim`` dimensions: None when off, or fitted for another model or size."""
    adapter = load(setting)
    if adapter is None or not adapter.applies_to(model) or adapter.matrix.shape[0] != dim:
        return None
    return adapter


def record(setting: str) -> None:
    """Record the configured adapter with the index (an indexing run)."""
    adapter = load(setting)
    set_setting(RECORD_KEY, adapter.label() if adapter else OFF)


def summary(setting: str, model: str | None) -> JsonObject:
    """For ``stats`` and ``status``: the adapter searches use (``configured``,
    and whether it ``applies`` to the code index's model), the one recorded
    when the index was last built, and a note when they differ."""
    adapter = load(setting)
    configured = adapter.label() if adapter else OFF
    recorded = get_setting(RECORD_KEY)
    applies = bool(adapter and model and adapter.applies_to(model))
    note = ""
    if adapter and model and not applies:
        note = f"the query adapter was fitted for {adapter.model}; the code index holds {model} vectors"
    elif recorded is not None and recorded != configured:
        note = f"searches use query adapter {configured}; the index was last built with {recorded}"
    return {"configured": configured, "recorded": recorded, "applies": applies, "note": note}
