"""Which connection makes way when ``up`` is at ``server.max_connections``
(mcp_gateway/bounded.py): the policy alone, over stand-in channels. The
real server under slow uploads is tests/test_slow_clients.py."""

from __future__ import annotations

import resource

import pytest

from mcp_gateway import bounded
from mcp_gateway.bounded import OpenConnections


class Channel:
    """What OpenConnections asks of a connection."""

    def __init__(self, name: str, waiting: bool):
        self.name, self.waiting_on_client, self.answered = name, waiting, ""
        self.refused = False  # answered: it only lingers to close
        self.lingering = False

    def make_way(self, message: str) -> None:
        self.answered, self.waiting_on_client = f"made way: {message}", False
        self.refused = self.lingering = True

    def refuse_busy(self, message: str) -> None:
        self.answered = f"refused: {message}"
        self.refused = True

    def stop_lingering(self) -> None:
        self.lingering = False


BUDGET = 10


def fill(open_connections: OpenConnections, *waiting: bool) -> list[Channel]:
    channels = [Channel(f"c{i}", flag) for i, flag in enumerate(waiting)]
    for channel in channels:
        open_connections.opened(channel)
    return channels


@pytest.mark.parametrize(
    ("waiting", "answered"),
    [
        pytest.param((False, False, False), {}, id="under-the-limit"),
        pytest.param((True, True, True, True), {"c0": "made way"}, id="oldest-waiting-goes"),
        pytest.param((False, True, False, True), {"c1": "made way"}, id="served-ones-are-kept"),
        pytest.param((False, False, False, True), {"c3": "refused"}, id="all-served-newcomer-refused"),
        pytest.param((True,) * 5, {"c0": "made way", "c1": "made way"}, id="each-newcomer-one"),
    ],
)
def test_the_oldest_connection_waiting_on_its_client_makes_way(waiting, answered):
    channels = fill(OpenConnections(3, BUDGET), *waiting)
    assert {c.name: c.answered.split(":")[0] for c in channels if c.answered} == answered
    assert all("3 connections" in c.answered for c in channels if c.answered)


def test_a_closed_connection_frees_its_place():
    open_connections = OpenConnections(2, BUDGET)
    first, second = fill(open_connections, True, True)
    open_connections.closed(first)
    third = Channel("c2", True)
    open_connections.opened(third)
    assert (first.answered, second.answered, third.answered) == ("", "", "")
    assert len(open_connections) == 2


def test_the_cap_follows_the_open_file_limit_unless_configured():
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert bounded.connection_cap(40) == 40
    derived = bounded.connection_cap(0)
    assert derived >= bounded.MIN_CONNECTIONS
    if soft != resource.RLIM_INFINITY and soft > bounded.RESERVED_FILES + 2 * bounded.MIN_CONNECTIONS:
        assert derived * bounded.FILES_PER_CONNECTION + bounded.RESERVED_FILES <= soft


@pytest.mark.parametrize(
    ("received", "answered"),
    [
        pytest.param([("c0", 4), ("c1", 4)], {}, id="within-the-budget"),
        pytest.param([("c0", 4), ("c1", 4), ("c2", 4)], {"c0": "made way"}, id="oldest-upload-goes"),
        pytest.param(
            [("c0", 1), ("c1", 8), ("c2", 4)], {"c0": "made way", "c1": "made way"}, id="as-many-as-it-takes"
        ),
        pytest.param([("c0", 11)], {"c0": "made way"}, id="one-upload-over-the-whole-budget"),
        pytest.param([("c0", 4), ("c0", 4), ("c1", 1)], {}, id="one-connection-counted-once"),
        # The server reads the sockets in no set order: the oldest connection
        # goes, not the one whose body bytes were counted first.
        pytest.param(
            [("c1", 4), ("c0", 4), ("c2", 4)], {"c0": "made way"}, id="oldest-connection-not-first-read"
        ),
        # ... nor when its bytes are read last, pushing the total over (its
        # client's bytes waited in the kernel's buffers: a fresh clone's CI
        # run made the youngest make way, and the oldest waited out its idle timeout).
        pytest.param([("c1", 4), ("c2", 4), ("c0", 4)], {"c0": "made way"}, id="oldest-connection-read-last"),
    ],
)
def test_uploads_past_the_body_budget_make_the_oldest_upload_make_way(received, answered):
    open_connections = OpenConnections(10, BUDGET)
    channels = {c.name: c for c in fill(open_connections, True, True, True)}
    for name, size in received:
        open_connections.received(channels[name], size)
    assert {c.name: c.answered.split(":")[0] for c in channels.values() if c.answered} == answered
    assert all("server.max_body_buffer_mb" in c.answered for c in channels.values() if c.answered)


def test_a_whole_body_no_longer_counts_against_the_budget():
    open_connections = OpenConnections(10, BUDGET)
    first, second = fill(open_connections, True, True)
    open_connections.received(first, 8)
    open_connections.body_done(first)
    open_connections.received(second, 8)
    assert (first.answered, second.answered) == ("", "")
