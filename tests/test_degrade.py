"""Degrade, don't fail: when the query embedding fails, search and ask answer
from the lexical index and say so; when the chat model fails, ask answers
with the top matches and says so.

Every provider failure is real: the fake Mistral server at the network edge
answers 401, 422, 429 (with Retry-After), 500, 503, or sleeps past the
timeout, or the provider's port is closed; the local embedder's model
directory is emptied or broken. The index is always built with embeddings
first, so dense search would normally take part (each test shows it does
before the failure). In process through the tool registry for every class,
over MCP (HTTP, daphne) and the REST mirror for a representative subset, and
through ``dir2mcp ask --json``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from jsonschema import Draft202012Validator

from corpus.answer import ask
from corpus.index.dense.embedding import DenseStore, dense_store, drop_store
from corpus.index.dense.vectors import index_path
from corpus.ingest.indexing import index_directory
from corpus.models import Chunk
from corpus.providers.http import QUERY_OPTIONS
from corpus.providers.registry import make_embedder
from corpus.retrieval import Searcher
from kernel import errors
from kernel.config import build_config
from kernel.state import IndexLock
from mcp_gateway import context, dispatch, tools
from mcp_gateway.transport import shape_message
from tests.fakes.mistral import FakeMistral
from tests.mcp_http import REPO, base_env, free_port, serve_daphne, start_daphne, stop

EMBED = "/v1/embeddings"
CHAT = "/v1/chat/completions"
QUERY = "exponential backoff"
EXPECTED = "docs/retry.md"
pytestmark = pytest.mark.django_db

NOTICE = "Dense search unavailable ("
LEXICAL_ONLY = "); results are lexical only."

CORPUS = {
    EXPECTED: "# Retries\n\nFailed requests are retried with exponential backoff and jitter.\n",
    "docs/cache.md": "# Caching\n\nResponses are kept in memory for ten minutes.\n",
    "src/loader.py": "def parse_config_file(path):\n    return open(path).read()\n",
    "notes/fox.md": "# Fox\n\nThe quick brown fox jumps over the lazy dog.\n",
}


def write_corpus(root: Path) -> None:
    for rel, text in CORPUS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there once the socket is closed


@dataclass(frozen=True)
class Outage:
    """One way the provider fails, scripted on the fake."""

    script: Callable[[FakeMistral], None]
    code: str
    #: embedding requests one failing search makes (the short-retry path)
    requests: int
    #: in the error message
    says: str
    #: the logged wait before the one retry, when it is the server's
    wait: str = ""


OUTAGES = {
    "401": Outage(lambda f: f.fail_next(401), errors.MISTRAL_AUTH, 1, "HTTP 401"),
    "422": Outage(lambda f: f.fail_next(422), errors.MISTRAL_FAILED, 1, "HTTP 422"),
    # Retry-After of 1 s is honoured once, then the search gives up.
    "429-retry-after": Outage(
        lambda f: f.fail_next(429, count=2, retry_after="1"),
        errors.MISTRAL_RATE_LIMIT,
        2,
        "rate limit",
        wait="in 1.0 s",
    ),
    "500": Outage(lambda f: f.fail_next(500, count=2), errors.MISTRAL_FAILED, 2, "HTTP 500"),
    "503": Outage(lambda f: f.fail_next(503, count=2), errors.MISTRAL_FAILED, 2, "HTTP 503"),
    # Sleeps past the query timeout (5 s); a timed-out query is not retried.
    "timeout": Outage(
        lambda f: f.delay_next(QUERY_OPTIONS.read_timeout + 3), errors.MISTRAL_FAILED, 1, "timed out"
    ),
}


def mistral_config(base_url: str, **sections):
    return build_config(
        {
            "mistral": {"base_url": base_url},
            "embed": {"provider": "mistral"},
            "chat": {"provider": "mistral"},
            **sections,
        },
        {},
        {},
    )


def assert_degraded(structured: dict, text: str, code: str, says: str, *, key: str | None) -> None:
    """Lexical hits, the right file first, the status and the text line; no key anywhere."""
    hits = structured["hits"]
    assert hits and hits[0]["rel_path"] == EXPECTED
    dense = structured["dense"]
    assert dense["status"] == "unavailable" and dense["code"] == code
    assert says in dense["message"]
    line = next(line for line in text.splitlines() if line.startswith(NOTICE))
    assert line.startswith(f"{NOTICE}{code}: ") and line.endswith(LEXICAL_ONLY)
    if key:
        assert key not in json.dumps(structured) + text


# -- in process, through the tool registry (every class) -------------------------------


def request(name: str, arguments: dict) -> dict:
    params = {"name": name, "arguments": arguments}
    return shape_message({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})


def call(ctx, name: str, arguments: dict) -> dict:
    """``tools/call`` as the MCP endpoint runs it; the result, validated against the output schema."""
    result = dispatch.respond(request(name, arguments), dispatch.SessionState("s", "2025-11-25"), ctx)[
        "result"
    ]
    assert not result.get("isError"), result
    Draft202012Validator(tools.table()[name].output_schema).validate(result["structuredContent"])
    return result


@pytest.fixture
def served(corpus_dir, state, fake_mistral, monkeypatch):
    """A context over an index whose chunks are all embedded (through the fake)."""
    write_corpus(corpus_dir)
    monkeypatch.setenv("MISTRAL_API_KEY", fake_mistral.API_KEY)
    config = mistral_config(fake_mistral.url)
    builder = make_embedder(config, secrets_lookup=lambda name: fake_mistral.API_KEY)
    counters = index_directory(corpus_dir, state=state, config=config, embedder=builder)
    builder.close()
    assert counters.embedded_ok == Chunk.objects.count() > 0
    ctx = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    yield ctx
    for model in ctx._models.values():
        if model is not None:
            model.close()


def embeds(fake: FakeMistral) -> int:
    return len(fake.requests_to(EMBED))


def retries_logged(caplog) -> list[str]:
    """The provider client's "retry n/m" warnings, as "retry n/m"."""
    found = [
        re.search(r"retry \d+/\d+", r.getMessage())
        for r in caplog.records
        if r.name == "corpus.providers.http"
    ]
    return [match.group(0) for match in found if match]


def test_dense_takes_part_when_the_provider_answers(served, fake_mistral):
    before = embeds(fake_mistral)

    result = call(served, "dir2mcp.search", {"query": QUERY})

    assert result["structuredContent"]["dense"] == {"status": "ok"}
    # auto searches both dense indices: one query embedding per model
    # (mistral-embed for text, codestral-embed for code)
    assert result["structuredContent"]["index_used"] == "both"
    assert embeds(fake_mistral) == before + 2
    assert NOTICE not in result["content"][0]["text"]


def test_no_embedder_is_dense_off(corpus_dir, state):
    write_corpus(corpus_dir)
    config = build_config({"embed": {"provider": "none"}, "chat": {"provider": "none"}}, {}, {})
    index_directory(corpus_dir, state=state, config=config)
    ctx = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")

    searched = call(ctx, "dir2mcp.search", {"query": QUERY})
    asked = call(ctx, "dir2mcp.ask", {"question": QUERY})

    for result in (searched, asked):
        assert result["structuredContent"]["dense"] == {"status": "off"}
        assert NOTICE not in result["content"][0]["text"]
    assert searched["structuredContent"]["hits"][0]["rel_path"] == EXPECTED


@pytest.mark.parametrize("outage", OUTAGES.values(), ids=OUTAGES.keys())
def test_search_answers_lexically_when_the_query_embedding_fails(served, fake_mistral, outage, caplog):
    assert call(served, "dir2mcp.search", {"query": QUERY})["structuredContent"]["dense"]["status"] == "ok"
    before = embeds(fake_mistral)
    outage.script(fake_mistral)

    with caplog.at_level(logging.WARNING, logger="corpus"):
        result = call(served, "dir2mcp.search", {"query": QUERY})

    structured = result["structuredContent"]
    assert_degraded(
        structured, result["content"][0]["text"], outage.code, outage.says, key=fake_mistral.API_KEY
    )
    assert embeds(fake_mistral) - before == outage.requests
    # The search path's budget: at most one retry (none after a timeout), the server's 1 s honoured.
    assert retries_logged(caplog) == ["retry 1/1"] * (outage.requests - 1)
    assert outage.wait in caplog.text
    warned = [r for r in caplog.records if r.name == "corpus.retrieval" and r.levelno == logging.WARNING]
    assert warned and outage.code in warned[0].getMessage()
    assert fake_mistral.API_KEY not in caplog.text


@pytest.mark.parametrize("outage", OUTAGES.values(), ids=OUTAGES.keys())
def test_ask_answers_from_lexical_hits_when_the_query_embedding_fails(served, fake_mistral, outage):
    outage.script(fake_mistral)
    chats = len(fake_mistral.requests_to(CHAT))

    result = call(served, "dir2mcp.ask", {"question": QUERY})

    structured = result["structuredContent"]
    assert_degraded(
        structured, result["content"][0]["text"], outage.code, outage.says, key=fake_mistral.API_KEY
    )
    # The chat model answered from the lexical hits, and cited them.
    assert len(fake_mistral.requests_to(CHAT)) == chats + 1
    assert structured["citations"][0]["rel_path"] == EXPECTED
    assert f"[{EXPECTED}:L" in structured["answer"]


def test_a_server_waiting_for_its_childs_file_says_dense_waits(served, state):
    """A server following its indexing child's saves (`up`), with no usable
    code index file and too many vectors to build it here, searches that
    index lexically until the child saves the file: search, ask and stats
    say so (they said ``ok`` and nothing, before)."""
    index_path(state, "code").unlink()  # lost: the child builds it again and saves it
    drop_store(state)  # the server starts afresh
    store = dense_store(state)
    store.follow_saves, store.replace_in_place_max = 3600.0, 0
    holder = IndexLock(state)  # the indexing child is alive
    holder.acquire()
    try:
        searched = call(served, "dir2mcp.search", {"query": QUERY})
        asked = call(served, "dir2mcp.ask", {"question": QUERY, "mode": "search_only"})
        stats = call(served, "dir2mcp.stats", {})
    finally:
        holder.release()
    for result in (searched, asked):
        dense = result["structuredContent"]["dense"]
        assert dense["status"] == "waiting" and dense["kinds"] == ["code"], dense
        assert "indexing process" in dense["message"]
        assert "Dense search waiting (" in result["content"][0]["text"]
    assert searched["structuredContent"]["index_used"] == "text"  # the text index's dense ranking took part
    assert searched["structuredContent"]["hits"][0]["rel_path"] == EXPECTED
    assert stats["structuredContent"]["indexer"]["dense"]["waiting_for_file"] == ["code"]
    assert "waits for the indexer's file" in stats["content"][0]["text"]

    child = DenseStore(state)  # the child builds the code index and saves it
    child.sync("code")
    child.save(force=True)
    again = call(served, "dir2mcp.search", {"query": QUERY})
    assert again["structuredContent"]["dense"] == {"status": "ok"}
    stats = call(served, "dir2mcp.stats", {})
    assert stats["structuredContent"]["indexer"]["dense"]["waiting_for_file"] == []


GENERATION_NOTICE = "Answer generation unavailable ("
LISTED_INSTEAD = "); the top matches are listed instead."

#: (scripting of the chat endpoint alone, code, chat requests made, in the message)
CHAT_OUTAGES = {
    "401": (lambda f: f.fail_next(401, path=CHAT), errors.MISTRAL_AUTH, 1, "HTTP 401"),
    "422": (lambda f: f.fail_next(422, path=CHAT), errors.MISTRAL_FAILED, 1, "HTTP 422"),
    # The chat client's own budget: five attempts with backoff, then the hits.
    "503": (lambda f: f.fail_next(503, count=5, path=CHAT), errors.MISTRAL_FAILED, 5, "HTTP 503"),
}


def assert_generation_unavailable(structured: dict, text: str, code: str, says: str, key: str) -> None:
    """The hits as the answer, each cited; dense search took part; the status and its line."""
    assert structured["dense"] == {"status": "ok"}
    generation = structured["generation"]
    assert generation["status"] == "unavailable" and generation["code"] == code
    assert says in generation["message"]
    assert structured["answer"].startswith("Top matches:\n1. [" + EXPECTED + ":L")
    assert [c["rel_path"] for c in structured["citations"]] == [h["rel_path"] for h in structured["hits"]]
    line = next(line for line in text.splitlines() if line.startswith(GENERATION_NOTICE))
    assert line.startswith(f"{GENERATION_NOTICE}{code}: ") and line.endswith(LISTED_INSTEAD)
    assert key not in json.dumps(structured) + text


def test_ask_says_whether_the_chat_model_wrote_the_answer(served, fake_mistral):
    answered = call(served, "dir2mcp.ask", {"question": QUERY})["structuredContent"]
    listed = call(served, "dir2mcp.ask", {"question": QUERY, "mode": "search_only"})["structuredContent"]

    assert answered["generation"] == {"status": "ok", "model": "mistral/mistral-small-2506"}
    assert answered["mode"] == "answer" and f"[{EXPECTED}:L" in answered["answer"]
    # Contract 5.0.0 (issue #24): which mode answered, and why.
    assert listed["generation"] == {
        "status": "off",
        "reason": "search_only",
        "message": "mode=search_only was asked for",
    }
    assert listed["mode"] == "search_only" and listed["answer"].startswith("Top matches:")


@pytest.mark.parametrize("name", CHAT_OUTAGES)
def test_ask_lists_the_hits_when_the_chat_model_fails(served, fake_mistral, name, caplog):
    script, code, requests, says = CHAT_OUTAGES[name]
    script(fake_mistral)
    chats = len(fake_mistral.requests_to(CHAT))

    with caplog.at_level(logging.WARNING, logger="corpus"):
        result = call(served, "dir2mcp.ask", {"question": QUERY})

    assert_generation_unavailable(
        result["structuredContent"], result["content"][0]["text"], code, says, fake_mistral.API_KEY
    )
    assert len(fake_mistral.requests_to(CHAT)) - chats == requests
    warned = [r for r in caplog.records if r.name == "corpus.answer" and r.levelno == logging.WARNING]
    assert warned and code in warned[0].getMessage()
    assert fake_mistral.API_KEY not in caplog.text
    # The next ask, with the chat model back, is answered by it again.
    assert (
        call(served, "dir2mcp.ask", {"question": QUERY})["structuredContent"]["generation"]["status"] == "ok"
    )


def test_a_refused_connection_degrades_search_and_ask(served, corpus_dir, state, caplog):
    # The index was embedded through the fake; now nothing listens where the provider was.
    config = mistral_config(closed_port_url(), chat={"provider": "none"})
    ctx = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    key = os.environ["MISTRAL_API_KEY"]
    try:
        with caplog.at_level(logging.WARNING, logger="corpus"):
            searched = call(ctx, "dir2mcp.search", {"query": QUERY})
            asked = call(ctx, "dir2mcp.ask", {"question": QUERY})
    finally:
        ctx.embedder.close()

    for result in (searched, asked):
        assert_degraded(
            result["structuredContent"],
            result["content"][0]["text"],
            errors.MISTRAL_FAILED,
            "could not connect",
            key=key,
        )
    assert retries_logged(caplog) == ["retry 1/1"] * 2  # one quick retry each, not a ladder of four


def test_a_long_retry_after_is_not_waited_for(served, fake_mistral, caplog):
    fake_mistral.fail_next(429, count=5, retry_after="30")
    before = embeds(fake_mistral)

    with caplog.at_level(logging.WARNING, logger="corpus"):
        result = call(served, "dir2mcp.search", {"query": QUERY})

    assert retries_logged(caplog) == []
    assert embeds(fake_mistral) - before == 1  # Retry-After > 1 s: no retry on the search path
    assert result["structuredContent"]["dense"]["code"] == errors.MISTRAL_RATE_LIMIT
    assert result["structuredContent"]["hits"][0]["rel_path"] == EXPECTED


def test_a_persistent_outage_costs_a_search_two_requests_not_five(served, fake_mistral):
    fake_mistral.fail_next(503, count=5)
    before = embeds(fake_mistral)

    result = call(served, "dir2mcp.search", {"query": QUERY, "index": "both"})

    assert embeds(fake_mistral) - before == 2  # the text embedding gave up; code is not tried
    dense = result["structuredContent"]["dense"]
    assert dense["status"] == "unavailable" and dense["code"] == errors.MISTRAL_FAILED
    assert result["structuredContent"]["hits"][0]["rel_path"] == EXPECTED


# -- a local model that cannot load ---------------------------------------------------


@pytest.fixture
def local_index(corpus_dir, state):
    from corpus.providers.local import LocalEmbedder

    write_corpus(corpus_dir)
    config = build_config({"embed": {"provider": "local"}, "chat": {"provider": "none"}}, {}, {})
    counters = index_directory(corpus_dir, state=state, config=config, embedder=LocalEmbedder())
    assert counters.embedded_ok == Chunk.objects.count() > 0
    return config


def linked_model(target: Path) -> Path:
    """A model directory of links to the installed model's files."""
    from corpus.providers.local import default_model_dir

    target.mkdir()
    for item in default_model_dir().iterdir():
        (target / item.name).symlink_to(item)
    return target


def search_and_ask(state, config, embedder) -> list[tuple[dict, str]]:
    searcher = Searcher(state, config, embedder)
    searched = searcher.search(QUERY).as_dict()
    asked = ask(QUERY, searcher=searcher, chat=None, config=config).as_dict()
    return [
        (searched, tools.table()["dir2mcp.search"].summarize(searched)),
        (asked, tools.table()["dir2mcp.ask"].summarize(asked)),
    ]


def test_a_local_model_dir_emptied_after_start_degrades(local_index, state, tmp_path):
    from corpus.providers.local import LocalEmbedder

    model = linked_model(tmp_path / "model")
    embedder = LocalEmbedder(model)  # its files were there when it was made
    for item in model.iterdir():
        item.unlink()
    assert not any(model.iterdir())

    for structured, text in search_and_ask(state, local_index, embedder):
        assert_degraded(
            structured, text, errors.CONFIG_INVALID, "cannot read the local model weights", key=None
        )


def test_a_local_model_that_fails_to_load_degrades(local_index, state, tmp_path):
    from corpus.providers.local import LocalEmbedder

    model = linked_model(tmp_path / "model")
    (model / "tokenizer.json").unlink()
    (model / "tokenizer.json").write_text("{not a tokenizer")  # the tokenizers library raises its own error
    embedder = LocalEmbedder(model)

    for structured, text in search_and_ask(state, local_index, embedder):
        assert_degraded(structured, text, errors.CONFIG_INVALID, "the local embedder failed", key=None)


def test_the_intact_local_model_takes_part(local_index, state, tmp_path):
    from corpus.providers.local import LocalEmbedder

    embedder = LocalEmbedder(linked_model(tmp_path / "model"))

    for structured, text in search_and_ask(state, local_index, embedder):
        assert structured["dense"] == {"status": "ok"} and NOTICE not in text


# -- over MCP (HTTP) and the REST mirror, on a real server ----------------------------------


@pytest.fixture(scope="module")
def module_fake():
    fake = FakeMistral().start()
    yield fake
    fake.close()


def server_env(fake: FakeMistral, base_url: str | None = None) -> dict[str, str]:
    return {
        "MISTRAL_API_KEY": fake.API_KEY,
        "DIR2MCP_MISTRAL__BASE_URL": base_url or fake.url,
        "DIR2MCP_EMBED__PROVIDER": "mistral",
        "DIR2MCP_CHAT__PROVIDER": "mistral",
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory, module_fake):
    """daphne over a corpus indexed with embeddings through the fake."""
    root = tmp_path_factory.mktemp("degrade")
    write_corpus(root)
    srv = start_daphne(root, env=server_env(module_fake))
    yield srv
    err = stop(srv)
    assert "Traceback" not in err, err
    assert module_fake.API_KEY not in err


def rest(server, method: str, path: str, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {server.token}"}
    return httpx.request(method, f"{server.base}/api/v1{path}", headers=headers, timeout=30, **kw)


HTTP_OUTAGES = ["401", "429-retry-after", "503"]


@pytest.mark.parametrize("name", HTTP_OUTAGES)
@pytest.mark.parametrize("tool", ["dir2mcp.search", "dir2mcp.ask"])
def test_over_mcp_search_and_ask_degrade(server, module_fake, name, tool):
    session = server.initialize()
    arguments = {"query": QUERY} if tool == "dir2mcp.search" else {"question": QUERY}
    assert server.call(session, tool, arguments)["structuredContent"]["dense"] == {"status": "ok"}
    outage = OUTAGES[name]
    outage.script(module_fake)

    result = server.call(session, tool, arguments, msg_id=2)

    assert not result.get("isError"), result
    Draft202012Validator(tools.table()[tool].output_schema).validate(result["structuredContent"])
    assert_degraded(
        result["structuredContent"],
        result["content"][0]["text"],
        outage.code,
        outage.says,
        key=module_fake.API_KEY,
    )


@pytest.mark.parametrize("name", ["401", "500"])
def test_over_rest_search_and_ask_degrade(server, module_fake, name):
    outage = OUTAGES[name]
    outage.script(module_fake)
    searched = rest(server, "GET", "/search", params={"query": QUERY})
    outage.script(module_fake)
    asked = rest(server, "POST", "/ask", json={"question": QUERY})

    for response, tool in ((searched, "dir2mcp.search"), (asked, "dir2mcp.ask")):
        assert response.status_code == 200, response.text
        body = response.json()
        Draft202012Validator(tools.table()[tool].output_schema).validate(body)
        # REST answers the structured result alone: the notice is the summary of that body.
        assert_degraded(
            body, tools.table()[tool].summarize(body), outage.code, outage.says, key=module_fake.API_KEY
        )


def test_over_mcp_and_rest_ask_lists_the_hits_when_the_chat_model_fails(server, module_fake):
    session = server.initialize()
    module_fake.fail_next(401, path=CHAT)
    over_mcp = server.call(session, "dir2mcp.ask", {"question": QUERY})
    module_fake.fail_next(401, path=CHAT)
    over_rest = rest(server, "POST", "/ask", json={"question": QUERY})

    assert not over_mcp.get("isError"), over_mcp
    assert over_rest.status_code == 200, over_rest.text
    for structured, text in (
        (over_mcp["structuredContent"], over_mcp["content"][0]["text"]),
        (over_rest.json(), tools.table()["dir2mcp.ask"].summarize(over_rest.json())),
    ):
        Draft202012Validator(tools.table()["dir2mcp.ask"].output_schema).validate(structured)
        assert_generation_unavailable(structured, text, errors.MISTRAL_AUTH, "HTTP 401", module_fake.API_KEY)


def test_a_server_whose_provider_is_gone_still_answers(server, module_fake):
    # The same index, served by a second process whose provider port is closed.
    env = base_env(
        DIR2MCP_ROOT=str(server.root), DIR2MCP_AUTH="auto", **server_env(module_fake, closed_port_url())
    )
    env["DIR2MCP_CHAT__PROVIDER"] = "none"
    gone = serve_daphne(server.root, env)
    try:
        session = gone.initialize()
        over_mcp = gone.call(session, "dir2mcp.search", {"query": QUERY})
        over_rest = rest(gone, "GET", "/search", params={"query": QUERY})
    finally:
        err = stop(gone)
    assert_degraded(
        over_mcp["structuredContent"],
        over_mcp["content"][0]["text"],
        errors.MISTRAL_FAILED,
        "could not connect",
        key=module_fake.API_KEY,
    )
    assert over_rest.status_code == 200
    assert over_rest.json()["dense"]["code"] == errors.MISTRAL_FAILED
    assert "dense search unavailable (MISTRAL_FAILED" in err  # the log warning
    assert module_fake.API_KEY not in err


def test_ask_cli_json_reports_the_degraded_search(server, module_fake):
    env = base_env(**server_env(module_fake))
    module_fake.fail_next(401)

    done = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "ask", QUERY, "--dir", str(server.root), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["dense"]["status"] == "unavailable" and answer["dense"]["code"] == errors.MISTRAL_AUTH
    assert answer["hits"][0]["rel_path"] == EXPECTED
    assert module_fake.API_KEY not in done.stdout + done.stderr
