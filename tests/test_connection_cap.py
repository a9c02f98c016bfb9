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

    def make_way(self, limit: int) -> None:
        self.answered, self.waiting_on_client = f"made way ({limit})", False

    def refuse_busy(self, limit: int) -> None:
        self.answered = f"refused ({limit})"


def fill(open_connections: OpenConnections, *waiting: bool) -> list[Channel]:
    channels = [Channel(f"c{i}", flag) for i, flag in enumerate(waiting)]
    for channel in channels:
        open_connections.opened(channel)
    return channels


@pytest.mark.parametrize(
    ("waiting", "answered"),
    [
        pytest.param((False, False, False), {}, id="under-the-limit"),
        pytest.param((True, True, True, True), {"c0": "made way (3)"}, id="oldest-waiting-goes"),
        pytest.param((False, True, False, True), {"c1": "made way (3)"}, id="served-ones-are-kept"),
        pytest.param((False, False, False, True), {"c3": "refused (3)"}, id="all-served-newcomer-refused"),
        pytest.param((True,) * 5, {"c0": "made way (3)", "c1": "made way (3)"}, id="each-newcomer-one"),
    ],
)
def test_the_oldest_connection_waiting_on_its_client_makes_way(waiting, answered):
    channels = fill(OpenConnections(3), *waiting)
    assert {c.name: c.answered for c in channels if c.answered} == answered


def test_a_closed_connection_frees_its_place():
    open_connections = OpenConnections(2)
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
