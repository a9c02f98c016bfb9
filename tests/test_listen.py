"""``subscriptions/listen`` (MCP 2026-07-28) on a live ``up`` and on
``mcp_stdio``: the acknowledgment first, then only what was asked for, each
message tagged with the subscription's id, as files change under live sync."""

from __future__ import annotations

import itertools
import json
import queue
import threading
import time

import httpx
import pytest

from tests.mcp_http import Server
from tests.support import TLS, wait_until
from tests.test_modern import META, VERSION
from tests.test_notifications import serving, start_up, write_files
from tests.test_stdio import Raw, command
from tests.up_process import Up

UPDATED = "notifications/resources/updated"
LIST_CHANGED = "notifications/resources/list_changed"
ACK = "notifications/subscriptions/acknowledged"
SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"


def tag(message: dict):
    """The subscription id a message carries, if any."""
    return (message.get("params") or {}).get("_meta", {}).get(SUBSCRIPTION)


class Listening:
    """A ``subscriptions/listen`` POST read on a thread: each JSON message of
    its SSE answer into a queue, None at its end."""

    def __init__(self, server: Server, notifications: dict, msg_id="sub-1"):
        body = {
            "jsonrpc": "2.0",
            "id": msg_id,
            "method": "subscriptions/listen",
            "params": {"_meta": META, "notifications": notifications},
        }
        headers = server.headers(**{"MCP-Protocol-Version": VERSION, "Mcp-Method": "subscriptions/listen"})
        self.messages: queue.Queue = queue.Queue()
        self.content_type: queue.Queue = queue.Queue()
        self._client = httpx.Client(timeout=httpx.Timeout(10, read=None), verify=TLS)
        self._thread = threading.Thread(target=self._read, args=(server.url, headers, body), daemon=True)
        self._thread.start()

    def _read(self, url: str, headers: dict, body: dict) -> None:
        try:
            with self._client.stream("POST", url, headers=headers, json=body) as response:
                self.content_type.put(response.headers.get("content-type", ""))
                for line in response.iter_lines():
                    if line.startswith("data:") and line[5:].strip():
                        self.messages.put(json.loads(line[5:]))
        except httpx.HTTPError:
            pass  # closed by the test
        finally:
            self.messages.put(None)

    def wait_for(self, method: str, timeout: float = 60) -> tuple[dict, list[dict]]:
        """The next message carrying ``method``, and those before it."""
        end, before = time.monotonic() + timeout, []
        while (left := end - time.monotonic()) > 0:
            message = self.messages.get(timeout=left)
            assert message is not None, f"the stream ended before {method}"
            if message.get("method") == method:
                return message, before
            before.append(message)
        raise AssertionError(f"no {method} within {timeout}s")

    def close(self) -> None:
        self._client.close()
        self._thread.join(10)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("listened")) as server:
        yield server


def test_listen_acknowledges_then_sends_what_was_asked_tagged(served):
    watched = "dir2mcp:///watched/updated.txt"
    asked = {
        "resourcesListChanged": True,
        "toolsListChanged": True,  # the tool list never changes: not honoured
        "resourceSubscriptions": [
            watched,
            "dir2mcp:///config.txt",
            "dir2mcp:///node_modules/dep.js",
            "test://x",
        ],
    }
    stream = Listening(served, asked)
    try:
        assert stream.content_type.get(timeout=30).startswith("text/event-stream")
        ack = stream.messages.get(timeout=30)
        assert ack["method"] == ACK and ack["params"]["_meta"][SUBSCRIPTION] == "sub-1"
        # The secret-bearing, excluded and foreign URIs are left out, as resources/read refuses them.
        assert ack["params"]["notifications"] == {
            "resourcesListChanged": True,
            "resourceSubscriptions": [watched],
        }
        (served.root / "watched" / "updated.txt").write_text("updated once more\n")
        updated, _ = stream.wait_for(UPDATED)
        assert updated["params"] == {"uri": watched, "_meta": {SUBSCRIPTION: "sub-1"}}
        (served.root / "watched" / "added-later.txt").write_text("a new file\n")
        changed, _ = stream.wait_for(LIST_CHANGED)
        assert changed["params"]["_meta"][SUBSCRIPTION] == "sub-1"
    finally:
        stream.close()


def test_a_filter_without_list_changes_hears_only_its_files(served):
    other = "dir2mcp:///watched/other_stream.txt"
    narrow = Listening(served, {"resourceSubscriptions": [other]}, msg_id=2)
    everything = Listening(served, {"resourcesListChanged": True}, msg_id=3)
    try:
        assert narrow.messages.get(timeout=30)["method"] == ACK
        assert everything.messages.get(timeout=30)["method"] == ACK
        (served.root / "watched" / "other-new.txt").write_text("listed\n")
        everything.wait_for(LIST_CHANGED)  # the change has been fanned out
        (served.root / "watched" / "other_stream.txt").write_text("changed\n")
        updated, before = narrow.wait_for(UPDATED)
        assert updated["params"]["uri"] == other and updated["params"]["_meta"][SUBSCRIPTION] == 2
        assert [m["method"] for m in before] == []  # no list_changed: it did not ask
    finally:
        narrow.close()
        everything.close()


def test_a_malformed_filter_is_invalid_params(served):
    body = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "subscriptions/listen",
        "params": {"_meta": META, "notifications": {"resourceSubscriptions": "dir2mcp:///a"}},
    }
    headers = served.headers(**{"MCP-Protocol-Version": VERSION, "Mcp-Method": "subscriptions/listen"})
    answer = httpx.post(served.url, headers=headers, json=body, timeout=30, verify=TLS).json()
    assert (answer["id"], answer["error"]["code"]) == (5, -32602)


def test_stdio_listen_until_cancelled(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    write_files(root)
    server = Raw(command(root))
    try:
        ids = itertools.count()

        def indexed():
            params = {"name": "dir2mcp.stats", "arguments": {}, "_meta": META}
            stats = server.request(f"stats-{next(ids)}", "tools/call", params)["result"]["structuredContent"]
            return not stats["indexing"]["running"] and stats["indexing"]["job_id"]

        wait_until(indexed, timeout=240, message="the first indexing job to finish")
        uri = "dir2mcp:///watched/updated.txt"
        params = {
            "_meta": META,
            "notifications": {"resourcesListChanged": True, "resourceSubscriptions": [uri]},
        }
        server.send({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen", "params": params})
        ack = server.recv()
        assert ack["method"] == ACK and ack["params"]["_meta"][SUBSCRIPTION] == "L"
        (root / "watched" / "updated.txt").write_text("changed under stdio\n")
        seen = server.recv()
        while seen.get("method") != UPDATED:
            seen = server.recv()
        assert seen["params"] == {"uri": uri, "_meta": {SUBSCRIPTION: "L"}}
        server.notify("notifications/cancelled", {"requestId": "L"})
        later = {"_meta": META, "notifications": {"resourcesListChanged": True}}
        server.send({"jsonrpc": "2.0", "id": "M", "method": "subscriptions/listen", "params": later})
        after_cancel = [server.recv()]
        (root / "watched" / "added.txt").write_text("new after the cancel\n")
        while after_cancel[-1].get("method") != LIST_CHANGED:
            after_cancel.append(server.recv())
        # The second subscription hears the change; the cancelled one nothing, not even a result.
        assert after_cancel[0]["method"] == ACK and after_cancel[-1]["params"]["_meta"][SUBSCRIPTION] == "M"
        assert all(m.get("id") != "L" and tag(m) != "L" for m in after_cancel), after_cancel
        assert server.close() == 0
        # Stopping ends the open subscription gracefully: its result, tagged.
        closing = json.loads(server.lines[-1])
        assert closing["id"] == "M" and closing["result"]["_meta"][SUBSCRIPTION] == "M"
    finally:
        server.kill()


def test_subscriptions_past_the_process_limit_are_server_busy(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    write_files(root)
    up, server = start_up(Up, root, env={"DIR2MCP_MAX_LISTENS": "1"})
    try:
        first = Listening(server, {"resourcesListChanged": True}, msg_id=1)
        assert first.messages.get(timeout=30)["method"] == ACK
        body = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "subscriptions/listen",
            "params": {"_meta": META, "notifications": {"resourcesListChanged": True}},
        }
        headers = server.headers(**{"MCP-Protocol-Version": VERSION, "Mcp-Method": "subscriptions/listen"})
        busy = httpx.post(server.url, headers=headers, json=body, timeout=30, verify=TLS)
        assert busy.headers["Retry-After"] == "1"
        assert (busy.json()["id"], busy.json()["error"]["code"]) == (2, -32001)
        first.close()  # its slot is free once the server sees the hang-up
        assert wait_until(lambda: reopened(server, body), timeout=30, message="a free subscription slot")
        assert up.stop() == 0
    finally:
        up.close()


def reopened(server: Server, body: dict) -> bool:
    """Whether a subscription opens now (its acknowledgment arrives)."""
    probe = Listening(server, body["params"]["notifications"], msg_id="probe")
    try:
        first = probe.messages.get(timeout=30)
        return first is not None and first.get("method") == ACK
    finally:
        probe.close()
