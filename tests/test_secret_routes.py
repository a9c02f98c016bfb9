"""The positive corpus of tests/test_secret_rules.py (every credential shape,
as files and inside a zip, a tar.gz and a zip in a zip; files kept out by
name; files, directories and members named like tokens) served by a real
server (daphne), asked for on every route (issue #34): ``open_file``, ``read_bytes``,
``search``, ``find``, ``list_files``, ``resources/list``,
``resources/read``, ``completion/complete``, ``prompts/get`` and the REST
mirror. Every one is refused or absent, no answer holds a secret, and no
file of the state directory (``meta.sqlite``, its log, the indexes) holds a
trace of one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corpus import uris
from tests.mcp_http import PROTOCOL, Server, start_daphne, stop
from tests.support import TLS
from tests.test_secret_rules import (
    ARCHIVES,
    CONTENT_SECRETS,
    EXCLUDED_NAMES,
    NAME_SECRET,
    TOKEN_NAMES,
    content_paths,
    positive_corpus,
)


def fragment(secret: str) -> str:
    """A piece of ``secret`` that nothing else in the corpus holds: its middle."""
    secret = secret.strip()
    if len(secret) <= 24:
        return secret
    middle = len(secret) // 2
    return secret[middle - 10 : middle + 10]


def _token(name: str) -> str:
    """The token part of a name in TOKEN_NAMES."""
    part = next(p for p in name.split("/") if p.startswith(("ghp_", "sk-", "AKIA")))
    return part.rsplit(".", 1)[0]


FRAGMENTS = sorted({fragment(s) for _, _, s in CONTENT_SECRETS.values()} | {NAME_SECRET})
FRAGMENTS += [_token(name)[:24] for name in TOKEN_NAMES]


def refused_paths() -> list[str]:
    paths = [rel for rel, _ in content_paths()] + list(EXCLUDED_NAMES) + list(TOKEN_NAMES)
    for archive in ARCHIVES:
        paths += [f"{archive}!/conf/.env.local", f"{archive}!/conf/production.env"]
        paths += [f"{archive}!/names/{name}" for name in TOKEN_NAMES]
    return paths


def write_tree(root: Path, tree: dict[str, str | bytes] | None = None) -> None:
    for rel, data in (tree if tree is not None else positive_corpus()).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())


def serving(root: Path, fragments: list[str], *, env: dict[str, str] | None = None) -> Iterator[Server]:
    """A real server on ``root`` with an initialized session and a kept-alive
    client; once stopped, its log holds no traceback and none of ``fragments``."""
    srv = start_daphne(root, env=env)
    srv.session = srv.initialize()
    with httpx.Client(timeout=30, verify=TLS) as client:
        srv.client = client
        yield srv
    err = stop(srv)
    assert "Traceback" not in err, err[-3000:]
    assert [piece for piece in fragments if piece in err] == []


def state_traces(root: Path, fragments: list[str]) -> dict[str, list[str]]:
    """Each file of the state directory that holds one of ``fragments``, with those it holds."""
    found = {}
    for path in (root / ".dir2mcp").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            hits = [piece for piece in fragments if piece.encode() in data]
            if hits:
                found[path.name] = hits
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_tree(root)
    yield from serving(root, FRAGMENTS)


def rpc(server: Server, method: str, params: dict) -> dict:
    """One MCP request on the module's kept-alive connection (hundreds are sent)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = server.headers(**{"MCP-Protocol-Version": PROTOCOL, "MCP-Session-Id": server.session})
    response = server.client.post(server.url, json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def call(server: Server, name: str, arguments: dict) -> dict:
    return rpc(server, "tools/call", {"name": name, "arguments": arguments})["result"]


def rest(server: Server, path: str, params: dict) -> httpx.Response:
    return server.client.get(
        f"{server.base}/api/v1{path}", params=params, headers={"Authorization": f"Bearer {server.token}"}
    )


def leaked(text: str) -> list[str]:
    return [piece for piece in FRAGMENTS if piece in text]


def test_the_state_directory_holds_no_trace_of_any_secret(server):
    assert state_traces(server.root, FRAGMENTS) == {}
    assert (server.root / ".dir2mcp" / "meta.sqlite").stat().st_size > 0


def test_every_secret_bearing_path_is_refused_on_every_read_route(server):
    served = []
    for rel in refused_paths():
        result = call(server, "dir2mcp.open_file", {"rel_path": rel})
        if not result.get("isError") or result["structuredContent"]["error"]["code"] != "FORBIDDEN":
            served.append(("open_file", rel))
        raw = call(server, "dir2mcp.read_bytes", {"rel_path": rel, "format": "base64"})
        if not raw.get("isError") or raw["structuredContent"]["error"]["code"] != "FORBIDDEN":
            served.append(("read_bytes", rel))
        read = rpc(server, "resources/read", {"uri": uris.file_uri(rel)})
        if "error" not in read:
            served.append(("resources/read", rel))
        prompt = rpc(server, "prompts/get", {"name": "explain", "arguments": {"path": rel}})
        if "error" not in prompt:
            served.append(("prompts/get explain", rel))
        if rest(server, "/files/slice", {"rel_path": rel}).status_code != 403:
            served.append(("REST files/slice", rel))
        if rest(server, "/files/bytes", {"rel_path": rel}).status_code != 403:
            served.append(("REST files/bytes", rel))
        if rest(server, "/resources/read", {"uri": uris.file_uri(rel)}).status_code < 400:
            served.append(("REST resources/read", rel))
    assert served == []


def _resource_pages(server: Server) -> list[dict]:
    listed, cursor = [], None
    for _ in range(100):
        result = rpc(server, "resources/list", {"cursor": cursor} if cursor else {})["result"]
        listed += result["resources"]
        cursor = result.get("nextCursor")
        if not cursor:
            return listed
    raise AssertionError("resources/list never ended")


def _find_pages(server: Server, arguments: dict) -> list[dict]:
    matches, cursor = [], None
    for _ in range(100):
        paging = {"limit": 200} | ({"cursor": cursor} if cursor else {})
        page = call(server, "dir2mcp.find", arguments | paging)
        matches += page["structuredContent"]["matches"]
        cursor = page["structuredContent"].get("next_cursor")
        if not cursor:
            return matches
    raise AssertionError("find never ended")


def test_no_listing_search_or_completion_offers_them(server):
    refused = set(refused_paths())
    answers: list[str] = []

    files = call(server, "dir2mcp.list_files", {"limit": 5000})
    listed = {f["rel_path"] for f in files["structuredContent"]["files"]}
    assert "docs/databases.md" in listed  # the look-alikes are there
    assert listed & refused == set()
    answers.append(json.dumps(files))

    resources = _resource_pages(server)
    assert {uris.parse(r["uri"])[0] for r in resources} & refused == set()
    assert "dir2mcp:///docs/databases.md" in {r["uri"] for r in resources}
    answers.append(json.dumps(resources))

    rest_files = rest(server, "/files", {"limit": 5000})
    assert rest_files.status_code == 200
    assert {f["rel_path"] for f in rest_files.json()["files"]} & refused == set()
    answers += [rest_files.text, rest(server, "/resources", {}).text]

    # find by name alone lists files as list_files does (it listed secret-bearing
    # ones, with their size and time, where every other listing left them out).
    found_by_name = _find_pages(server, {"name_glob": "*"})
    assert "docs/databases.md" in {m["rel_path"] for m in found_by_name}
    assert {m["rel_path"] for m in found_by_name} & refused == set()
    rest_found = rest(server, "/find", {"name_glob": "*", "limit": 200})
    assert rest_found.status_code == 200
    assert {m["rel_path"] for m in rest_found.json()["matches"]} & refused == set()
    answers += [json.dumps(found_by_name), rest_found.text]

    queries = ["DATABASE_URL", "client-key-data", "AccountKey", "POSTGRES_PASSWORD", "Authorization Basic"]
    queries += ["REDIS_AUTH", "SendGridAPIClient", "broker_url", "ordinary note unusual name", "VALUE"]
    for query in queries:
        found = call(server, "dir2mcp.search", {"query": query, "k": 50})
        answers.append(json.dumps(found))
        answers.append(rest(server, "/search", {"query": query, "k": 50}).text)
        hits = {hit["rel_path"] for hit in found["structuredContent"]["hits"]}
        assert hits & refused == set(), query
    for piece in FRAGMENTS:
        answers.append(json.dumps(call(server, "dir2mcp.find", {"content": piece})))
        answers.append(rest(server, "/find", {"content": piece}).text)

    changes = rpc(server, "prompts/get", {"name": "changes", "arguments": {"since": "2000-01-01"}})
    answers.append(json.dumps(changes))

    offered = []
    for rel in refused:
        outer = rel.split("!/")[0]
        parent = outer.rsplit("/", 1)[0] + "/" if "/" in outer else ""
        for typed in {rel[:-1], outer[:-1], parent}:
            params = {
                "ref": {"type": "ref/resource", "uri": uris.FILE_TEMPLATE},
                "argument": {"name": "path", "value": typed},
            }
            values = rpc(server, "completion/complete", params)["result"]["completion"]["values"]
            offered += [value for value in values if value in refused or leaked(value)]
            answers.append(json.dumps(values))
    assert offered == []
    assert leaked("\n".join(answers)) == []
