"""``subscriptions/listen`` (MCP 2026-07-28): one long-lived request whose
answer is the stream of change notifications it asked for.

The request's ``notifications`` filter may ask for
``resourcesListChanged`` (``notifications/resources/list_changed`` when files
are added or removed) and ``resourceSubscriptions`` (URIs of files whose
changes send ``notifications/resources/updated``). Each URI is screened as
``resources/read`` would screen it (``notify.subscribable``: outside the
root, excluded, secret-bearing or not indexed is refused); the
acknowledgment (``notifications/subscriptions/acknowledged``, always the
first message) lists what is honoured, leaving out the rest and the tool
and prompt lists, which do not change while the server runs.

The subscription is a sink of ``notify.HUB`` with its own
:class:`notify.LocalSubscriptions`: the same channel-layer fan-out as a
2025-11-25 session's stream (in memory in one process, Redis across
several), with nothing stored in the database. Every message carries the
subscription's id (the request's id) in ``_meta``. It ends when the client
closes the stream (HTTP) or cancels the request (stdio), or, gracefully,
with a result when the server stops.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings

from kernel import errors
from kernel.jsontypes import JsonObject
from mcp_gateway import notify, sessions
from mcp_gateway.context import Context
from mcp_gateway.modern import META_SERVER_INFO, server_info
from mcp_gateway.resources import ResourceError
from mcp_gateway.transport import Message

METHOD = "subscriptions/listen"
#: A subscription's id (its request's) is sent with each of its
#: notifications: at most this many characters of JSON. A 1 MB id made each
#: update 1 MB (session 28).
MAX_ID_CHARS = 256
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"


@dataclass
class Listen:
    """One open subscription: its id and what it honours."""

    id: object
    list_changed: bool
    local: notify.LocalSubscriptions = field(default_factory=notify.LocalSubscriptions)
    uris: list[str] = field(default_factory=list)

    @property
    def honored(self) -> JsonObject:
        out: JsonObject = {"resourcesListChanged": True} if self.list_changed else {}
        if self.uris:
            out["resourceSubscriptions"] = list(self.uris)
        return out


def max_open() -> int:
    """Subscriptions one HTTP process keeps open at once (``DIR2MCP_MAX_LISTENS``);
    one more is SERVER_BUSY: each holds a connection and a hub sink, and no
    session bounds them."""
    return int(getattr(settings, "DIR2MCP_MAX_LISTENS", 1000))


def _invalid(message: str) -> ResourceError:
    data = {"code": errors.INVALID_FIELD, "retryable": False}
    return ResourceError(errors.RPC_INVALID_PARAMS, message, data)


def open_listen(msg: Message, ctx: Context) -> Listen:
    """The subscription ``msg`` asks for; :class:`ResourceError` (-32602) for a
    malformed filter. Reads the database (a worker thread's call)."""
    if len(json.dumps(msg.id)) > MAX_ID_CHARS:
        raise _invalid(
            f"a subscription's id is sent with each of its notifications: at most {MAX_ID_CHARS} characters"
        )
    wanted = msg.params.get("notifications", {})
    if not isinstance(wanted, dict):
        raise _invalid("params.notifications must be an object")
    uris = wanted.get("resourceSubscriptions", [])
    if not isinstance(uris, list) or not all(isinstance(uri, str) for uri in uris):
        raise _invalid("params.notifications.resourceSubscriptions must be a list of URIs")
    if len(uris) > sessions.MAX_SUBSCRIPTIONS:
        raise _invalid(f"at most {sessions.MAX_SUBSCRIPTIONS} resource subscriptions a request")
    listen = Listen(msg.id, wanted.get("resourcesListChanged") is True)
    for uri in dict.fromkeys(uris):
        if len(uri) > notify.MAX_URI_CHARS:
            continue
        try:
            listen.local.add(uri, notify.subscribable(ctx, uri))
        except ResourceError:
            continue  # not a file this client may read: not honoured, left out of the acknowledgment
        except sessions.TooManySpellings as exc:  # the whole request: a cut list would hide which were kept
            data = {"code": errors.INVALID_RANGE, "retryable": False}
            raise ResourceError(
                errors.RPC_INVALID_PARAMS, f"{exc.message()} in one subscription", data
            ) from None
        listen.uris.append(uri)
    return listen


def tagged(notification: JsonObject, subscription_id: object) -> JsonObject:
    params = dict(notification.get("params") or {})
    params["_meta"] = {**(params.get("_meta") or {}), META_SUBSCRIPTION: subscription_id}
    return {**notification, "params": params}


def acknowledged(listen: Listen) -> JsonObject:
    note = {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged"}
    return tagged(note | {"params": {"notifications": listen.honored}}, listen.id)


def closing(listen: Listen) -> JsonObject:
    """The result that ends a subscription the server closes."""
    meta = {META_SUBSCRIPTION: listen.id, META_SERVER_INFO: server_info()}
    return {"jsonrpc": "2.0", "id": listen.id, "result": {"resultType": "complete", "_meta": meta}}


class Sink:
    """``notify.Sink`` of one subscription: what it asked for, tagged, to
    ``deliver``; ``on_close`` when the hub ends it."""

    def __init__(
        self, listen: Listen, deliver: Callable[[JsonObject], object], on_close: Callable[[], object]
    ) -> None:
        self.listen, self._deliver, self._on_close = listen, deliver, on_close

    def send(self, notification: JsonObject) -> None:
        if notification.get("method") == notify.LIST_CHANGED["method"] and not self.listen.list_changed:
            return
        self._deliver(tagged(notification, self.listen.id))

    def close(self) -> None:
        self._on_close()
