"""Secret resolution (spec §16.1.1): order, provider restrictions, file
permissions, storage, and that no value ever reaches printable output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import keyring
import keyring.errors
import pytest
import yaml
from keyring.backend import KeyringBackend
from keyring.backends import fail
from keyring.compat import properties

from kernel import errors
from kernel.config import build_config, env_overrides, load_config
from kernel.secrets import (
    Secret,
    keychain_available,
    parse_dotenv,
    redacted_config,
    resolve_all,
    resolve_secret,
    store_secret,
    write_snapshot,
)

KEYRING_FILE_ENV = "DIR2MCP_TEST_KEYRING_FILE"
SECRET = "sk-test-5f2c9a1e0b7d4c3a"


class JsonFileKeyring(KeyringBackend):
    """A working keyring backend that keeps entries in a JSON file.

    It is viable only when ``DIR2MCP_TEST_KEYRING_FILE`` is set, so keyring's
    own detection never picks it by accident; subprocesses select it with
    ``PYTHON_KEYRING_BACKEND=tests.test_secrets.JsonFileKeyring``.
    """

    @properties.classproperty
    def priority(cls) -> float:
        if not os.environ.get(KEYRING_FILE_ENV):
            raise RuntimeError(f"{KEYRING_FILE_ENV} is not set")
        return 1

    @property
    def path(self) -> Path:
        return Path(os.environ[KEYRING_FILE_ENV])

    def _entries(self) -> dict[str, str]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def get_password(self, service: str, username: str) -> str | None:
        return self._entries().get(f"{service}\0{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        entries = self._entries()
        entries[f"{service}\0{username}"] = password
        self.path.write_text(json.dumps(entries))

    def delete_password(self, service: str, username: str) -> None:
        entries = self._entries()
        entries.pop(f"{service}\0{username}", None)
        self.path.write_text(json.dumps(entries))


class LockedKeyring(KeyringBackend):
    """A backend whose store is locked: every call fails."""

    priority = 1

    def get_password(self, service: str, username: str) -> str | None:
        raise keyring.errors.KeyringLocked("locked")

    def set_password(self, service: str, username: str, password: str) -> None:
        raise keyring.errors.KeyringLocked("locked")

    def delete_password(self, service: str, username: str) -> None:
        raise keyring.errors.KeyringLocked("locked")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("DIR2MCP_") or name in {"MISTRAL_API_KEY", "ELEVENLABS_API_KEY"}:
            monkeypatch.delenv(name)


@pytest.fixture
def use_backend() -> Iterator:
    previous = keyring.get_keyring()

    def install(backend: KeyringBackend) -> KeyringBackend:
        keyring.set_keyring(backend)
        return backend

    yield install
    keyring.set_keyring(previous)


@pytest.fixture
def keychain(use_backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JsonFileKeyring:
    monkeypatch.setenv(KEYRING_FILE_ENV, str(tmp_path / "keyring.json"))
    return use_backend(JsonFileKeyring())


@pytest.fixture
def no_keychain(use_backend) -> None:
    use_backend(fail.Keyring())


@pytest.fixture
def root(corpus_dir: Path) -> Path:
    return corpus_dir


def config_for(file_data: dict | None = None, environ: dict | None = None):
    return build_config(file_data or {}, env_overrides(environ or {}), {})


def write_private(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


# -- order of sources ----------------------------------------------------------

ALL_SOURCES = {"env", "keychain", "dotenv", "session"}


@pytest.mark.parametrize(
    ("present", "expected_source", "expected_detail"),
    [
        pytest.param(ALL_SOURCES, "env", "MISTRAL_API_KEY", id="env-beats-everything"),
        pytest.param({"keychain", "dotenv", "session"}, "keychain", "dir2mcp/default/mistral_api_key",
                     id="keychain-beats-file"),
        pytest.param({"dotenv", "session"}, "file", "{root}/.dir2mcp/secret.env", id="file-beats-session"),
        pytest.param({"session"}, "session", "", id="session-last"),
        pytest.param(set(), "unset", "", id="nothing-set"),
    ],
)  # fmt: skip
def test_sources_are_consulted_in_spec_order(
    present, expected_source, expected_detail, keychain, root, root_state
):
    config = config_for()
    environ = {"MISTRAL_API_KEY": "from-env"} if "env" in present else {}
    if "keychain" in present:
        keychain.set_password("dir2mcp", "default/mistral_api_key", "from-keychain")
    if "dotenv" in present:
        write_private(root / ".dir2mcp/secret.env", "MISTRAL_API_KEY=from-file\n")
    session = {"mistral_api_key": "from-session"} if "session" in present else None

    secret = resolve_secret(
        "mistral_api_key", config, root_state, session=session, environ=environ, root=root
    )

    assert (secret.source, secret.detail) == (expected_source, expected_detail.format(root=root))
    assert secret.value == (None if expected_source == "unset" else f"from-{expected_source}")


def test_config_reference_names_the_variable_to_read(root_state):
    config = config_for({"mistral": {"api_key": "${WORK_MISTRAL_KEY}"}})
    environ = {"WORK_MISTRAL_KEY": "work", "MISTRAL_API_KEY": "home"}

    secret = resolve_secret("mistral_api_key", config, root_state, environ=environ)

    assert (secret.source, secret.detail, secret.value) == ("env", "WORK_MISTRAL_KEY", "work")


def test_unset_reference_falls_back_to_the_well_known_variable(root_state):
    config = config_for({"mistral": {"api_key": "${WORK_MISTRAL_KEY}"}})

    secret = resolve_secret("mistral_api_key", config, root_state, environ={"MISTRAL_API_KEY": "home"})

    assert (secret.detail, secret.value) == ("MISTRAL_API_KEY", "home")


def test_literal_in_the_config_file_is_a_file_source(no_keychain, root_state):
    config = config_for({"stt": {"elevenlabs": {"api_key": "el-literal"}}})

    secret = resolve_secret("elevenlabs_api_key", config, root_state, environ={})

    assert (secret.source, secret.detail, secret.value) == ("file", "config", "el-literal")


def test_literal_from_a_dir2mcp_env_override_is_an_env_source(no_keychain, root_state):
    environ = {"DIR2MCP_MISTRAL__API_KEY": "literal-from-env"}
    config = config_for(environ=environ)

    secret = resolve_secret("mistral_api_key", config, root_state, environ=environ)

    assert (secret.source, secret.detail) == ("env", "DIR2MCP_MISTRAL__API_KEY")


# -- secrets.provider ----------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "expected_source"),
    [
        pytest.param("auto", "keychain", id="auto-uses-all-stores"),
        pytest.param("keychain", "keychain", id="keychain-only"),
        pytest.param("file", "file", id="file-skips-keychain"),
        pytest.param("session", "session", id="session-skips-keychain-and-file"),
        pytest.param("env", "unset", id="env-skips-every-store"),
    ],
)
def test_provider_restricts_the_stores_consulted(provider, expected_source, keychain, root, root_state):
    config = config_for({"secrets": {"provider": provider}})
    keychain.set_password("dir2mcp", "default/mistral_api_key", "k")
    write_private(root / ".dir2mcp/secret.env", "MISTRAL_API_KEY=f\n")

    secret = resolve_secret(
        "mistral_api_key", config, root_state, session={"mistral_api_key": "s"}, environ={}
    )

    assert secret.source == expected_source


@pytest.mark.parametrize("provider", ["auto", "keychain", "file", "session", "env"])
def test_explicit_env_var_is_honoured_under_every_provider(provider, keychain, root_state):
    config = config_for({"secrets": {"provider": provider}})
    keychain.set_password("dir2mcp", "default/mistral_api_key", "k")

    secret = resolve_secret("mistral_api_key", config, root_state, environ={"MISTRAL_API_KEY": "e"})

    assert (secret.source, secret.value) == ("env", "e")


def test_keychain_entry_uses_configured_service_and_account(keychain, root_state):
    config = config_for({"secrets": {"keychain": {"service": "acme", "account": "ci"}}})
    keychain.set_password("acme", "ci/elevenlabs_api_key", "el")

    secret = resolve_secret("elevenlabs_api_key", config, root_state, environ={})

    assert (secret.source, secret.detail, secret.value) == ("keychain", "acme/ci/elevenlabs_api_key", "el")


# -- the bearer token ----------------------------------------------------------


def test_auth_token_reads_the_variable_named_by_token_env(no_keychain, root_state):
    config = config_for({"security": {"auth": {"token_env": "MY_TOKEN"}}})
    environ = {"MY_TOKEN": "tok", "DIR2MCP_AUTH_TOKEN": "default-var"}

    secret = resolve_secret("auth_token", config, root_state, environ=environ)

    assert (secret.source, secret.detail, secret.value) == ("env", "MY_TOKEN", "tok")


def test_auth_token_file_is_relative_to_root_and_beats_state_token(no_keychain, root, root_state):
    write_private(root / "tokens/mcp.token", "from-token-file\n")
    write_private(root_state.token_file, "from-state\n")
    config = config_for({"security": {"auth": {"mode": "file", "token_file": "tokens/mcp.token"}}})

    secret = resolve_secret("auth_token", config, root_state, environ={}, root=root)

    assert (secret.detail, secret.value) == (str(root / "tokens/mcp.token"), "from-token-file")


@pytest.mark.parametrize("provider", ["env", "keychain", "auto"])
def test_state_token_is_found_whatever_the_provider(provider, no_keychain, root_state):
    write_private(root_state.token_file, "generated\n")
    config = config_for({"secrets": {"provider": provider}})

    secret = resolve_secret("auth_token", config, root_state, environ={})

    assert (secret.source, secret.detail, secret.value) == ("file", str(root_state.token_file), "generated")


# -- file permissions ----------------------------------------------------------


@pytest.mark.parametrize(
    "which",
    [pytest.param("dotenv", id="secret-env"), pytest.param("token", id="auth-token-file")],
)
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_secret_file_readable_by_others_is_refused(which, mode, no_keychain, root, root_state):
    if which == "dotenv":
        name, path = (
            "mistral_api_key",
            write_private(root / ".dir2mcp/secret.env", "MISTRAL_API_KEY=x\n", mode),
        )
    else:
        name, path = "auth_token", write_private(root_state.token_file, "tok\n", mode)

    with pytest.raises(errors.Dir2mcpError) as caught:
        resolve_secret(name, config_for(), root_state, environ={}, root=root)

    assert caught.value.code == errors.CONFIG_INVALID
    assert caught.value.exit_code == 2
    assert str(path) in caught.value.message
    assert caught.value.hint == f"Run: chmod 600 {path}"


def test_read_only_secret_file_is_accepted(no_keychain, root, root_state):
    write_private(root / ".dir2mcp/secret.env", "MISTRAL_API_KEY=ro\n", 0o400)

    secret = resolve_secret("mistral_api_key", config_for(), root_state, environ={}, root=root)

    assert secret.value == "ro"


# -- keychain availability -----------------------------------------------------


def test_missing_keyring_backend_is_skipped_without_error(no_keychain, root_state):
    assert keychain_available() is False
    assert resolve_secret("mistral_api_key", config_for(), root_state, environ={}).source == "unset"


def test_failing_keyring_backend_is_skipped_without_error(use_backend, root_state):
    use_backend(LockedKeyring())

    secret = resolve_secret(
        "mistral_api_key", config_for(), root_state, environ={}, session={"mistral_api_key": "s"}
    )

    assert secret.source == "session"


def test_storing_in_an_unavailable_keychain_says_what_to_do(no_keychain, root_state):
    with pytest.raises(errors.Dir2mcpError) as caught:
        store_secret("mistral_api_key", SECRET, config_for(), root_state, provider="keychain")

    assert caught.value.code == errors.CONFIG_INVALID
    assert "file, env or session" in caught.value.hint
    assert SECRET not in str(caught.value) + caught.value.hint


# -- storing -------------------------------------------------------------------


def test_store_in_keychain_is_resolved_back(keychain, root_state):
    config = config_for()

    stored = store_secret("mistral_api_key", SECRET, config, root_state, provider="keychain")
    resolved = resolve_secret("mistral_api_key", config, root_state, environ={})

    assert stored.source == resolved.source == "keychain"
    assert resolved.value == SECRET


def test_store_in_file_writes_0600_and_merges_existing_lines(no_keychain, root, root_state):
    path = write_private(
        root / ".dir2mcp/secret.env", "# keys\nELEVENLABS_API_KEY=el\nexport MISTRAL_API_KEY=old\n"
    )
    config = config_for()

    stored = store_secret("mistral_api_key", SECRET, config, root_state, provider="file", root=root)

    assert stored.detail == str(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_text() == f"# keys\nELEVENLABS_API_KEY=el\nMISTRAL_API_KEY={SECRET}\n"
    assert resolve_secret("mistral_api_key", config, root_state, environ={}, root=root).value == SECRET
    assert resolve_secret("elevenlabs_api_key", config, root_state, environ={}, root=root).value == "el"


def test_store_in_file_creates_missing_directories_under_root(no_keychain, root, root_state):
    config = config_for({"secrets": {"file": {"path": "private/keys.env"}}})

    store_secret("elevenlabs_api_key", SECRET, config, root_state, provider="file", root=root)

    assert parse_dotenv((root / "private/keys.env").read_text()) == {"ELEVENLABS_API_KEY": SECRET}


def test_store_in_file_refuses_a_loose_configured_mode(root, root_state):
    config = config_for({"secrets": {"file": {"mode": "0644"}}})

    with pytest.raises(errors.Dir2mcpError) as caught:
        store_secret("mistral_api_key", SECRET, config, root_state, provider="file", root=root)

    assert caught.value.code == errors.CONFIG_INVALID
    assert not (root / ".dir2mcp/secret.env").exists()


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        pytest.param("env", ("env", "MISTRAL_API_KEY"), id="env-names-the-variable"),
        pytest.param("session", ("session", ""), id="session-keeps-it-in-memory"),
    ],
)
def test_env_and_session_stores_write_nothing(provider, expected, root, root_state):
    stored = store_secret("mistral_api_key", SECRET, config_for(), root_state, provider=provider, root=root)

    assert (stored.source, stored.detail) == expected
    # only the id root_state's directory got when it was made (kernel/state_identity.py)
    assert [p.name for p in root.rglob("*") if p.is_file()] == ["state.id"]


@pytest.mark.parametrize("value", ["", "two\nlines", "cr\rhere"])
def test_store_rejects_values_that_are_not_one_line(value, root_state):
    with pytest.raises(errors.Dir2mcpError):
        store_secret("mistral_api_key", value, config_for(), root_state, provider="session")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("A=1\nB=2\n", {"A": "1", "B": "2"}, id="plain"),
        pytest.param("export A=1\n", {"A": "1"}, id="export-prefix"),
        pytest.param("A=\"q v\"\nB='s'\n", {"A": "q v", "B": "s"}, id="quoted"),
        pytest.param("# A=1\n\nnot an assignment\n", {}, id="comments-and-junk"),
        pytest.param("A=x=y\n", {"A": "x=y"}, id="equals-in-value"),
        pytest.param("A=first\nA=second\n", {"A": "first"}, id="first-wins"),
    ],
)
def test_parse_dotenv(text, expected):
    assert parse_dotenv(text) == expected


# -- nothing printable holds a value -------------------------------------------


def test_secret_repr_never_shows_the_value():
    secret = Secret("mistral_api_key", SECRET, "env", "MISTRAL_API_KEY")

    assert SECRET not in repr(secret)
    assert secret.describe() == "<env:MISTRAL_API_KEY>"


def test_redacted_config_replaces_every_secret_field_with_its_source(keychain, root, root_state):
    keychain.set_password("dir2mcp", "default/elevenlabs_api_key", SECRET + "-el")
    config = config_for()
    secrets = resolve_all(config, root_state, environ={"MISTRAL_API_KEY": SECRET}, root=root)

    data = redacted_config(config, secrets)

    assert data["mistral"]["api_key"] == "<env:MISTRAL_API_KEY>"
    assert data["stt"]["mistral"]["api_key"] == "<env:MISTRAL_API_KEY>"
    assert data["stt"]["elevenlabs"]["api_key"] == "<keychain:dir2mcp/default/elevenlabs_api_key>"
    assert SECRET not in json.dumps(data)


def test_redacted_config_hides_a_literal_even_when_env_wins(no_keychain, root_state):
    config = config_for({"mistral": {"api_key": "literal-in-yaml"}})
    secrets = resolve_all(config, root_state, environ={"MISTRAL_API_KEY": "from-env"})

    data = redacted_config(config, secrets)

    assert data["mistral"]["api_key"] == "<file:config>"
    assert data["stt"]["mistral"]["api_key"] == "<env:MISTRAL_API_KEY>"
    assert "literal-in-yaml" not in json.dumps(data)


def test_snapshot_records_sources_and_no_values(no_keychain, root, root_state):
    write_private(root / ".dir2mcp/secret.env", f"ELEVENLABS_API_KEY={SECRET}-el\n")
    write_private(root_state.token_file, f"{SECRET}-tok\n")
    (root / ".dir2mcp.yaml").write_text(f"mistral:\n  api_key: {SECRET}\n")
    config = load_config(root / ".dir2mcp.yaml", environ={}, named=True)
    secrets = resolve_all(config, root_state, environ={}, root=root)

    write_snapshot(config, secrets, root_state)

    text = root_state.snapshot.read_text()
    assert SECRET not in text
    snapshot = yaml.safe_load(text)
    assert snapshot["secret_sources"] == {
        "mistral_api_key": {"source": "file", "detail": "config"},
        "elevenlabs_api_key": {"source": "file", "detail": str(root / ".dir2mcp/secret.env")},
        "auth_token": {"source": "file", "detail": str(root_state.token_file)},
    }
    assert snapshot["mistral"]["api_key"] == "<file:config>"
    assert snapshot["rag"]["k_default"] == 10


# -- start-up cost -------------------------------------------------------------

PROBE = (
    "import sys; from kernel import secrets; print(secrets.keychain_available(), 'keyring' in sys.modules)"
)


def probe_keychain(tmp_path: Path, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if "KEYRING" not in k and "DBUS" not in k}
    clean.pop("XDG_RUNTIME_DIR", None)
    clean.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"), **env)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=clean, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_without_a_session_bus_keyring_is_not_even_imported(tmp_path):
    assert probe_keychain(tmp_path) == "False False"


def test_a_configured_backend_is_still_asked(tmp_path):
    configured = probe_keychain(
        tmp_path,
        PYTHON_KEYRING_BACKEND="tests.test_secrets.JsonFileKeyring",
        DIR2MCP_TEST_KEYRING_FILE=str(tmp_path / "keyring.json"),
    )
    assert configured == "True True"
    (tmp_path / "config" / "python_keyring").mkdir(parents=True)
    (tmp_path / "config" / "python_keyring" / "keyringrc.cfg").write_text("[backend]\n")
    assert probe_keychain(tmp_path).endswith("True")  # keyring consulted: its file names a backend
