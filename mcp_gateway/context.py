"""What the gateway serves from: the root, state, config, models and policy.

One :class:`Context` per process. ``up`` and ``mcp_stdio`` build it from their
flags and :func:`install` it, so the background indexer and the tools share
one embedder (and so one in-memory dense index). Under a bare
``daphne dir2mcp_site.asgi:application`` deployment it is built lazily from
the environment (``DIR2MCP_ROOT``, ``DIR2MCP_STATE_DIR``, ``DIR2MCP_CONFIG``,
``DIR2MCP_AUTH``), so several daphne processes behind a proxy agree.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from django.conf import settings

from corpus import write_guard
from corpus.index.dense.choice import announce_embedder, choose_embedder
from corpus.providers.base import ChatModel, Embedder
from corpus.providers.registry import EmbedderChoice, live_choice, make_chat
from corpus.retrieval import Searcher
from corpus.security import ExclusionEngine
from corpus.status import recorded_embedder
from corpus.store import open_store
from kernel import errors
from kernel.config import Config, config_named, default_config_path, load_config
from kernel.jsontypes import JsonObject
from kernel.secrets import from_token_file, resolve_secret
from kernel.state import StateDir, ensure_token
from mcp_gateway import registry

if TYPE_CHECKING:  # imported when a server sells calls (payment_gate): x402 is slow to import
    from payments.gate import Gate

AUTH_ENV = "DIR2MCP_AUTH"


@dataclass(frozen=True)
class AuthSetup:
    """How clients authenticate: a bearer token and where it came from."""

    token: str | None = field(repr=False)
    # "secret.token" | "env" | "file" | "none" (spec §3.2 token_source)
    source: str
    token_file: str = ""

    @property
    def required(self) -> bool:
        return self.token is not None


def resolve_auth(spec: str, config: Config, state: StateDir, *, root: Path) -> AuthSetup:
    """Resolve ``--auth auto|none|file:<path>`` (spec §2.3, §10.6, §17).

    ``auto`` takes the token from ``security.auth.token_env`` (default
    ``DIR2MCP_AUTH_TOKEN``), then ``security.auth.token_file``, then the
    generated ``secret.token`` (created 0600 on first use).
    """
    spec = (spec or "auto").strip()
    if spec == "none":
        return AuthSetup(None, "none")
    if spec.startswith("file:"):
        raw = spec[len("file:") :]
        if not raw:
            raise errors.Dir2mcpError(
                errors.CONFIG_INVALID, "--auth file: needs a path, as file:/path/to/token"
            )
        path = Path(raw).expanduser()
        path = path if path.is_absolute() else (root / path)
        found = from_token_file("auth_token", path)
        if found is None:
            raise errors.Dir2mcpError(
                errors.CONFIG_INVALID,
                f"token file {path} is missing, unreadable or empty",
                hint="Write one token line to it (chmod 600), or use --auth auto.",
            )
        return AuthSetup(found.value, "file", str(path))
    if spec != "auto":
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID, f"--auth must be auto, none or file:<path>, not {spec!r}"
        )
    found = resolve_secret("auth_token", config, state, root=root)
    if found.source == "env":
        return AuthSetup(found.value, "env")
    if found.value and found.detail and Path(found.detail) != state.token_file:
        return AuthSetup(found.value, "file", found.detail)
    return AuthSetup(ensure_token(state), "secret.token", str(state.token_file))


class IndexerLaunch(Protocol):
    """How to start the indexing child: ``mcp_gateway.indexer_process.ChildLaunch``
    (a protocol here because that module imports this one)."""

    @property
    def state(self) -> StateDir: ...
    @property
    def nice(self) -> int: ...
    def argv(self) -> list[str]: ...
    def env(self) -> dict[str, str]: ...


class EmbedRate(Protocol):
    def per_second(self) -> float: ...


class RunningIndexer(Protocol):
    """The indexer ``up`` and ``mcp_stdio`` run: ``IndexerSupervisor`` (a child
    process) or ``IndexerThread`` (mcp_gateway/indexer_process.py)."""

    @property
    def rate(self) -> EmbedRate: ...
    def request_reindex(self, rel_paths: list[str], *, full: bool) -> bool: ...
    def embed_first(self, rel_paths: list[str]) -> bool: ...
    def describe(self) -> JsonObject: ...


@dataclass
class Context:
    """Everything a request needs; cheap to share across threads."""

    root: Path
    state: StateDir
    config: Config
    auth: AuthSetup
    # `up --read-only`: tools that would store anything (annotate's result,
    # transcribe's transcript) are refused with FORBIDDEN once installed.
    read_only: bool = False
    public: bool = False
    mcp_path: str = "/mcp"
    # The x402 gate (payments/gate.py) when tool calls are sold, else None.
    gate: Gate | None = None
    # How to start the indexing child (mcp_gateway.indexer_process.ChildLaunch),
    # and its supervisor once started (``up`` and ``mcp_stdio`` only).
    indexer_launch: IndexerLaunch | None = None
    indexer: RunningIndexer | None = None
    # Where this process's indexer runs: "process", "thread" or "none".
    indexer_mode: str = "none"
    _models: dict[str, Embedder | ChatModel | None] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _model(self, kind: str) -> Embedder | ChatModel | None:
        with self._lock:
            if kind not in self._models:
                if kind == "embedder":
                    embedder, choice = choose_embedder(self.config, self.state, secrets_lookup=self.secret)
                    announce_embedder(choice)
                    self._models[kind] = embedder
                else:
                    self._models[kind] = make_chat(self.config, secrets_lookup=self.secret)
            return self._models[kind]

    @property
    def embedder(self) -> Embedder | None:
        """The embedder, made once (None for lexical-only): the configured one,
        or the one the index was built with when they differ (see
        corpus.index.dense.choice.choose_embedder)."""
        return cast("Embedder | None", self._model("embedder"))  # _models holds each kind under its name

    def embedder_choice(self) -> EmbedderChoice:
        """How this process's embedder relates to the index's recorded one
        and the configured one, now (``stats``)."""
        return live_choice(
            self.config,
            secrets_lookup=self.secret,
            recorded=recorded_embedder(self.state),
            embedder=self.embedder,
        )

    @property
    def chat(self) -> ChatModel | None:
        """The configured chat model, made once (None: answers are search-only)."""
        return cast("ChatModel | None", self._model("chat"))  # _models holds each kind under its name

    def secret(self, name: str) -> str | None:
        return resolve_secret(name, self.config, self.state, root=self.root).value

    @cached_property
    def searcher(self) -> Searcher:
        return Searcher(self.state, self.config, self.embedder)

    @cached_property
    def engine(self) -> ExclusionEngine:
        return ExclusionEngine.from_config(self.root, self.config, state_dir=self.state.path)

    @property
    def allowed_origins(self) -> tuple[str, ...]:
        return tuple(self.config.security.allowed_origins)


def build(
    *,
    root: Path | None = None,
    state: StateDir | None = None,
    config: Config | None = None,
    auth_spec: str | None = None,
    **extra: Any,  # Any: Context's other fields, by name
) -> Context:
    """A context from explicit parts, falling back to settings and env.

    Models are made on first use, so building a context is cheap.
    """
    root = root or Path(settings.DIR2MCP_ROOT)
    state = state or StateDir(Path(settings.DIR2MCP_STATE_DIR))
    config = config or load_config(default_config_path(root), named=config_named())
    spec = auth_spec or default_auth_spec(config)
    extra.setdefault("mcp_path", config.server.mcp_path)
    return Context(
        root=root, state=state, config=config, auth=resolve_auth(spec, config, state, root=root), **extra
    )


def default_auth_spec(config: Config) -> str:
    """The auth spec when no flag names one: ``DIR2MCP_AUTH``, then ``security.auth``."""
    from_env = os.environ.get(AUTH_ENV, "").strip()
    if from_env:
        return from_env
    auth = config.security.auth
    if auth.mode == "file" and auth.token_file:
        return f"file:{auth.token_file}"
    return auth.mode


_current: Context | None = None
_build_lock = threading.Lock()


def get() -> Context:
    """The process's context, built from the environment on first use.

    A bare daphne process makes sure the store is migrated first; ``up``
    and ``mcp_stdio`` have done that before they install theirs.
    """
    global _current
    if _current is None:
        with _build_lock:
            if _current is None:
                ctx = build()
                open_store(ctx.state)
                ctx.gate = payment_gate(ctx)
                _current = ctx
    return _current


def payment_gate(ctx: Context, emit: Callable[[JsonObject], None] | None = None) -> Gate | None:
    """The x402 gate for ``ctx``'s configuration, or None when calls are free.

    ``x402.mode: required`` with an incomplete configuration raises
    CONFIG_INVALID; ``on`` with one serves free and warns (payments/gate.py).
    """
    if ctx.config.x402.mode == "off":
        return None
    from payments import gate  # x402 and its eth libraries take ~1.4 s to import: paid servers only

    return gate.from_config(ctx.config, ctx.state.path, emit=emit, tools=registry.catalog())


def peek() -> Context | None:
    """The installed context, without building one."""
    return _current


def mcp_path() -> str:
    """The endpoint path, known without touching the database (URLconf time)."""
    if _current is not None:
        return _current.mcp_path
    root = Path(settings.DIR2MCP_ROOT)
    return load_config(default_config_path(root), named=config_named()).server.mcp_path


#: why a read-only server refuses a tool's write (corpus.write_guard.check_writable)
READ_ONLY_REASON = "this server runs with --read-only (tools may not store results)"


def install(ctx: Context | None) -> None:
    """Make ``ctx`` the process's context (``None`` to forget it, in tests);
    a read-only one makes the store refuse every write but the indexer's."""
    global _current
    _current = ctx
    write_guard.refuse_writes(READ_ONLY_REASON if ctx is not None and ctx.read_only else None)
