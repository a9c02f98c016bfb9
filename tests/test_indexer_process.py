"""The indexer in a supervised child process (issue #17), on real `up`
processes with the local embedder: a killed child is restarted and the
index ends as a clean build would, searches answer throughout, Ctrl-C stops
every process, and a vector the child stores reaches the server's search."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import sqlite3
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest

from corpus.events import Reporter
from corpus.index.dense.embedding import check_models, dense_store, embed_chunks, embed_first, embed_pending
from corpus.index.words import index_text, tokens
from corpus.ingest.indexing import index_directory
from corpus.models import Chunk
from corpus.providers.local import LocalEmbedder
from kernel.config import build_config
from mcp_gateway.indexer_process import (
    VIEW_COST,
    DenseRefresher,
    ForwardingReporter,
    _Rate,
    dense_eta,
    replay,
)
from tests.support import CHUNK_TEXT, TLS, chunk_text, wait_until
from tests.test_cli import cli
from tests.up_process import ASKING_EVERY, running  # noqa: F401  (the fixture)

#: The local model at float32: these tests watch what `up` shows while the
#: child embeds (a kill, the restart, the estimate), which needs embedding to
#: take a while; at bf16 (auto, on a processor with AMX) the rest of the tree
#: was embedded before stats had a rate to estimate from. bf16 itself:
#: tests/test_local_embedder.py, tests/test_precision.py.
LOCAL = {"DIR2MCP_EMBED__PROVIDER": "local", "DIR2MCP_EMBED__PRECISION": "fp32"}


def end_to_end(test):
    """A test on real `up` processes: marked slow, so the file is handed
    out among the first (tests/conftest.py), and allowed 900 s, since the
    first such test's module fixture alone (a clean build of 1,200 chunks
    with the local model) can take most of the suite's default 300 s on a
    loaded machine, before the test's own waits of minutes each."""
    return pytest.mark.slow(pytest.mark.timeout(900)(test))


TOPICS = [
    ("invoice", "total", "tax"),
    ("parser", "token", "grammar"),
    ("socket", "packet", "timeout"),
    ("matrix", "row", "column"),
    ("calendar", "month", "weekday"),
    ("archive", "member", "header"),
]


def small_modules(root: Path, files: int) -> None:
    """``files`` modules of a few small functions each: several hundred
    units, so embedding them takes the local model a while."""
    for i in range(files):
        a, b, c = TOPICS[i % len(TOPICS)]
        body = "\n\n".join(
            f"def {a}_{b}_{i}_{j}(items, limit={j}):\n"
            f"    # sum the {b} of each {a} until the {c} limit\n"
            f"    found = [x.{b} for x in items if x.{c} < limit]\n"
            f"    return sum(found) + {i * 7 + j}\n"
            for j in range(4)
        )
        (root / f"pkg_{i // 20}").mkdir(exist_ok=True)
        (root / f"pkg_{i // 20}" / f"{a}_{i}.py").write_text(body + "\n")


def chunk_rows(state_dir: Path, select: str, where: str = "", params: tuple = (), tail: str = "") -> list:
    """``SELECT select`` over the live chunks (c) joined to their
    representation (r) and document (d), read straight from the state's SQLite."""
    with contextlib.closing(sqlite3.connect(state_dir / "meta.sqlite")) as conn:
        return conn.execute(
            f"SELECT {select} FROM chunks c "
            "JOIN representations r ON r.rep_id = c.representation_id "
            "JOIN documents d ON d.doc_id = r.document_id "
            f"WHERE c.deleted = 0 AND r.deleted = 0 AND d.deleted = 0 {where} {tail}",
            params,
        ).fetchall()


def snapshot(state_dir: Path) -> dict[tuple, bytes | None]:
    """Every live chunk, by (path, ordinal, text), with its status and vector;
    status ``unit`` for a code unit whose vector is still its own alone (its
    signature view is embedded later: corpus/index/dense/embedding.py)."""
    rows = chunk_rows(
        state_dir, f"d.rel_path, c.ordinal, c.embedding_status, c.view_pending, c.embedding, {CHUNK_TEXT}"
    )
    return {
        (path, ordinal, chunk_text(*text)): ("unit" if later else status, blob)
        for path, ordinal, status, later, blob, *text in rows
    }


def same_vector(blob: bytes, reference: bytes) -> bool:
    """The same stored vector up to float noise (code vectors are not unit
    length: they lean towards the signature view, corpus/index/dense/views.py)."""
    a, b = np.frombuffer(blob, dtype="<f4"), np.frombuffer(reference, dtype="<f4")
    return a.shape == b.shape == (384,) and np.allclose(a, b, atol=1e-4)


def assert_same_index(found: dict, reference: dict) -> None:
    assert set(found) == set(reference)
    for key, (status, blob) in found.items():
        assert status == "ok", key
        assert same_vector(blob, reference[key][1]), key


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The tree, and a clean build of it by `reindex` (state kept apart)."""
    base = tmp_path_factory.mktemp("reference")
    tree = base / "tree"
    tree.mkdir()
    # Enough for several of the local embedder's 256-chunk calls, so a stop
    # lands between two of them.
    small_modules(tree, 300)
    built = cli("reindex", "--dir", str(tree), "--state-dir", str(base / "state"), env=LOCAL, timeout=600)
    assert built.returncode == 0, built.stderr
    return tree, snapshot(base / "state")


def embedding_under_way(up) -> dict | None:
    return next(
        (
            e["data"]
            for e in up.events()
            if e["event"] == "embed_progress" and 0 < e["data"]["embedded_ok"] < e["data"]["chunks_total"]
        ),
        None,
    )


def niceness(pid: int) -> int:
    """Field 19 of /proc/PID/stat (the fields after the command's name start at 3)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[16])


def up_mid_embedding(tree: Path, tmp_path: Path, running, **env: str):  # noqa: F811
    """`up` on a copy of ``tree``, once its child is embedding: (root, up)."""
    root = tmp_path / "root"
    shutil.copytree(tree, root)
    up = running("--dir", str(root), "--json", "--auth", "none", env={**LOCAL, **env})
    up.wait_until(embedding_under_way, "embedding under way", timeout=300)
    return root, up


@end_to_end
def test_a_killed_indexer_is_restarted_searches_answer_and_the_index_ends_as_a_clean_build(
    reference,
    tmp_path,
    running,  # noqa: F811
):
    clean = reference[1]
    root, up = up_mid_embedding(reference[0], tmp_path, running, DIR2MCP_SERVER__INDEXER_NICE="3")
    indexer = up.rest("/api/v1/stats").json()["indexer"]
    assert indexer["mode"] == "process" and indexer["running"] and indexer["pid"] != up.proc.pid
    child = indexer["pid"]
    assert niceness(child) == niceness(up.proc.pid) + 3  # server.indexer_nice

    answers: list[int] = []
    halt = threading.Event()

    def search_all_along() -> None:
        with httpx.Client(timeout=30, verify=TLS) as client:
            base = up.url().removesuffix("/mcp")
            while not halt.is_set():
                response = client.post(base + "/api/v1/search", json={"query": "invoice tax total", "k": 5})
                answers.append(response.status_code)
                # a client's pace, not a busy loop: this process shares the cores with the child
                halt.wait(0.1)

    searcher = threading.Thread(target=search_all_along, daemon=True)
    searcher.start()
    os.kill(child, signal.SIGKILL)
    restarted = up.event("indexer_restarted")
    assert restarted["signal"] == "SIGKILL" and restarted["restarts"] == 1

    def estimating(_):
        if not progress_since(up, "indexer_restarted"):
            return None  # the restarted child has stored nothing yet
        dense = up.rest("/api/v1/stats").json()["indexer"]["dense"]
        return dense if dense["embedded"] < dense["total"] and (dense["eta_seconds"] or 0) > 0 else None

    # The restarted child embeds the rest, and stats says when it will be done.
    estimate = up.wait_until(estimating, "an estimate of the time to full coverage", timeout=300)
    assert_eta_of_shown_rate(estimate)

    def covered(_):
        stats = up.rest("/api/v1/stats").json()
        dense = stats["indexer"]["dense"]
        done = not stats["indexing"]["running"] and dense["total"] == len(clean) == dense["embedded"]
        return stats if done else None

    stats = up.wait_until(
        covered, "full dense coverage after the restart", timeout=300, interval=ASKING_EVERY
    )
    halt.set()
    searcher.join(30)
    assert stats["indexer"]["restarts"] == 1 and stats["indexer"]["pid"] not in (None, child)
    assert stats["indexer"]["dense"]["eta_seconds"] == 0
    assert len(answers) >= 3 and set(answers) == {200}, answers
    assert up.stop() == 0, up.stderr
    assert_same_index(snapshot(root / ".dir2mcp"), clean)
    status = cli("status", "--dir", str(root))
    assert "Indexer process: not running, restarted 1 time(s); last exit: killed by SIGKILL" in status.stdout
    recorded = json.loads(cli("status", "--dir", str(root), "--json").stdout)["indexer"]
    assert recorded["restarts"] == 1 and recorded["running"] is False


@end_to_end
def test_ctrl_c_during_embedding_stops_every_process_and_leaves_the_index_whole(
    reference,
    tmp_path,
    running,  # noqa: F811
):
    clean = reference[1]
    root, up = up_mid_embedding(reference[0], tmp_path, running)
    child = up.rest("/api/v1/stats").json()["indexer"]["pid"]

    assert up.stop(signal.SIGINT, timeout=60) == 0, up.stderr
    wait_until(lambda: gone(child), timeout=30, message="the indexing child to exit with its server")

    state = root / ".dir2mcp"
    with contextlib.closing(sqlite3.connect(state / "meta.sqlite")) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    found = snapshot(state)
    embedded = [key for key, (status, _) in found.items() if status == "ok"]
    alone = [key for key, (status, _) in found.items() if status == "unit"]
    assert 0 < len(embedded) + len(alone) and len(embedded) < len(clean)  # stopped mid-way
    for key in embedded:  # what was stored is whole and right
        assert same_vector(found[key][1], clean[key][1]), key
    for key in alone:  # a unit's own vector, whole: unit length (a blend is shorter)
        assert np.linalg.norm(np.frombuffer(found[key][1], dtype="<f4")) == pytest.approx(1, abs=1e-4), key

    resumed = cli("reindex", "--dir", str(root), "--incremental", env=LOCAL, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_index(snapshot(state), clean)


def pending_by_file(state_dir: Path) -> tuple[str, dict[str, int]]:
    """(the file whose chunks come last in the embedding queue, pending chunks per file)."""
    rows = chunk_rows(
        state_dir,
        "d.rel_path, count(*), max(c.chunk_id)",
        "AND c.embedding_status = 'pending'",
        tail="GROUP BY d.rel_path",
    )
    last = max(rows, key=lambda row: row[2])[0] if rows else ""
    return last, {path: count for path, count, _ in rows}


@end_to_end
@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_file_a_client_opens_is_embedded_ahead_of_the_queue_and_stats_estimates_the_rest(
    mode,
    reference,
    tmp_path,
    running,  # noqa: F811
):
    root, up = up_mid_embedding(reference[0], tmp_path, running, DIR2MCP_SERVER__INDEXER=mode)
    state = root / ".dir2mcp"
    indexer = up.rest("/api/v1/stats").json()["indexer"]
    assert indexer["mode"] == mode and indexer["running"]
    assert (indexer["pid"] is None) == (mode == "thread")

    # The file at the end of the queue (chunks are embedded in id order).
    asked, pending = pending_by_file(state)
    assert pending[asked] > 0 and sum(pending.values()) > pending[asked]
    opened = up.rest(f"/api/v1/files/slice?rel_path={asked}&start_line=1&end_line=3")
    assert opened.status_code == 200, opened.text

    def embedded(_):
        _, now = pending_by_file(state)
        return now if asked not in now else None

    # In id order it would be embedded with the last call, nothing left
    # after it; asked about, it goes ahead of the rest. It waits for the call
    # under way, then its own: two of the model's 256-chunk calls at fp32,
    # about two minutes each at nice 15 beside a load of 16 (timed out at
    # 120 s there), so the file's other waits' 300 s.
    left = up.wait_until(embedded, f"{asked}'s chunks embedded", timeout=300)
    assert sum(left.values()) > 0, "embedded only in its turn, with the last of the queue"

    def estimating(_):
        dense = up.rest("/api/v1/stats").json()["indexer"]["dense"]
        return dense if dense["embedded"] < dense["total"] and (dense["eta_seconds"] or 0) > 0 else None

    estimate = up.wait_until(estimating, "an estimate of the time to full coverage", timeout=300)
    assert_eta_of_shown_rate(estimate)
    assert up.stop() == 0, up.stderr


def progress_since(up, event: str) -> list[int]:
    """The ``embedded_ok`` counts `up` reported after its first ``event``
    whose chunks were stored since (the first one after it is the base)."""
    events = up.events()
    at = next((i for i, e in enumerate(events) if e["event"] == event), None)
    if at is None:
        return []
    counts = [e["data"]["embedded_ok"] for e in events[at:] if e["event"] == "embed_progress"]
    return [count for count in counts[1:] if count > counts[0]]


#: the rates ``stats`` shows are rounded to two decimals
SHOWN_RATE_STEP = 0.005


def assert_eta_of_shown_rate(dense: dict) -> None:
    """``stats``' time to full coverage is the one its own counts and
    chunk rate give (while chunks remain a signature view counts as
    VIEW_COST of a chunk: dense_eta), at the rate it shows as that rate was
    before its rounding: within the estimates of the rate half a step
    either side (and the estimate's own rounding, 0.1 s). It compared two
    rates before, the shown views rate against the chunk rate's share,
    which a views rate of embed-first's few views (171 s against 7,562 s on
    a loaded machine) set far apart."""
    units, views, rate = dense["total"] - dense["embedded"], dense["views_waiting"], dense["rate_per_second"]
    assert units > 0 and rate > 0, dense
    fastest = dense_eta(units, views, rate + SHOWN_RATE_STEP, 0.0)
    slowest = dense_eta(units, views, rate - SHOWN_RATE_STEP, 0.0) if rate > SHOWN_RATE_STEP else None
    assert fastest is not None and fastest - 0.1 <= dense["eta_seconds"], (dense, fastest)
    assert slowest is None or dense["eta_seconds"] <= slowest + 0.1, (dense, slowest)
    if rate >= 1:  # a rate shown to a hundredth of it or finer: the estimate is the shown rate's, to 1%
        assert dense["eta_seconds"] == pytest.approx((units + views * VIEW_COST) / rate, rel=0.01, abs=0.1)


def all_stored(state_dir: Path, rel_path: str) -> bool:
    """Whether every live chunk of ``rel_path`` has its vector stored."""
    found = chunk_rows(state_dir, "DISTINCT c.embedding_status", "AND d.rel_path = ?", (rel_path,))
    return {status for (status,) in found} == {"ok"}


@end_to_end
def test_a_vector_the_child_stores_is_found_by_the_servers_search(tmp_path, running):  # noqa: F811
    root = tmp_path / "root"
    root.mkdir()
    small_modules(root, 6)
    up = running("--dir", str(root), "--json", "--auth", "none", env=LOCAL)
    up.event("watch_ready", timeout=300)
    names = [e["event"] for e in up.events()]
    assert (
        names.index("lexical_index_complete")
        < names.index("dense_index_complete")
        < names.index("watch_ready")
    )
    lexical, dense = up.event("lexical_index_complete"), up.event("dense_index_complete")
    assert lexical["documents"] == 6 and lexical["chunks"] == dense["chunks"] == dense["embedded"] > 0

    body = (
        "def compute_shipping_cost(weight_kg, distance_km):\n"
        "    # freight charge by courier\n"
        "    return 4.5 + weight_kg * 0.8 + distance_km * 0.05\n"
    )
    query = {"query": "what is the price to mail a package", "k": 5, "index": "code"}
    # Found by meaning: the query shares no word with the file, so its
    # lexical half cannot find it, only the vector the child stores.
    assert not set(tokens(query["query"])) & set(tokens(index_text(body)))
    # A search first: from then on the server's dense index takes new
    # vectors only from its refresher, never at search time.
    assert up.rest("/api/v1/search", query).json()["hits"]
    (root / "shipping.py").write_text(body)

    up.wait_until(
        lambda _: all_stored(root / ".dir2mcp", "shipping.py"), "the new file's vector stored", timeout=120
    )

    def found(_):
        hits = up.rest("/api/v1/search", query).json()["hits"]
        return hits if any(h["rel_path"] == "shipping.py" for h in hits) else None

    # How soon is bench/store_to_search.py's (0.016 s median on 2 idle
    # cores): the suite asserts the outcome, never a duration.
    hits = up.wait_until(
        found, "the new file's vector in the server's search", timeout=60, interval=ASKING_EVERY
    )
    assert hits[0]["rel_path"] == "shipping.py"
    assert up.stop() == 0, up.stderr


@end_to_end
def test_up_says_when_each_half_of_the_index_is_complete(tmp_path, running):  # noqa: F811
    root = tmp_path / "root"
    root.mkdir()
    small_modules(root, 3)
    up = running("--dir", str(root), "--auth", "none", env=LOCAL)
    up.wait_until(lambda u: "Dense index complete: " in u.stdout, "the dense-complete line", timeout=300)
    lines = up.stdout.splitlines()
    lexical = next(
        i for i, line in enumerate(lines) if line.startswith("Lexical index complete: 3 documents")
    )
    dense = next(i for i, line in enumerate(lines) if line.startswith("Dense index complete: "))
    assert lexical < dense
    assert up.stop() == 0, up.stderr


@pytest.mark.django_db
def test_files_a_client_asked_about_are_embedded_first(tmp_path, state):
    root = tmp_path / "root"
    root.mkdir()
    small_modules(root, 12)
    (root / "notes.md").write_text("# Notes\n\nWhere the shipping rates come from.\n")
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    index_directory(root, state=state, config=config, embedder=None)  # every chunk pending
    asked = {"pkg_0/archive_11.py", "notes.md"}  # the last code file, and a text one
    embed_first.add(sorted(asked))
    done = embed_pending(LocalEmbedder(), state, batch_size=4)

    rows = list(
        Chunk.objects.filter(deleted=False).values_list("representation__document__rel_path", "embed_seq")
    )
    assert done == len(rows) and all(seq is not None for _, seq in rows)
    first = {path for path, seq in rows if seq == 1}  # each kind's first stored batch
    assert first == asked
    assert embed_first.pick({"code": Chunk.objects.none()}, 4) is None  # forgotten once embedded


@pytest.mark.django_db
def test_the_file_asked_about_last_is_embedded_first(tmp_path, state):
    """Taken in chunk id order, a file asked about waited behind every file
    asked before or after it with lower ids: on the kernel's drivers/net, a
    file opened while another client searched once a second waited more than
    five minutes (issue #37). A file asked again moves up only when opened:
    moved up by every search that hit it again, the files of a client
    searching in circles kept everything else waiting. The batch holds the
    latest file alone: filled up with the other asked files, it took as long
    as any batch (256 chunks, a minute at 5 chunks/s under load)."""
    root = tmp_path / "root"
    root.mkdir()
    small_modules(root, 12)
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    index_directory(root, state=state, config=config, embedder=None)  # every chunk pending
    pending = Chunk.objects.filter(deleted=False, embedding_status="pending")
    queues = {kind: pending.filter(index_kind=kind) for kind in ("text", "code")}
    by_id = sorted(
        pending.filter(index_kind="code").values_list("chunk_id", "representation__document__rel_path")
    )
    low, high = by_id[0][1], by_id[-1][1]

    def picked() -> set[str]:
        kind, rows = embed_first.pick(queues, 64) or ("", [])
        return set(
            Chunk.objects.filter(chunk_id__in=[r[0] for r in rows]).values_list(
                "representation__document__rel_path", flat=True
            )
        )

    try:
        embed_first.add([low])
        embed_first.add([high])  # asked last: first, though its chunks come last in the queue
        assert picked() == {high}  # alone: a batch of the file asked about is done sooner
        embed_first.add([low])  # a search hit again: keeps its place
        assert picked() == {high}
        embed_first.add([low], again=True)  # opened: first again
        assert picked() == {low}
    finally:
        embed_first.pick({"code": Chunk.objects.none()}, 1)  # forget them


# -- the report channel --------------------------------------------------------


def test_reports_cross_the_pipe_as_the_same_calls():
    wire = io.StringIO()
    child = ForwardingReporter(wire)
    child.event("watch_ready", {"root": "/r"})
    child.warn("provider slow", code="MISTRAL_RATE_LIMIT")
    child.file_error("a/b.gz", "FILE_UNREADABLE", "bad gzip")
    child.progress({"scanned": 3, "chunks_total": 10, "embedded_ok": 4}, final=True)
    child.say("Index lock released")

    direct, replayed = io.StringIO(), io.StringIO()
    expected = Reporter(direct, json_mode=True)
    expected.event("watch_ready", {"root": "/r"})
    expected.warn("provider slow", code="MISTRAL_RATE_LIMIT")
    expected.file_error("a/b.gz", "FILE_UNREADABLE", "bad gzip")
    expected.progress({"scanned": 3, "chunks_total": 10, "embedded_ok": 4}, final=True)
    server = Reporter(replayed, json_mode=True)
    calls = [replay(line, server) for line in wire.getvalue().splitlines()]
    assert [c[0] for c in calls] == ["event", "warn", "file_error", "progress", "say"]

    def strip(text: str) -> list[dict]:
        return [{k: v for k, v in json.loads(line).items() if k != "ts"} for line in text.splitlines()]

    assert strip(replayed.getvalue()) == strip(direct.getvalue())


def test_a_stray_line_from_the_child_is_shown_not_lost():
    out = io.StringIO()
    assert replay("Traceback (most recent call last):\n", Reporter(out)) is None
    assert "indexer: Traceback" in out.getvalue()
    assert replay(json.dumps({"call": "__class__", "args": []}), Reporter(out)) is None


class Clock:
    """A clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_embedding_rate_follows_progress_and_restarts_with_a_new_job():
    clock = Clock()
    rate = _Rate(window=60, clock=clock)
    for done in (0, 50, 100):  # a batch of 50 every ten seconds
        rate.add({"embedded_ok": done, "chunks_total": 200})
        clock.now += 10
    assert rate.per_second() == pytest.approx(5.0)
    rate.add({"embedded_ok": 10, "chunks_total": 200})  # a new job counts from zero
    assert rate.per_second() == 0.0


def test_the_embedding_rate_counts_from_the_first_batch_stored_not_from_the_lexical_pass():
    """A dense pass begins when the lexical one ends: counted from the
    lexical pass's reports (nothing embedded) and the model's loading, the
    first estimate on the kernel's drivers/net was 0.02 chunks/s, an ETA of
    160 days for about an hour and a half (issue #37)."""
    clock = Clock()
    rate = _Rate(window=60, clock=clock)
    for _ in range(40):  # the lexical pass's last reports: nothing embedded
        rate.add({"embedded_ok": 0, "chunks_total": 10_000})
        clock.now += 1
    clock.now += 30  # the model loads, and the first batch is embedded
    for done in (1, 257, 513, 769):  # then a batch of 256 every 6 seconds
        rate.add({"embedded_ok": done, "chunks_total": 10_000})
        clock.now += 6
    assert rate.per_second() == pytest.approx(256 / 6)
    clock.now += 120  # batches slower than the window: the last two reports
    rate.add({"embedded_ok": 1025, "chunks_total": 10_000})
    assert rate.per_second() == pytest.approx(256 / 126)


def test_the_signature_views_have_a_rate_of_their_own_and_the_job_is_complete_only_after_them():
    """Views later: every chunk's own vector first, then the code units'
    signature views. A job whose chunks all have a vector while views wait
    is not complete (asks to embed files first are still sent), and the
    views' rate is measured apart from the chunks'."""
    clock = Clock()
    rate = _Rate(window=60, clock=clock)
    for done in (0, 100, 200):  # units: 10 a second
        rate.add({"embedded_ok": done, "chunks_total": 200, "views_embedded": 0, "views_waiting": 180})
        clock.now += 10
    assert rate.per_second() == pytest.approx(10.0) and rate.views_per_second() == 0.0
    assert not rate.complete()
    for views in (30, 90, 150):  # then views: 6 a second
        waiting = 180 - views
        rate.add({"embedded_ok": 200, "chunks_total": 200, "views_embedded": views, "views_waiting": waiting})
        clock.now += 10
    assert rate.views_per_second() == pytest.approx(6.0)
    assert not rate.complete()
    rate.add({"embedded_ok": 200, "chunks_total": 200, "views_embedded": 180, "views_waiting": 0})
    assert rate.complete()


def test_the_time_to_full_coverage_counts_the_views_still_to_come():
    # before any view: each costs VIEW_COST of a chunk at the chunks' rate
    assert dense_eta(100, 50, 10.0, 0.0) == pytest.approx(10 + 50 * VIEW_COST / 10)
    # the views' own rate once measured; every chunk has its vector
    assert dense_eta(0, 60, 0.0, 6.0) == pytest.approx(10.0)
    # while chunks remain, the views embedded are embed-first's few (files
    # an agent asked about), not the views pass: their rate is not the
    # pass's (on the whole kernel such a trickle read as 178 days)
    assert dense_eta(1_500_000, 700_000, 200.0, 0.2) == pytest.approx(
        1_500_000 / 200 + 700_000 * VIEW_COST / 200
    )
    assert dense_eta(0, 0, 0.0, 0.0) == 0.0
    # a rate not known yet: no estimate rather than a wrong one
    assert dense_eta(100, 50, 0.0, 0.0) is None
    assert dense_eta(0, 50, 0.0, 0.0) is None


@pytest.mark.django_db(transaction=True)
def test_the_refresher_takes_new_vectors_when_woken_not_only_on_its_tick(tmp_path, state):
    """The supervisor wakes the server's refresher on each progress report
    of its child, so a vector is searchable well before the next tick."""
    root = tmp_path / "root"
    root.mkdir()
    small_modules(root, 2)
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    index_directory(root, state=state, config=config, embedder=None)  # every chunk pending
    ids = list(Chunk.objects.filter(deleted=False, index_kind="code").values_list("chunk_id", flat=True))
    first, rest_ids = ids[:2], ids[2:]
    embedder = LocalEmbedder()
    check_models(embedder, state)  # what `up` records before anything is embedded
    assert embed_chunks(embedder, first) == 2  # stored the way another process does: database only

    stop = threading.Event()
    refresher = DenseRefresher(state, stop, every=3600).start()  # no tick within the test
    store = dense_store(state)
    try:
        refresher.wake()
        wait_until(lambda: refresher.passes >= 1, timeout=30, message="the first pass")
        assert set(first) <= set(store.index("code").labels)

        assert embed_chunks(embedder, rest_ids) == len(rest_ids)
        assert not set(rest_ids) & set(store.index("code").labels)  # asleep: nothing taken yet
        refresher.wake()
        wait_until(
            lambda: set(rest_ids) <= set(store.index("code").labels),
            timeout=30,
            message="the woken refresher to take the new vectors",
        )
    finally:
        stop.set()
        refresher.wake()
        refresher.join(10)
    assert not refresher._thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_the_refresher_takes_no_pass_before_the_server_has_answered(tmp_path, state):
    """`up` hands its refresher an event set once a first request is
    answered: loading each .hnsw file and listing the embedded chunks waits
    for it, however often the refresher is woken meanwhile."""
    root = tmp_path / "root"
    root.mkdir()
    small_modules(root, 2)
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    index_directory(root, state=state, config=config, embedder=None)
    stop, settled = threading.Event(), threading.Event()
    refresher = DenseRefresher(state, stop, every=0.02, after=settled).start()
    try:
        for _ in range(10):
            refresher.wake()
            stop.wait(0.02)
        assert refresher.passes == 0

        settled.set()
        wait_until(lambda: refresher.passes >= 1, timeout=30, message="the first pass once settled")
    finally:
        stop.set()
        refresher.join(10)
    assert not refresher._thread.is_alive()
