"""A local writer swaps files for symlinks out of the root while they are read (issue #23).

A writer thread flips ``race.txt`` between a regular file and a symlink to a
canary file outside the root, and ``racedir`` between a real directory and
a symlink to a directory outside, as fast as it can. Meanwhile the readers
call the opener the way every tool does: ``open_file``, the on-demand
transcription read, the indexer (whose output ``find`` searches), in
process for the bulk of the 10,000 calls and through a real ``up`` over MCP
and the REST mirror for the rest. The canary never appears anywhere: a path
is checked and opened in one walk, with no window for the swap.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections import Counter
from pathlib import Path

import httpx
import pytest

from corpus import files
from corpus.ingest import ondemand
from corpus.ingest.indexing import index_directory
from corpus.models import Representation
from corpus.security import ExclusionEngine, ExclusionPolicy
from kernel import errors
from kernel.config import DEFAULT_PATH_EXCLUDES, build_config
from tests.mcp_http import PROTOCOL, free_port
from tests.support import TLS, holds
from tests.up_process import Up

CANARY = "CANARY-OUTSIDE-ROOT-9b41e7"
INSIDE = "inside text that may be served\n"
# A WAV header: what transcription accepts as audio, where the canary is text.
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(200)
NO_FOLLOW = ExclusionPolicy(tuple(DEFAULT_PATH_EXCLUDES), ())
FOLLOW = ExclusionPolicy(tuple(DEFAULT_PATH_EXCLUDES), (), follow_symlinks=True)
REFUSED = {errors.FORBIDDEN, errors.PATH_OUTSIDE_ROOT, errors.FILE_NOT_FOUND}
# A name the indexer met mid-swap is recorded with an error and no type
# until its next pass: open_file then declines it as not text. A file
# swapped during every read, with no indexed text to answer from, is
# retryable INDEX_NOT_READY (corpus.files.read_settled).
DECLINED = REFUSED | {errors.DOC_TYPE_UNSUPPORTED, errors.INDEX_NOT_READY}


class Swapper:
    """Flips each racing name between its inside and outside versions until stopped."""

    def __init__(self, root: Path, outside: Path):
        self.root, self.outside = root, outside
        self.stop = threading.Event()
        self.swaps = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Swapper:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)

    def _flip_file(self, name: str, content: bytes, target: Path, n: int) -> None:
        spare = self.root / f".{name}.{n % 2}"
        if n % 2:
            spare.write_bytes(content)
        else:
            with contextlib.suppress(FileNotFoundError):
                spare.unlink()
            spare.symlink_to(target)
        os.replace(spare, self.root / name)  # atomic: the name is always one or the other

    def _flip_dir(self, n: int) -> None:
        real, link, name = self.root / ".racedir.real", self.root / ".racedir.link", self.root / "racedir"
        if n % 2:  # the link is in place: put the real directory back
            os.rename(name, link)
            os.rename(real, name)
        else:
            os.rename(name, real)
            os.rename(link, name)

    def _run(self) -> None:
        for n in itertools.count():
            if self.stop.is_set():
                break
            self._flip_file("race.txt", INSIDE.encode(), self.outside / "canary.txt", n)
            self._flip_file("race.wav", WAV, self.outside / "canary.txt", n)
            self._flip_dir(n)
            self.swaps += 1
        if self.swaps % 2:  # leave the real directory in place
            self._flip_dir(1)


def build(base: Path) -> tuple[Path, Path]:
    outside = base / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "canary.txt").write_text(f"{CANARY}\n")
    (outside / "dir" / "race.txt").write_text(f"{CANARY} in a directory\n")
    root = base / "root"
    (root / "racedir").mkdir(parents=True)
    (root / "racedir" / "race.txt").write_text(INSIDE)
    (root / ".racedir.link").symlink_to(outside / "dir", target_is_directory=True)
    (root / "race.txt").write_text(INSIDE)
    (root / "race.wav").write_bytes(WAV)
    (root / "steady.md").write_text("# Steady\n\nA file nobody touches.\n")
    return root, outside


def outcome(call) -> str:
    """``"served"`` or the refusal's code; a leak fails the test at once."""
    try:
        result = call()
    except errors.Dir2mcpError as exc:
        assert exc.code in DECLINED, (exc.code, exc.message)
        assert CANARY not in exc.message
        return exc.code
    text = result if isinstance(result, str) else repr(result)
    assert CANARY not in text, text
    return "served"


@pytest.mark.django_db
def test_in_process_readers_never_read_outside_while_names_are_swapped(tmp_path, state):
    root, outside = build(tmp_path)
    config = build_config({}, {}, {})
    engines = [ExclusionEngine(root, NO_FOLLOW), ExclusionEngine(root, FOLLOW)]
    ws = ondemand.Workspace(config=config, state=state, engine=engines[0], secret=lambda _name: None)
    seen: Counter = Counter()

    def read(engine, rel):
        with engine.open(rel, judged=True) as opened:  # the indexer's read
            return opened.read().decode("utf-8", "replace")

    calls = [
        *[lambda e=e: files.open_file(e, rel_path="race.txt")["content"] for e in engines],
        *[lambda e=e: files.open_file(e, rel_path="racedir/race.txt")["content"] for e in engines],
        lambda: ondemand._read(ws, "race.txt")[1].decode("utf-8", "replace"),  # transcribe's read
        lambda: ondemand._read(ws, "racedir/race.txt")[1].decode("utf-8", "replace"),
        *[lambda e=e: read(e, "racedir/race.txt") for e in engines],
    ]
    with Swapper(root, outside) as swapper:
        for round_ in range(1200):
            for call in calls:
                seen[outcome(call)] += 1
            if round_ % 100 == 0:  # the indexer reads every racing name too
                index_directory(root, state=state, config=config)
                found = files.find(engines[0], content=CANARY)
                assert found["matches"] == [], found
                seen["find"] += 1
    assert sum(seen.values()) >= 9600
    assert swapper.swaps > 100
    # Both sides of the race were met: the test did race.
    assert seen["served"] and seen[errors.FORBIDDEN] and seen[errors.PATH_OUTSIDE_ROOT], seen
    texts = Representation.objects.values_list("text", flat=True)
    assert not [text for text in texts if CANARY in text]


@pytest.mark.slow
def test_a_served_root_never_answers_from_outside_while_names_are_swapped(tmp_path):
    """The same race against a real ``up``: MCP and the REST mirror, the
    indexer and its watcher following the churn, transcription included
    (its provider is a closed port: the inside WAV reaches it and fails
    there, the text canary would be DOC_TYPE_UNSUPPORTED)."""
    root, outside = build(tmp_path)
    env = {
        "MISTRAL_API_KEY": "test-key-not-real",
        "DIR2MCP_MISTRAL__BASE_URL": f"http://127.0.0.1:{free_port()}",
        "DIR2MCP_STT__MAX_ATTEMPTS": "1",
    }
    up = Up("--dir", str(root), "--json", "--auth", "none", env=env)
    seen: Counter = Counter()
    try:
        url = up.url()
        base = url.rsplit("/", 1)[0]
        with httpx.Client(timeout=60, verify=TLS) as client, Swapper(root, outside):
            headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": PROTOCOL}
            init = {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t"}},
            }
            session = client.post(url, json=init, headers=headers).headers["MCP-Session-Id"]
            headers["MCP-Session-Id"] = session

            def mcp(name: str, arguments: dict) -> dict:
                body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
                body["params"] = {"name": name, "arguments": arguments}
                response = client.post(url, json=body, headers=headers)
                assert CANARY not in response.text, response.text
                result = response.json()["result"]
                return result["structuredContent"]

            def rest(path: str, params: dict) -> dict:
                response = client.get(f"{base}/api/v1{path}", params=params)
                assert CANARY not in response.text, response.text
                return response.json()

            for _ in range(60):  # 420 calls; with the 9,600 in process, over 10,000
                for rel in ("race.txt", "racedir/race.txt"):
                    for answer in (
                        mcp("dir2mcp.open_file", {"rel_path": rel}),
                        rest("/files/slice", {"rel_path": rel}),
                    ):
                        seen[answer.get("error", {}).get("code", "served")] += 1
                said = mcp("dir2mcp.transcribe", {"rel_path": "race.wav"})
                code = said.get("error", {}).get("code", "served")
                assert code != errors.DOC_TYPE_UNSUPPORTED, said  # the text canary was read
                seen[f"transcribe:{code}"] += 1
                assert mcp("dir2mcp.find", {"content": CANARY})["matches"] == []
                assert rest("/find", {"content": CANARY})["matches"] == []
        assert seen["served"] and seen[errors.FORBIDDEN], seen
        assert set(seen) - {"served"} <= DECLINED | {k for k in seen if k.startswith("transcribe:")}, seen
        assert up.stop() == 0, up.stderr
    finally:
        up.close()
    assert CANARY not in up.stdout + up.stderr
    assert not holds(root / ".dir2mcp" / "meta.sqlite", CANARY)
