"""The official MCP Python SDK 2.3 client against one daphne-served ``up``
and against ``mcp_stdio``, in each of its modes: ``"2026-07-28"`` (stateless,
no probe), ``"auto"`` (probes ``server/discover``: stateless here) and
``"legacy"`` (``initialize`` and a session). The client lives in its own venv
(``make mcp2-env``), made here when it is missing; it runs as a subprocess
(tests/mcp2_client.py) and reports what it saw as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.mcp_http import REPO, base_env, index, write_corpus
from tests.test_mcp_client import start_up

VENV = REPO / ".venv-mcp2"
CLIENT = REPO / "tests" / "mcp2_client.py"
PINNED = "mcp==2.3.0"


@pytest.fixture(scope="module")
def mcp2_python():
    python = VENV / "bin" / "python"
    check = [str(python), "-c", "import importlib.metadata as m; print('mcp==' + m.version('mcp'))"]
    installed = subprocess.run(check, capture_output=True, text=True) if python.exists() else None
    if installed is None or installed.stdout.strip() != PINNED:
        subprocess.run(["make", "mcp2-env", f"PYTHON={sys.executable}"], cwd=REPO, check=True, timeout=600)
    return python


def run_client(python, *args: str, env: dict | None = None) -> dict:
    done = subprocess.run(
        [str(python), str(CLIENT), *args], capture_output=True, text=True, timeout=300, env=env, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root)
    index(root, base_env(DIR2MCP_ROOT=str(root)))
    proc, connection, _events = start_up(root, "--no-index")
    token = (root / ".dir2mcp" / "secret.token").read_text().strip()
    yield root, connection["url"], token
    proc.terminate()
    _out, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err[-2000:]


def check_walk(seen: dict, version: str) -> None:
    assert seen["protocol_version"] == version
    # A tool whose x-mcp-header the client found invalid would be left out of the list.
    assert {"dir2mcp.search", "dir2mcp.open_file", "dir2mcp.open_files"} <= set(seen["tools"])
    assert len(seen["tools"]) >= 17
    assert not seen["search_is_error"] and seen["hit"] == "src/loader.py"
    assert not seen["open_file_is_error"] and "parse_config_file" in seen["open_file_content"]
    assert "parse_config_file" in seen["resource_text"]
    if version == "2026-07-28":
        honored = {"resourcesListChanged": True, "resourceSubscriptions": ["dir2mcp:///src/loader.py"]}
        assert seen["listen_honored"] == honored


@pytest.mark.parametrize(
    ("mode", "version"),
    [("2026-07-28", "2026-07-28"), ("auto", "2026-07-28"), ("legacy", "2025-11-25")],
)
def test_sdk2_client_over_http_in_every_mode(mcp2_python, served, mode, version):
    _root, url, token = served
    check_walk(run_client(mcp2_python, mode, "http", url, token), version)


@pytest.mark.parametrize(("mode", "version"), [("2026-07-28", "2026-07-28"), ("legacy", "2025-11-25")])
def test_sdk2_client_over_stdio(mcp2_python, served, mode, version):
    root, _url, _token = served
    seen = run_client(
        mcp2_python, mode, "stdio", sys.executable, str(REPO / "manage.py"), str(root), env=base_env()
    )
    check_walk(seen, version)
