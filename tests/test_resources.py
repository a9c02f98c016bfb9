"""MCP resources (issue #18) on a real server: ``up`` on a loopback port,
the official MCP client, a fake Mistral for the transcript; then the REST
mirror's ``/api/v1/resources`` routes, and ``mcp_stdio``.

The corpus holds enough files for three pages of ``resources/list``, a
secret-bearing file, a git-ignored one, a symlink out of the root, a text
PDF, a recording, and binaries on both sides of the 1 MiB limit.
"""

from __future__ import annotations

import base64
import sys
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import anyio
import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, response_schema_conformance, status_code_conformance

from corpus import documents, uris
from corpus.citations import format_ms
from kernel import errors
from mcp_gateway import resources
from tests.fakes.facilitator import running_facilitator
from tests.fakes.media import make_text_pdf, make_wav
from tests.fakes.mistral import FakeMistral
from tests.mcp_http import REPO, Server, base_env, start_daphne, stop, wait_for_index, write_corpus
from tests.support import TLS, read_only
from tests.test_mcp_client import start_up
from tests.x402_client import x402_env

MANY = 230  # with the rest, three pages of resources/list
SCRIPT = [
    (0.0, 20.0, "Welcome to the depot briefing."),
    (20.0, 45.0, "The night shift starts at nine sharp."),
]
SECRET = "aws_key = AKIAIOSFODNN7EXAMPLE\n"
BLOB = bytes(range(256)) * 8
BIG = b"\x00\x01" * (documents.MAX_BYTES // 2 + 1)


def write_files(root, outside) -> None:
    write_corpus(root)
    for n in range(MANY):
        (root / "many" / f"f{n:03d}.txt").parent.mkdir(exist_ok=True)
        (root / "many" / f"f{n:03d}.txt").write_text(f"file number {n}\n")
    (root / "creds.txt").write_text(SECRET)
    (root / ".gitignore").write_text("hidden.txt\n")
    (root / "hidden.txt").write_text("git-ignored but on disk\n")
    (root / "report.pdf").write_bytes(make_text_pdf(["Otters hold hands.", "Beavers build dams."]))
    (root / "briefing.wav").write_bytes(make_wav(SCRIPT))
    (root / "small.bin").write_bytes(BLOB)
    (root / "long.txt").write_text("".join(f"line {n} of a long text file\n" for n in range(1, 4001)))
    (root / "big.bin").write_bytes(BIG)
    (outside / "elsewhere.txt").write_text("outside the root\n")
    (root / "escape.txt").symlink_to(outside / "elsewhere.txt")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root, outside = tmp_path_factory.mktemp("corpus"), tmp_path_factory.mktemp("outside")
    write_files(root, outside)
    mistral = FakeMistral().start()
    env = {"MISTRAL_API_KEY": mistral.api_key, "DIR2MCP_MISTRAL__BASE_URL": mistral.url}
    proc, connection, _ = start_up(root, env=env)
    token = (root / ".dir2mcp" / "secret.token").read_text().strip()
    server = Server(root, connection["url"], token, proc)
    anyio.run(_indexed, server)
    yield server
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    mistral.close()
    assert "Traceback" not in err, err[-2000:]
    assert token not in out + err


async def _indexed(server: Server) -> None:
    async with client(server) as session:
        await wait_for_index(session)


@asynccontextmanager
async def client(server: Server):
    headers = {"Authorization": f"Bearer {server.token}"}
    async with httpx.AsyncClient(headers=headers, timeout=60, verify=TLS) as http:
        async with streamable_http_client(server.url, http_client=http) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def run(server: Server, walk) -> None:
    async def main():
        async with client(server) as session:
            await walk(session)

    anyio.run(main)


async def refusal(session, uri: str) -> tuple[int, dict]:
    with pytest.raises(McpError) as raised:
        await session.read_resource(uri)
    return raised.value.error.code, raised.value.error.data


async def open_file(session, arguments: dict) -> dict:
    return (await session.call_tool("dir2mcp.open_file", arguments)).structuredContent


def rpc(server: Server, method: str, params: dict) -> dict:
    session = server.initialize()
    return server.post(
        {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}, session=session
    ).json()


# -- resources/list -------------------------------------------------------------------


async def pages_of(session) -> list[list]:
    pages, cursor = [], None
    while True:
        page = await session.list_resources(cursor)
        pages.append(page.resources)
        cursor = page.nextCursor
        if cursor is None:
            return pages


def test_every_readable_document_is_listed_once_in_path_order_across_pages(served):
    async def walk(session):
        pages = await pages_of(session)
        files = await session.call_tool("dir2mcp.list_files", {"limit": 5000})
        indexed = {f["rel_path"] for f in files.structuredContent["files"]}
        listed = [r for page in pages for r in page]
        titles = [r.title for r in listed]

        assert len(pages) == 3 and [len(p) for p in pages[:2]] == [documents.PAGE_SIZE] * 2
        assert titles == sorted(titles) and len(set(titles)) == len(titles)
        # indexed (skipped for its secret), never listed: not by list_files either (issue #34)
        with read_only(served.root / ".dir2mcp" / "meta.sqlite") as db:
            row = db.execute("SELECT status, error FROM documents WHERE rel_path = 'creds.txt'").fetchone()
        assert row[0] == "skipped" and row[1].startswith("SECRET_DETECTED")
        assert "creds.txt" not in indexed
        assert set(titles) == indexed
        assert "hidden.txt" not in titles and "escape.txt" not in titles
        again = await session.list_resources(None)
        assert [r.title for r in again.resources] == titles[: documents.PAGE_SIZE]

    run(served, walk)


def test_a_listed_resource_describes_its_file(served):
    async def walk(session):
        listed = [r for page in await pages_of(session) for r in page]
        notes = next(r for r in listed if r.title == "notes.txt")
        assert str(notes.uri) == "dir2mcp:///notes.txt" and notes.name == "notes.txt"
        assert notes.mimeType == "text/plain"
        stat = (served.root / "notes.txt").stat()
        assert notes.size == stat.st_size
        modified = datetime.strptime(notes.annotations.lastModified, "%Y-%m-%dT%H:%M:%SZ")
        assert int(modified.replace(tzinfo=UTC).timestamp()) == int(stat.st_mtime)
        pdf = next(r for r in listed if r.title == "report.pdf")
        assert pdf.mimeType == "application/pdf"

    run(served, walk)


@pytest.mark.parametrize("cursor", ["garbage", "", 5, base64.urlsafe_b64encode(b"tools:1").decode()])
def test_a_bad_cursor_is_invalid_params(served, cursor):
    error = rpc(served, "resources/list", {"cursor": cursor})["error"]
    assert error["code"] == -32602
    assert error["data"]["code"] == "INVALID_FIELD"


def test_templates_are_the_citation_uris(served):
    async def walk(session):
        listed = await session.list_resource_templates()
        by_name = {t.name: t for t in listed.resourceTemplates}
        assert by_name["file"].uriTemplate == uris.FILE_TEMPLATE
        assert by_name["slice"].uriTemplate == uris.SLICE_TEMPLATE
        assert by_name["slice"].mimeType == "text/plain"
        assert all(t.title and t.description for t in listed.resourceTemplates)

    run(served, walk)


def test_initialize_declares_resources(served):
    result = served.post(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
    ).json()["result"]
    assert "resources" in result["capabilities"]


# -- resources/read ------------------------------------------------------------------


def test_a_text_file_reads_whole(served):
    async def walk(session):
        [contents] = (await session.read_resource("dir2mcp:///src/loader.py")).contents
        assert contents.text == (served.root / "src" / "loader.py").read_text()
        assert contents.mimeType == "text/x-python"

    run(served, walk)


@pytest.mark.parametrize(
    ("uri", "rel_path", "code"),
    [
        pytest.param("dir2mcp:///creds.txt", "creds.txt", "FORBIDDEN", id="secret"),
        pytest.param("dir2mcp:///hidden.txt", "hidden.txt", "FORBIDDEN", id="git-ignored"),
        pytest.param(
            "dir2mcp:///.dir2mcp/secret.token", ".dir2mcp/secret.token", "FORBIDDEN", id="state-dir"
        ),
        pytest.param("dir2mcp:///escape.txt", "escape.txt", "FORBIDDEN", id="symlink-out"),
        pytest.param(
            "dir2mcp:///..%2F..%2Fetc%2Fpasswd", "../../etc/passwd", "PATH_OUTSIDE_ROOT", id="traversal"
        ),
        pytest.param("dir2mcp:///nope.txt", "nope.txt", "FILE_NOT_FOUND", id="missing"),
    ],
)
def test_refusals_are_open_files_with_resource_not_found(served, uri, rel_path, code):
    async def walk(session):
        rpc_code, data = await refusal(session, uri)
        refused = await open_file(session, {"rel_path": rel_path})
        assert refused["error"]["code"] == code
        assert (rpc_code, data["code"]) == (errors.RPC_RESOURCE_NOT_FOUND, code)
        assert data["uri"] == uri

    run(served, walk)


def test_a_literal_traversal_uri_is_refused(served):
    # The SDK normalises "../" away before sending; a raw client need not.
    error = rpc(served, "resources/read", {"uri": "dir2mcp:///../../etc/passwd"})["error"]
    assert error["code"] == errors.RPC_RESOURCE_NOT_FOUND
    assert error["data"]["code"] == "PATH_OUTSIDE_ROOT"


@pytest.mark.parametrize(
    ("params", "rpc_code", "code"),
    [
        pytest.param({"uri": "file:///etc/passwd"}, -32002, "INVALID_FIELD", id="other-scheme"),
        pytest.param({"uri": "dir2mcp:///notes.txt?lines=3-1"}, -32602, "INVALID_FIELD", id="empty-range"),
        pytest.param({"uri": "dir2mcp:///notes.txt?rows=1"}, -32602, "INVALID_FIELD", id="unknown-slice"),
        pytest.param({"uri": "dir2mcp:///notes.txt?lines=9-9"}, -32602, "INVALID_RANGE", id="past-the-end"),
        pytest.param(
            {"uri": "dir2mcp:///report.pdf?lines=1-2"}, -32602, "DOC_TYPE_UNSUPPORTED", id="lines-of-pdf"
        ),
        pytest.param({}, -32602, "MISSING_FIELD", id="no-uri"),
        pytest.param({"uri": 42}, -32602, "INVALID_FIELD", id="not-a-string"),
    ],
)
def test_bad_uris_are_json_rpc_errors(served, params, rpc_code, code):
    error = rpc(served, "resources/read", params)["error"]
    assert (error["code"], error["data"]["code"]) == (rpc_code, code)
    assert error["message"]


def test_a_search_hit_links_the_exact_lines_it_cites(served):
    async def walk(session):
        found = await session.call_tool("dir2mcp.search", {"query": "parse_config_file"})
        hits = found.structuredContent["hits"]
        assert found.content[0].type == "text"
        links = found.content[1:]
        assert [link.type for link in links] == ["resource_link"] * len(hits)
        top, link = hits[0], links[0]
        span = top["span"]
        assert str(link.uri) == f"dir2mcp:///{top['rel_path']}?lines={span['start_line']}-{span['end_line']}"
        assert link.name == top["rel_path"].rsplit("/", 1)[-1] and link.mimeType == "text/plain"

        [contents] = (await session.read_resource(link.uri)).contents
        opened = await open_file(
            session,
            {"rel_path": top["rel_path"], "start_line": span["start_line"], "end_line": span["end_line"]},
        )
        lines = (served.root / top["rel_path"]).read_text().split("\n")
        assert (
            contents.text == opened["content"] == "\n".join(lines[span["start_line"] - 1 : span["end_line"]])
        )
        assert "def parse_config_file" in contents.text

    run(served, walk)


def test_ask_citations_link_their_slices(served):
    async def walk(session):
        asked = await session.call_tool("dir2mcp.ask", {"question": "what reads configuration files?"})
        citations = asked.structuredContent["citations"]
        links = [item for item in asked.content if item.type == "resource_link"]
        assert citations and len(links) == len(citations)
        for citation, link in zip(citations, links, strict=True):
            span = citation["span"]
            assert str(link.uri).startswith(uris.file_uri(citation["rel_path"]) + "?")
            assert uris.parse(str(link.uri))[1].as_dict() == span
            assert (await session.read_resource(link.uri)).contents[0].text

    run(served, walk)


def test_a_pdf_reads_as_its_pages_marked(served):
    async def walk(session):
        [whole] = (await session.read_resource("dir2mcp:///report.pdf")).contents
        assert whole.mimeType == "text/plain"
        first, second = whole.text.index("--- page 1 ---"), whole.text.index("--- page 2 ---")
        assert (
            first < whole.text.index("Otters hold hands.") < second < whole.text.index("Beavers build dams.")
        )
        [page] = (await session.read_resource("dir2mcp:///report.pdf?page=2")).contents
        assert page.text == (await open_file(session, {"rel_path": "report.pdf", "page": 2}))["content"]
        assert "Beavers" in page.text and "Otters" not in page.text

    run(served, walk)


def test_a_recording_reads_as_its_transcript_marked_by_time(served):
    async def walk(session):
        heard = (await session.call_tool("dir2mcp.search", {"query": "night shift"})).structuredContent
        hit = next(h for h in heard["hits"] if h["rel_path"] == "briefing.wav")
        start, end = hit["span"]["start_ms"], hit["span"]["end_ms"]
        [whole] = (await session.read_resource("dir2mcp:///briefing.wav")).contents
        marker = f"[{format_ms(start)}-{format_ms(end)}]"
        assert marker in whole.text
        assert whole.text.index("[00:00-") < whole.text.index("Welcome") < whole.text.index("nine sharp")
        assert whole.text.count("nine sharp") == 1  # overlapping windows are not repeated
        [piece] = (await session.read_resource(f"dir2mcp:///briefing.wav?time={start}-{end}")).contents
        opened = await open_file(session, {"rel_path": "briefing.wav", "start_ms": start, "end_ms": end})
        assert piece.text == opened["content"] and "nine sharp" in piece.text

    run(served, walk)


def test_a_small_binary_is_a_blob(served):
    async def walk(session):
        [contents] = (await session.read_resource("dir2mcp:///small.bin")).contents
        assert base64.b64decode(contents.blob) == BLOB
        assert contents.mimeType == "application/octet-stream"

    run(served, walk)


def test_a_binary_over_the_limit_is_refused(served):
    async def walk(session):
        rpc_code, data = await refusal(session, "dir2mcp:///big.bin")
        assert (rpc_code, data["code"]) == (-32602, "FILE_TOO_LARGE")

    run(served, walk)


# -- the REST mirror ------------------------------------------------------------------


def rest(server: Server, path: str, params=None, **headers) -> httpx.Response:
    auth = {"Authorization": f"Bearer {server.token}"}
    return httpx.get(
        f"{server.base}/api/v1{path}", params=params, headers={**auth, **headers}, timeout=30, verify=TLS
    )


def test_rest_pages_are_the_mcp_pages(served):
    cursor, rest_pages, mcp_pages = None, [], []
    while True:
        params = {"cursor": cursor} if cursor else {}
        mcp_pages.append(rpc(served, "resources/list", params)["result"])
        response = rest(served, "/resources", params)
        assert response.status_code == 200, response.text
        rest_pages.append(response.json())
        cursor = response.json().get("nextCursor")
        if not cursor:
            break
    assert rest_pages == mcp_pages and len(rest_pages) == 3


@pytest.mark.parametrize(
    "uri",
    [
        "dir2mcp:///notes.txt",
        "dir2mcp:///notes.txt?lines=2-3",
        "dir2mcp:///report.pdf",
        "dir2mcp:///small.bin",
    ],
)
def test_rest_read_is_the_mcp_read(served, uri):
    response = rest(served, "/resources/read", {"uri": uri})
    assert response.status_code == 200, response.text
    assert response.json() == rpc(served, "resources/read", {"uri": uri})["result"]


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        ("/resources/read", {"uri": "dir2mcp:///creds.txt"}, 403, "FORBIDDEN"),
        ("/resources/read", {"uri": "dir2mcp:///hidden.txt"}, 403, "FORBIDDEN"),
        ("/resources/read", {"uri": "dir2mcp:///../../etc/passwd"}, 403, "PATH_OUTSIDE_ROOT"),
        ("/resources/read", {"uri": "dir2mcp:///nope.txt"}, 404, "FILE_NOT_FOUND"),
        ("/resources/read", {"uri": "dir2mcp:///big.bin"}, 422, "FILE_TOO_LARGE"),
        ("/resources/read", {"uri": "file:///etc/passwd"}, 400, "INVALID_FIELD"),
        ("/resources/read", {}, 400, "MISSING_FIELD"),
        ("/resources", {"cursor": "garbage"}, 400, "INVALID_FIELD"),
    ],
)
def test_rest_refusals_have_the_same_codes(served, path, params, status, code):
    response = rest(served, path, params)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


@pytest.mark.parametrize("path", ["/resources", "/resources/read?uri=dir2mcp:///notes.txt"])
def test_rest_resources_need_the_token(served, path):
    response = httpx.get(f"{served.base}/api/v1{path}", timeout=30, verify=TLS)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHORIZED"


def test_rest_resources_refuse_a_foreign_origin(served):
    response = rest(served, "/resources", Origin="https://evil.example")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "FORBIDDEN_ORIGIN"


def test_openapi_documents_the_resource_routes(served):
    document = httpx.get(f"{served.base}/api/v1/openapi.json", timeout=30, verify=TLS).json()
    for path, result in (
        ("/api/v1/resources", "ResourceList"),
        ("/api/v1/resources/read", "ReadResourceResult"),
    ):
        op = document["paths"][path]["get"]
        assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(result)
        assert op["security"] and {"400", "401", "403", "404", "422"} <= set(op["responses"])
    read = document["paths"]["/api/v1/resources/read"]["get"]
    assert [(p["name"], p["required"]) for p in read["parameters"]] == [("uri", True)]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize("path", ["/api/v1/resources", "/api/v1/resources/read"])
def test_openapi_conformance_of_the_resource_routes(served, path, mode):
    operation = schemathesis.openapi.from_url(f"{served.base}/api/v1/openapi.json", timeout=30)[path]["GET"]
    checks = [not_a_server_error, status_code_conformance, response_schema_conformance]
    headers = {"Authorization": f"Bearer {served.token}"}

    @settings(
        max_examples=20,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def conforms(case):
        case.call_and_validate(base_url=served.base, headers=headers, checks=checks, timeout=30)

    conforms()


# -- stdio ----------------------------------------------------------------------------


def test_resources_over_stdio(served, tmp_path):
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(REPO / "manage.py"), "mcp_stdio", "--dir", str(served.root), "--no-index"],
        env=base_env(),
        cwd=str(REPO),
    )

    async def walk():
        with (tmp_path / "stderr.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    init = await session.initialize()
                    assert init.capabilities.resources is not None
                    page = await session.list_resources(None)
                    assert page.resources[0].title == ".gitignore" and page.nextCursor
                    [contents] = (await session.read_resource("dir2mcp:///notes.txt?lines=1-1")).contents
                    assert contents.text == "hnsw index notes"
                    rpc_code, data = await refusal(session, "dir2mcp:///creds.txt")
                    assert (rpc_code, data["code"]) == (errors.RPC_RESOURCE_NOT_FOUND, "FORBIDDEN")

    anyio.run(walk)
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()


# -- x402 ------------------------------------------------------------------------------


def test_a_server_selling_open_file_does_not_give_reads_away(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    with running_facilitator() as facilitator:
        env = {
            **x402_env(facilitator.url, resource_base="https://files.example"),
            "DIR2MCP_X402__ROUTE_POLICY__TOOLS_CALL__PRICES": '{dir2mcp.list_files: "0"}',
        }
        server = start_daphne(root, env=env)
        try:
            listed = rpc(server, "resources/list", {})["result"]
            refused = rpc(server, "resources/read", {"uri": "dir2mcp:///notes.txt"})["error"]
            response = rest(server, "/resources/read", {"uri": "dir2mcp:///notes.txt"})
        finally:
            err = stop(server)
    assert "notes.txt" in [r["title"] for r in listed["resources"]]  # list_files is free here
    assert (refused["code"], refused["data"]["code"]) == (-32600, "FORBIDDEN")
    assert "dir2mcp.open_file" in refused["message"]
    assert response.status_code == 403 and response.json()["error"]["code"] == "FORBIDDEN"
    assert "Traceback" not in err, err[-2000:]


def test_a_long_text_reads_whole_up_to_the_default_budget_and_names_the_lines_after(served):
    long_text = (served.root / "long.txt").read_text()
    first = rpc(served, "resources/read", {"uri": "dir2mcp:///long.txt"})["result"]["contents"][0]
    assert len(first["text"]) <= resources.WHOLE_MAX_CHARS < len(long_text)
    assert long_text.startswith(first["text"]) and first["text"].endswith("\n")
    meta = first["_meta"]
    assert meta["dir2mcp/truncated"] and meta["dir2mcp/total_chars"] == len(long_text)
    shown = first["text"].count("\n")
    assert meta["dir2mcp/next"] == f"dir2mcp:///long.txt?lines={shown + 1}-4000"
    rest = rpc(served, "resources/read", {"uri": meta["dir2mcp/next"]})["result"]["contents"][0]
    assert long_text.split("\n")[shown] == rest["text"].split("\n")[0]
