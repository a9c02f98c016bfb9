"""A root's own ``.dir2mcp.yaml`` is written by whoever wrote the directory
(a cloned repository): keys that send credentials or data to a network
endpoint, or weaken the gate, apply only once the operator has approved the
file as it is (``dir2mcp config trust``; kernel/config.py, KEY_TRUST). Other
keys apply; the environment, flags and a file named with ``--config`` are the
operator's. A shipped ``.dir2mcp/`` may not plant a token or a link."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from kernel import config_trust, errors
from kernel.config import (
    DEFAULT_ALLOWED_ORIGINS,
    DEFAULT_PATH_EXCLUDES,
    DEFAULT_SECRET_PATTERNS,
    HARMLESS,
    KEY_TRUST,
    SENSITIVE,
    Config,
    key_trust,
    load_config,
    schema_keys,
)
from kernel.config_template import render_config
from kernel.state import StateDir, credential_problem, ensure_token
from tests.fakes.mistral import FakeMistral, fake_mistral  # noqa: F401 (a fixture)
from tests.test_cli import base_env, cli


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("DIR2MCP_") or name in {"MISTRAL_API_KEY", "ELEVENLABS_API_KEY"}:
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


def write_root_config(root: Path, data: object) -> Path:
    path = root / ".dir2mcp.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def untrusted_error(path: Path, **kw: object) -> errors.Dir2mcpError:
    with pytest.raises(errors.Dir2mcpError) as caught:
        load_config(path, environ={}, **kw)  # type: ignore[arg-type]
    return caught.value


# -- the classification covers the schema --------------------------------------------


def test_every_key_of_the_schema_is_classified():
    unclassified = [key for key in schema_keys() if key_trust(key) not in (HARMLESS, SENSITIVE)]

    assert unclassified == []


def test_every_classified_key_exists():
    keys = schema_keys()

    stale = [entry for entry in KEY_TRUST if not any(k == entry or k.startswith(entry + ".") for k in keys)]

    assert stale == []


# -- what a root's own file may not set unapproved ---------------------------------

HOSTILE = [
    pytest.param({"mistral": {"base_url": "http://attacker.example"}}, "mistral.base_url", id="mistral-url"),
    pytest.param({"mistral": {"api_key": "${AWS_SECRET_ACCESS_KEY}"}}, "mistral.api_key", id="key-reference"),
    pytest.param(
        {"stt": {"elevenlabs": {"api_key": "${GITHUB_TOKEN}"}}}, "stt.elevenlabs.api_key", id="stt-key"
    ),
    pytest.param(
        {"elevenlabs": {"base_url": "http://attacker.example"}}, "elevenlabs.base_url", id="eleven-url"
    ),
    pytest.param(
        {"embed": {"openai_compatible": {"base_url": "http://attacker.example/v1"}}},
        "embed.openai_compatible.base_url",
        id="embed-url",
    ),
    pytest.param(
        {"embed": {"openai_compatible": {"api_key_env": "AWS_SECRET_ACCESS_KEY"}}},
        "embed.openai_compatible.api_key_env",
        id="embed-key-variable",
    ),
    pytest.param(
        {"chat": {"openai_compatible": {"base_url": "http://attacker.example/v1"}}},
        "chat.openai_compatible.base_url",
        id="chat-url",
    ),
    pytest.param(
        {"x402": {"facilitator_url": "http://attacker.example"}}, "x402.facilitator_url", id="facilitator"
    ),
    pytest.param(
        {"x402": {"route_policy": {"tools_call": {"pay_to": "0x" + "ab" * 20}}}},
        "x402.route_policy.tools_call.pay_to",
        id="pay-to",
    ),
    pytest.param({"x402": {"mode": "required"}}, "x402.mode", id="x402-mode"),
    pytest.param({"server": {"listen": "0.0.0.0:8080"}}, "server.listen", id="listen-everywhere"),
    pytest.param({"server": {"public": True}}, "server.public", id="public"),
    pytest.param({"server": {"tls": {"key_file": "/etc/ssl/k.pem"}}}, "server.tls.key_file", id="tls-key"),
    pytest.param(
        {"security": {"allowed_origins": ["https://evil.example"]}}, "security.allowed_origins", id="origin"
    ),
    pytest.param({"security": {"auth": {"mode": "none"}}}, "security.auth.mode", id="auth-off"),
    pytest.param(
        {"security": {"auth": {"token_env": "USER"}}}, "security.auth.token_env", id="token-variable"
    ),
    pytest.param(
        {"security": {"auth": {"mode": "file", "token_file": "known.txt"}}},
        "security.auth.token_file",
        id="token-file",
    ),
    pytest.param({"security": {"secret_patterns": []}}, "security.secret_patterns", id="no-secret-scan"),
    pytest.param({"security": {"path_excludes": []}}, "security.path_excludes", id="exclude-nothing"),
    pytest.param(
        {"security": {"path_excludes": [*DEFAULT_PATH_EXCLUDES, "!**/.env"]}},
        "security.path_excludes",
        id="re-include",
    ),
    pytest.param({"security": {"secret_mode": "redact"}}, "security.secret_mode", id="redact"),
    pytest.param(
        {"search": {"query_adapter": "/tmp/adapter.npy"}}, "search.query_adapter", id="adapter-path"
    ),
    pytest.param({"secrets": {"file": {"path": "~/.aws/env"}}}, "secrets.file.path", id="secret-file"),
    pytest.param({"secrets": {"keychain": {"service": "github"}}}, "secrets.keychain.service", id="keychain"),
    pytest.param({"ingest": {"gitignore": False}}, "ingest.gitignore", id="serve-ignored"),
    pytest.param({"chat": {"provider": "openai_compatible"}}, "chat.provider", id="key-to-a-local-port"),
    pytest.param({"ingest": {"follow_hardlinks": True}}, "ingest.follow_hardlinks", id="hardlinks"),
    pytest.param({"ingest": {"prepare_processes": 64}}, "ingest.prepare_processes", id="many-workers"),
]


@pytest.mark.parametrize(("data", "key"), HOSTILE)
def test_a_sensitive_key_of_an_unapproved_root_file_is_refused(corpus_dir, data, key):
    path = write_root_config(corpus_dir, {"ingest": {"pdf": {"mode": "auto"}}, **data})

    error = untrusted_error(path)

    assert error.code == errors.CONFIG_UNTRUSTED and error.exit_code == errors.EXIT_CONFIG
    assert key in error.message and str(path) in error.message
    assert f"dir2mcp config trust --dir {corpus_dir}" in (error.hint or "")


HARMLESS_FILES = [
    pytest.param({"ingest": {"pdf": {"mode": "auto"}, "max_file_mb": 5}}, id="ingest"),
    pytest.param({"ingest": {"pdf": {"mode": "auto"}, "prepare_processes": 1}}, id="one-worker"),
    pytest.param({"search": {"rrf_k": 60, "query_adapter": "builtin"}, "rag": {"k_default": 5}}, id="tuning"),
    pytest.param({"embed": {"provider": "mistral"}, "chat": {"provider": "none"}}, id="providers"),
    pytest.param({"server": {"listen": "127.0.0.1:8080", "mcp_path": "/x"}}, id="loopback-port"),
    pytest.param({"security": {"allowed_origins": DEFAULT_ALLOWED_ORIGINS[:2]}}, id="fewer-origins"),
    pytest.param(
        {"security": {"path_excludes": [*DEFAULT_PATH_EXCLUDES, "**/private/**"]}}, id="more-excludes"
    ),
    pytest.param(
        {"security": {"secret_patterns": [*DEFAULT_SECRET_PATTERNS, "internal_[0-9]{8}"]}}, id="more-rules"
    ),
    pytest.param("x402:\n  mode: off\nmistral:\n  api_key: ${MISTRAL_API_KEY}\n", id="defaults-written-out"),
    pytest.param(render_config(Config()), id="config-init-template"),
]


@pytest.mark.parametrize("data", HARMLESS_FILES)
def test_harmless_keys_of_an_unapproved_root_file_apply(corpus_dir, data):
    path = write_root_config(corpus_dir, data)

    config = load_config(path, environ={})

    if isinstance(data, dict) and "ingest" in data:
        assert config.ingest.pdf.mode == "auto"


def test_approving_the_file_applies_it_until_it_changes(corpus_dir):
    path = write_root_config(corpus_dir, {"mistral": {"base_url": "https://eu.example.com"}})
    assert untrusted_error(path).code == errors.CONFIG_UNTRUSTED

    out = io.StringIO()
    call_command("config", "trust", "--dir", str(corpus_dir), stdout=out)

    assert "mistral.base_url" in out.getvalue()
    assert load_config(path, environ={}).mistral.base_url == "https://eu.example.com"
    path.write_text(yaml.safe_dump({"mistral": {"base_url": "http://attacker.example"}}))
    changed = untrusted_error(path)
    assert changed.code == errors.CONFIG_UNTRUSTED and "changed since you approved it" in changed.message


def test_config_trust_reports_the_keys_it_approves_as_json(corpus_dir):
    path = write_root_config(corpus_dir, {"server": {"public": True}, "rag": {"k_default": 3}})
    out = io.StringIO()

    call_command("config", "trust", "--dir", str(corpus_dir), "--json", stdout=out)

    event = json.loads(out.getvalue().splitlines()[0])
    assert event["event"] == "config_trusted"
    assert event["data"]["keys"] == ["server.public"]
    assert event["data"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_config_trust_without_a_file_is_an_error(corpus_dir):
    with pytest.raises(SystemExit) as stopped:
        call_command("config", "trust", "--dir", str(corpus_dir), stdout=io.StringIO(), stderr=io.StringIO())

    assert stopped.value.code == errors.EXIT_CONFIG
    assert not config_trust.store_path().exists()


def test_the_approval_is_kept_outside_the_root_owner_only(corpus_dir, tmp_path):
    path = write_root_config(corpus_dir, {"server": {"public": True}})

    store = config_trust.approve(path, path.read_text())

    assert store == tmp_path / "xdg" / "dir2mcp" / "trusted.json"
    assert not store.is_relative_to(corpus_dir)
    assert store.stat().st_mode & 0o077 == 0


def test_the_trust_directory_can_be_named(corpus_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(config_trust.TRUST_DIR_ENV, str(tmp_path / "elsewhere"))
    path = write_root_config(corpus_dir, {"server": {"public": True}})

    config_trust.approve(path, path.read_text())

    assert (tmp_path / "elsewhere" / "trusted.json").is_file()
    assert load_config(path, environ={}).server.public is True


def test_a_file_the_operator_names_and_the_environment_need_no_approval(corpus_dir):
    path = write_root_config(corpus_dir, {"server": {"public": True}})

    assert load_config(path, environ={}, named=True).server.public is True
    environ = {"DIR2MCP_MISTRAL__BASE_URL": "https://eu.example.com"}
    assert load_config(None, environ=environ).mistral.base_url == "https://eu.example.com"


def test_config_init_approves_the_file_it_writes(corpus_dir):
    call_command("config", "init", "--dir", str(corpus_dir), "--non-interactive", stdout=io.StringIO())
    path = corpus_dir / ".dir2mcp.yaml"

    assert config_trust.approval(path, path.read_text()) == config_trust.APPROVED


def test_config_print_marks_an_unapproved_key_and_exits_2(corpus_dir):
    write_root_config(corpus_dir, {"server": {"listen": "0.0.0.0:9"}})
    out = io.StringIO()

    with pytest.raises(SystemExit) as stopped:
        call_command("config", "print", "--dir", str(corpus_dir), stdout=out, stderr=io.StringIO())

    assert stopped.value.code == errors.EXIT_CONFIG
    assert out.getvalue().startswith(f"# {errors.CONFIG_UNTRUSTED}")
    assert "listen: 127.0.0.1:0  # <- '0.0.0.0:9'" in out.getvalue()


@pytest.mark.slow
def test_ask_on_a_hostile_root_sends_nothing_to_its_endpoint(corpus_dir, tmp_path):
    attacker = FakeMistral().start()
    try:
        (corpus_dir / "plan.md").write_text("The launch is on Tuesday.\n")
        write_root_config(
            corpus_dir, {"mistral": {"base_url": attacker.url}, "embed": {"provider": "mistral"}}
        )
        env = base_env() | {"MISTRAL_API_KEY": "the-users-own-key", "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
        env.pop("DIR2MCP_EMBED__PROVIDER")

        asked = cli("ask", "when is the launch?", "--dir", str(corpus_dir), env=env)

        assert asked.returncode == errors.EXIT_CONFIG, asked.stderr
        assert errors.CONFIG_UNTRUSTED in asked.stderr and "mistral.base_url" in asked.stderr
        assert attacker.requests == []
    finally:
        attacker.close()


# -- a shipped state directory ----------------------------------------------------------


def test_a_shipped_token_readable_by_others_is_refused_not_reused(tmp_path):
    state = StateDir(tmp_path / ".dir2mcp")
    state.path.mkdir()
    state.token_file.write_text("attacker-known-token\n")
    state.token_file.chmod(0o644)  # what a clone or an archive brings in

    for attempt in (state.ensure, lambda: ensure_token(state)):
        with pytest.raises(errors.Dir2mcpError) as caught:
            attempt()
        assert caught.value.code == errors.CONFIG_UNTRUSTED and "0644" in caught.value.message
    assert state.token_file.stat().st_mode & 0o777 == 0o644


def test_a_state_token_of_its_own_is_kept(tmp_path):
    state = StateDir(tmp_path / ".dir2mcp")
    state.ensure()

    assert ensure_token(state) == ensure_token(state)


def test_a_token_that_links_elsewhere_is_refused(tmp_path):
    private = tmp_path / "id_ed25519"
    private.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    private.chmod(0o600)
    state = StateDir(tmp_path / ".dir2mcp")
    state.path.mkdir()
    state.token_file.symlink_to(private)

    assert credential_problem(state.token_file) == "is a symbolic link"
    with pytest.raises(errors.Dir2mcpError):
        ensure_token(state)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_token_of_another_user_is_refused(tmp_path):
    token = tmp_path / "secret.token"
    token.write_text("t\n")
    token.chmod(0o600)
    os.chown(token, 4242, 4242)

    assert credential_problem(token) == "belongs to another user (uid 4242)"


@pytest.mark.parametrize(
    "link", [".", "cache", "cache/ocr", "locks"], ids=["state-dir", "cache", "ocr", "locks"]
)
def test_a_state_directory_that_links_elsewhere_is_refused_untouched(tmp_path, link):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "shared.txt").write_text("x")
    (victim / "shared.txt").chmod(0o644)
    state = StateDir(tmp_path / "root" / ".dir2mcp")
    target = state.path / link if link != "." else state.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(victim)

    with pytest.raises(errors.Dir2mcpError) as caught:
        state.ensure()

    assert caught.value.code == errors.CONFIG_UNTRUSTED and "symbolic link" in caught.value.message
    assert sorted(p.name for p in victim.iterdir()) == ["shared.txt"]
    assert (victim / "shared.txt").stat().st_mode & 0o777 == 0o644
