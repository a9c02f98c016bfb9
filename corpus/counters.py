"""A job's nine counters: the one list the indexer counts, the job's row
stores (``IndexJob``), ``status`` reports and the progress line prints."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass
class Counters:
    """A job's counts. ``skipped`` is what a policy left out (binary, too
    large, a secret, a missing provider key); ``unchanged`` what an
    incremental pass found as the store holds it."""

    scanned: int = 0
    indexed: int = 0
    skipped: int = 0
    unchanged: int = 0
    deleted: int = 0
    representations: int = 0
    chunks_total: int = 0
    embedded_ok: int = 0
    errors: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def load(self, values: dict[str, int]) -> None:
        """Take these counts in place: the reader, the batch writer and the
        write step of one pass hold this one object, so none of them is left
        counting into a copy (a coordinator reads the job's counts back)."""
        for name, value in values.items():
            setattr(self, name, value)


#: the counters' names, in the order they are shown
NAMES: tuple[str, ...] = tuple(field.name for field in fields(Counters))
#: the progress line's shorter label of a counter, where it has one
_SHORT = {"representations": "reps", "chunks_total": "chunks", "embedded_ok": "embedded"}
#: (label, counter) of the progress line, for every counter
PROGRESS_FIELDS: tuple[tuple[str, str], ...] = tuple((_SHORT.get(name, name), name) for name in NAMES)
