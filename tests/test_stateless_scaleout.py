"""Two server processes behind no sticky routing, MCP 2026-07-28 (issue #33).

An ``up`` (which indexes and watches) and a second daphne that only serves
share one PostgreSQL database and one Redis (docs/scaling.md). One client's
consecutive stateless requests alternate between them, as a round-robin load
balancer would send them, and every one is answered, the same by both. A
``subscriptions/listen`` stream open on the process that indexes nothing
hears of a file change the other one indexed, through the channel layer.
A payment settled through one process buys nothing more through the other
(the replay store is the database).
"""

from __future__ import annotations

import contextlib

import httpx
import pytest
import redis
from x402.http import decode_payment_response_header

from tests.fakes.facilitator import running_facilitator
from tests.mcp_http import base_env, serve_daphne, stop, write_corpus
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
    assert answers["hits"][0][0][0] == "docs/guide.md"
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
    one process buys nothing more through the other."""
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
            other = {"name": "dir2mcp.search", "arguments": {"query": "hnsw notes"}}
            replayed = post(indexing, "tools/call", other, extra=signature, msg_id=2)
            assert answered(replayed)["structuredContent"] == result["structuredContent"]
            assert (facilitator.count("/verify"), facilitator.count("/settle")) == (1, 1)
