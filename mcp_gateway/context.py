"""What the gateway serves from: the root, state, config, models and policy.

One :class:`Context` per process (:mod:`mcp_gateway.current` holds it). ``up``
and ``mcp_stdio`` build it from their flags and install it, so the background
indexer and the tools share one embedder (and so one in-memory dense index).
Under a bare ``daphne dir2mcp_site.asgi:application`` deployment it is built
lazily from the environment (``DIR2MCP_ROOT``, ``DIR2MCP_STATE_DIR``, ``DIR2MCP_CONFIG``,
``DIR2MCP_AUTH``), so several daphne processes behind a proxy agree.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict, Unpack, cast

from django.conf import settings

from corpus.index.dense.choice import announce_embedder, choose_embedder
from corpus.providers.base import ChatModel, Embedder
from corpus.providers.registry import EmbedderChoice, live_choice, make_chat
from corpus.screen import SecretBearing
from corpus.security import ExclusionEngine
from corpus.status import recorded_embedder
from kernel import errors
from kernel.config import Config, config_named, default_config_path, load_config
from kernel.jsontypes import JsonObject
from kernel.secrets import from_token_file, resolve_secret
from kernel.state import StateDir, ensure_token

if TYPE_CHECKING:  # imported when a server sells calls (payment_gate): x402 is slow to import
    from corpus.retrieval import Searcher
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
    def views_per_second(self) -> float: ...


class RunningIndexer(Protocol):
    """The indexer ``up`` and ``mcp_stdio`` run: ``IndexerSupervisor`` (a child
    process) or ``IndexerThread`` (mcp_gateway/indexer_process.py)."""

    @property
    def rate(self) -> EmbedRate: ...
    def request_reindex(self, rel_paths: list[str], *, full: bool) -> bool: ...
    def embed_first(self, rel_paths: list[str], *, again: bool = False) -> bool: ...
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
    # False while the store's integrity check has pages left to read (it
    # was cut short to serve sooner; ``up`` finishes it once serving).
    store_checked: bool = True
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
        # Retrieval brings numpy, hnswlib and the extractors (~0.1 CPU-s):
        # imported by the first search, not before the server's first answer.
        from corpus.retrieval import Searcher

        return Searcher(
            self.state,
            self.config,
            self.embedder,
            readable=self.readable,
            pinned=self.engine.pinned,
            holds_secret=self.engine.find_secret,
            prime=self.secret_bearing.prime,
        )

    @cached_property
    def engine(self) -> ExclusionEngine:
        engine = ExclusionEngine.from_config(self.root, self.config, state_dir=self.state.path)
        engine.stored_secret, engine.stored_prime = self.secret_bearing.holds, self.secret_bearing.prime
        return engine

    @cached_property
    def secret_bearing(self) -> SecretBearing:
        """Verdicts on the stored texts of the index's documents under this
        context's secret rules (the engine's)."""
        return SecretBearing(lambda text: self.engine.find_secret(text))  # the engine's, once it is made

    def readable(self, rel_path: str) -> bool:
        """Whether the rules as they are now let ``rel_path`` be read (the
        index may hold a file excluded since: see :class:`Searcher`), its
        stored text judged whole against the secret rules now: a credential
        two units hold together passed a screen of each (session 30)."""
        return self.engine.listed_reason(rel_path) is None

    @property
    def allowed_origins(self) -> tuple[str, ...]:
        return tuple(self.config.security.allowed_origins)


class ContextOptions(TypedDict, total=False):
    """The fields of :class:`Context` that :func:`build` takes by name."""

    read_only: bool
    public: bool
    mcp_path: str


def build(
    *,
    root: Path | None = None,
    state: StateDir | None = None,
    config: Config | None = None,
    auth_spec: str | None = None,
    models: dict[str, Embedder | ChatModel | None] | None = None,
    **extra: Unpack[ContextOptions],
) -> Context:
    """A context from explicit parts, falling back to settings and env.

    Models are made on first use (``models`` may give some made already),
    so building a context is cheap.
    """
    root = root or Path(settings.DIR2MCP_ROOT)
    state = state or StateDir(Path(settings.DIR2MCP_STATE_DIR))
    config = config or load_config(default_config_path(root), named=config_named())
    spec = auth_spec or default_auth_spec(config)
    extra.setdefault("mcp_path", config.server.mcp_path)
    auth = resolve_auth(spec, config, state, root=root)
    return Context(root=root, state=state, config=config, auth=auth, _models=dict(models or {}), **extra)


def default_auth_spec(config: Config) -> str:
    """The auth spec when no flag names one: ``DIR2MCP_AUTH``, then ``security.auth``."""
    from_env = os.environ.get(AUTH_ENV, "").strip()
    if from_env:
        return from_env
    auth = config.security.auth
    if auth.mode == "file" and auth.token_file:
        return f"file:{auth.token_file}"
    return auth.mode
