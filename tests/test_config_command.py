"""``config print`` and ``config init``: real commands, real files, and the
wizard driven on a pseudo-terminal."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import CommandError, call_command

from kernel.config import Config, load_config
from kernel.state import StateDir
from tests.support import holds

MANAGE = Path(settings.BASE_DIR) / "manage.py"
SECRET = "sk-wizard-8d3f61c2a94e"
EL_SECRET = "el-wizard-0c7b55e1d2aa"

# The template of spec §16.2, verbatim: `config init` must write every key.
SPEC_TEMPLATE = r"""
version: 1
mistral:
  api_key: ${MISTRAL_API_KEY}
  chat_model: mistral-small-2506
  embed_text_model: mistral-embed
  embed_code_model: codestral-embed
  ocr_model: mistral-ocr-latest
rag:
  generate_answer: true
  k_default: 10
  system_prompt: |
    You are a retrieval-augmented assistant.
    Use citations and never invent sources.
  max_context_chars: 20000
  oversample_factor: 5
ingest:
  gitignore: true
  pdf:
    mode: ocr          # off|ocr|auto
  images:
    mode: ocr_auto     # off|ocr_auto|ocr_on
  audio:
    mode: auto         # off|auto|on
    cache: true
  archives:
    mode: deep         # off|shallow|deep
  follow_symlinks: false
  max_file_mb: 20
chunking:
  max_chars: 2500
  overlap_chars: 250
  min_chars: 200
  code:
    max_lines: 200
    overlap_lines: 30
  transcript:
    segment_ms: 30000
    overlap_ms: 5000
stt:
  provider: mistral        # mistral|elevenlabs
  mistral:
    api_key: ${MISTRAL_API_KEY}
    model: voxtral-mini-latest
    timestamps: true
  elevenlabs:
    api_key: ${ELEVENLABS_API_KEY}
    model: scribe
    timestamps: true
x402:
  enabled: false
  mode: off                # off|on|required
  facilitator_url: ""
  resource_base_url: ""
  route_policy:
    tools_call:
      enabled: false
      price: "0.001"
      network: "eip155:8453"
      scheme: "exact"
      asset: ""
      pay_to: ""
  bazaar:
    enabled: false
    metadata:
      description: ""
server:
  listen: "127.0.0.1:0"
  mcp_path: "/mcp"
  protocol_version: "2025-11-25"
  tls:
    enabled: false
    cert_file: ""
    key_file: ""
  public: false
  session_inactivity_timeout: "24h"
  session_max_lifetime: "0"
secrets:
  provider: auto         # auto|keychain|file|env|session
  keychain:
    service: "dir2mcp"
    account: "default"
  file:
    path: ".dir2mcp/secret.env"
    mode: "0600"
security:
  auth:
    mode: auto           # auto|none|file
    token_file: ""       # used when mode=file
    token_env: "DIR2MCP_AUTH_TOKEN"
  allowed_origins:
    - "http://localhost"
  path_excludes:
    - "**/.git/**"
  secret_patterns:
    - 'AKIA[0-9A-Z]{16}'
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("DIR2MCP_") or name in {"MISTRAL_API_KEY", "ELEVENLABS_API_KEY"}:
            monkeypatch.delenv(name)


def dotted_keys(tree: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        keys.add(dotted)
        if isinstance(value, dict):
            keys |= dotted_keys(value, dotted + ".")
    return keys


def run_config(*args: str) -> tuple[str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command("config", *args, stdout=stdout, stderr=stderr)
    return stdout.getvalue(), stderr.getvalue()


def files_containing(root: Path, needle: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and holds(p, needle))


# -- config print ----------------------------------------------------------------


def test_print_defaults_as_yaml_with_unset_secrets(corpus_dir):
    out, _ = run_config("print", "--dir", str(corpus_dir))

    data = yaml.safe_load(out)
    expected = Config().model_dump(mode="json")
    expected["mistral"]["api_key"] = "<unset>"
    expected["stt"]["mistral"]["api_key"] = "<unset>"
    expected["stt"]["elevenlabs"]["api_key"] = "<unset>"
    assert data == expected


def test_print_layers_file_and_env(corpus_dir, monkeypatch):
    (corpus_dir / ".dir2mcp.yaml").write_text("ingest:\n  pdf:\n    mode: auto\nrag:\n  k_default: 3\n")
    monkeypatch.setenv("DIR2MCP_RAG__K_DEFAULT", "7")

    out, _ = run_config("print", "--dir", str(corpus_dir), "--json")

    data = json.loads(out)
    assert (data["ingest"]["pdf"]["mode"], data["rag"]["k_default"]) == ("auto", 7)


def test_print_json_is_one_object(corpus_dir):
    out, _ = run_config("print", "--dir", str(corpus_dir), "--json")

    assert out.count("\n") == 1
    assert json.loads(out)["version"] == 1


def test_print_shows_secret_sources_never_values(corpus_dir, monkeypatch):
    monkeypatch.setenv("MISTRAL_API_KEY", SECRET)
    env_file = corpus_dir / ".dir2mcp/secret.env"
    StateDir(env_file.parent).ensure()  # dir2mcp makes it first: one without state.id is refused
    env_file.write_text(f"ELEVENLABS_API_KEY={EL_SECRET}\n")
    env_file.chmod(0o600)

    for flags in ((), ("--json",)):
        out, err = run_config("print", "--dir", str(corpus_dir), *flags)

        assert SECRET not in out + err and EL_SECRET not in out + err
        data = json.loads(out) if flags else yaml.safe_load(out)
        assert data["mistral"]["api_key"] == "<env:MISTRAL_API_KEY>"
        assert data["stt"]["elevenlabs"]["api_key"] == f"<file:{env_file}>"


def test_print_hides_a_literal_key_written_in_the_file(corpus_dir):
    (corpus_dir / ".dir2mcp.yaml").write_text(f"mistral:\n  api_key: {SECRET}\n")
    run_config("trust", "--dir", str(corpus_dir))  # a literal key is for the operator to approve

    out, _ = run_config("print", "--dir", str(corpus_dir))

    assert SECRET not in out
    assert yaml.safe_load(out)["mistral"]["api_key"] == "<file:config>"


def test_print_refuses_a_world_readable_secret_file(corpus_dir):
    env_file = corpus_dir / ".dir2mcp/secret.env"
    StateDir(env_file.parent).ensure()  # dir2mcp makes it first: one without state.id is refused
    env_file.write_text(f"MISTRAL_API_KEY={SECRET}\n")
    env_file.chmod(0o644)

    result = subprocess.run(
        [sys.executable, str(MANAGE), "config", "print", "--dir", str(corpus_dir)],
        capture_output=True,
        text=True,
        env=child_env(),
    )

    assert result.returncode == 2
    assert f"ERROR: CONFIG_INVALID: secret file {env_file}" in result.stderr
    assert f"chmod 600 {env_file}" in result.stderr
    assert SECRET not in result.stdout + result.stderr


# -- config init (template) ------------------------------------------------------


def test_init_template_round_trips_to_the_defaults(corpus_dir):
    run_config("init", "--dir", str(corpus_dir), "--non-interactive")

    assert load_config(corpus_dir / ".dir2mcp.yaml", environ={}) == Config()


def test_init_template_holds_every_key_of_the_spec_template(corpus_dir):
    run_config("init", "--dir", str(corpus_dir), "--non-interactive")

    written = yaml.safe_load((corpus_dir / ".dir2mcp.yaml").read_text())
    assert dotted_keys(yaml.safe_load(SPEC_TEMPLATE)) - dotted_keys(written) == set()


@pytest.mark.parametrize(
    ("line_start", "comment"),
    [
        pytest.param("    mode: ocr", "# off|ocr|auto", id="pdf"),
        pytest.param("    mode: ocr_auto", "# off|ocr_auto|ocr_on", id="images"),
        pytest.param("    mode: auto", "# off|auto|on", id="audio"),
        pytest.param("    mode: deep", "# off|shallow|deep", id="archives"),
        pytest.param("  provider: mistral", "# mistral|elevenlabs", id="stt"),
        pytest.param("  mode: 'off'", "# off|on|required", id="x402"),
        pytest.param("  provider: auto", "# auto|keychain|file|env|session", id="secrets"),
        pytest.param("    mode: auto", "# auto|none|file", id="auth"),
        pytest.param("  session_max_lifetime:", "# duration:", id="duration"),
    ],
)
def test_init_template_comments_the_choices(corpus_dir, line_start, comment):
    run_config("init", "--dir", str(corpus_dir), "--non-interactive")

    lines = (corpus_dir / ".dir2mcp.yaml").read_text().splitlines()
    assert any(line.startswith(line_start) and comment in line for line in lines)


def test_init_template_keeps_keys_as_references_even_when_set(corpus_dir, monkeypatch):
    monkeypatch.setenv("MISTRAL_API_KEY", SECRET)

    run_config("init", "--dir", str(corpus_dir), "--non-interactive")

    text = (corpus_dir / ".dir2mcp.yaml").read_text()
    assert "api_key: ${MISTRAL_API_KEY}" in text
    assert "api_key: ${ELEVENLABS_API_KEY}" in text
    assert files_containing(corpus_dir, SECRET) == []


def test_init_writes_the_snapshot_with_secret_sources(corpus_dir, monkeypatch):
    monkeypatch.setenv("MISTRAL_API_KEY", SECRET)

    run_config("init", "--dir", str(corpus_dir), "--non-interactive")

    snapshot = yaml.safe_load((corpus_dir / ".dir2mcp/.dir2mcp.yaml.snapshot").read_text())
    assert snapshot["secret_sources"]["mistral_api_key"] == {"source": "env", "detail": "MISTRAL_API_KEY"}
    assert snapshot["mistral"]["api_key"] == "<env:MISTRAL_API_KEY>"


def test_init_refuses_to_overwrite_without_force(corpus_dir):
    path = corpus_dir / ".dir2mcp.yaml"
    path.write_text("rag:\n  k_default: 3\n")

    with pytest.raises(CommandError, match="already exists; pass --force") as caught:
        run_config("init", "--dir", str(corpus_dir), "--non-interactive")

    assert caught.value.returncode == 1
    assert path.read_text() == "rag:\n  k_default: 3\n"


def test_init_refusal_exits_1_from_the_command_line(corpus_dir):
    (corpus_dir / ".dir2mcp.yaml").write_text("{}\n")

    result = subprocess.run(
        [sys.executable, str(MANAGE), "config", "init", "--dir", str(corpus_dir), "--non-interactive"],
        capture_output=True,
        text=True,
        env=child_env(),
    )

    assert result.returncode == 1
    assert "already exists; pass --force to overwrite it" in result.stderr


def test_init_force_replaces_even_a_broken_file(corpus_dir):
    (corpus_dir / ".dir2mcp.yaml").write_text("ingest: [\n")

    run_config("init", "--dir", str(corpus_dir), "--non-interactive", "--force")

    assert load_config(corpus_dir / ".dir2mcp.yaml", environ={}) == Config()


def test_init_writes_a_new_file_named_by_config(corpus_dir):
    target = corpus_dir / "conf" / "mine.yaml"
    target.parent.mkdir()

    out, _ = run_config("init", "--dir", str(corpus_dir), "--config", str(target), "--non-interactive")

    assert out == f"Wrote {target}\n"
    assert load_config(target, environ={}) == Config()
    assert not (corpus_dir / ".dir2mcp.yaml").exists()


def test_init_without_a_terminal_writes_the_template(corpus_dir):
    result = subprocess.run(
        [sys.executable, str(MANAGE), "config", "init", "--dir", str(corpus_dir)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=child_env(),
    )

    assert result.returncode == 0, result.stderr
    assert "Mistral API key" not in result.stdout
    assert load_config(corpus_dir / ".dir2mcp.yaml", environ={}) == Config()


def test_init_json_reports_one_event(corpus_dir):
    out, _ = run_config("init", "--dir", str(corpus_dir), "--json")

    event = json.loads(out)
    assert event["event"] == "config_written"
    assert event["data"] == {"path": str(corpus_dir / ".dir2mcp.yaml"), "snapshot": True}


# -- config init (wizard on a pseudo-terminal) -----------------------------------


def child_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DIR2MCP_") and k not in {"MISTRAL_API_KEY", "ELEVENLABS_API_KEY"}
    }
    env.pop("PYTHON_KEYRING_BACKEND", None)
    env["PYTHONPATH"] = str(MANAGE.parent)
    return {**env, **extra}


class Terminal:
    """A child process on a pseudo-terminal, answering its prompts."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: becomes the command
            try:
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        self.output = b""
        self._seen = 0

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            chunk = b""
        self.output += chunk
        return bool(chunk)

    def expect(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.output[self._seen :]:
            if time.monotonic() > deadline or not self._read(0.2):
                raise AssertionError(f"never saw {text!r}; terminal said:\n{self.text}")
        self._seen = self.output.index(text.encode(), self._seen) + len(text)

    def send(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\r")

    def finish(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._read(0.2):
            pass
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)

    @property
    def text(self) -> str:
        return self.output.decode(errors="replace")


def wizard(root: Path, **env: str) -> Terminal:
    argv = [sys.executable, str(MANAGE), "config", "init", "--dir", str(root)]
    return Terminal(argv, child_env(**env))


@pytest.mark.slow
def test_wizard_stores_keys_in_the_secret_file_and_never_echoes_them(corpus_dir):
    term = wizard(corpus_dir)
    term.expect("Mistral API key (input hidden; Enter to skip): ")
    term.send(SECRET)
    term.expect("Speech-to-text provider [mistral/elevenlabs]")
    term.send("elevenlabs")
    term.expect("ElevenLabs API key (input hidden; Enter to skip): ")
    term.send(EL_SECRET)
    term.expect("Store secrets in [file/env/session] (default file): ")
    term.send("")

    assert term.finish() == 0, term.text
    secret_file = corpus_dir / ".dir2mcp/secret.env"
    assert f"stored in the secret file ({secret_file})" in term.text
    for value in (SECRET, EL_SECRET):
        assert value not in term.text
        assert files_containing(corpus_dir, value) == [".dir2mcp/secret.env"]
    assert secret_file.stat().st_mode & 0o777 == 0o600
    config = load_config(corpus_dir / ".dir2mcp.yaml", environ={})
    assert (config.stt.provider, config.secrets.provider) == ("elevenlabs", "file")
    snapshot = yaml.safe_load((corpus_dir / ".dir2mcp/.dir2mcp.yaml.snapshot").read_text())
    assert snapshot["secret_sources"]["elevenlabs_api_key"] == {"source": "file", "detail": str(secret_file)}


@pytest.mark.slow
def test_wizard_stores_keys_in_the_keychain_when_one_is_available(corpus_dir, tmp_path):
    keyring_file = tmp_path / "keyring.json"
    term = wizard(
        corpus_dir,
        PYTHON_KEYRING_BACKEND="tests.test_secrets.JsonFileKeyring",
        DIR2MCP_TEST_KEYRING_FILE=str(keyring_file),
    )
    term.expect("Mistral API key (input hidden; Enter to skip): ")
    term.send(SECRET)
    term.expect("Speech-to-text provider")
    term.send("")
    term.expect("Store secrets in [keychain/file/env/session] (default keychain): ")
    term.send("")

    assert term.finish() == 0, term.text
    assert "stored in the OS keychain (dir2mcp/default/mistral_api_key)" in term.text
    assert SECRET not in term.text
    assert files_containing(corpus_dir, SECRET) == []
    assert json.loads(keyring_file.read_text()) == {"dir2mcp\0default/mistral_api_key": SECRET}
    snapshot = yaml.safe_load((corpus_dir / ".dir2mcp/.dir2mcp.yaml.snapshot").read_text())
    assert snapshot["mistral"]["api_key"] == "<keychain:dir2mcp/default/mistral_api_key>"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("store", "note", "source"),
    [
        pytest.param("env", "export MISTRAL_API_KEY=<your key>", "unset", id="env"),
        pytest.param("session", "kept for this session only", "session", id="session"),
    ],
)
def test_wizard_env_and_session_stores_persist_nothing(corpus_dir, store, note, source):
    term = wizard(corpus_dir)
    term.expect("Mistral API key (input hidden; Enter to skip): ")
    term.send(SECRET)
    term.expect("Speech-to-text provider")
    term.send("mistral")
    term.expect("Store secrets in")
    term.send(store)

    assert term.finish() == 0, term.text
    assert note in term.text
    assert SECRET not in term.text
    assert files_containing(corpus_dir, SECRET) == []
    snapshot = yaml.safe_load((corpus_dir / ".dir2mcp/.dir2mcp.yaml.snapshot").read_text())
    assert snapshot["secret_sources"]["mistral_api_key"]["source"] == source
    assert load_config(corpus_dir / ".dir2mcp.yaml", environ={}).secrets.provider == store


@pytest.mark.slow
def test_wizard_reasks_a_bad_choice_and_skipping_keys_writes_defaults(corpus_dir):
    term = wizard(corpus_dir)
    term.expect("Mistral API key (input hidden; Enter to skip): ")
    term.send("")
    term.expect("Speech-to-text provider")
    term.send("whisper")
    term.expect("Please answer one of: mistral, elevenlabs.")
    term.send("")

    assert term.finish() == 0, term.text
    assert "Store secrets in" not in term.text
    assert "No API key entered" in term.text
    assert load_config(corpus_dir / ".dir2mcp.yaml", environ={}) == Config()
