"""Every tool result under a token budget (issue #32 item 4).

A client hands a tool's result to its model and caps it (Claude Code warns
past 10,000 tokens and refuses past 25,000). Each tool that returns text
takes ``max_tokens`` (default :data:`DEFAULT_MAX_TOKENS`), and its whole
``CallToolResult`` (text, structured content, links and all, as JSON) is
estimated at one token per four characters and brought under it one of two
ways, declared per tool by a :class:`Budget`:

- ``items``: a list field is cut from its end, in order, and a cursor
  continues after the last item kept (it wraps the tool's own page cursor,
  where it has one, so paging goes on unchanged after the cut page);
- ``knob``: an integer argument (``max_chars``, ``max_entries``) is lowered
  and the call run again, so the tool cuts its own text the way it always
  has and says so in its own ``truncated``.

A cut is never silent: the result carries ``budget`` (``truncated``,
``omitted``, the tokens used) and the text says what was left out and how
to get it. Every result carries its token estimate in ``_meta``.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from corpus.navigation.tokens import estimate_tokens
from kernel import errors
from kernel.jsontypes import JsonObject
from mcp_gateway.registry import Budget, Shrink, Tool

#: under Claude Code's 25,000-token cap counting text and structured content
#: both, and each of them under its 10,000-token warning
DEFAULT_MAX_TOKENS = 16_000
MIN_MAX_TOKENS = 256
MAX_MAX_TOKENS = 200_000
#: what the budget field, the note and the token estimate add: the knob aims below the limit by it
RESERVE_TOKENS = 96
#: a budget cursor starts so; a tool's own cursors are base64url (no dot)
#: a model's cost of one image (Claude's, for an image of about 1.15 megapixels or less)
IMAGE_TOKENS = 1_600
CURSOR_PREFIX = "b."
MAX_CURSOR_CHARS = 1024
META_TOKENS = "dir2mcp/tokens"


def argument(what: str = "the result", more: str = "") -> JsonObject:
    """The ``max_tokens`` input schema (no JSON default: a tool may treat an
    explicit budget differently, as search does)."""
    return {
        "type": "integer",
        "minimum": MIN_MAX_TOKENS,
        "maximum": MAX_MAX_TOKENS,
        "description": (
            f"Most tokens {what} may take, text and structured content together, estimated at 4 "
            f"characters a token (default {DEFAULT_MAX_TOKENS:,}). What does not fit is left out and "
            "reported in budget, never cut silently." + (f" {more}" if more else "")
        ),
    }


CURSOR_ARGUMENT = {
    "type": "string",
    "maxLength": MAX_CURSOR_CHARS,
    "description": "next_cursor from the previous call, with the same arguments.",
}

NEXT_CURSOR = {"type": "string", "description": "Pass as cursor to continue; absent when nothing follows."}

OUTPUT = {
    "type": "object",
    "description": "Present when max_tokens was given or the result was cut to it.",
    "additionalProperties": False,
    "properties": {
        "max_tokens": {"type": "integer"},
        "used_tokens": {"type": "integer", "description": "The whole result's estimate."},
        "truncated": {"type": "boolean", "description": "Something was left out to fit."},
        "omitted": {"type": "integer", "description": "Items left out (continue with next_cursor)."},
        "merged": {"type": "integer", "description": "search: hits merged into another's passage."},
    },
    "required": ["max_tokens", "used_tokens", "truncated", "omitted"],
}


def declared(
    tool: Tool, budget: Budget, hints: Callable[[JsonObject, JsonObject], list[JsonObject]] | None = None
) -> Tool:
    """``tool`` with ``budget`` and its schemas taking it: ``max_tokens`` (and
    ``cursor``) in, ``budget`` (and ``next_cursor``) out."""
    given, out = copy.deepcopy(tool.input_schema), copy.deepcopy(tool.output_schema)
    given["properties"].setdefault("max_tokens", argument())
    out["properties"].setdefault("budget", OUTPUT)
    if budget.paging == "cursor":
        given["properties"].setdefault("cursor", CURSOR_ARGUMENT)
        out["properties"].setdefault("next_cursor", NEXT_CURSOR)
    return replace(tool, input_schema=given, output_schema=out, budget=budget, next_actions=hints)


Handler = Callable[[JsonObject], JsonObject]
Package = Callable[[JsonObject], JsonObject]


def run(
    tool_name: str, budget: Budget | None, args: JsonObject, handler: Handler, package: Package
) -> JsonObject:
    """``handler(args)`` packaged by ``package`` under the call's budget;
    INVALID_RANGE when even the least result (one item, the knob at its
    floor) does not fit."""
    limit = args.get("max_tokens", DEFAULT_MAX_TOKENS)
    skip = 0
    if budget is not None and budget.paging == "cursor" and _is_budget_cursor(args.get("cursor")):
        skip, native = decode_cursor(args["cursor"], tool_name, args)
        args = {k: v for k, v in args.items() if k != "cursor"} | ({"cursor": native} if native else {})
    result = handler(args)
    if skip and budget is not None:  # skip is set only under a budget
        result = result | {budget.items: result.get(budget.items, [])[skip:]}
    if budget is None:
        return finish(package(result), None)
    explicit = "max_tokens" in args
    whole = finish(package(result), Cut(limit) if explicit else None)
    if measure(whole) <= limit:
        return whole
    if budget.knob:
        fitted = _lower(budget, args, result, handler, package, limit)
    else:
        fitted = _shorten(tool_name, budget, args, result, package, limit, skip)
    if measure(fitted) > limit:
        raise _too_small(limit, measure(fitted))
    return fitted


@dataclass(frozen=True)
class Cut:
    """What a budget left out, as the result reports it."""

    limit: int
    truncated: bool = False
    omitted: int = 0
    note: str = ""


def measure(packaged: JsonObject) -> int:
    """The estimate of a packaged result: its JSON as the HTTP transport
    sends it, but an image item at what a model reads of an image
    (:data:`IMAGE_TOKENS`), not its base64."""
    images = [item for item in packaged.get("content") or () if item.get("type") == "image"]
    if images:
        packaged = packaged | {"content": [item for item in packaged["content"] if item not in images]}
    return estimate_tokens(json.dumps(packaged, ensure_ascii=False)) + IMAGE_TOKENS * len(images)


def finish(packaged: JsonObject, cut: Cut | None) -> JsonObject:
    """``packaged`` with its ``budget`` field and note (where a cut was made or
    the budget asked for) and its token estimate in ``_meta``."""
    structured = packaged.get("structuredContent")
    if cut is not None and isinstance(structured, dict):
        structured = packaged["structuredContent"] = structured | {
            "budget": structured.get("budget", {})
            | {"max_tokens": cut.limit, "used_tokens": 0, "truncated": cut.truncated, "omitted": cut.omitted}
        }
    if cut is not None and cut.note and packaged["content"] and packaged["content"][0].get("type") == "text":
        first = packaged["content"][0]
        packaged["content"] = [first | {"text": f"{first['text']}\n({cut.note}.)"}, *packaged["content"][1:]]
    packaged["_meta"] = packaged.get("_meta", {}) | {META_TOKENS: 0}
    for _ in range(3):  # the figures count themselves: settle them
        used = measure(packaged)
        packaged["_meta"][META_TOKENS] = used
        if cut is not None and isinstance(structured, dict):
            structured["budget"]["used_tokens"] = used
    return packaged


def _lower(
    budget: Budget, args: JsonObject, result: JsonObject, handler: Handler, package: Package, limit: int
) -> JsonObject:
    """Lower the knob and run again until the result fits (a few runs at
    most: each aims by the ratio of the limit to what the last run used)."""
    value, fitted = args.get(budget.knob, budget.start), None
    used = measure(package(result))
    for _ in range(8):
        if value is None or value <= budget.floor:
            break
        value = max(budget.floor, min(value - 1, int(value * (limit - RESERVE_TOKENS) / used * 0.95)))
        note = f"{budget.knob} lowered to {value} to fit max_tokens {limit}; {budget.advice}"
        fitted = finish(package(handler(args | {budget.knob: value})), Cut(limit, True, 0, note))
        used = measure(fitted)
        if used <= limit:
            break
    return fitted if fitted is not None else finish(package(result), Cut(limit, True))


def _shorten(
    tool_name: str,
    budget: Budget,
    args: JsonObject,
    result: JsonObject,
    package: Package,
    limit: int,
    skip: int,
) -> JsonObject:
    """Keep the longest prefix of the list that fits, with what continues it;
    when not even the first item fits, the first cut short (``budget.shrink``)."""
    items = result.get(budget.items, [])

    def kept(count: int, first: JsonObject | None = None) -> JsonObject:
        listed = items[:count] if first is None else [first, *items[1:count]]
        shortened, omitted = result | {budget.items: listed}, len(items) - count
        if "has_more" in result and budget.paging:  # the items cut follow
            shortened["has_more"] = True
        if budget.paging == "cursor":
            shortened["next_cursor"] = encode_cursor(tool_name, args, skip + count)
            how = "pass next_cursor to continue"
        else:
            how = budget.advice
        note = f"{omitted} more left out to fit max_tokens {limit}: {how}"
        if first is not None:
            note = f"the first cut short and {note}"
        return finish(package(shortened), Cut(limit, True, omitted, note))

    low, high = 0, len(items) - 1  # the longest prefix that fits is in [low, high]
    while low < high:
        middle = (low + high + 1) // 2
        if measure(kept(middle)) <= limit:
            low = middle
        else:
            high = middle - 1
    if low > 0:
        return kept(low)
    if items and budget.shrink is not None:
        fitted = _first_cut_short(budget.shrink, items[0], lambda first: kept(1, first), limit)
        if fitted is not None:
            return fitted
    raise _too_small(limit, measure(kept(1)))  # nothing to read and nothing to page past


def _first_cut_short(
    shrink: Shrink, item: JsonObject, kept: Callable[[JsonObject], JsonObject], limit: int
) -> JsonObject | None:
    """The result with its one item cut to the most characters that fit, or None."""
    low, high, best = 1, shrink(item, None), None  # shrink(item, None): the item's full length
    while low <= high:
        middle = (low + high) // 2
        cut = shrink(item, middle)
        fitted = kept(cut) if cut is not None else None
        if fitted is not None and measure(fitted) <= limit:
            best, low = fitted, middle + 1
        else:
            high = middle - 1
    return best


def _too_small(limit: int, needed: int) -> errors.Dir2mcpError:
    return errors.Dir2mcpError(
        errors.INVALID_RANGE, f"max_tokens {limit} is too small for this call: it needs about {needed}"
    )


# -- cursors ---------------------------------------------------------------------------------


def _is_budget_cursor(cursor: object) -> bool:
    return isinstance(cursor, str) and cursor.startswith(CURSOR_PREFIX)


def _digest(tool_name: str, args: JsonObject) -> str:
    """The call a cursor belongs to: its tool and arguments, but for the
    cursor itself and the budget (a client may resume with a larger one)."""
    kept = {k: v for k, v in args.items() if k not in ("cursor", "max_tokens")}
    raw = json.dumps([tool_name, kept], sort_keys=True, default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def page_cursor(tool_name: str, args: JsonObject, position: int) -> str:
    """A tool's own cursor (base64url, no dot): where the call ``args``
    goes on, at ``position`` of what it pages through."""
    body = {"d": _digest(tool_name, args), "p": position}
    return base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")


def page_position(cursor: str, tool_name: str, args: JsonObject) -> int:
    """The position a :func:`page_cursor` holds; INVALID_FIELD for a cursor
    that is not one we gave, or was given for other arguments."""
    invalid = errors.Dir2mcpError(errors.INVALID_FIELD, "invalid cursor")
    try:
        body = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise invalid from None
    position = body.get("p") if isinstance(body, dict) else None
    if not isinstance(position, int) or isinstance(position, bool) or position < 0:
        raise invalid
    if body.get("d") != _digest(tool_name, args):
        raise errors.Dir2mcpError(errors.INVALID_FIELD, "cursor was given for other arguments")
    return position


def encode_cursor(tool_name: str, args: JsonObject, skip: int) -> str:
    """Resume the call ``args`` after ``skip`` items of the page its own cursor (if any) gave."""
    body = {"d": _digest(tool_name, args), "s": skip, "n": args.get("cursor")}
    return CURSOR_PREFIX + base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, tool_name: str, args: JsonObject) -> tuple[int, str | None]:
    """``(skip, the tool's own cursor)``; INVALID_FIELD for a cursor that is
    not one we gave, or was given for other arguments."""
    invalid = errors.Dir2mcpError(errors.INVALID_FIELD, "invalid cursor")
    raw = cursor[len(CURSOR_PREFIX) :]
    try:
        body = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise invalid from None
    if not isinstance(body, dict) or not isinstance(body.get("s"), int) or body["s"] < 0:
        raise invalid
    native = body.get("n")
    if native is not None and not isinstance(native, str):
        raise invalid
    if body.get("d") != _digest(tool_name, args):
        raise errors.Dir2mcpError(errors.INVALID_FIELD, "cursor was given for other arguments")
    return body["s"], native
