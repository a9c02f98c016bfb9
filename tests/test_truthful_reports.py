"""Issue #24 (items 6 and 7): what dir2mcp reports is what it does.

The models in corpus.json and ``settings`` are the ones in use; a file that
fails is an error everywhere until it succeeds; a plain ``.gz`` is the text
it holds, within limits; configuration problems name their source and
``config print`` shows them; ``ask`` says which mode answered and why; the
Progress line counts unchanged files as unchanged; ``--read-only`` refuses
tools that would store something. Commands run as real processes; providers
are the fakes at the network edge.
"""

from __future__ import annotations

import gzip
import io
import json
import resource
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from corpus.answer import ask
from corpus.ingest.indexing import index_directory
from corpus.models import Representation
from corpus.providers.mistral import MistralChat
from corpus.retrieval import Searcher
from corpus.store import SPEC_SETTINGS
from kernel import errors
from kernel.config import build_config, load_config
from mcp_gateway import current, tools
from mcp_gateway.context import AuthSetup, Context
from tests.fakes.media import make_wav
from tests.mcp_http import Server
from tests.support import read_only
from tests.test_cli import REPO, base_env, cli
from tests.test_stdio import Raw, command

CHANGELOG = "dir2mcp (1.0) unstable; urgency=low\n\n  * First release: the quokkafold feature.\n"
INVOICE = "Invoice 2231 from Okapi Logistics.\nTotal due: 1,250 EUR by 30 June.\n"
SCHEMA = {"type": "object", "properties": {"vendor": {"type": "string"}}, "required": ["vendor"]}


def gzip_bomb(expanded: int = 1 << 30) -> bytes:
    """``expanded`` bytes of zeros, gzip-compressed (about a thousandth of the size)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\0" * (1 << 20)
    return b"".join([*(packer.compress(block) for _ in range(expanded // len(block))), packer.flush()])


def tar_gz(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def rows(root: Path, sql: str, *args) -> list[tuple]:
    db = root / ".dir2mcp" / "meta.sqlite"
    with read_only(db) as conn:
        return conn.execute(sql, args).fetchall()


def ndjson(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def final_counters(stdout: str) -> dict:
    return [e["data"] for e in ndjson(stdout) if e["event"] == "scan_progress"][-1]


# -- a: the models in use --------------------------------------------------------------------------


@pytest.mark.slow
def test_corpus_json_and_settings_name_the_local_model_the_index_uses(corpus_dir):
    (corpus_dir / "notes.md").write_text("# Notes\n\nThe quokka sleeps at noon.\n")

    # No key: embed.provider auto is the local model, and there is no chat model.
    done = cli("reindex", "--dir", str(corpus_dir), env={"DIR2MCP_EMBED__PROVIDER": "auto"}, timeout=300)

    assert done.returncode == 0, done.stderr
    models = json.loads((corpus_dir / ".dir2mcp" / "corpus.json").read_text())["models"]
    settings = dict(rows(corpus_dir, "SELECT key, value FROM settings"))
    assert set(SPEC_SETTINGS) <= set(settings)
    assert settings["embed_provider"] == "local"
    assert models["embed_text"] == f"local/{settings['embed_text_model']}" != "mistral-embed"
    assert models["embed_code"] == f"local/{settings['embed_code_model']}"
    assert int(settings["embed_text_dim"]) > 0
    assert models["chat"] == "none (chat.provider is auto and MISTRAL_API_KEY is not set)"
    assert models["ocr"] == "none (needs MISTRAL_API_KEY)"
    assert models["stt_model"] == "none (needs MISTRAL_API_KEY)"
    for key, name in {"ocr_model": "ocr", "stt_provider": "stt_provider", "stt_model": "stt_model"}.items():
        assert settings[key] == models[name]
    assert settings["chat_model"] == models["chat"]
    assert json.loads(settings["models_in_use"]) == models


@pytest.mark.django_db
def test_corpus_json_names_the_models_stats_names(corpus_dir, state, fake_mistral, monkeypatch):
    monkeypatch.setenv("MISTRAL_API_KEY", fake_mistral.api_key)
    config = build_config(
        {"mistral": {"base_url": fake_mistral.url, "chat_model": "mistral-medium-2508"}},
        {},
        {},
    )
    (corpus_dir / "a.py").write_text("def quokka():\n    return 1\n")
    served = Context(root=corpus_dir, state=state, config=config, auth=AuthSetup(None, "none"))

    index_directory(corpus_dir, state=state, config=config, embedder=served.embedder)

    stats = tools.run(tools.table()["dir2mcp.stats"], {}, tools.Call(served))["structuredContent"]
    written = json.loads(state.corpus_json.read_text())["models"]
    assert written == stats["models"]
    assert (
        written["embed_text"] == "mistral/mistral-embed" and written["chat"] == "mistral/mistral-medium-2508"
    )
    assert written["ocr"] == "mistral-ocr-latest"


# -- c, d, g: failures stay visible; plain .gz files; unchanged is not skipped -------------------------------


@pytest.mark.slow
def test_failed_files_are_errors_everywhere_until_they_succeed(corpus_dir):
    (corpus_dir / "changelog.Debian.gz").write_bytes(gzip.compress(CHANGELOG.encode()))
    (corpus_dir / "bomb.gz").write_bytes(gzip_bomb())
    (corpus_dir / "bad.tar.gz").write_bytes(gzip.compress(b"plain text, not a tar\n" * 20))
    (corpus_dir / "notes.txt").write_text("plain notes\n")

    first = cli("reindex", "--dir", str(corpus_dir), "--json")
    again = cli("reindex", "--incremental", "--dir", str(corpus_dir), "--json")
    status = cli("status", "--dir", str(corpus_dir), "--json")

    assert first.returncode == again.returncode == status.returncode == 0, first.stderr + again.stderr
    for run in (first, again):  # counted and reported on every pass, not only the first
        assert final_counters(run.stdout)["errors"] == 2
        reported = {
            e["data"]["rel_path"]: e["data"]["code"] for e in ndjson(run.stdout) if e["event"] == "file_error"
        }
        assert reported == {"bad.tar.gz": errors.ARCHIVE_REJECTED, "bomb.gz": errors.ARCHIVE_REJECTED}
    stored = dict(rows(corpus_dir, "SELECT rel_path, status || ' ' || coalesce(error, '') FROM documents"))
    assert stored["bad.tar.gz"].startswith("error ARCHIVE_REJECTED: corrupt or truncated archive")
    assert stored["bomb.gz"].startswith("error ARCHIVE_REJECTED: compression ratio exceeds 100")
    codes = dict(rows(corpus_dir, "SELECT rel_path, error_code FROM documents WHERE status = 'error'"))
    assert codes == {"bad.tar.gz": errors.ARCHIVE_REJECTED, "bomb.gz": errors.ARCHIVE_REJECTED}
    report = json.loads(status.stdout)
    assert {e["rel_path"] for e in report["recent_errors"]} == {"bad.tar.gz", "bomb.gz"}
    assert report["by_status"] == {"error": 2, "ok": 2}
    summary = json.loads((corpus_dir / ".dir2mcp" / "corpus.json").read_text())
    assert {(e["rel_path"], e["code"]) for e in summary["recent_errors"]} == {
        ("bad.tar.gz", errors.ARCHIVE_REJECTED),
        ("bomb.gz", errors.ARCHIVE_REJECTED),
    }
    assert summary["profile"]["status_counts"] == {"error": 2, "ok": 2}
    # The changelog is the text it holds, served from its stored text.
    ((doc_type, text, meta),) = rows(
        corpus_dir,
        "SELECT d.doc_type, r.text, r.meta_json FROM documents d JOIN representations r "
        "ON r.document_id = d.doc_id WHERE d.rel_path = 'changelog.Debian.gz'",
    )
    assert (
        doc_type == "text" and "quokkafold feature" in text and json.loads(meta)["converted_from"] == "gzip"
    )
    # g: the unchanged files of the second pass are unchanged, not skipped.
    assert final_counters(again.stdout)["unchanged"] == 2 and final_counters(again.stdout)["skipped"] == 0

    (corpus_dir / "bad.tar.gz").write_bytes(tar_gz({"inner.txt": b"now a real archive\n"}))
    fixed = cli("reindex", "--incremental", "--dir", str(corpus_dir), "--json")

    assert final_counters(fixed.stdout)["errors"] == 1
    fixed_row = "SELECT status, error, error_code FROM documents WHERE rel_path = 'bad.tar.gz'"
    assert rows(corpus_dir, fixed_row) == [("ok", None, "")]
    left = json.loads(cli("status", "--dir", str(corpus_dir), "--json").stdout)["recent_errors"]
    bomb = stored["bomb.gz"].removeprefix("error ")
    assert left == [{"rel_path": "bomb.gz", "code": errors.ARCHIVE_REJECTED, "error": bomb}]


@pytest.mark.slow
def test_a_gzip_bomb_is_refused_within_a_small_memory_budget(corpus_dir):
    (corpus_dir / "bomb.gz").write_bytes(gzip_bomb(4 << 30))  # 4 GiB of zeros, in 4 MB

    def cap() -> None:  # 1.5 GiB of address space: expanding the bomb would fail
        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))

    done = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "reindex", "--dir", str(corpus_dir)],
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=cap,
    )

    assert done.returncode == 0, done.stderr
    assert "file_error: bomb.gz: ARCHIVE_REJECTED: compression ratio exceeds 100" in done.stdout


@pytest.mark.slow
def test_the_incremental_progress_line_counts_unchanged_files_apart(corpus_dir):
    (corpus_dir / "a.py").write_text("def a():\n    return 1\n")
    (corpus_dir / "b.md").write_text("# B\n")
    (corpus_dir / "blob.bin").write_bytes(bytes(range(256)) * 8)

    first = cli("reindex", "--dir", str(corpus_dir))
    again = cli("reindex", "--incremental", "--dir", str(corpus_dir))

    assert "Progress: scanned=3 indexed=2 skipped=1 unchanged=0 " in first.stdout
    # Nothing was skipped by a policy this time: the three files were unchanged.
    assert "Progress: scanned=3 indexed=0 skipped=0 unchanged=3 " in again.stdout, again.stdout
    job = rows(corpus_dir, "SELECT skipped, unchanged FROM index_jobs ORDER BY started_unix DESC LIMIT 1")
    assert job == [(0, 3)]


# -- e: configuration problems name their source -------------------------------------------------------


@pytest.mark.slow
def test_an_env_typo_is_blamed_on_the_variable_and_config_print_shows_it_marked(corpus_dir):
    env = {"DIR2MCP_CHUNKING__MAX_CHARZ": "3000"}

    refused = cli("reindex", "--dir", str(corpus_dir), env=env)
    printed = cli("config", "print", "--dir", str(corpus_dir), env=env)
    as_json = cli("config", "print", "--dir", str(corpus_dir), "--json", env=env)

    assert refused.returncode == 2
    assert (
        "unknown key 'chunking.max_charz' in environment variable DIR2MCP_CHUNKING__MAX_CHARZ"
        in refused.stderr
    )
    assert ".dir2mcp.yaml" not in refused.stderr  # there is no such file
    assert printed.returncode == as_json.returncode == 2
    marked = [line for line in printed.stdout.splitlines() if "# <-" in line]
    assert marked == [
        "  max_charz: 3000  # <- unknown key, set in environment variable "
        "DIR2MCP_CHUNKING__MAX_CHARZ: not applied"
    ]
    shown = yaml.safe_load(printed.stdout)
    assert shown["chunking"]["max_chars"] == 2500 and shown["server"]["listen"] == "127.0.0.1:0"
    data, fatal = (json.loads(line) for line in as_json.stdout.splitlines())  # --json: the refusal is NDJSON
    assert fatal["event"] == "fatal" and fatal["data"]["code"] == errors.CONFIG_INVALID
    assert data["problems"] == [
        {
            "key": "chunking.max_charz",
            "problem": "unknown key",
            "source": "environment variable DIR2MCP_CHUNKING__MAX_CHARZ",
            "value": 3000,
        }
    ]
    assert "max_charz" not in data["chunking"]


def test_each_problem_names_the_layer_that_set_it(tmp_path):
    path = tmp_path / ".dir2mcp.yaml"
    path.write_text("ingest:\n  pdf:\n    mode: fast\n")

    with pytest.raises(errors.Dir2mcpError) as caught:
        load_config(path, environ={"DIR2MCP_LISTEN": "127.0.0.1:1", "DIR2MCP_RAG__K_DEFAULT": "0"})
    with pytest.raises(errors.Dir2mcpError) as flagged:
        build_config({}, {}, {"rag": {"k_default": 99}})

    assert caught.value.code == errors.CONFIG_INVALID
    assert f"bad value for 'ingest.pdf.mode' in {path}:" in caught.value.message
    assert (
        "bad value for 'rag.k_default' in environment variable DIR2MCP_RAG__K_DEFAULT:"
        in caught.value.message
    )
    assert "bad value for 'rag.k_default' in a command-line flag:" in flagged.value.message


@pytest.mark.parametrize(("value", "ok"), [("2025-11-25", True), ("2025-06-18", False)])
def test_server_protocol_version_is_checked_not_ignored(value, ok):
    if ok:
        assert build_config({"server": {"protocol_version": value}}, {}, {}).server.protocol_version == value
        return
    with pytest.raises(errors.Dir2mcpError) as caught:
        build_config({"server": {"protocol_version": value}}, {}, {}, origin="x.yaml")
    assert "bad value for 'server.protocol_version' in x.yaml" in caught.value.message
    assert "agreed at initialize" in caught.value.message


# -- f: ask says which mode answered and why -----------------------------------------------------------


@pytest.mark.slow
def test_ask_without_a_chat_model_says_so(corpus_dir):
    (corpus_dir / "notes.md").write_text("# Ferries\n\nThe ferry to the island leaves at noon.\n")

    text = cli("ask", "--dir", str(corpus_dir), "when does the ferry leave")
    data = cli("ask", "--dir", str(corpus_dir), "--json", "when does the ferry leave")

    assert text.returncode == data.returncode == 0, text.stderr
    why = "no chat model is configured (chat.provider is auto and MISTRAL_API_KEY is not set)"
    assert text.stdout.rstrip().endswith(f"(search only: {why})")
    result = json.loads(data.stdout)
    assert result["mode"] == "search_only"
    assert result["generation"] == {"status": "off", "reason": "no_chat_model", "message": why}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("sections", "question", "reason"),
    [
        ({"rag": {"generate_answer": False}}, "ferry noon", "generate_answer_off"),
        ({}, "zzyzx qwertyuiop", "no_hits"),
        ({}, "ferry noon", None),
    ],
)
def test_ask_reports_why_the_chat_model_did_not_answer(
    corpus_dir, state, fake_mistral, sections, question, reason
):
    fake_mistral.chat_reply = "It leaves at noon [notes.md:L1-L3]."
    config = build_config(
        {"mistral": {"base_url": fake_mistral.url}, "embed": {"provider": "none"}, **sections}, {}, {}
    )
    (corpus_dir / "notes.md").write_text("# Ferries\n\nThe ferry leaves at noon.\n")
    index_directory(corpus_dir, state=state, config=config)
    chat = MistralChat(config, api_key=fake_mistral.api_key)
    chats = len(fake_mistral.requests_to("/v1/chat/completions"))

    answer = ask(question, searcher=Searcher(state, config, None), chat=chat, config=config)

    out = answer.as_dict()
    if reason is None:
        assert out["mode"] == "answer"
        assert out["generation"] == {"status": "ok", "model": "mistral/mistral-small-2506"}
        assert len(fake_mistral.requests_to("/v1/chat/completions")) == chats + 1
        return
    assert out["mode"] == "search_only" and out["generation"]["reason"] == reason
    assert out["answer"].endswith(f"(search only: {out['generation']['message']})")
    assert len(fake_mistral.requests_to("/v1/chat/completions")) == chats  # never asked


# -- b: --read-only ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_up_read_only_refuses_to_store_an_annotation(corpus_dir, running, fake_mistral):
    (corpus_dir / "invoice.txt").write_text(INVOICE)
    fake_mistral.chat_reply = json.dumps({"vendor": "Okapi Logistics"})
    up = running(
        "--dir", str(corpus_dir), "--json", "--auth", "none", "--read-only",
        env={"MISTRAL_API_KEY": fake_mistral.api_key, "DIR2MCP_MISTRAL__BASE_URL": fake_mistral.url},
    )  # fmt: skip
    up.event("scan_progress", lambda data: data.get("running") is False)
    server = Server(corpus_dir, up.url(), None, up.proc)
    session = server.initialize()

    refused = server.call(session, "dir2mcp.annotate", {"rel_path": "invoice.txt", "schema_json": SCHEMA})
    found = server.call(session, "dir2mcp.search", {"query": "Okapi"}, msg_id=2)

    assert refused["isError"] is True
    error = refused["structuredContent"]["error"]
    assert error["code"] == errors.FORBIDDEN and "--read-only" in error["message"]
    assert rows(corpus_dir, "SELECT rep_type FROM representations WHERE rep_type LIKE 'annotation%'") == []
    assert found["structuredContent"]["hits"][0]["rel_path"] == "invoice.txt"  # reading goes on
    assert up.stop() == 0


@pytest.mark.django_db
def test_a_read_only_process_still_indexes_but_refuses_every_tool_write(
    corpus_dir, state, fake_mistral, monkeypatch
):
    monkeypatch.setenv("MISTRAL_API_KEY", fake_mistral.api_key)
    fake_mistral.chat_reply = json.dumps({"vendor": "Okapi Logistics"})
    config = build_config({"mistral": {"base_url": fake_mistral.url}, "embed": {"provider": "none"}}, {}, {})
    (corpus_dir / "invoice.txt").write_text(INVOICE)
    (corpus_dir / "talk.wav").write_bytes(make_wav([(0.0, 4.0, "The ferry leaves at noon.")]))
    ctx = Context(root=corpus_dir, state=state, config=config, auth=AuthSetup(None, "none"), read_only=True)

    def run(name: str, arguments: dict) -> dict:
        tool = tools.table()[name]
        result = tools.run(tool, arguments, tools.Call(ctx))
        if not result.get("isError"):
            Draft202012Validator(tool.output_schema).validate(result["structuredContent"])
        return result

    current.install(ctx)
    try:
        counters = index_directory(corpus_dir, state=state, config=config)  # the indexer writes
        annotated = run("dir2mcp.annotate", {"rel_path": "invoice.txt", "schema_json": SCHEMA})
        transcribed = run("dir2mcp.transcribe", {"rel_path": "talk.wav", "retranscribe": True})
    finally:
        current.install(None)
    allowed = run("dir2mcp.annotate", {"rel_path": "invoice.txt", "schema_json": SCHEMA})

    assert counters.indexed == 2
    for refused in (annotated, transcribed):
        assert refused["isError"] and refused["structuredContent"]["error"]["code"] == errors.FORBIDDEN
    assert allowed["structuredContent"]["stored"] is True
    assert Representation.objects.filter(rep_type="annotation_json", deleted=False).count() == 1


@pytest.mark.slow
def test_mcp_stdio_read_only_refuses_to_store_an_annotation(corpus_dir, fake_mistral):
    (corpus_dir / "invoice.txt").write_text(INVOICE)
    fake_mistral.chat_reply = json.dumps({"vendor": "Okapi Logistics"})
    env = {"MISTRAL_API_KEY": fake_mistral.api_key, "DIR2MCP_MISTRAL__BASE_URL": fake_mistral.url}
    server = Raw(command(corpus_dir, "--read-only"), env=env)
    try:
        server.initialize()
        server.wait_for_index()
        refused = server.call(1, "dir2mcp.annotate", {"rel_path": "invoice.txt", "schema_json": SCHEMA})
    finally:
        code = server.close()
        server.kill()  # closes its pipes

    assert refused["isError"] is True
    assert refused["structuredContent"]["error"]["code"] == errors.FORBIDDEN
    assert rows(corpus_dir, "SELECT rep_type FROM representations WHERE rep_type LIKE 'annotation%'") == []
    assert code == 0, server.stderr
