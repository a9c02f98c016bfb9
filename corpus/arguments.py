"""The file tools' argument bounds, in one place: :mod:`corpus.files` checks
them (REST callers may bypass JSON-schema validation, so types and ranges
are checked there too) and ``mcp_gateway/schemas.py`` publishes the same
numbers as each tool's JSON schema."""

from __future__ import annotations

from dataclasses import dataclass

from kernel import errors
from kernel.jsontypes import JsonObject

#: The largest integer SQLite (and any 64-bit field) can hold.
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Integer:
    """An integer argument: from ``low`` to ``high``, ``default`` when left out."""

    low: int
    high: int = INT64_MAX
    default: int | None = None

    def schema(self) -> JsonObject:
        """The argument's JSON schema."""
        out: JsonObject = {"type": "integer", "minimum": self.low}
        if self.high != INT64_MAX:
            out["maximum"] = self.high
        if self.default is not None:
            out["default"] = self.default
        return out

    def check(self, name: str, value: object) -> int | None:
        """``value`` (the default when ``None``); INVALID_FIELD or INVALID_RANGE otherwise."""
        if value is None:
            return self.default
        if isinstance(value, bool) or not isinstance(value, int):
            raise errors.Dir2mcpError(errors.INVALID_FIELD, f"{name} must be an integer")
        if not self.low <= value <= self.high:
            raise errors.Dir2mcpError(errors.INVALID_RANGE, f"{name} must be from {self.low} to {self.high}")
        return value


def text(name: str, value: object, *, limit: int) -> str:
    """``value`` as a string of at most ``limit`` characters (``""`` when ``None``)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise errors.Dir2mcpError(errors.INVALID_FIELD, f"{name} must be a string")
    if len(value) > limit:
        raise errors.Dir2mcpError(errors.INVALID_FIELD, f"{name} is longer than {limit} characters")
    return value


#: ``open_file``: a 1-based line, a page, a millisecond, and the most characters returned
LINE = Integer(1)
PAGE = Integer(1)
MILLISECOND = Integer(0)
MAX_CHARS = Integer(200, 50000, 20000)
#: ``list_files``: a page of paths
LIST_LIMIT = Integer(1, 5000, 200)
#: where a ``list_files`` page starts, in the files the rules let through:
#: every entry before it is judged again (session 27), so it has a bound
OFFSET = Integer(0, 10_000, 0)
#: ``find``: matching files a page, and matches a file
FIND_LIMIT = Integer(1, 200, 50)
MATCHES_PER_FILE = Integer(1, 100, 5)
