"""Credential resolution (spec §16.1.1): where each secret comes from.

A secret is looked up in this order, first hit wins:

1. an environment variable: the one a config value references
   (``api_key: ${MY_KEY}``), then the well-known name (``MISTRAL_API_KEY``,
   ``ELEVENLABS_API_KEY``, or ``security.auth.token_env`` for the bearer
   token), then a ``DIR2MCP_<SECTION>__API_KEY`` override holding a literal;
2. the OS keychain, when a real keyring backend is available;
3. files: a literal key written in the config, ``security.auth.token_file``,
   the dotenv file at ``secrets.file.path``, the state's ``secret.token``;
4. the session mapping (values typed at a prompt, never persisted).

``secrets.provider`` selects which *stores* are consulted: the keychain, the
dotenv secret file and the session (``auto`` = all of them). What the user
names directly — environment variables, a literal in the config, the bearer
token files of ``security.auth`` — is always honoured, so every prompted value
keeps an env/config equivalent (§2.5) and ``auth.mode`` alone governs the
token file.

Relative secret file paths (``secrets.file.path``,
``security.auth.token_file``) are relative to the root directory, so the
default ``.dir2mcp/secret.env`` sits next to the default state directory.

Values never leave a :class:`Secret` except through ``.value``: its repr,
:func:`redacted_config` and the snapshot show only where a value came from.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from kernel import errors, state_identity
from kernel.config import ENV_PREFIX, Config
from kernel.jsontypes import JsonObject
from kernel.state import StateDir, atomic_write

if TYPE_CHECKING:
    from keyring.backend import KeyringBackend

SECRET_NAMES = ("mistral_api_key", "elevenlabs_api_key", "auth_token")
SOURCES = ("env", "keychain", "file", "session", "unset")
STORES = ("keychain", "file", "env", "session")

# Config fields that hold (a reference to) each secret.
SECRET_FIELDS: dict[str, tuple[str, ...]] = {
    "mistral_api_key": ("mistral.api_key", "stt.mistral.api_key"),
    "elevenlabs_api_key": ("stt.elevenlabs.api_key",),
    "auth_token": (),
}
_WELL_KNOWN_ENV = {"mistral_api_key": "MISTRAL_API_KEY", "elevenlabs_api_key": "ELEVENLABS_API_KEY"}
_PROVIDER_STORES = {
    "auto": {"keychain", "file", "session"},
    "keychain": {"keychain"},
    "file": {"file"},
    "session": {"session"},
    "env": set(),
}
_REFERENCE_RE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


@dataclass(frozen=True)
class Secret:
    """A resolved secret and where it came from; the value is never shown."""

    name: str
    value: str | None = field(repr=False)
    source: str
    detail: str = ""

    def describe(self) -> str:
        """``<env:MISTRAL_API_KEY>``, ``<file:/abs/secret.env>``, ``<unset>``…"""
        return f"<{self.source}:{self.detail}>" if self.detail else f"<{self.source}>"

    def as_dict(self) -> dict[str, str]:
        return {"source": self.source, "detail": self.detail}


def env_reference(value: str) -> str | None:
    """The variable named by a ``${VAR}`` config value, else ``None``."""
    match = _REFERENCE_RE.match(value.strip())
    return match.group(1) if match else None


def _field_value(config: Config, dotted: str) -> str:
    node: object = config
    for part in dotted.split("."):
        node = getattr(node, part)
    assert isinstance(node, str), dotted  # SECRET_FIELDS names only str fields
    return node


def env_names(name: str, config: Config) -> list[str]:
    """Variables that may hold ``name``, most specific first."""
    if name == "auth_token":
        return [config.security.auth.token_env]
    names = [env_reference(_field_value(config, dotted)) for dotted in SECRET_FIELDS[name]]
    names.append(_WELL_KNOWN_ENV[name])
    return list(dict.fromkeys(n for n in names if n))


def _literal(value: str) -> bool:
    return bool(value.strip()) and env_reference(value) is None


def _resolve_path(raw: str, root: Path) -> Path:
    path = Path(raw).expanduser()
    return path if path.is_absolute() else root / path


def secret_file_path(config: Config, root: Path) -> Path:
    return _resolve_path(config.secrets.file.path, root)


def _file_mode(config: Config) -> int:
    raw = config.secrets.file.mode
    try:
        mode = int(raw, 8)
    except ValueError:
        mode = -1
    if mode < 0 or mode > 0o777 or mode & 0o077:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"secrets.file.mode {raw!r} must be an octal mode with no group or other access",
            hint="Use 0600 (or 0400).",
        )
    return mode


def read_secret_file(path: Path) -> str | None:
    """The text of a secret file, refusing one others can read; ``None`` if absent."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise errors.Dir2mcpError(errors.CONFIG_INVALID, f"cannot read secret file {path}: {exc}") from exc
    if mode & 0o077:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"secret file {path} has permissions {stat.S_IMODE(mode):04o}; it must not be readable "
            "by group or others",
            hint=f"Run: chmod 600 {path}",
        )
    return text


def parse_dotenv(text: str) -> dict[str, str]:
    """``KEY=value`` lines (``export`` and surrounding quotes allowed)."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        if not sep or line.startswith("#"):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values.setdefault(key.strip(), value)
    return values


def _keychain_reachable() -> bool:
    """Whether any OS keychain could answer, decided without importing
    keyring, whose backend discovery costs about 0.2 s of every start.

    On Linux and the BSDs the keychains (Secret Service, KWallet) live on
    the D-Bus session bus: with no bus address and no bus socket, and no
    keyring configuration naming another backend, there is none.
    """
    if sys.platform in ("darwin", "win32") or "keyring" in sys.modules:
        return True
    if os.environ.get("PYTHON_KEYRING_BACKEND") or os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        return True
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime, "bus").exists():
        return True
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home, "python_keyring", "keyringrc.cfg").exists()


def _keyring_backend() -> KeyringBackend | None:
    """The active keyring backend, or ``None`` when there is no usable one."""
    if not _keychain_reachable():
        return None
    try:
        import keyring
        from keyring.backends import fail

        backend = keyring.get_keyring()
        # The same viability rule keyring's own chainer applies: the fail
        # and null backends, and an empty chain, have priority <= 0.
        if isinstance(backend, fail.Keyring) or backend.priority <= 0:
            return None
        return backend
    except Exception:  # a broken backend (no D-Bus, locked store) means "no keychain"
        return None


def keychain_available() -> bool:
    return _keyring_backend() is not None


def keychain_entry(name: str, config: Config) -> tuple[str, str]:
    """The (service, username) pair a secret is stored under."""
    keychain = config.secrets.keychain
    return keychain.service, f"{keychain.account}/{name}"


def _from_env(name: str, config: Config, environ: Mapping[str, str]) -> Secret | None:
    for var in env_names(name, config):
        if environ.get(var):
            return Secret(name, environ[var], "env", var)
    for dotted in SECRET_FIELDS[name]:
        var = ENV_PREFIX + dotted.upper().replace(".", "__")
        if _literal(environ.get(var, "")):
            return Secret(name, environ[var].strip(), "env", var)
    return None


def _from_keychain(name: str, config: Config) -> Secret | None:
    backend = _keyring_backend()
    if backend is None:
        return None
    service, username = keychain_entry(name, config)
    try:
        value = backend.get_password(service, username)
    except Exception:  # keychain errors must degrade to the next source, never crash
        return None
    return Secret(name, value, "keychain", f"{service}/{username}") if value else None


def _from_config(name: str, config: Config, root: Path) -> Secret | None:
    for dotted in SECRET_FIELDS[name]:
        value = _field_value(config, dotted)
        if _literal(value):
            return Secret(name, value.strip(), "file", "config")
    if name == "auth_token" and config.security.auth.token_file:
        return from_token_file(name, _resolve_path(config.security.auth.token_file, root))
    return None


def _from_dotenv(name: str, config: Config, root: Path) -> Secret | None:
    path = secret_file_path(config, root)
    if path.parent.name == state_identity.STATE_DIRNAME:
        # the default place, <root>/.dir2mcp: one a repository ships is refused, not read
        state_identity.verify(path.parent)
    text = read_secret_file(path)
    if text is None:
        return None
    values = parse_dotenv(text)
    for var in env_names(name, config):
        if values.get(var):
            return Secret(name, values[var], "file", str(path))
    return None


def from_token_file(name: str, path: Path) -> Secret | None:
    text = read_secret_file(path)
    token = text.strip().splitlines()[0].strip() if text and text.strip() else ""
    return Secret(name, token, "file", str(path)) if token else None


def resolve_secret(
    name: str,
    config: Config,
    state: StateDir,
    *,
    session: Mapping[str, str] | None = None,
    environ: Mapping[str, str] = os.environ,
    root: Path | None = None,
) -> Secret:
    """Find ``name`` in the §16.1.1 order; ``source="unset"`` when nowhere.

    ``root`` anchors relative secret file paths; it defaults to the state
    directory's parent, which is the root in the default layout.
    """
    if name not in SECRET_FIELDS:
        raise ValueError(f"unknown secret {name!r}; expected one of {', '.join(SECRET_NAMES)}")
    root = root or state.path.parent
    stores = _PROVIDER_STORES[config.secrets.provider]
    found = _from_env(name, config, environ)
    if found is None and "keychain" in stores:
        found = _from_keychain(name, config)
    if found is None:
        found = _from_config(name, config, root)
    if found is None and "file" in stores:
        found = _from_dotenv(name, config, root)
    if found is None and name == "auth_token":
        state_identity.verify(state.path)  # a token in a state directory not made for this user is never read
        found = from_token_file(name, state.token_file)
    if found is None and "session" in stores and session and session.get(name):
        found = Secret(name, session[name], "session")
    return found or Secret(name, None, "unset")


def resolve_all(
    config: Config,
    state: StateDir,
    *,
    session: Mapping[str, str] | None = None,
    environ: Mapping[str, str] = os.environ,
    root: Path | None = None,
) -> dict[str, Secret]:
    """Every secret in :data:`SECRET_NAMES`, resolved with the same options."""
    return {
        name: resolve_secret(name, config, state, session=session, environ=environ, root=root)
        for name in SECRET_NAMES
    }


def _set_dotted(tree: JsonObject, dotted: str, value: str) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        tree = tree[part]
    tree[leaf] = value


def redacted_config(config: Config, secrets: Mapping[str, Secret]) -> JsonObject:
    """The config as plain data with every secret field replaced by its source."""
    data = config.model_dump(mode="json")
    for name, fields in SECRET_FIELDS.items():
        resolved = secrets.get(name) or Secret(name, None, "unset")
        for dotted in fields:
            value = _field_value(config, dotted)
            # A literal the resolver did not pick (an env var won) is still
            # never echoed: it is described by where it was written.
            if _literal(value) and resolved.value != value.strip():
                _set_dotted(data, dotted, "<file:config>")
            else:
                _set_dotted(data, dotted, resolved.describe())
    return data


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings (the system prompt) as ``|`` blocks."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_representer)


def dump_yaml(data: object) -> str:
    return yaml.dump(data, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True, width=10_000)


def write_snapshot(config: Config, secrets: Mapping[str, Secret], state: StateDir) -> None:
    """Write ``.dir2mcp.yaml.snapshot``: the redacted config plus secret sources."""
    data = redacted_config(config, secrets)
    data["secret_sources"] = {name: secret.as_dict() for name, secret in secrets.items()}
    atomic_write(state.snapshot, dump_yaml(data))


def _merge_dotenv(text: str, key: str, value: str) -> str:
    lines, replaced = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        if line.partition("=")[0].strip() == key and "=" in line and not line.startswith("#"):
            if not replaced:
                lines.append(f"{key}={value}")
            replaced = True
            continue
        lines.append(raw)
    if not replaced:
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def _store_in_file(name: str, value: str, config: Config, root: Path) -> Secret:
    path = secret_file_path(config, root)
    mode = _file_mode(config)
    try:
        existing = path.read_text(encoding="utf-8") if path.exists() else ""
        made = not path.parent.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        if (
            made and path.parent.name == state_identity.STATE_DIRNAME
        ):  # the default place: a state directory of the user's
            state_identity.verify(path.parent)
        atomic_write(path, _merge_dotenv(existing, env_names(name, config)[0], value), mode=mode)
    except OSError as exc:
        raise errors.Dir2mcpError(
            errors.STATE_NOT_WRITABLE, f"cannot write secret file {path}: {exc.strerror or exc}"
        ) from exc
    return Secret(name, value, "file", str(path))


def _store_in_keychain(name: str, value: str, config: Config) -> Secret:
    backend = _keyring_backend()
    service, username = keychain_entry(name, config)
    failure = "no keyring backend is available"
    if backend is not None:
        try:
            backend.set_password(service, username, value)
            failure = ""
        except Exception as exc:  # any backend failure is reported with the alternatives
            failure = f"the keyring backend failed ({type(exc).__name__})"
    if failure:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"cannot store {name} in the OS keychain: {failure}",
            hint="Choose another secret store: file, env or session.",
        )
    return Secret(name, value, "keychain", f"{service}/{username}")


def store_secret(
    name: str,
    value: str,
    config: Config,
    state: StateDir,
    *,
    provider: str,
    root: Path | None = None,
) -> Secret:
    """Persist ``value`` in the chosen store and return where it now lives.

    ``env`` and ``session`` store nothing: the caller tells the user which
    variable to export (``detail``), or keeps the value for this process.
    """
    if name not in SECRET_FIELDS:
        raise ValueError(f"unknown secret {name!r}")
    if not value or "\n" in value or "\r" in value:
        raise errors.Dir2mcpError(errors.INVALID_FIELD, f"{name} must be a single non-empty line")
    if provider == "keychain":
        return _store_in_keychain(name, value, config)
    if provider == "file":
        return _store_in_file(name, value, config, root or state.path.parent)
    if provider == "env":
        return Secret(name, value, "env", env_names(name, config)[0])
    if provider == "session":
        return Secret(name, value, "session")
    raise ValueError(f"unknown secret store {provider!r}; expected one of {', '.join(STORES)}")
