"""Two server processes behind no sticky routing, MCP 2026-07-28 (issue #33).

An ``up`` (which indexes and watches) and a second daphne that only serves
share one PostgreSQL database and one Redis (docs/scaling.md). One client's
consecutive stateless requests alternate between them, as a round-robin load
balancer would send them, and every one is answered, the same by both. A
``subscriptions/listen`` stream open on the process that indexes nothing
hears of a file change the other one indexed, through the channel layer.
A payment settled through one process buys nothing more through the other
(the replay store is the database). A file a client opens through the
process that indexes nothing is embedded first by the one that does.
"""

from __future__ import annotations

import contextlib

import httpx
import psycopg
import pytest
import redis
from x402.http import decode_payment_response_header

from tests.fakes.facilitator import running_facilitator
from tests.mcp_http import base_env, serve_daphne, stop, write_corpus
from tests.support import wait_until
from tests.test_indexer_process import LOCAL, small_modules
from tests.test_listen import ACK, LIST_CHANGED, SUBSCRIPTION, UPDATED, Listening
from tests.test_modern import post
from tests.test_notifications import FAST, REDIS_URL, start_up
from tests.x402_client import payment_header, x402_env

pytestmark = pytest.mark.slow


@pytest.fixture
def pair(tmp_path, running, pg_database):
    """(the indexing ``up``, a serving-only daphne) on one database and one Redis."""
    with serve_pair(tmp_path, running, pg_database) as servers:
        yield servers


@contextlib.contextmanager
def serve_pair(root, running, database: str, env: dict | None = None):
    """An ``up`` and a daphne on ``root``, sharing ``database`` and Redis."""
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:  # .ci/run starts Redis; by hand it may be down
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    write_corpus(root)
    shared = {"DATABASE_URL": database, "REDIS_URL": REDIS_URL, "DIR2MCP_ROOT": str(root), **FAST}
    shared.update(env or {})
    up, indexing = start_up(running, root, env=shared)
    serving = serve_daphne(root, base_env(DIR2MCP_AUTH="auto", **shared))
    try:
        yield indexing, serving
    finally:
        err = stop(serving)
    assert "Traceback" not in err, err[-3000:]
    assert up.stop() == 0
    assert "Traceback" not in up.stderr, up.stderr[-3000:]


def answered(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    assert "MCP-Session-Id" not in response.headers
    result = response.json()["result"]
    assert result["resultType"] == "complete" and not result.get("isError"), result
    return result


def test_one_clients_stateless_requests_alternate_between_processes(pair):
    indexing, serving = pair
    turns = [indexing, serving] * 3  # round robin: no request lands where the one before it did
    answers: dict[str, list] = {"tools": [], "hits": [], "text": [], "listing": []}
    for n, server in enumerate(turns):
        tools = answered(post(server, "tools/list", msg_id=f"l{n}"))
        answers["tools"].append(sorted(tool["name"] for tool in tools["tools"]))
        search = {"name": "dir2mcp.search", "arguments": {"query": "loader configuration"}}
        found = answered(post(server, "tools/call", search, msg_id=f"s{n}"))
        hits = found["structuredContent"]["hits"]
        assert hits, found
        answers["hits"].append([(hit["rel_path"], hit["span"]) for hit in hits])
        read = answered(post(server, "resources/read", {"uri": "dir2mcp:///docs/guide.md"}, msg_id=f"r{n}"))
        answers["text"].append(read["contents"][0]["text"])
        listing = answered(post(server, "resources/list", msg_id=f"f{n}"))
        answers["listing"].append(sorted(item["uri"] for item in listing["resources"]))
    for key, seen in answers.items():
        assert all(one == seen[0] for one in seen), (key, seen)
    assert "dir2mcp.search" in answers["tools"][0]
    # the guide says "The loader reads configuration files"; src/loader.py
    # declares parse_config_file, named by the query's words (search.name_match_weight)
    assert {"docs/guide.md", "src/loader.py"} <= {path for path, _ in answers["hits"][0][:2]}
    assert "The loader reads configuration files" in answers["text"][0]


def quokka_search() -> dict:
    return {"name": "dir2mcp.search", "arguments": {"query": "quokka sightings"}}


def test_a_listen_on_one_process_hears_a_change_the_other_indexed(pair):
    indexing, serving = pair
    asked = {"resourcesListChanged": True, "resourceSubscriptions": ["dir2mcp:///notes.txt"]}
    stream = Listening(serving, asked)  # on the process that indexes nothing
    try:
        ack, _ = stream.wait_for(ACK)
        assert ack["params"]["notifications"]["resourceSubscriptions"] == ["dir2mcp:///notes.txt"]
        (indexing.root / "notes.txt").write_text("quokka sightings, counted by the indexer\n")
        updated, _ = stream.wait_for(UPDATED)
        assert updated["params"] == {"uri": "dir2mcp:///notes.txt", "_meta": {SUBSCRIPTION: "sub-1"}}
        # What the notification announces is there on either process.
        for server in (serving, indexing):
            found = answered(post(server, "tools/call", quokka_search()))
            assert [hit["rel_path"] for hit in found["structuredContent"]["hits"]] == ["notes.txt"]
        (indexing.root / "added.md").write_text("# Added\n\nafter the stream opened\n")
        changed, _ = stream.wait_for(LIST_CHANGED)
        assert changed["params"]["_meta"][SUBSCRIPTION] == "sub-1"
        listing = answered(post(serving, "resources/list"))
        assert "dir2mcp:///added.md" in {item["uri"] for item in listing["resources"]}
    finally:
        stream.close()


def test_a_payment_is_answered_once_whichever_process_it_reaches(tmp_path, running, pg_database):
    """The replay store is the shared database: a payment settled through
    one process buys nothing more through the other (its own request gets the
    stored answer, another ``payment_already_used``)."""
    with running_facilitator() as facilitator:
        env = x402_env(facilitator.url)
        with serve_pair(tmp_path, running, pg_database, env) as (indexing, serving):
            search = {"name": "dir2mcp.search", "arguments": {"query": "loader"}}
            unpaid = post(indexing, "tools/call", search)
            assert unpaid.status_code == 402 and unpaid.json()["error"]["code"] == 402, unpaid.text
            signature = {"PAYMENT-SIGNATURE": payment_header(unpaid.headers["PAYMENT-REQUIRED"])}
            paid = post(serving, "tools/call", search, extra=signature)
            result = answered(paid)
            assert result["structuredContent"]["hits"]
            assert decode_payment_response_header(paid.headers["PAYMENT-RESPONSE"]).success is True
            replayed = post(indexing, "tools/call", search, extra=signature, msg_id=2)
            assert answered(replayed)["structuredContent"] == result["structuredContent"]
            other = {"name": "dir2mcp.search", "arguments": {"query": "hnsw notes"}}
            refused = post(indexing, "tools/call", other, extra=signature, msg_id=3)
            assert refused.status_code == 402 and "result" not in refused.json(), refused.text
            assert refused.json()["error"]["data"]["error"] == "payment_already_used"
            assert (facilitator.count("/verify"), facilitator.count("/settle")) == (1, 1)


def pending_by_file(database: str) -> tuple[str, dict[str, int], int, int]:
    """(the file whose chunks come last in the embedding queue, pending
    chunks per file, chunks embedded, files with chunks), read straight from
    the shared PostgreSQL database."""
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT d.rel_path, c.embedding_status, count(*), max(c.chunk_id) FROM chunks c "
            "JOIN representations r ON r.rep_id = c.representation_id "
            "JOIN documents d ON d.doc_id = r.document_id "
            "WHERE NOT c.deleted AND NOT r.deleted AND NOT d.deleted GROUP BY d.rel_path, c.embedding_status"
        ).fetchall()
    pending = [row for row in rows if row[1] == "pending"]
    last = max(pending, key=lambda row: row[3])[0] if pending else ""
    embedded = sum(count for _, status, count, _ in rows if status == "ok")
    files = len({row[0] for row in rows})
    return last, {path: count for path, _, count, _ in pending}, embedded, files


@pytest.mark.timeout(900)
def test_a_file_opened_through_the_serving_process_is_embedded_first_by_the_indexing_one(
    tmp_path, running, pg_database
):
    """The serving-only process has no indexer of its own: it asks the one
    that embeds through the channel layer. Before, the ask was dropped and
    the file waited for its turn in the queue, last."""
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:  # .ci/run starts Redis; by hand it may be down
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    small_modules(tmp_path, 300)  # ~1,200 units: the local model takes a while
    shared = {
        "DATABASE_URL": pg_database,
        "REDIS_URL": REDIS_URL,
        "DIR2MCP_ROOT": str(tmp_path),
        **FAST,
        **LOCAL,
    }
    up = running("--dir", str(tmp_path), "--json", env=shared)
    up.url()  # answering: its state directory and token are there
    serving = serve_daphne(tmp_path, base_env(DIR2MCP_AUTH="auto", **shared))
    try:
        seen: list[tuple] = []

        def written() -> tuple[str, dict[str, int]] | None:
            """Every file's chunks are written (the lexical pass is through)."""
            last, pending, embedded, files = pending_by_file(pg_database)
            seen[:] = [(files, sum(pending.values()), embedded)]
            return (last, pending) if files == 300 else None

        asked, pending = wait_until(
            written,
            timeout=300,
            interval=0.1,
            message=lambda: f"every file written (files, pending, embedded: {seen})",
        )
        assert pending[asked] > 0 and sum(pending.values()) > pending[asked]
        opened = {
            "name": "dir2mcp.open_file",
            "arguments": {"rel_path": asked, "start_line": 1, "end_line": 3},
        }
        assert answered(post(serving, "tools/call", opened, extra={"Mcp-Param-Path": asked}))[
            "structuredContent"
        ]

        def embedded() -> tuple[dict[str, int]] | None:
            _, now, _, _ = pending_by_file(pg_database)
            return (now,) if asked not in now else None

        # In id order it would be embedded with the last call, nothing left
        # after it; asked about through the other process, it goes ahead.
        (left,) = wait_until(embedded, timeout=300, interval=0.1, message=f"{asked}'s chunks embedded")
        assert sum(left.values()) > 0, "embedded only in its turn, with the last of the queue"
    finally:
        err = stop(serving)
    assert "Traceback" not in err, err[-3000:]
    assert up.stop() == 0
    assert "Traceback" not in up.stderr, up.stderr[-3000:]
