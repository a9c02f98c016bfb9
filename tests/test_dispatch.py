"""JSON-RPC methods and the tool registry, in process over a real index."""

from __future__ import annotations

import threading

import pytest
from jsonschema import Draft202012Validator

from corpus.ingest.indexing import index_directory
from kernel.config import build_config
from mcp_gateway import context, dispatch, schemas, tools
from mcp_gateway.transport import shape_message

pytestmark = pytest.mark.django_db


@pytest.fixture
def ctx(corpus_dir, state):
    (corpus_dir / "src").mkdir()
    (corpus_dir / "src" / "loader.py").write_text(
        "def parse_config_file(path):\n    return open(path).read()\n"
    )
    (corpus_dir / "README.md").write_text("# Loader\n\nThe loader reads configuration files.\n")
    config = build_config({"embed": {"provider": "none"}, "chat": {"provider": "none"}}, {}, {})
    index_directory(corpus_dir, state=state, config=config)
    built = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    return built


def request(method, params=None, msg_id=1):
    body = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        body["params"] = params
    return shape_message(body)


def session():
    return dispatch.SessionState("sess_test", "2025-11-25")


def call(ctx, name, arguments, **kw):
    reply = dispatch.respond(
        request("tools/call", {"name": name, "arguments": arguments}), session(), ctx, **kw
    )
    return reply["result"]


def test_initialize_echoes_a_supported_version_and_offers_the_latest_otherwise(ctx):
    for version in ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"):
        result = dispatch.respond(request("initialize", {"protocolVersion": version}), session(), ctx)[
            "result"
        ]
        assert result["protocolVersion"] == version
    result = dispatch.respond(request("initialize", {"protocolVersion": "1999-01-01"}), session(), ctx)[
        "result"
    ]
    assert result["protocolVersion"] == "2025-11-25"
    assert result["capabilities"] == {
        "tools": {"listChanged": False},
        "logging": {},
        "resources": {"subscribe": True, "listChanged": True},
        "prompts": {"listChanged": False},
        "completions": {},
    }
    assert result["serverInfo"]["name"] == "dir2mcp"
    assert result["serverInfo"]["schemaVersion"] == schemas.SCHEMA_VERSION
    assert "dir2mcp.search" in result["instructions"]


def test_ping_and_unknown_methods(ctx):
    assert dispatch.respond(request("ping"), session(), ctx) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    reply = dispatch.respond(request("resources/frobnicate", {"uri": "x"}), session(), ctx)
    assert reply["error"]["code"] == -32601
    reply = dispatch.respond(request("resources/read", {"uri": "x"}), session(), ctx)
    assert reply["error"]["code"] == -32002  # not a dir2mcp:/// URI: no such resource here


def test_notifications_get_no_answer(ctx):
    note = shape_message({"jsonrpc": "2.0", "method": "notifications/initialized"})
    state = session()
    assert dispatch.respond(note, state, ctx) is None
    assert state.initialized


def test_logging_set_level(ctx):
    state = session()
    assert dispatch.respond(request("logging/setLevel", {"level": "info"}), state, ctx)["result"] == {}
    assert state.log_level == "info"
    reply = dispatch.respond(request("logging/setLevel", {"level": "loud"}), state, ctx)
    assert reply["error"]["code"] == -32602


def test_tools_list_pages_with_cursors(ctx, monkeypatch):
    monkeypatch.setattr(tools, "PAGE_SIZE", 2)
    names, cursor = [], None
    while True:
        params = {"cursor": cursor} if cursor else {}
        result = dispatch.respond(request("tools/list", params), session(), ctx)["result"]
        names += [t["name"] for t in result["tools"]]
        cursor = result.get("nextCursor")
        if not cursor:
            break
    assert names == list(tools.table())
    assert {
        "dir2mcp.search",
        "dir2mcp.ask",
        "dir2mcp.open_file",
        "dir2mcp.list_files",
        "dir2mcp.stats",
    } <= set(names)


@pytest.mark.parametrize("cursor", ["garbage", "dG9vbHM6OTk5", "", 7])
def test_bad_cursor_is_invalid_params(ctx, cursor):
    reply = dispatch.respond(request("tools/list", {"cursor": cursor}), session(), ctx)
    assert reply["error"]["code"] == -32602


def test_every_tool_definition_is_well_formed():
    for tool in tools.table().values():
        definition = tool.definition()
        assert definition["name"].startswith("dir2mcp.")
        assert definition["inputSchema"]["type"] == "object"
        assert definition["outputSchema"]["type"] == "object"
        Draft202012Validator.check_schema(definition["inputSchema"])
        Draft202012Validator.check_schema(definition["outputSchema"])
        assert definition["annotations"]["readOnlyHint"] is True
        assert len(definition["description"]) > 80


def test_unknown_tool_is_a_protocol_error(ctx):
    reply = dispatch.respond(request("tools/call", {"name": "dir2mcp.nope", "arguments": {}}), session(), ctx)
    assert reply["error"]["code"] == -32602
    assert "Unknown tool" in reply["error"]["message"]
    reply = dispatch.respond(request("tools/call", {"arguments": {}}), session(), ctx)
    assert reply["error"]["code"] == -32602
    reply = dispatch.respond(
        request("tools/call", {"name": "dir2mcp.stats", "arguments": [1]}), session(), ctx
    )
    assert reply["error"]["code"] == -32602


@pytest.mark.parametrize(
    "arguments, code",
    [
        ({}, "MISSING_FIELD"),
        ({"query": "x", "k": 0}, "INVALID_RANGE"),
        ({"query": "x", "k": 51}, "INVALID_RANGE"),
        ({"query": "x", "k": "ten"}, "INVALID_FIELD"),
        ({"query": "x", "index": "images"}, "INVALID_FIELD"),
        ({"query": "x", "colour": "red"}, "INVALID_FIELD"),
        ({"query": 5}, "INVALID_FIELD"),
    ],
)
def test_bad_arguments_are_tool_errors_with_codes(ctx, arguments, code):
    result = call(ctx, "dir2mcp.search", arguments)
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == code
    assert result["structuredContent"]["error"]["retryable"] is False
    assert result["content"][0]["text"].startswith(f"ERROR: {code}:")


def validate_output(name, result):
    assert not result.get("isError"), result
    Draft202012Validator(tools.table()[name].output_schema).validate(result["structuredContent"])


def test_search_result_validates_and_cites(ctx):
    result = call(ctx, "dir2mcp.search", {"query": "parse_config_file"})
    validate_output("dir2mcp.search", result)
    hits = result["structuredContent"]["hits"]
    assert hits[0]["rel_path"] == "src/loader.py"
    assert "[src/loader.py:L1-L2]" in result["content"][0]["text"]


def test_ask_without_a_chat_model_is_search_only_with_citations(ctx):
    result = call(ctx, "dir2mcp.ask", {"question": "what reads configuration files?"})
    validate_output("dir2mcp.ask", result)
    # the function whose name is made of the question's words comes first
    # (search.name_match_weight), the README that says them second
    citations = [citation["rel_path"] for citation in result["structuredContent"]["citations"]]
    assert citations[:2] == ["src/loader.py", "README.md"]
    assert "Sources: [src/loader.py:L1-L2]" in result["content"][0]["text"]


def test_stats_validates_and_reports_the_finished_job(ctx):
    result = call(ctx, "dir2mcp.stats", {})
    validate_output("dir2mcp.stats", result)
    stats = result["structuredContent"]
    assert stats["indexing"]["running"] is False
    assert stats["indexing"]["indexed"] == 2
    assert stats["schema_version"] == schemas.SCHEMA_VERSION
    assert stats["root"] == str(ctx.root)


def test_progress_notifications_strictly_increase(ctx):
    sent = []
    msg = shape_message(
        {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {
                "name": "dir2mcp.ask",
                "arguments": {"question": "loader"},
                "_meta": {"progressToken": "p"},
            },
        }
    )
    dispatch.respond(msg, session(), ctx, emit=sent.append)
    progress = [n["params"] for n in sent if n["method"] == "notifications/progress"]
    assert len(progress) >= 2
    assert all(p["progressToken"] == "p" for p in progress)
    values = [p["progress"] for p in progress]
    assert values == sorted(set(values))


def test_no_progress_without_a_token_and_logs_only_at_the_chosen_level(ctx):
    sent = []
    state = session()
    dispatch.respond(
        request("tools/call", {"name": "dir2mcp.ask", "arguments": {"question": "x"}}),
        state,
        ctx,
        emit=sent.append,
    )
    assert sent == []
    state.log_level = "info"
    dispatch.respond(
        request("tools/call", {"name": "dir2mcp.ask", "arguments": {"question": "x"}}),
        state,
        ctx,
        emit=sent.append,
    )
    assert [n["method"] for n in sent] == ["notifications/message"]
    assert sent[0]["params"]["level"] == "info"
    sent.clear()
    state.log_level = "error"
    dispatch.respond(
        request("tools/call", {"name": "dir2mcp.ask", "arguments": {"question": "x"}}),
        state,
        ctx,
        emit=sent.append,
    )
    assert sent == []


def test_a_cancelled_call_raises_to_the_transport(ctx):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(tools.Cancelled):
        dispatch.respond(
            request("tools/call", {"name": "dir2mcp.ask", "arguments": {"question": "x"}}),
            session(),
            ctx,
            cancel=cancel,
        )


def test_stats_names_the_models_this_process_runs(ctx):
    models = call(ctx, "dir2mcp.stats", {})["structuredContent"]["models"]
    assert models["embed_text"] == models["embed_code"] == "none"  # embed.provider: none
    assert models["chat"] == "none (chat.provider is none)"  # and why (issue #24)
