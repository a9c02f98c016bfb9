"""One name per file, on every surface of a real ``up`` (issue #34).

A path spelled another way than its canonical form (``./docs/guide.md``,
``docs//guide.md``, ``docs/./guide.md``, ``docs/guide.md/``) is refused
with ``INVALID_FIELD`` by every tool that takes a path, ``resources/read``,
the ``explain`` prompt, completions, the REST mirror and stdio: all of them
pass the one resolver (``corpus.security.canonical_rel_path``). A resource
URI whose characters are percent-encoded another way names the same file
and is answered with its one URI.
"""

from __future__ import annotations

import httpx
import pytest

from tests.mcp_http import Server, write_corpus
from tests.support import TLS
from tests.test_stdio import Raw, command
from tests.up_process import Up

pytestmark = pytest.mark.slow

NOT_CANONICAL = [
    pytest.param("./docs/guide.md", id="dot-slash"),
    pytest.param("docs//guide.md", id="double-slash"),
    pytest.param("docs/./guide.md", id="inner-dot"),
    pytest.param("docs/guide.md/", id="trailing-slash"),
]
NOT_CANONICAL_PREFIXES = [
    pytest.param("./docs", id="dot-slash"),
    pytest.param("docs//", id="double-slash"),
    pytest.param("docs/./", id="inner-dot"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("canonical")
    write_corpus(root)
    up = Up("--dir", str(root), "--json")
    url = up.url()
    up.event("scan_progress", lambda data: data.get("running") is False)
    srv = Server(root, url, (root / ".dir2mcp" / "secret.token").read_text().strip(), up.proc)
    srv.session = srv.initialize()
    yield srv
    code = up.stop()
    up.close()
    assert code == 0, up.stderr[-3000:]
    assert "Traceback" not in up.stderr, up.stderr[-3000:]


def rpc(srv: Server, method: str, params: dict) -> dict:
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    response = srv.post(body, session=srv.session)
    assert response.status_code == 200, response.text
    return response.json()


def tool_error(srv: Server, name: str, arguments: dict) -> dict:
    result = srv.call(srv.session, name, arguments)
    assert result["isError"] is True, result
    return result["structuredContent"]["error"]


def rest(srv: Server, path: str, params: dict) -> httpx.Response:
    headers = {"Authorization": f"Bearer {srv.token}"}
    return httpx.get(f"{srv.base}/api/v1{path}", params=params, headers=headers, timeout=30, verify=TLS)


def test_the_canonical_path_is_served(server):
    result = server.call(server.session, "dir2mcp.open_file", {"rel_path": "docs/guide.md"})
    assert result["structuredContent"]["rel_path"] == "docs/guide.md"


@pytest.mark.parametrize("rel_path", NOT_CANONICAL)
def test_open_file_refuses_another_spelling(server, rel_path):
    error = tool_error(server, "dir2mcp.open_file", {"rel_path": rel_path})
    assert error["code"] == "INVALID_FIELD"
    assert "'docs/guide.md'" in error["message"]  # the refusal names the canonical form


@pytest.mark.parametrize("prefix", NOT_CANONICAL_PREFIXES)
@pytest.mark.parametrize(
    ("tool", "arguments"),
    [("dir2mcp.list_files", {}), ("dir2mcp.find", {"pattern": "loader"}), ("dir2mcp.search", {"query": "x"})],
)
def test_path_prefixes_refuse_another_spelling(server, prefix, tool, arguments):
    assert tool_error(server, tool, {**arguments, "path_prefix": prefix})["code"] == "INVALID_FIELD"


@pytest.mark.parametrize("prefix", ["", ".", "./", "docs", "docs/"])
def test_the_whole_root_and_directory_prefixes_are_accepted(server, prefix):
    result = server.call(server.session, "dir2mcp.list_files", {"path_prefix": prefix})
    assert "docs/guide.md" in [f["rel_path"] for f in result["structuredContent"]["files"]]


@pytest.mark.parametrize("rel_path", NOT_CANONICAL)
def test_resources_read_refuses_another_spelling(server, rel_path):
    error = rpc(server, "resources/read", {"uri": f"dir2mcp:///{rel_path}"})["error"]
    assert (error["code"], error["data"]["code"]) == (-32602, "INVALID_FIELD")


@pytest.mark.parametrize(
    ("uri", "answered"),
    [
        ("dir2mcp:///docs/gu%69de.md", "dir2mcp:///docs/guide.md"),
        ("dir2mcp:///%64ocs/guide%2Emd", "dir2mcp:///docs/guide.md"),
        ("dir2mcp:///docs/guide.md?lines=01-002", "dir2mcp:///docs/guide.md?lines=1-2"),
        ("dir2mcp:///docs/guide.md?", "dir2mcp:///docs/guide.md"),
    ],
)
def test_resources_read_answers_with_the_one_uri(server, uri, answered):
    contents = rpc(server, "resources/read", {"uri": uri})["result"]["contents"]
    assert [item["uri"] for item in contents] == [answered]
    assert contents[0]["text"].startswith("# Guide")


@pytest.mark.parametrize(
    "uri",
    [
        pytest.param("dir2mcp:///docs%2Fguide.md", id="encoded-separator"),
        pytest.param("dir2mcp:///docs%2f..%2f..%2fetc%2fpasswd", id="encoded-traversal"),
        pytest.param("dir2mcp:////docs/guide.md", id="absolute"),
    ],
)
def test_resources_read_refuses_an_encoded_separator_or_an_absolute_path(server, uri):
    error = rpc(server, "resources/read", {"uri": uri})["error"]
    assert error["data"]["code"] == "PATH_OUTSIDE_ROOT"


@pytest.mark.parametrize("rel_path", NOT_CANONICAL)
def test_the_explain_prompt_refuses_another_spelling(server, rel_path):
    error = rpc(server, "prompts/get", {"name": "explain", "arguments": {"path": rel_path}})["error"]
    assert error["code"] == -32602 and error["data"]["code"] == "INVALID_FIELD"
    ok = rpc(server, "prompts/get", {"name": "explain", "arguments": {"path": "docs/guide.md"}})
    assert "result" in ok, ok


@pytest.mark.parametrize("rel_path", NOT_CANONICAL)
def test_symbol_completion_offers_nothing_for_another_spelling(server, rel_path):
    def values(path: str) -> list[str]:
        params = {
            "ref": {"type": "ref/prompt", "name": "explain"},
            "argument": {"name": "symbol", "value": "parse"},
            "context": {"arguments": {"path": path}},
        }
        return rpc(server, "completion/complete", params)["result"]["completion"]["values"]

    assert values("src/loader.py") == ["parse_config_file"]
    assert values(rel_path.replace("docs/guide.md", "src/loader.py")) == []


@pytest.mark.parametrize("rel_path", NOT_CANONICAL)
def test_the_rest_mirror_refuses_another_spelling(server, rel_path):
    for path, params in [
        ("/files/slice", {"rel_path": rel_path}),
        ("/resources/read", {"uri": f"dir2mcp:///{rel_path}"}),
    ]:
        response = rest(server, path, params)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "INVALID_FIELD"
    assert rest(server, "/files/slice", {"rel_path": "docs/guide.md"}).status_code == 200


def test_stdio_refuses_another_spelling(server):
    raw = Raw(command(server.root))
    try:
        raw.initialize()
        for rel_path in ["./docs/guide.md", "docs/guide.md/"]:
            result = raw.call(rel_path, "dir2mcp.open_file", {"rel_path": rel_path})
            assert result["isError"] is True
            assert result["structuredContent"]["error"]["code"] == "INVALID_FIELD"
        served = raw.call("ok", "dir2mcp.open_file", {"rel_path": "docs/guide.md"})
        assert served["structuredContent"]["rel_path"] == "docs/guide.md"
        assert raw.close() == 0
    finally:
        raw.kill()
    assert "Traceback" not in raw.stderr, raw.stderr[-2000:]
