"""The tool registry: every tool the server offers, in the contract's order.

It sits below the handlers (only :class:`Tool`, the :class:`Call` a handler
takes, and the table), so the payment gate can price the catalog without
importing a handler. ``McpGatewayConfig.ready`` names the loader that fills it
from ``tools`` and ``media_tools``; :func:`table` runs it on first use, so
the processes that set up Django without serving tools (every command, the
indexing child, Celery workers) never import the handlers (~0.45 s each,
measured).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, overload

from kernel.jsontypes import JsonObject

if TYPE_CHECKING:  # for annotations only: the context is heavier to import than the table
    from jsonschema import Draft202012Validator

    from mcp_gateway.context import Context


class Cancelled(Exception):
    """The client sent ``notifications/cancelled`` for this call."""


def _noop(*_args: object, **_kwargs: object) -> None:
    return None


@dataclass
class Call:
    """One tool invocation: its context, and its ways back to the client."""

    ctx: Context
    progress: Callable[[float, float | None, str | None], None] = _noop
    log: Callable[[str, str], None] = _noop
    cancel: threading.Event = field(default_factory=threading.Event)

    def check(self) -> None:
        if self.cancel.is_set():
            raise Cancelled()


READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}


class Shrink(Protocol):
    """``(item, chars)``: the item cut to at most ``chars`` characters of its
    text, None when too short to cut; ``(item, None)``: its full length."""

    @overload
    def __call__(self, item: JsonObject, chars: int, /) -> JsonObject | None: ...
    @overload
    def __call__(self, item: JsonObject, chars: None, /) -> int: ...


@dataclass(frozen=True)
class Budget:
    """How one tool's result is brought under ``max_tokens`` (:mod:`mcp_gateway.budgets`)."""

    #: the list field cut from its end
    items: str = ""
    #: or the integer argument lowered (down to ``floor``) and the call run again
    knob: str = ""
    floor: int = 0
    #: the knob's value when the call leaves it out (its schema has no default)
    start: int | None = None
    #: "cursor": a budget cursor continues a cut list (every paged tool pages so)
    paging: str = ""
    #: ``(item, chars) -> item`` cut to at most ``chars`` characters of its text (None: too
    #: short to cut); ``(item, None)``: its full length. Used when not even one item fits.
    shrink: Shrink | None = None
    #: the text's advice when nothing continues the cut
    advice: str = "ask again with a larger max_tokens"


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    input_schema: JsonObject
    output_schema: JsonObject
    #: ``(call, args) -> result``
    handler: Callable[[Call, JsonObject], JsonObject]
    summarize: Callable[[JsonObject], str]
    annotations: JsonObject = field(default_factory=lambda: dict(READ_ONLY))
    #: content items after the text (audio, resource links): ``result -> (structured, content items)``
    split_content: Callable[[JsonObject], tuple[JsonObject, list[JsonObject]]] | None = None
    #: how the result is brought under ``max_tokens`` (:mod:`mcp_gateway.budgets`); None: not text
    budget: Budget | None = None
    #: ``(result, args) -> [{"tool", "arguments", "why"}]``: the calls an agent would make next
    #: (:mod:`mcp_gateway.hints`)
    next_actions: Callable[[JsonObject, JsonObject], list[JsonObject]] | None = None
    #: ``result -> rel_paths`` the result cites: its ``freshness`` checks them
    #: (:mod:`mcp_gateway.freshness`); None: no ``freshness``
    cites: Callable[[JsonObject], Iterable[str]] | None = None

    def definition(self) -> JsonObject:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "annotations": {"title": self.title, **self.annotations},
        }

    @property
    def validator(self) -> Draft202012Validator:
        # jsonschema when a call is first validated: the commands and the
        # indexing child, which set up Django and so the table, never load it
        from jsonschema import Draft202012Validator  # noqa: PLC0415

        return _validators.setdefault(self.name, Draft202012Validator(self.input_schema))


_validators: dict[str, Draft202012Validator] = {}
_REGISTRY: dict[str, Tool] = {}
_loaders: list[Callable[[], Iterable[Tool]]] = []
_load_lock = threading.Lock()


def register(tools: Iterable[Tool]) -> None:
    """Add ``tools`` in order; registering the same tool again is a no-op."""
    for tool in tools:
        _REGISTRY.setdefault(tool.name, tool)


def load_with(loader: Callable[[], Iterable[Tool]]) -> None:
    """Have :func:`table` register ``loader()``'s tools, in order, on its first call."""
    with _load_lock:
        _loaders.append(loader)


def table() -> dict[str, Tool]:
    """Every tool, by name, in the contract's order (the loaders run first, once)."""
    if _loaders:
        with _load_lock:
            while _loaders:
                register(_loaders[0]())
                _loaders.pop(0)
    return _REGISTRY


def catalog() -> dict[str, JsonObject]:
    """Each tool's description and input schema (the payment gate's Bazaar metadata)."""
    return {
        name: {"description": tool.description, "inputSchema": tool.input_schema}
        for name, tool in table().items()
    }
