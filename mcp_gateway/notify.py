"""Live resource notifications: from the indexer's changes to every session that should hear.

The indexer says which documents it (re)wrote or tombstoned through its
reporter (``Reporter.documents_changed``), from its child process over the
pipe or from its thread. :class:`ChangeAnnouncer` sits on the server's
reporter and hands each batch to :func:`announce`, which sends one message
to the corpus's group on the channel layer (``settings.CHANNEL_LAYERS``):
``InMemoryChannelLayer`` within one process, ``channels_redis``' pub/sub
layer across every process that serves the corpus when Redis is configured
(docs/scaling.md). Every serving process (daphne under ``up``, ``mcp_stdio``)
runs one :class:`Hub`: a listener on the group, on an event loop of its own
in a daemon thread, and a delivery thread that debounces per file and turns
the changes into MCP notifications for the sessions it holds a stream for:

- ``notifications/resources/updated`` {uri} for each subscription (stored
  per session in the database, so a subscription made through any process
  counts) to a file that was (re)indexed or tombstoned;
- ``notifications/resources/list_changed`` to every stream when files were
  added or removed.

A file saved ten times in a second gives at most two ``updated`` (the first
at once, the rest folded into one at the end of :data:`DEBOUNCE_SECONDS`).
``resources/subscribe`` and ``unsubscribe`` are answered here too.

The same group carries asks the other way: a process that does not index
(a serving-only daphne beside the ``up`` that does, on another machine or
not) sends the files its clients searched or opened (:meth:`Hub.ask`), and
the process whose indexer embeds (:meth:`Hub.take_asks`) embeds them first,
as it does for its own clients (issue #17, docs/scaling.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol

from channels.layers import BaseChannelLayer, get_channel_layer
from django.conf import settings
from django.db import close_old_connections

from corpus import uris
from corpus.events import Reporter
from corpus.models import DocStatus, Document
from kernel import errors
from kernel.jsontypes import JsonObject
from mcp_gateway import sessions
from mcp_gateway.context import Context
from mcp_gateway.resources import ResourceError, refuse_if_sold
from mcp_gateway.transport import Message

log = logging.getLogger(__name__)

METHODS = frozenset({"resources/subscribe", "resources/unsubscribe"})
#: Changes of one file within this window after a notification make one more, at its end.
DEBOUNCE_SECONDS = 1.0
#: Messages from the layer waiting for the delivery thread; past this they are
#: dropped and every stream is told ``list_changed`` instead.
INBOX_MAX = 10_000
#: The listener renews its group membership this often (the in-memory
#: layer forgets a member after a day).
REJOIN_SECONDS = 3600.0
#: the longest a new subscription waits for this process to join the fan-out group
READY_SECONDS = 5.0
#: how often a waiting subscription looks whether the group was joined or given up on
READY_POLL_SECONDS = 0.05

#: The longest URI a subscription stores (McpSubscription.uri).
MAX_URI_CHARS = 2048

CHANGED = "dir2mcp.changed"  # the layer's message types (channels routes on "type")
ENDED = "dir2mcp.session_ended"
ASKED = "dir2mcp.embed_first"

#: Paths one ask carries (a search's hits, an opened file); more are dropped.
ASK_PATHS_MAX = 64
#: The longest path an ask carries (longer ones are no file of the corpus).
ASK_PATH_CHARS = 4096
#: Paths a process remembers having asked for lately: asked again, they are
#: not sent again (unless opened: ``again``).
ASKED_RECENT = 256


def updated(uri: str) -> JsonObject:
    return {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}


LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}


def group_name() -> str:
    """The corpus's group: processes on one database share it, and two
    corpora on one Redis (whose pub/sub ignores the database number) never
    hear each other's file names."""
    db = settings.DATABASES["default"]
    identity = "|".join(str(db.get(key, "")) for key in ("ENGINE", "HOST", "PORT", "NAME"))
    return "dir2mcp-resources-" + hashlib.sha256(identity.encode()).hexdigest()[:20]


# -- where changes come from ---------------------------------------------------------


#: What the debouncer holds back: ``("path", rel_path)`` or ``"list"``.
_Key = tuple[str, str] | str


class ChangeAnnouncer(Reporter):
    """The indexer's reporter under a server: everything goes to ``inner``,
    and the documents it changed to :func:`announce`. A Reporter (the
    indexer takes one) whose every call is forwarded; it writes nothing itself."""

    def __init__(self, inner: Reporter) -> None:  # no super().__init__(): nothing is written here
        self._inner = inner

    def __getattr__(self, name: str) -> object:  # whatever the wrapped reporter has (stream, ...)
        return getattr(self._inner, name)

    def event(self, event: str, data: JsonObject | None = None, *, level: str = "info") -> None:
        self._inner.event(event, data, level=level)

    def say(self, text: str) -> None:
        self._inner.say(text)

    def warn(self, text: str, **data: object) -> None:
        self._inner.warn(text, **data)

    def file_error(self, rel_path: str, code: str, message: str) -> None:
        self._inner.file_error(rel_path, code, message)

    def progress(self, counters: dict[str, int], *, final: bool = False, running: bool = True) -> None:
        self._inner.progress(counters, final=final, running=running)

    def documents_changed(self, rel_paths: list[str], *, listing: bool = False) -> None:
        announce(rel_paths, listing=listing)


def announce(rel_paths: Iterable[str], *, listing: bool) -> None:
    """Tell every process serving this corpus that these documents changed
    (``listing``: the set of documents changed too). Never blocks, never raises."""
    paths = [p for p in rel_paths if isinstance(p, str)]
    if paths or listing:
        HUB.publish({"type": CHANGED, "paths": paths, "listing": bool(listing)})


def session_ended(session_id: str) -> None:
    """A DELETE: the process holding the session's stream ends it."""
    HUB.publish({"type": ENDED, "session": session_id})


# -- where notifications go ----------------------------------------------------------


class Sink(Protocol):
    """A session's way to the client: a GET stream (standalone.Outbox) or stdio."""

    def send(self, notification: JsonObject) -> None: ...

    def close(self) -> None: ...


class LocalSubscriptions:
    """The subscriptions of a session that is not in the database (stdio's one session)."""

    def __init__(self) -> None:
        self._by_uri: dict[str, str] = {}
        self._lock = threading.Lock()

    def add(self, uri: str, rel_path: str) -> None:
        with self._lock:
            if uri in self._by_uri:
                return
            if len(self._by_uri) >= sessions.MAX_SUBSCRIPTIONS:
                raise sessions.TooManySubscriptions()
            if sum(rel == rel_path for rel in self._by_uri.values()) >= sessions.MAX_SPELLINGS:
                raise sessions.TooManySpellings(rel_path)
            self._by_uri[uri] = rel_path

    def remove(self, uri: str) -> None:
        with self._lock:
            self._by_uri.pop(uri, None)

    def uris_for(self, rel_paths: set[str]) -> list[str]:
        with self._lock:
            return [uri for uri, rel in self._by_uri.items() if rel in rel_paths]


#: stdio's session (there is one per process).
LOCAL = LocalSubscriptions()


class _Debouncer:
    """Per key, the first change passes at once; further ones within ``window``
    are held and pass once, at the window's end."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._last: dict[_Key, float] = {}
        self._held: dict[_Key, float] = {}

    def offer(self, key: _Key, now: float) -> bool:
        last = self._last.get(key)
        if last is None or now - last >= self.window:
            self._last[key] = now
            return True
        self._held.setdefault(key, last + self.window)
        return False

    def due(self, now: float) -> list[_Key]:
        ready = [key for key, at in self._held.items() if at <= now]
        for key in ready:
            del self._held[key]
            self._last[key] = now
        if len(self._last) > 1000:  # forget keys whose window has passed
            self._last = {k: t for k, t in self._last.items() if now - t < self.window or k in self._held}
        return ready

    def wait(self, now: float) -> float | None:
        return max(0.0, min(self._held.values()) - now) if self._held else None


class Asks(Protocol):
    """Where this process takes asks to embed files first (``RunningIndexer.embed_first``)."""

    def __call__(self, rel_paths: list[str], *, again: bool = False) -> bool: ...


class Hub:
    """This process's end of the fan-out: the group listener and the sinks it feeds."""

    def __init__(
        self, debounce: float = DEBOUNCE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock = clock  # the debounce window's clock
        self._lock = threading.Lock()
        self._sinks: dict[str, tuple[Sink, LocalSubscriptions | None]] = {}
        self._inbox: queue.Queue[JsonObject] = queue.Queue(maxsize=INBOX_MAX)
        self._overflow = threading.Event()
        self._debounce = _Debouncer(debounce)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._group = ""
        self.listening = threading.Event()
        #: set while the layer is known to be away: a failed attempt to join
        #: the group, or a wait for it that ran out (see ready())
        self.away = threading.Event()
        self._asks: Asks | None = None
        self._asked: deque[str] = deque(maxlen=ASKED_RECENT)

    # -- lifecycle --

    def start(self) -> None:
        """Start the listener and the delivery thread once (daemon threads:
        they never hold up the process's exit)."""
        with self._lock:
            if self._loop is not None:
                return
            self._group = group_name()
            self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._run_loop, name="dir2mcp-notify-listen", daemon=True).start()
        threading.Thread(target=self._deliver, name="dir2mcp-notify-deliver", daemon=True).start()

    def _run_loop(self) -> None:
        loop = self._loop
        assert loop is not None  # start() made it before starting this thread
        asyncio.set_event_loop(loop)
        loop.run_until_complete(self._listen())

    async def _listen(self) -> None:
        layer = get_channel_layer()
        backoff = 0.5
        while True:
            try:
                channel = await layer.new_channel()
                await self._receive(layer, channel)
            except Exception as exc:  # Redis away: retry; nothing else depends on this
                self.listening.clear()
                self.away.set()
                log.warning("resource notifications: listening failed (%s); retrying in %gs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    async def _receive(self, layer: BaseChannelLayer, channel: str) -> None:
        while True:
            await layer.group_add(self._group, channel)
            self.listening.set()
            self.away.clear()
            rejoin = asyncio.get_running_loop().time() + REJOIN_SECONDS
            while (left := rejoin - asyncio.get_running_loop().time()) > 0:
                try:
                    message = await asyncio.wait_for(layer.receive(channel), left)
                except TimeoutError:
                    break
                try:
                    self._inbox.put_nowait(message)
                except queue.Full:
                    self._overflow.set()

    def ready(self, timeout: float = READY_SECONDS) -> bool:
        """Wait (at most ``timeout``) until this process is in the fan-out
        group: a subscription acknowledged before then could miss a change
        published meanwhile by another process. False when it is not (the
        channel layer is away: the stream still opens, and hears once it is).

        Once the layer is known to be away (an attempt to join failed, or a
        wait ran out), False at once until it is back: with Redis down each
        subscription held a thread for the whole ``timeout`` (session 26).
        Blocks its thread: a server awaits :meth:`joined` instead."""
        self.start()
        deadline = time.monotonic() + timeout
        while not self.listening.is_set():
            left = deadline - time.monotonic()
            if self.away.is_set() or left <= 0:
                self.away.set()
                return False
            self.listening.wait(min(left, READY_POLL_SECONDS))
        return True

    async def joined(self, timeout: float = READY_SECONDS) -> bool:
        """:meth:`ready` for the event loop, holding no thread while it waits:
        ``asyncio.to_thread(ready)`` held one of the loop's few shared
        threads for up to ``timeout`` per subscription while Redis was away,
        and every other client's lookups and lists waited behind them."""
        self.start()
        deadline = time.monotonic() + timeout
        while not self.listening.is_set():
            if self.away.is_set() or time.monotonic() >= deadline:
                self.away.set()
                return False
            await asyncio.sleep(READY_POLL_SECONDS)
        return True

    def publish(self, message: JsonObject) -> None:
        self.start()
        assert self._loop is not None  # start() made it
        future = asyncio.run_coroutine_threadsafe(self._send(message), self._loop)
        future.add_done_callback(_report_failure)

    async def _send(self, message: JsonObject) -> None:
        await get_channel_layer().group_send(self._group, message)

    # -- embed-first asks --

    def take_asks(self, handler: Asks) -> None:
        """This process embeds: ``handler(rel_paths, again)`` gets the files
        other processes' clients asked about (``RunningIndexer.embed_first``)."""
        self._asks = handler
        if cross_process():  # else no other process can ask: no listener needed for it
            self.start()

    def ask(self, rel_paths: Iterable[str], *, again: bool = False) -> None:
        """This process does not embed: ask the one that does, through the
        layer, to embed these files first. Only where the layer reaches other
        processes (Redis); a path asked lately is not sent again unless
        ``again`` (a file opened moves up). Never blocks, never raises."""
        if not cross_process():
            return
        with self._lock:
            fresh = [p for p in dict.fromkeys(rel_paths) if again or p not in self._asked]
            self._asked.extend(p for p in fresh if p not in self._asked)
        if fresh:
            self.publish({"type": ASKED, "paths": fresh[:ASK_PATHS_MAX], "again": again})

    # -- sinks --

    def attach(self, key: str, sink: Sink, local: LocalSubscriptions | None = None) -> None:
        """Deliver to ``sink`` the notifications of session ``key`` (its
        subscriptions in the database, or in ``local``)."""
        self.start()
        with self._lock:
            self._sinks[key] = (sink, local)

    def detach(self, key: str, sink: Sink) -> None:
        with self._lock:
            if self._sinks.get(key, (None,))[0] is sink:
                del self._sinks[key]

    def sink(self, key: str) -> Sink | None:
        with self._lock:
            entry = self._sinks.get(key)
        return entry[0] if entry else None

    # -- delivery --

    def _deliver(self) -> None:
        while True:
            try:
                message = self._inbox.get(timeout=self._debounce.wait(self._clock()))
            except queue.Empty:
                message = None
            try:
                self._take(message)
            except Exception:  # the database away, a bug: the next message tries again
                log.exception("resource notifications: delivery failed")
            finally:
                close_old_connections()

    def _take(self, message: JsonObject | None) -> None:
        now = self._clock()
        paths, listing = set(), self._overflow.is_set()
        self._overflow.clear()
        if message and message.get("type") == ENDED:
            sink = self.sink(str(message.get("session")))
            if sink is not None:
                sink.close()
        elif message and message.get("type") == ASKED:
            self._asked_here(message)
        elif message and message.get("type") == CHANGED:
            paths = {p for p in message.get("paths", ()) if self._debounce.offer(("path", p), now)}
            listing = listing or (bool(message.get("listing")) and self._debounce.offer("list", now))
        for key in self._debounce.due(now):
            if key == "list":
                listing = True
            else:
                paths.add(key[1])
        if paths or listing:
            self._fan_out(paths, listing)

    def _asked_here(self, message: JsonObject) -> None:
        handler, paths = self._asks, message.get("paths")
        if handler is None or not isinstance(paths, list):
            return
        wanted = [p for p in paths[:ASK_PATHS_MAX] if isinstance(p, str) and 0 < len(p) <= ASK_PATH_CHARS]
        if wanted:
            handler(wanted, again=message.get("again") is True)

    def _fan_out(self, paths: set[str], listing: bool) -> None:
        with self._lock:
            sinks = dict(self._sinks)
        if not sinks:
            return
        if paths:
            for key, uri in self._subscribed(sinks, paths):
                sinks[key][0].send(updated(uri))
        if listing:
            for sink, _ in sinks.values():
                sink.send(LIST_CHANGED)

    @staticmethod
    def _subscribed(sinks: JsonObject, paths: set[str]) -> list[tuple[str, str]]:
        found = [(key, uri) for key, (_, local) in sinks.items() if local for uri in local.uris_for(paths)]
        stored = [key for key, (_, local) in sinks.items() if local is None]
        if stored:
            found += sessions.subscribers(stored, sorted(paths))
        return found


def cross_process() -> bool:
    """Whether the channel layer reaches other processes (Redis), not only this one."""
    return settings.CHANNEL_LAYERS["default"]["BACKEND"] != "channels.layers.InMemoryChannelLayer"


def _report_failure(future: concurrent.futures.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("resource notifications: cannot announce a change: %s", future.exception())


HUB = Hub()


# -- resources/subscribe and resources/unsubscribe ------------------------------------


def respond(msg: Message, session_id: str | None, ctx: Context) -> JsonObject:
    """The result of a subscription method; :class:`ResourceError` otherwise.
    ``session_id`` None is stdio's session (:data:`LOCAL`), which waits here
    for the fan-out group; an HTTP session's caller awaits :meth:`Hub.joined`
    off the write lane (whose two threads every ``initialize`` needs)."""
    uri = msg.params.get("uri")
    if not isinstance(uri, str) or not uri:
        raise ResourceError(
            errors.RPC_INVALID_PARAMS, "params.uri (a string) is required", _data(errors.MISSING_FIELD)
        )
    if len(uri) > MAX_URI_CHARS:
        raise ResourceError(
            errors.RPC_INVALID_PARAMS,
            f"a subscribed URI is at most {MAX_URI_CHARS} characters",
            _data(errors.INVALID_FIELD),
        )
    if msg.method == "resources/unsubscribe":
        if session_id is None:
            LOCAL.remove(uri)
        else:
            sessions.unsubscribe(session_id, uri)
        return {}
    rel = subscribable(ctx, uri)
    try:
        if session_id is None:
            LOCAL.add(uri, rel)
        else:
            sessions.subscribe(session_id, uri, rel)
    except sessions.TooManySubscriptions:
        raise ResourceError(
            errors.RPC_INVALID_PARAMS,
            f"a session holds at most {sessions.MAX_SUBSCRIPTIONS} subscriptions; unsubscribe some first",
            _data(errors.INVALID_RANGE),
        ) from None
    except sessions.TooManySpellings as exc:
        raise ResourceError(
            errors.RPC_INVALID_PARAMS, f"{exc.message()}; unsubscribe one first", _data(errors.INVALID_RANGE)
        ) from None
    # Acknowledged once this process is in the fan-out group (at most
    # READY_SECONDS), as subscriptions/listen is: a change another process
    # indexes right after the acknowledgment must reach this session's stream.
    if session_id is None:
        HUB.ready()
    return {}


def subscribable(ctx: Context, uri: str) -> str:
    """The rel_path of the indexed, readable file ``uri`` names; the refusals
    of ``resources/read`` otherwise (-32002 for anything outside the root,
    excluded, secret-bearing or not indexed).

    While x402 prices ``list_files``, every URI is refused (``FORBIDDEN``)
    before it is looked at: the answer told an indexed file from a readable
    one that is not, and a file on disk from a made-up name, which is what
    ``list_files`` sells, and no payment reaches a subscription (session 28;
    docs/payments.md). A ``subscriptions/listen`` then honours
    ``resourcesListChanged`` alone; ``resources/unsubscribe`` stays free."""
    refuse_if_sold(ctx, "dir2mcp.list_files", "file names")
    try:
        rel_path, _span = uris.parse(uri)
        rel = ctx.engine.resolve(rel_path).rel  # the one resolver: outside the root, excluded, gone
        doc = Document.objects.filter(rel_path=rel, deleted=False).first()
        secret = doc is not None and doc.status == DocStatus.SKIPPED and _secret(doc.error)
        # its stored text judged too, as every listing does: one a secret
        # pattern added since indexing makes secret-bearing is named by none
        if doc is None or secret or ctx.engine.listed_reason(rel) is not None:
            raise errors.Dir2mcpError(errors.FILE_NOT_FOUND, f"{rel} is not an indexed file")
        return rel
    except uris.BadUri as exc:  # as resources/read: another scheme names nothing here
        rpc_code = errors.RPC_INVALID_PARAMS if uri.startswith(uris.PREFIX) else errors.RPC_RESOURCE_NOT_FOUND
        raise ResourceError(rpc_code, str(exc), _data(errors.INVALID_FIELD, uri=uri[:1000])) from None
    except errors.Dir2mcpError as exc:
        raise ResourceError.of(exc, uri) from None


def _secret(error: str | None) -> bool:
    return (error or "").startswith(errors.SECRET_DETECTED)


def _data(code: str, **extra: object) -> JsonObject:
    return {"code": code, "retryable": False, **extra}
