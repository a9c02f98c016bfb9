"""Prompts and completions over a real server, driven by the official MCP client.

``prompts/list``, ``prompts/get`` and ``completion/complete`` against daphne
on a real port (the corpus indexed first, as ``start_daphne`` does), and the
same methods over ``mcp_stdio``, which shares the dispatcher. The corpus has
a secret-bearing file (indexed as skipped), a git-ignored one, a folder of
150 files, mixed-case names and files with known modification times.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.types import PromptReference, ResourceTemplateReference

from corpus import uris
from mcp_gateway import dispatch, prompts
from mcp_gateway.completion import declared_name
from mcp_gateway.transport import shape_message
from tests.mcp_http import REPO, base_env, index, start_daphne, stop, write_corpus
from tests.support import TLS, wait_until_async

pytestmark = pytest.mark.slow

SECRET = "AKIAABCDEFGHIJKLMNOP"
OLD = datetime(2020, 1, 1, tzinfo=UTC).timestamp()
#: files modified after 2023-01-01, newest first
RECENT = {
    "src/helpers.py": datetime(2024, 6, 2, tzinfo=UTC),
    "docs/guide.md": datetime(2024, 6, 1, tzinfo=UTC),
}
HELPERS = "def parse_other(x):\n    return x\n\n\nclass ConfigLoader:\n    pass\n"


def write_fixture(root: Path) -> None:
    write_corpus(root)  # src/loader.py (parse_config_file), docs/guide.md, notes.txt
    extra = {
        "src/helpers.py": HELPERS,
        "Mixed/ReadMe.md": "# Mixed case\n",
        "keys/aws.txt": f"aws_key = {SECRET}\n",  # secret-bearing: indexed as skipped
        "keys/aws_old.txt": f"old_key = {SECRET}\n",
        ".gitignore": "build/\n",
        "build/out.txt": "ignored output\n",
        **{f"many/file_{n:03d}.txt": f"file {n}\n" for n in range(150)},
    }
    for rel, text in extra.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, (OLD, OLD))
    for rel, moment in RECENT.items():
        os.utime(root / rel, (moment.timestamp(), moment.timestamp()))
    os.utime(root / "keys/aws.txt", (RECENT["src/helpers.py"].timestamp(),) * 2)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_fixture(root)
    served = start_daphne(root)
    yield served
    err = stop(served)
    assert "Traceback" not in err, err[-2000:]


def over_http(server, check) -> None:
    """Run ``check(session)`` in an initialized SDK session with ``server``."""

    async def main() -> None:
        headers = {"Authorization": f"Bearer {server.token}"}
        async with httpx.AsyncClient(headers=headers, timeout=60, verify=TLS) as http:
            async with streamable_http_client(server.url, http_client=http) as (read, write, _):
                async with ClientSession(read, write) as session:
                    init = await session.initialize()
                    assert init.capabilities.prompts is not None
                    assert init.capabilities.prompts.listChanged is False
                    assert init.capabilities.completions is not None
                    await check(session)

    anyio.run(main)


async def error_of(call) -> tuple[int, str, dict | None]:
    with pytest.raises(McpError) as raised:
        await call
    error = raised.value.error
    return error.code, error.message, error.data


def prompt(name: str) -> PromptReference:
    return PromptReference(type="ref/prompt", name=name)


FILE = ResourceTemplateReference(type="ref/resource", uri=uris.FILE_TEMPLATE)
SLICE = ResourceTemplateReference(type="ref/resource", uri=uris.SLICE_TEMPLATE)


# -- prompts ------------------------------------------------------------------------


def test_prompts_are_listed_with_titles_and_arguments(server):
    async def check(session):
        listed = await session.list_prompts()
        assert listed.nextCursor is None
        by_name = {p.name: p for p in listed.prompts}
        assert set(by_name) == {"ask", "explain", "changes"}
        for item in listed.prompts:
            assert item.title and item.description
        assert [(a.name, a.required) for a in by_name["ask"].arguments] == [("question", True)]
        assert [(a.name, a.required) for a in by_name["explain"].arguments] == [
            ("path", False),
            ("symbol", False),
        ]
        assert [(a.name, a.required) for a in by_name["changes"].arguments] == [("since", True)]
        code, message, _ = await error_of(session.list_prompts(cursor="not-a-cursor"))
        assert (code, message) == (-32602, "invalid cursor")

    over_http(server, check)


def test_ask_tells_the_model_to_search_read_and_cite(server):
    async def check(session):
        got = await session.get_prompt("ask", {"question": "What reads configuration files?"})
        (message,) = got.messages
        assert message.role == "user" and message.content.type == "text"
        text = message.content.text
        assert text.endswith("Question: What reads configuration files?")
        for needed in ("dir2mcp.search", "dir2mcp.open_file", "[path:L10-L20]"):
            assert needed in text

    over_http(server, check)


def test_explain_embeds_the_file_as_it_is_on_disk(server):
    async def check(session):
        got = await session.get_prompt("explain", {"path": "src/loader.py"})
        intro, attached = got.messages
        assert intro.content.type == "text" and "src/loader.py" in intro.content.text
        assert attached.content.type == "resource"
        resource = attached.content.resource
        assert str(resource.uri) == "dir2mcp:///src/loader.py"
        assert resource.mimeType == "text/x-python"
        assert resource.text == (server.root / "src/loader.py").read_text()

    over_http(server, check)


def test_explain_a_symbol_embeds_its_definition(server):
    async def check(session):
        got = await session.get_prompt("explain", {"symbol": "parse_other"})
        intro, attached = got.messages
        assert "[src/helpers.py:L1-L2]" in intro.content.text
        resource = attached.content.resource
        assert str(resource.uri) == "dir2mcp:///src/helpers.py?lines=1-2"
        assert resource.text == "def parse_other(x):\n    return x"
        # the symbol in a chosen file: the one there, or a clear refusal
        got = await session.get_prompt("explain", {"symbol": "parse_config_file", "path": "src/loader.py"})
        assert "src/loader.py" in got.messages[1].content.resource.uri.path
        code, message, _ = await error_of(
            session.get_prompt("explain", {"symbol": "parse_other", "path": "src/loader.py"})
        )
        assert code == -32602 and "no definition of 'parse_other' found in src/loader.py" in message

    over_http(server, check)


def test_changes_lists_exactly_the_files_modified_since(server):
    async def check(session):
        got = await session.get_prompt("changes", {"since": "2023-01-01"})
        intro, *links = got.messages
        assert [link.content.type for link in links] == ["resource_link"] * 2
        assert [link.content.name for link in links] == ["helpers.py", "guide.md"]
        assert [str(link.content.uri) for link in links] == [f"dir2mcp:///{rel}" for rel in RECENT]
        assert links[0].content.annotations.lastModified == "2024-06-02T00:00:00Z"
        for rel in RECENT:
            assert rel in intro.content.text
        assert "keys/aws.txt" not in intro.content.text  # modified then too, but secret-bearing
        later = await session.get_prompt("changes", {"since": "2024-06-01T12:00:00Z"})
        assert [str(m.content.uri) for m in later.messages[1:]] == ["dir2mcp:///src/helpers.py"]
        none = await session.get_prompt("changes", {"since": "2030-01-01"})
        assert len(none.messages) == 1 and "No file" in none.messages[0].content.text

    over_http(server, check)


@pytest.mark.parametrize(
    "name, arguments, expected",
    [
        pytest.param("nope", {}, "Unknown prompt: nope", id="unknown-prompt"),
        pytest.param("ask", {}, "prompt ask needs the argument question", id="missing-required"),
        pytest.param(
            "ask", {"question": "  "}, "prompt ask needs the argument question", id="blank-required"
        ),
        pytest.param(
            "ask", {"question": "q", "k": "5"}, "prompt ask has no argument 'k'", id="unknown-argument"
        ),
        pytest.param("explain", {}, "explain needs a path or a symbol", id="explain-nothing"),
        pytest.param("changes", {"since": "last week"}, "since must be an ISO-8601 date", id="bad-date"),
        pytest.param("explain", {"path": "../outside.txt"}, "", id="outside-root"),
        pytest.param("explain", {"path": "keys/aws.txt"}, "secret", id="secret-bearing"),
        pytest.param("explain", {"path": "build/out.txt"}, "excluded", id="git-ignored"),
        pytest.param("explain", {"path": "no/such.py"}, "", id="missing-file"),
    ],
)
def test_bad_prompt_requests_are_invalid_params(server, name, arguments, expected):
    async def check(session):
        code, message, _ = await error_of(session.get_prompt(name, arguments))
        assert code == -32602
        assert expected in message

    over_http(server, check)


def test_refused_files_carry_open_files_code(server):
    async def check(session):
        for path, code in (
            ("../outside.txt", "PATH_OUTSIDE_ROOT"),
            ("keys/aws.txt", "FORBIDDEN"),
            ("build/out.txt", "FORBIDDEN"),
            ("no/such.py", "FILE_NOT_FOUND"),
        ):
            _, _, data = await error_of(session.get_prompt("explain", {"path": path}))
            assert data["code"] == code, path

    over_http(server, check)


def test_prompts_list_pages_with_cursors(monkeypatch):
    monkeypatch.setattr(prompts, "PAGE_SIZE", 1)
    state = dispatch.SessionState("sess_test", "2025-11-25")

    def listed(params: dict) -> dict:
        body = {"jsonrpc": "2.0", "id": 1, "method": "prompts/list", "params": params}
        return dispatch.respond(shape_message(body), state, None)

    names, cursor = [], None
    while True:
        page = listed({"cursor": cursor} if cursor else {})["result"]
        names += [p["name"] for p in page["prompts"]]
        cursor = page.get("nextCursor")
        if not cursor:
            break
    assert names == ["ask", "explain", "changes"]
    tools_cursor = dispatch.tools.list_page(page_size=1)["nextCursor"]
    for bad, message in ((tools_cursor, "invalid cursor"), (7, "cursor must be a string")):
        error = listed({"cursor": bad})["error"]
        assert (error["code"], error["message"]) == (-32602, message)


# -- completion ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, name",
    [
        pytest.param("def parse_config_file(path):", "parse_config_file", id="python-def"),
        pytest.param("async def fetch(url):", "fetch", id="python-async"),
        pytest.param("class ConfigLoader(Base):", "ConfigLoader", id="class"),
        pytest.param("func (s *Server) Serve(ctx context.Context) error {", "Serve", id="go-method"),
        pytest.param("pub struct Point<T> {", "Point", id="rust-struct"),
        pytest.param("export function renderPage(props) {", "renderPage", id="js-function"),
        pytest.param("const handler = async (event) => {", "handler", id="js-arrow"),
        pytest.param("exports.parse = function (text) {", "parse", id="js-exports"),
        pytest.param("static int *alloc_buffer(size_t n)", "alloc_buffer", id="c-function"),
        pytest.param("public void run(String[] args) {", "run", id="java-method"),
        pytest.param("getName(): string {", "getName", id="ts-method"),
        pytest.param("readonly id?: number;", "id", id="ts-property"),
        pytest.param("return compute(x)", None, id="return-call"),
        pytest.param("x = compute(y)", None, id="assigned-call"),
        pytest.param("with open(path) as fh:", None, id="with"),
        pytest.param("foo(bar);", None, id="call-statement"),
        pytest.param("} else if (x) {", None, id="else-if"),
        pytest.param("import os", None, id="import"),
    ],
)
def test_declared_name_reads_what_a_line_declares(line, name):
    assert declared_name(line) == name


def test_paths_complete_segment_by_segment_case_insensitively(server):
    async def check(session):
        async def values(ref, typed, context=None) -> list[str]:
            done = await session.complete(ref, {"name": "path", "value": typed}, context)
            return done.completion.values

        top = await values(prompt("explain"), "")
        # single-file folders complete to their file; keys/ holds only secret-bearing files
        assert top == [".gitignore", "docs/guide.md", "many/", "Mixed/ReadMe.md", "notes.txt", "src/"]
        assert await values(prompt("explain"), "SR") == ["src/"]
        assert await values(prompt("explain"), "src/") == ["src/helpers.py", "src/loader.py"]
        assert await values(prompt("explain"), "mixed/read") == ["Mixed/ReadMe.md"]
        assert await values(FILE, "NOTES") == ["notes.txt"]
        assert await values(SLICE, "src/L") == ["src/loader.py"]
        assert await values(prompt("explain"), "zzz") == []

    over_http(server, check)


def test_path_completion_is_bounded_with_a_total(server):
    async def check(session):
        done = (await session.complete(prompt("explain"), {"name": "path", "value": "MANY/F"})).completion
        assert len(done.values) == 100 and done.total == 150 and done.hasMore is True
        assert done.values == [f"many/file_{n:03d}.txt" for n in range(100)]
        few = (await session.complete(FILE, {"name": "path", "value": "many/file_14"})).completion
        assert few.values == [f"many/file_{n}.txt" for n in range(140, 150)]
        assert few.total == 10 and few.hasMore is False

    over_http(server, check)


def test_secret_and_excluded_files_are_never_completed(server):
    async def check(session):
        for typed in ("k", "keys/", "KEYS/AWS", "b", "build/", ".git/"):
            done = (await session.complete(FILE, {"name": "path", "value": typed})).completion
            assert done.values == [] and done.total == 0, typed

    over_http(server, check)


def test_symbols_complete_from_the_definitions_the_index_knows(server):
    async def check(session):
        async def values(typed, context=None) -> list[str]:
            done = await session.complete(prompt("explain"), {"name": "symbol", "value": typed}, context)
            return done.completion.values

        assert await values("PARSE") == ["parse_config_file", "parse_other"]
        assert await values("configl") == ["ConfigLoader"]
        assert await values("parse", {"path": "src/loader.py"}) == ["parse_config_file"]
        assert await values("parse", {"path": "./src//loader.py"}) == []  # one name per file
        assert await values("parse", {"path": "../elsewhere.py"}) == []
        assert await values("return") == []  # used, never defined

    over_http(server, check)


def test_other_arguments_complete_sensibly(server):
    async def check(session):
        since = (await session.complete(prompt("changes"), {"name": "since", "value": ""})).completion
        assert since.values[0] == datetime.now(UTC).date().isoformat() and len(since.values) == 4
        question = (await session.complete(prompt("ask"), {"name": "question", "value": "wh"})).completion
        assert question.values == [] and question.hasMore is False
        lines = (await session.complete(SLICE, {"name": "lines", "value": "1"})).completion
        assert lines.values == []

    over_http(server, check)


@pytest.mark.parametrize(
    "ref, argument, expected",
    [
        pytest.param(prompt("nope"), "path", "Unknown prompt: nope", id="unknown-prompt"),
        pytest.param(prompt("ask"), "path", "prompt ask has no argument 'path'", id="unknown-argument"),
        pytest.param(
            ResourceTemplateReference(type="ref/resource", uri="file:///{path}"),
            "path",
            "resource template of this server",
            id="foreign-template",
        ),
        pytest.param(FILE, "name", "the template has no variable 'name'", id="unknown-variable"),
    ],
)
def test_bad_completion_requests_are_invalid_params(server, ref, argument, expected):
    async def check(session):
        code, message, _ = await error_of(session.complete(ref, {"name": argument, "value": ""}))
        assert code == -32602 and expected in message

    over_http(server, check)


def test_malformed_completion_params_get_a_clear_error(server):
    session = server.initialize()
    for params, expected in (
        ({}, "needs params.ref and params.argument"),
        ({"ref": {"type": "ref/prompt", "name": "ask"}, "argument": {"name": "question"}}, "must be strings"),
        ({"ref": {"type": "ref/other"}, "argument": {"name": "x", "value": ""}}, "ref.type must be"),
        (
            {
                "ref": {"type": "ref/prompt", "name": "explain"},
                "argument": {"name": "symbol", "value": ""},
                "context": {"arguments": {"path": 5}},
            },
            "context.arguments must map names to strings",
        ),
    ):
        body = {"jsonrpc": "2.0", "id": 7, "method": "completion/complete", "params": params}
        response = server.post(body, session=session)
        assert response.status_code == 200
        error = response.json()["error"]
        assert error["code"] == -32602 and expected in error["message"], params


def test_completion_sees_files_indexed_while_it_serves(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    served = start_daphne(root)
    try:

        async def check(session):
            async def settled(ref, name: str, typed: str) -> list[str]:
                """The values once the table has caught up (it is rebuilt in the
                background, at most every few seconds)."""

                async def values() -> list[str]:
                    return (await session.complete(ref, {"name": name, "value": typed})).completion.values

                return await wait_until_async(values, timeout=20, message=f"completions of {typed!r}")

            before = await session.complete(FILE, {"name": "path", "value": "fresh"})
            symbols = await session.complete(prompt("explain"), {"name": "symbol", "value": "brand_"})
            assert before.completion.values == [] and symbols.completion.values == []
            (root / "fresh").mkdir()
            (root / "fresh/new_module.py").write_text("def brand_new_function():\n    return 1\n")
            await anyio.to_thread.run_sync(index, root, base_env(DIR2MCP_ROOT=str(root)))
            assert await settled(FILE, "path", "fresh") == ["fresh/new_module.py"]
            assert await settled(prompt("explain"), "symbol", "brand_") == ["brand_new_function"]

        over_http(served, check)
    finally:
        err = stop(served)
    assert "Traceback" not in err, err[-2000:]


# -- stdio ----------------------------------------------------------------------------


def test_stdio_answers_the_same_methods(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    write_fixture(root)
    index(root, base_env(DIR2MCP_ROOT=str(root)))
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(REPO / "manage.py"), "mcp_stdio", "--dir", str(root), "--no-index"],
        env=base_env(),
        cwd=str(REPO),
    )

    async def main() -> None:
        with (tmp_path / "stderr.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    init = await session.initialize()
                    assert init.capabilities.prompts is not None and init.capabilities.completions is not None
                    listed = await session.list_prompts()
                    assert [p.name for p in listed.prompts] == ["ask", "explain", "changes"]
                    got = await session.get_prompt("explain", {"path": "notes.txt"})
                    assert got.messages[1].content.resource.text == (root / "notes.txt").read_text()
                    changed = await session.get_prompt("changes", {"since": "2023-01-01"})
                    assert [m.content.name for m in changed.messages[1:]] == ["helpers.py", "guide.md"]
                    done = await session.complete(prompt("explain"), {"name": "path", "value": "src/"})
                    assert done.completion.values == ["src/helpers.py", "src/loader.py"]
                    symbols = await session.complete(
                        prompt("explain"), {"name": "symbol", "value": "parse_c"}
                    )
                    assert symbols.completion.values == ["parse_config_file"]
                    code, _, _ = await error_of(session.get_prompt("ask", {}))
                    assert code == -32602

    anyio.run(main)
    err = (tmp_path / "stderr.log").read_text()
    assert "Traceback" not in err, err[-2000:]
