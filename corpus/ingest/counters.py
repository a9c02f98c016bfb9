"""A job's counters, shared by every collaborator of one indexing pass."""

from __future__ import annotations

from dataclasses import asdict, dataclass


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
        write step hold this one object, so none of them is left counting
        into a copy (a coordinator reads the job's counts back each flush)."""
        for name, value in values.items():
            setattr(self, name, value)
