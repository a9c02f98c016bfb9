"""The Linux kernel as a user's tree (issue #37; a benchmark, not a test).

Unpacks Debian's ``linux-source-6.12`` tarball (``apt-get install
linux-source-6.12`` puts it in /usr/src) into ``--work`` (kept between
runs), drops Debian's packaging lines from the top ``.gitignore`` (``/*``
then ``!/debian/``: under them git tracks nothing), makes the tree a git
repository and runs ``up --json`` on it, recording:

- the physical floor: ``git ls-files -z | xargs -0 cat > /dev/null`` (cold
  when this process may drop the page cache, else said to be warm);
- the time until ``initialize`` is answered over MCP;
- the time until the lexical index is complete (``lexical_index_complete``)
  and files/s, against that floor;
- searches over MCP (2026-07-28, stateless) once a second during the pass and
  after it, each sent to the indexing server and to an ``up --no-index``
  server on the same state, interleaved: p50/p99 and their ratio;
- ``find`` with a literal and with a regular expression over the whole tree;
- peak RSS of the server and of each indexing child, the database and the
  hnswlib index size at the end;
- the walk's coverage: files found, indexed and tracked by git, and what
  it left out by reason (the ``coverage`` event);
- the CPU seconds of the server and of the indexing child (``/proc``), and
  every minute the files indexed, the child's CPU and the load average: on a
  shared machine the child's CPU per 1,000 files is the figure that holds,
  wall time is not. A pass not complete by ``--timeout`` is reported as far
  as it got;
- with ``--embed local``, over ``--dense-window`` seconds from the end of the
  lexical pass (the dense pass starts there): every ``--eta-interval``
  seconds the chunks embedded, the rate and the ETA ``stats`` shows, each
  ETA's rate (chunks left / ETA) against the rate achieved from it to the
  next sample and to the window's end, its error in % (positive: the ETA
  was too long), and beside it the rate of the five samples before (what a
  five-minute window would have shown); the rate achieved and the child's
  CPU seconds over the window; and embed-first (``--probes``): files of
  5-400 chunks, none embedded, from the last half of the queue, opened
  (``dir2mcp.open_file``) or searched for (their name, within their
  folder: the hit files are asked for), one at a time, each timed from the
  request until every chunk of the files asked about has its vector
  (``meta.sqlite``, read-only), against the time the background pass would
  have taken to reach them (their place in its queue at the window's rate);
  and whether a search scoped to the file, for words no file holds, then
  has hits (only the dense ranking can give them; none before).

    python bench/big_tree.py --work ~/.cache/dir2mcp-bench/big-tree --embed none

``--embed fake`` takes the tree to full dense coverage without the model's
hours: the product is configured as for Mistral, pointed at
``tests/fakes/mistral.py --fast`` (the Mistral wire format, random vectors
of the local model's 384 dimensions) run by this process on 127.0.0.1.
From the end of the lexical pass until ``dense_index_complete``, every
``--eta-interval`` seconds: `stats`, the memory of the server and its
children at that moment (VmRSS, RssAnon, RssFile: the shards are
memory-mapped), the shards and the database's size; searches go on
(phase ``dense``), then ``--dense-window`` seconds (at most 300) after it
(phase ``after``). Each process's largest VmRSS, VmHWM, RssAnon, RssFile
and the largest sum at one moment are reported, the reference server's
and the fake's apart. A file ``stop-dense`` in ``--work`` ends the dense
pass early (reported as far as it got). ``DIR2MCP_RAG__SHARD_VECTORS`` and
``DIR2MCP_SERVER__INDEXER_NICE`` in the environment are passed to `up`.
The model's own memory is not in these figures.

``--initialize`` measures only the start: from launching ``up`` to its
answer to a 2025-06-18 ``initialize`` (polled every 10 ms), the server
process's CPU seconds (user + system, ``/proc``, its indexing child not
included) and the wall time, with the load average, on (a) a small tree
whose state exists, (b) the big tree with an existing index (``--state``,
by default the one the full run leaves), (c) the big tree with a fresh
state directory (migrations included), each ``--repeat`` times,
interleaved with the reference: daphne serving a one-function ASGI app
(``bench/hello_asgi.py``), started and asked the same way. Reported as
medians and as ratios to the reference's. The project is byte-compiled
first: with ``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__``, every
start compiles the project's modules again (about 0.4 CPU-s).

    python bench/big_tree.py --initialize --tree ~/src/linux-subtree --state ~/src/linux-subtree/.dir2mcp

``--subtrees fs kernel`` unpacks and indexes only those paths;
``--prepare-processes 0 auto`` runs one pass with files prepared in the
indexing child and one with its preparing workers (``ingest.prepare_processes``),
in the same run: the CPU of the writer and of its workers is reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from serving import Server, make_tree, peak_rss_mib, percentile  # noqa: E402  (bench/serving.py's)

from corpus.index.dense.vectors import KINDS  # noqa: E402  (the background pass's order of kinds)

TARBALL = Path("/usr/src/linux-source-6.12.tar.xz")
STATELESS = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": STATELESS,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "big-tree", "version": "1"},
}
QUERIES = [
    "schedule a task on another cpu run queue",
    "ext4 journal commit transaction",
    "tcp retransmit timer",
    "page fault handler for anonymous memory",
    "kmalloc slab cache allocation",
    "usb device enumeration descriptor",
    "spin_lock_irqsave",
    "copy_from_user",
    "inode cache eviction",
    "pci config space read",
]
DEBIAN_PACKAGING = ("/*", "!/debian/")
T0 = time.monotonic()


def machine() -> str:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    return f"{platform.machine()}, {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def say(message: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {message}", file=sys.stderr, flush=True)


def prepare(tarball: Path, work: Path, subtrees: list[str] | None = None) -> Path:
    """The unpacked tree (or only ``subtrees`` of it, with its top
    ``.gitignore``) as a git repository with one commit (kept)."""
    top = tarball.name.removesuffix(".tar.xz")
    name = top if not subtrees else top + "-" + "-".join(s.strip("/").replace("/", "_") for s in subtrees)
    tree = work / name
    if (tree / ".git").is_dir():
        return tree
    work.mkdir(parents=True, exist_ok=True)
    say(f"unpacking {tarball} into {work}")
    if subtrees:
        into = work / f"{name}.unpacking"
        into.mkdir(exist_ok=True)
        members = [f"{top}/.gitignore", *(f"{top}/{s.strip('/')}/*" for s in subtrees)]
        subprocess.run(["tar", "-xf", str(tarball), "-C", str(into), "--wildcards", *members], check=True)
        (into / top).rename(tree)
        into.rmdir()
    else:
        subprocess.run(["tar", "-xf", str(tarball), "-C", str(work)], check=True)
    ignore = tree / ".gitignore"
    kept = [line for line in ignore.read_text().splitlines() if line.strip() not in DEBIAN_PACKAGING]
    ignore.write_text("\n".join(kept) + "\n")
    git = ["git", "-C", str(tree), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "unpacked"], check=True)
    return tree


def tracked(tree: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(tree), "ls-files", "-z"], capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def floor_read(tree: Path) -> dict:
    cold = drop_caches()
    began = time.monotonic()
    subprocess.run(
        # a dangling symlink makes cat (and xargs) fail: what can be read is read
        f"git -C '{tree}' ls-files -z | (cd '{tree}' && xargs -0 cat > /dev/null 2>&1)",
        shell=True,
        check=False,
    )
    return {"seconds": round(time.monotonic() - began, 1), "cache": "cold" if cold else "warm"}


class Mcp:
    """A stateless 2026-07-28 client: one POST per call, no session."""

    def __init__(self, url: str):
        self.url = url + "/mcp"
        self.http = httpx.Client(timeout=300)
        self.next_id = 0

    def post(self, method: str, params: dict, name: str = "", headers: dict | None = None) -> dict:
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": {**params, "_meta": META}}
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": STATELESS,
            "Mcp-Method": method,
            **(headers or {}),
        }
        if name:
            headers["Mcp-Name"] = name
        response = self.http.post(self.url, headers=headers, content=json.dumps(body))
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {name}: HTTP {response.status_code}: {response.text[:500]}")
        message = response.json()
        if "error" in message or message["result"].get("isError"):
            raise RuntimeError(json.dumps(message)[:500])
        return message["result"]

    def call(self, tool: str, arguments: dict) -> dict:
        # a 2026-07-28 client mirrors a rel_path as a header (an ASCII path is sent as is)
        mirrored = {"Mcp-Param-Path": arguments["rel_path"]} if "rel_path" in arguments else {}
        params = {"name": tool, "arguments": arguments}
        return self.post("tools/call", params, name=tool, headers=mirrored)["structuredContent"]

    def timed(self, tool: str, arguments: dict) -> tuple[float, dict]:
        began = time.perf_counter()
        result = self.call(tool, arguments)
        return (time.perf_counter() - began) * 1000, result


def first_initialize(url: str, deadline: float) -> float:
    """Seconds from now until ``server/discover`` is answered."""
    client = Mcp(url)
    while time.monotonic() < deadline:
        try:
            client.post("server/discover", {})
            return time.monotonic()
        except (httpx.HTTPError, RuntimeError):
            time.sleep(0.05)
    raise SystemExit("the server never answered")


class Searcher(threading.Thread):
    """Once a second (``interval``), the same query to the indexing server and to the
    reference (when it is up), alternating which goes first."""

    def __init__(self, indexing: str, interval: float = 1.0):
        super().__init__(daemon=True)
        self.indexing = Mcp(indexing)
        self.interval = interval
        self.reference: Mcp | None = None
        self.phase = "during"
        self.times: dict[tuple[str, str], list[float]] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.halt.wait(self.interval):
            args = {"query": QUERIES[i % len(QUERIES)], "k": 10}
            pairs = [("indexing", self.indexing)]
            if self.reference is not None:
                pairs.append(("reference", self.reference))
            if i % 2:
                pairs.reverse()
            phase = self.phase
            for label, client in pairs:
                try:
                    ms, _ = client.timed("dir2mcp.search", args)
                except (httpx.HTTPError, RuntimeError) as exc:
                    say(f"search on {label} failed: {exc}")
                    continue
                self.times.setdefault((phase, label), []).append(ms)
            i += 1

    def summary(self) -> dict:
        found: dict = {}
        for (phase, label), values in sorted(self.times.items()):
            found.setdefault(phase, {})[label] = {
                "n": len(values),
                "p50_ms": round(statistics.median(values), 1),
                "p99_ms": round(percentile(values, 0.99), 1),
            }
        for servers in found.values():
            if "indexing" in servers and "reference" in servers:
                ratio = servers["indexing"]["p50_ms"] / servers["reference"]["p50_ms"]
                servers["ratio_p50"] = round(ratio, 2)
        return found


def sizes(state: Path) -> dict:
    def mib(paths) -> float:
        return round(sum(p.stat().st_size for p in paths if p.is_file()) / 2**20, 1)

    return {
        "database_mib": mib(state.glob("meta.sqlite*")),
        "vectors_mib": mib(p for p in state.rglob("*") if "hnsw" in p.name or p.suffix in (".bin", ".hnsw")),
        "state_mib": mib(state.rglob("*")),
    }


# -- the dense pass: the ETA `stats` shows, and what an agent gets meanwhile -------


@dataclass(frozen=True)
class DenseOptions:
    window: float  # seconds of the dense pass measured
    eta_interval: float  # seconds between `stats` samples
    probes: int  # files opened or searched for, one at a time
    probe_timeout: float  # seconds a probe's files may take


#: what `dir2mcp.search` can match in no file: a search scoped to one file
#: with it has lexical hits in none, so any hit is the file's dense neighbour
NO_WORDS = "zyxwvq plughqux frobnitzal"


class Queue:
    """The embedding queue as meta.sqlite holds it, read-only (the server
    writes it): the background pass embeds the pending chunks kind by kind
    (``KINDS``) and by chunk id within a kind (``_embed_batches``)."""

    JOIN = (
        "FROM chunks c JOIN representations r ON r.rep_id = c.representation_id "
        "JOIN documents d ON d.doc_id = r.document_id"
    )
    LIVE_PENDING = "c.deleted = 0 AND r.deleted = 0 AND d.deleted = 0 AND c.embedding_status = 'pending'"

    def __init__(self, state: Path):
        self.db = sqlite3.connect(f"file:{state / 'meta.sqlite'}?mode=ro", uri=True, timeout=60)

    def pending(self, paths: list[str]) -> int:
        marks = ",".join("?" * len(paths))
        sql = f"SELECT count(*) {self.JOIN} WHERE d.rel_path IN ({marks}) AND {self.LIVE_PENDING}"
        return int(self.db.execute(sql, paths).fetchone()[0])

    def position(self, paths: list[str]) -> int:
        """Pending chunks the background pass embeds before it has every
        pending chunk of ``paths`` (those chunks included)."""
        marks = ",".join("?" * len(paths))
        last = dict(
            self.db.execute(
                f"SELECT c.index_kind, max(c.chunk_id) {self.JOIN} "
                f"WHERE d.rel_path IN ({marks}) AND {self.LIVE_PENDING} GROUP BY c.index_kind",
                paths,
            ).fetchall()
        )
        if not last:
            return 0
        final = max(last, key=KINDS.index)
        queue = "SELECT count(*) FROM chunks WHERE deleted = 0 AND embedding_status = 'pending'"
        ahead = sum(
            int(self.db.execute(f"{queue} AND index_kind = ?", [kind]).fetchone()[0])
            for kind in KINDS[: KINDS.index(final)]
        )
        mine = self.db.execute(f"{queue} AND index_kind = ? AND chunk_id <= ?", [final, last[final]])
        return ahead + int(mine.fetchone()[0])

    def deep_files(self, count: int, seed: int = 37) -> list[tuple[str, int]]:
        """(path, pending chunks) of ``count`` files of 5-400 chunks, none
        embedded, from the last half of the queue's last kind, in distinct
        folders (seeded)."""
        kind = KINDS[-1]
        ids = self.db.execute(
            "SELECT min(chunk_id), max(chunk_id) FROM chunks "
            "WHERE deleted = 0 AND embedding_status = 'pending' AND index_kind = ?",
            [kind],
        ).fetchone()
        if ids[0] is None:
            return []
        middle = (ids[0] + ids[1]) // 2
        rows = self.db.execute(
            f"SELECT d.rel_path, count(*), sum(c.embedding_status = 'pending') {self.JOIN} "
            "WHERE c.deleted = 0 AND c.index_kind = ? AND c.chunk_id > ? GROUP BY d.doc_id",
            [kind, middle],
        ).fetchall()
        whole = [(path, n) for path, n, pending in rows if 5 <= n <= 400 and pending == n]
        random.Random(seed).shuffle(whole)
        picked: list[tuple[str, int]] = []
        folders: set[str] = set()
        for path, n in whole:
            folder = path.rsplit("/", 1)[0]
            if folder not in folders:
                folders.add(folder)
                picked.append((path, n))
            if len(picked) == count:
                break
        return picked


def scoped_dense_hits(client: Mcp, path: str) -> int:
    """Hits of a search scoped to ``path`` for words no file holds: its
    chunks that have vectors the dense ranking read (0 while none has)."""
    found = client.call("dir2mcp.search", {"query": NO_WORDS, "k": 5, "path_prefix": path})
    return sum(1 for hit in found["hits"] if hit["rel_path"] == path)


def probe(client: Mcp, queue: Queue, how: str, path: str, options: DenseOptions, tick) -> dict:
    """Ask about ``path`` as an agent would (``open``: dir2mcp.open_file;
    ``search``: a search for its name within its folder, whose hit files the
    server asks to embed first) and time until every chunk of the files asked
    about has its vector; ``tick`` runs while waiting (the ETA samples)."""
    before = scoped_dense_hits(client, path)
    folder, _, name = path.rpartition("/")
    if how == "open":
        began = time.monotonic()
        client.call("dir2mcp.open_file", {"rel_path": path, "max_chars": 2000})
        asked = [path]
    else:
        words = name.rsplit(".", 1)[0].replace("_", " ").replace("-", " ")
        began = time.monotonic()
        found = client.call("dir2mcp.search", {"query": words, "k": 10, "path_prefix": folder + "/"})
        asked = list(dict.fromkeys(hit["rel_path"] for hit in found["hits"]))
    request_ms = (time.monotonic() - began) * 1000
    pending = {p: queue.pending([p]) for p in asked}
    asked = [p for p, n in pending.items() if n]  # a hit file embedded already is not waited for
    result = {
        "how": how,
        "path": path,
        "files": len(asked),
        "chunks": sum(pending[p] for p in asked),
        "position": queue.position(asked) if asked else 0,
        "request_ms": round(request_ms, 1),
        "dense_hits_before": before,
    }
    waited = None if asked else 0.0  # no hit file had anything pending: nothing to wait for
    result["nothing_pending"] = not asked
    while asked and time.monotonic() - began < options.probe_timeout:
        tick()
        if queue.pending(asked) == 0:
            waited = time.monotonic() - began
            break
        time.sleep(0.25)
    result["seconds"] = round(waited, 1) if waited is not None else None
    result["dense_hits_after"] = scoped_dense_hits(client, path) if path in asked or how == "open" else None
    return result


def eta_sample(client: Mcp, server: Server, began: float) -> dict:
    t = time.monotonic()
    dense = client.call("dir2mcp.stats", {})["indexer"]["dense"]
    cpu = progress(server, began)
    return {
        "seconds": round(t - began, 1),
        "stats_ms": round((time.monotonic() - t) * 1000),
        "embedded": dense["embedded"],
        "total": dense["total"],
        "rate_per_second": dense["rate_per_second"],
        "eta_seconds": dense["eta_seconds"],
        "child_cpu_s": cpu["child_cpu_s"],
        "server_cpu_s": cpu["server_cpu_s"],
        "load": cpu["load"],
    }


def eta_accuracy(track: list[dict]) -> list[dict]:
    """Each ETA `stats` showed against the rate achieved after it: the rate
    the ETA implies (chunks left / ETA) against the chunks embedded per
    second from that sample to the next one and to the window's end; the
    error is the ETA's, against the time those chunks would take at the rate
    achieved (positive: the ETA was too long)."""
    found = []
    last = track[-1]
    for i, s in enumerate(track[:-1]):
        left = s["total"] - s["embedded"]
        if not s["eta_seconds"] or left <= 0:
            continue
        implied = left / s["eta_seconds"]
        row = {
            "seconds": s["seconds"],
            "left": left,
            "eta_seconds": s["eta_seconds"],
            "implied": round(implied, 2),
        }
        if i >= 5 and track[i - 5]["eta_seconds"] is not None:  # five samples back, all in the pass
            before = track[i - 5]
            trailing = (s["embedded"] - before["embedded"]) / (s["seconds"] - before["seconds"])
            achieved = (last["embedded"] - s["embedded"]) / (last["seconds"] - s["seconds"])
            row["trailing_5"] = round(trailing, 2)
            row["error_trailing_5_end_pct"] = (
                round((achieved / trailing - 1) * 100, 1) if trailing > 0 else None
            )
        for label, later in (("next", track[i + 1]), ("end", last)):
            if later["seconds"] - s["seconds"] < 30:  # the window's last sample can follow closely
                continue
            achieved = (later["embedded"] - s["embedded"]) / (later["seconds"] - s["seconds"])
            row[f"achieved_{label}"] = round(achieved, 2)
            row[f"error_{label}_pct"] = round((achieved / implied - 1) * 100, 1) if achieved > 0 else None
        found.append(row)
    return found


def dense_window_run(
    server: Server,
    client: Mcp,
    state: Path,
    began: float,
    options: DenseOptions,
    peaks: dict[str, float],
    deadline: float,
) -> dict:
    """``options.window`` seconds of the dense pass from the end of the
    lexical one: the ETA `stats` shows every ``eta_interval`` seconds, and
    ``probes`` files deep in the queue opened or searched for, one at a time;
    ended by ``deadline`` (``--timeout`` from the start) if that comes first."""
    queue = Queue(state)
    end = min(time.monotonic() + options.window, deadline)
    track: list[dict] = []
    due = [time.monotonic()]

    def tick() -> None:
        if time.monotonic() >= due[0]:
            track.append(eta_sample(client, server, began))
            say("dense " + json.dumps(track[-1]))
            due[0] += options.eta_interval
        sample(server, peaks)

    files = queue.deep_files(options.probes)
    say(f"embed-first probes: {files}")
    probes: list[dict] = []
    while time.monotonic() < end:
        tick()
        # the first probe once `stats` has a rate, then one after another
        if files and len(track) >= 2 and time.monotonic() < end - 30:
            path, _ = files.pop(0)
            how = "open" if len(probes) % 2 == 0 else "search"
            probes.append(probe(client, queue, how, path, options, tick))
            say("probe " + json.dumps(probes[-1]))
        time.sleep(0.5)
    track.append(eta_sample(client, server, began))
    first, last = track[0], track[-1]
    elapsed = last["seconds"] - first["seconds"]
    rate = (last["embedded"] - first["embedded"]) / elapsed if elapsed > 0 else 0.0
    for found in probes:  # where the background pass would have reached them at the window's rate
        found["background_seconds"] = round(found["position"] / rate, 1) if rate > 0 else None
    timed = [p["seconds"] for p in probes if p["seconds"] is not None and not p["nothing_pending"]]
    accuracy = eta_accuracy(track)
    errors = {
        label: [abs(r[f"error_{label}_pct"]) for r in accuracy if r.get(f"error_{label}_pct") is not None]
        for label in ("next", "end", "trailing_5_end")
    }
    cpu = last["child_cpu_s"] - first["child_cpu_s"]
    dense = {
        **{k: last[k] for k in ("embedded", "total", "rate_per_second", "eta_seconds")},
        "window_seconds": round(elapsed, 1),
        "embedded_in_window": last["embedded"] - first["embedded"],
        "rate_achieved": round(rate, 2),
        "child_cpu_s": round(cpu, 1),
        "chunks_per_child_cpu_s": round((last["embedded"] - first["embedded"]) / cpu, 2) if cpu > 0 else None,
        "eta_abs_error_pct": {
            label: {"median": round(statistics.median(v), 1), "max": round(max(v), 1), "n": len(v)}
            for label, v in errors.items()
            if v
        },
        "load": [min(s["load"] for s in track), max(s["load"] for s in track)],
    }
    embed_first = {
        "probes": probes,
        "answered": f"{len(timed)} of {sum(1 for p in probes if not p['nothing_pending'])}",
        "p50_seconds": round(statistics.median(timed), 1) if timed else None,
        "max_seconds": round(max(timed), 1) if timed else None,
        "dense_hits_after": sum(1 for p in probes if p["dense_hits_after"]),
    }
    return {"track": {"samples": track, "accuracy": accuracy}, "embed_first": embed_first, "dense": dense}


# -- the whole tree to full dense coverage through a fake provider ---------------

#: the models the fake serves, at the local model's 384 dimensions (names no
#: provider documents, so the dimension is learned from the first answer)
FAKE_MODELS = {"text": "bench-text-384", "code": "bench-code-384"}


class FakeProvider:
    """``tests/fakes/mistral.py --fast`` as a process on 127.0.0.1: the
    Mistral wire format (``/v1/embeddings``), vectors drawn at random, at
    bulk speed; the product is configured as for Mistral, pointed at it."""

    def __init__(self, env: dict):
        models = [f"--model={name}=384" for name in FAKE_MODELS.values()]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.mistral", "--fast", *models],
            cwd=BENCH.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        first = json.loads(self.proc.stdout.readline())
        self.url, self.api_key = first["url"], first["api_key"]

    def configure(self, env: dict) -> None:
        env.update(
            {
                "DIR2MCP_EMBED__PROVIDER": "mistral",
                "MISTRAL_API_KEY": self.api_key,
                "DIR2MCP_MISTRAL__BASE_URL": self.url,
                "DIR2MCP_MISTRAL__EMBED_TEXT_MODEL": FAKE_MODELS["text"],
                "DIR2MCP_MISTRAL__EMBED_CODE_MODEL": FAKE_MODELS["code"],
            }
        )

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def vector_files(state: Path) -> dict:
    """The dense indices' files: full shards (count, MiB) and the open
    files with their sidecars, and the database."""

    def mib(paths) -> float:
        return round(sum(p.stat().st_size for p in paths if p.is_file()) / 2**20, 1)

    files = list(state.glob("vectors_*.hnsw*"))
    shards = [p for p in files if not p.name.endswith((".hnsw", ".json"))]
    return {
        "shards": len(shards),
        "shards_mib": mib(shards),
        "open_mib": mib(p for p in files if p not in shards),
        "meta_sqlite_mib": mib(state.glob("meta.sqlite*")),
    }


def full_dense_run(
    server: Server,
    client: Mcp,
    state: Path,
    began: float,
    options: DenseOptions,
    peaks: dict[str, float],
    memory: Memory,
    deadline: float,
) -> dict:
    """From the end of the lexical pass until ``dense_index_complete`` (or
    ``deadline``, or a stall of ten minutes): every ``eta_interval`` seconds
    `stats`, the memory of the server and its children at that moment and
    the vector files. ``stop_file`` appearing ends it early (the run is
    then reported as far as it got)."""
    stop_file = state.parent / "stop-dense"
    stop_file.unlink(missing_ok=True)
    start = time.monotonic()
    track: list[dict] = []
    due = start
    stalled = {"embedded": -1, "since": start}
    outcome = "complete"
    while not any(e["event"] == "dense_index_complete" for e in server.events):
        now = sample(server, peaks, memory)
        if server.proc.poll() is not None:
            outcome = f"the server exited ({server.proc.returncode})"
            break
        if time.monotonic() > deadline:
            outcome = "timeout"
            break
        if stop_file.exists():
            outcome = f"stopped ({stop_file.name})"
            break
        if time.monotonic() >= due:
            row = eta_sample(client, server, began)
            row["memory_mib"] = {k: round(v, 1) for k, v in now.items()}
            row["processes_mib"] = {
                label: {k: round(v) for k, v in found.items() if k != "RssShmem"}
                for label, found in memory.last.items()
            }
            row.update(vector_files(state))
            track.append(row)
            say("dense " + json.dumps(row))
            due += options.eta_interval
            if row["embedded"] != stalled["embedded"]:
                stalled.update(embedded=row["embedded"], since=time.monotonic())
            elif time.monotonic() - stalled["since"] > 600:
                outcome = "stalled: nothing embedded for ten minutes"
                break
        time.sleep(1.0)
    seconds = time.monotonic() - start
    final = eta_sample(client, server, began)
    final.update(vector_files(state))
    first = track[0] if track else final
    cpu = final["child_cpu_s"] - first["child_cpu_s"]
    embedded = final["embedded"] - first["embedded"]
    complete = next((e["data"] for e in server.events if e["event"] == "dense_index_complete"), None)
    return {
        "outcome": outcome,
        "seconds": round(seconds, 1),
        "complete": complete,
        "final": final,
        "chunks_per_second": round(embedded / (final["seconds"] - first["seconds"]), 1)
        if final["seconds"] > first["seconds"]
        else None,
        "child_cpu_s": round(cpu, 1),
        "chunks_per_child_cpu_s": round(embedded / cpu, 1) if cpu > 0 else None,
        "samples": track,
    }


def run(
    tree: Path, work: Path, embed: str, dense: DenseOptions, timeout: float, processes: str = "auto"
) -> dict:
    state = work / f"state-{embed}-{processes}"
    shutil.rmtree(state, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIR2MCP_", "MISTRAL"))}
    env["DIR2MCP_EMBED__PROVIDER"] = embed
    env["DIR2MCP_INGEST__PREPARE_PROCESSES"] = processes
    fake = FakeProvider(env) if embed == "fake" else None
    if fake is not None:
        fake.configure(env)
    # The indexing child runs `python -m dir2mcp_site.cli` from elsewhere: without
    # this it imports whichever checkout the virtualenv's editable install names,
    # not this one (a copy of the project measured another's code).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH.parent), env.get("PYTHONPATH")]))
    for name in ("DIR2MCP_SERVER__INDEXER_NICE", "DIR2MCP_RAG__SHARD_VECTORS"):  # passed through
        if os.environ.get(name):
            env[name] = os.environ[name]
    began = time.monotonic()
    indexing = Server(tree, state, env)
    reference = None
    peaks: dict[str, float] = {}
    memory = Memory()
    if fake is not None:
        memory.others["fake provider"] = fake.proc.pid
    result: dict = {"embed": embed, "prepare_processes": processes, "load_at_start": os.getloadavg()[0]}
    try:
        indexing.wait(lambda s: bool(s.url), timeout=120)
        result["initialize_seconds"] = round(first_initialize(indexing.url, began + 120) - began, 2)
        searcher = Searcher(indexing.url)
        searcher.start()
        deadline = began + timeout
        trace: list[dict] = []
        result["trace"] = trace
        next_trace = began
        while not any(e["event"] == "lexical_index_complete" for e in indexing.events):
            if time.monotonic() >= next_trace:
                trace.append(progress(indexing, began))
                say(json.dumps(trace[-1]))
                next_trace = time.monotonic() + 60.0
            if indexing.proc.poll() is not None:
                raise SystemExit("the server exited before the lexical pass completed")
            if time.monotonic() > deadline:
                say("the lexical pass did not complete in --timeout: reporting how far it got")
                result["lexical_incomplete"] = progress(indexing, began)
                searcher.halt.set()
                searcher.join()
                result["search"] = searcher.summary()
                sample(indexing, peaks, memory)
                result["peak_rss_mib"] = {k: round(v, 1) for k, v in peaks.items()}
                result.update(sizes(state))
                return result
            if reference is None and any(e["event"] == "scan_progress" for e in indexing.events):
                reference = Server(tree, state, env, "--no-index")
                reference.wait(lambda s: bool(s.url), timeout=120)
                memory.others["reference"] = reference.proc.pid
                searcher.reference = Mcp(reference.url)
            sample(indexing, peaks, memory)
            time.sleep(1.0)
        lexical = next(e for e in indexing.events if e["event"] == "lexical_index_complete")
        result["lexical_seconds"] = round(time.monotonic() - began, 1)
        result["lexical_cpu"] = progress(indexing, began)
        result["lexical"] = lexical["data"]
        result["files_per_second"] = round(lexical["data"]["documents"] / result["lexical_seconds"], 1)
        searcher.phase = "dense" if embed == "fake" else "after"
        result["memory_lexical"] = memory.summary()
        result["vector_files_lexical"] = vector_files(state)
        client = Mcp(indexing.url)
        result.update(finds(client))
        if fake is not None:
            result["dense_full"] = full_dense_run(
                indexing, client, state, began, dense, peaks, memory, began + timeout
            )
            searcher.phase = "after"
            result["memory_dense"] = memory.summary()
            result["after"] = finds(client)
            end = time.monotonic() + min(dense.window, 300.0)
            while time.monotonic() < end:
                sample(indexing, peaks, memory)
                time.sleep(1.0)
        elif embed != "none":
            found = dense_window_run(indexing, client, state, began, dense, peaks, began + timeout)
            result["dense_track"], result["embed_first"] = found["track"], found["embed_first"]
            result["dense"] = found["dense"]
        else:
            time.sleep(min(30.0, dense.window))
        searcher.halt.set()
        searcher.join()
        result["search"] = searcher.summary()
        # What the walk found against git, and what it left out by reason
        # (bench/git_equality.py compares the file sets themselves).
        result["coverage"] = next((e["data"] for e in indexing.events if e["event"] == "coverage"), None)
        sample(indexing, peaks, memory)
        result["peak_rss_mib"] = {k: round(v, 1) for k, v in peaks.items()}
        result["peak_rss_total_mib"] = round(sum(peaks.values()), 1)
        result["memory"] = memory.summary()
        result["load_at_end"] = os.getloadavg()
    finally:
        if reference is not None:
            reference.stop()
        indexing.stop()
        if fake is not None:
            result["fake_provider_cpu_s"] = round(cpu_seconds(fake.proc.pid), 1)
            fake.stop()
    result.update(sizes(state))
    result["vector_files"] = vector_files(state)
    return result


def finds(client: Mcp) -> dict:
    """``find`` over the whole tree with a literal and with a regular expression."""
    found = {}
    for label, arguments in (
        ("find_literal", {"content": "EXPORT_SYMBOL_GPL(kmalloc", "limit": 50}),
        ("find_regex", {"content": r"static\s+int\s+\w+_probe\(", "regex": True, "limit": 50}),
    ):
        ms, answer = client.timed("dir2mcp.find", arguments)
        found[label] = {"ms": round(ms, 1), "matches": len(answer.get("matches") or [])}
    return found


def cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """User and system CPU seconds of a process so far (0 once it is gone);
    ``reaped``: with those of its children it has waited for (the indexing
    child's preparing workers once they exit)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(") ", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def progress(server: Server, began: float) -> dict:
    """Files indexed so far, the CPU each process has used, and the load:
    the indexing child's own (the writer, and preparing when it has no
    workers) and its preparing workers' (live ones, and those it reaped)."""
    counters = next((e["data"] for e in reversed(server.events) if e["event"] == "scan_progress"), {})
    pids = server.pids()
    writer = sum(cpu_seconds(pid) for pid in pids[1:])
    workers = sum(cpu_seconds(pid, reaped=True) - cpu_seconds(pid) for pid in pids[1:])
    workers += sum(cpu_seconds(w) for pid in pids[1:] for w in children(pid))
    return {
        "seconds": round(time.monotonic() - began, 1),
        "indexed": counters.get("indexed", 0),
        "chunks": counters.get("chunks_total", 0),
        "server_cpu_s": round(cpu_seconds(pids[0]), 1),
        "child_cpu_s": round(writer + workers, 1),
        "writer_cpu_s": round(writer, 1),
        "workers_cpu_s": round(workers, 1),
        "load": os.getloadavg()[0],
    }


def sample(server: Server, peaks: dict[str, float], memory: Memory | None = None) -> dict[str, float]:
    pids = server.pids()
    labelled = [("server", pids[0])] + [(f"child {n}", pid) for n, pid in enumerate(pids[1:], 1)]
    labelled += [(f"worker {n}", pid) for n, pid in enumerate((w for c in pids[1:] for w in children(c)), 1)]
    for label, pid in labelled:
        peaks[label] = max(peaks.get(label, 0.0), peak_rss_mib(pid))
    return memory.sample(labelled) if memory is not None else {}


#: the memory lines of /proc/PID/status read (kB): resident now and at its
#: peak, and what is resident split into anonymous memory, file-backed pages
#: (memory-mapped shards, the database's pages mapped by SQLite, libraries)
#: and shared memory
STATUS_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")


def proc_status(pid: int) -> dict[str, float]:
    """``STATUS_FIELDS`` of a process in MiB (empty once it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    found = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name in STATUS_FIELDS:
            found[name] = int(value.split()[0]) / 1024
    return found


class Memory:
    """Each process's largest VmRSS, VmHWM, RssAnon, RssFile and RssShmem
    seen, and the largest sum of the server's and its children's VmRSS (and
    RssAnon) at one moment; ``others`` (the reference server, the fake
    provider) are sampled too and reported apart."""

    def __init__(self) -> None:
        self.peaks: dict[str, dict[str, float]] = {}
        self.together = {"VmRSS": 0.0, "RssAnon": 0.0, "RssFile": 0.0}
        self.others: dict[str, int] = {}
        #: each process's last reading
        self.last: dict[str, dict[str, float]] = {}

    def sample(self, labelled: list[tuple[str, int]]) -> dict[str, float]:
        now = {"VmRSS": 0.0, "RssAnon": 0.0, "RssFile": 0.0}
        for label, pid in [*labelled, *self.others.items()]:
            found = proc_status(pid)
            self.last[label] = found
            mine = self.peaks.setdefault(label, {})
            for name, value in found.items():
                mine[name] = max(mine.get(name, 0.0), value)
            if label not in self.others:
                for name in now:
                    now[name] += found.get(name, 0.0)
        for name, value in now.items():
            self.together[name] = max(self.together[name], value)
        return now

    def summary(self) -> dict:
        return {
            "per_process_mib": {
                label: {k: round(v, 1) for k, v in found.items()} for label, found in self.peaks.items()
            },
            "server_and_children_at_once_mib": {k: round(v, 1) for k, v in self.together.items()},
        }


# -- time to initialize ----------------------------------------------------------

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "b", "version": "1"},
    },
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def time_to_answer(command: list[str], url_path: str, port: int, env: dict, cwd: Path) -> dict:
    """Launch ``command`` (listening on ``port``), POST ``initialize`` every
    10 ms until a 200, then stop it: wall seconds, the process's CPU seconds
    at the answer, the load average at launch."""
    load = os.getloadavg()[0]
    began = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    try:
        with httpx.Client(timeout=60) as client:
            while True:
                try:
                    answer = client.post(
                        f"http://127.0.0.1:{port}{url_path}", json=INITIALIZE, headers=headers
                    )
                    if answer.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None:
                    raise SystemExit(f"{command[1:3]} exited before it answered")
                time.sleep(0.01)
        wall, cpu = time.monotonic() - began, cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "load": round(load, 1)}


def up_command(tree: Path, state: Path, port: int) -> list[str]:
    return [
        sys.executable, str(BENCH.parent / "manage.py"), "up", "--dir", str(tree), "--state-dir", str(state),
        "--json", "--auth", "none", "--listen", f"127.0.0.1:{port}",
    ]  # fmt: skip


def initialize_cases(tree: Path, work: Path, state: Path | None) -> dict[str, tuple[Path, Path, bool]]:
    """name -> (tree, state directory, whether the state starts fresh each run)."""
    small = work / "initialize-small"
    if not small.exists():
        make_tree(small / "tree", 50)
    cases = {"a_small_tree": (small / "tree", small / "state", False)}
    if state is not None and (state / "meta.sqlite").is_file():
        cases["b_big_index"] = (tree, state, False)
    else:
        say(f"no index at {state}: case (b) skipped (run the full benchmark first, or pass --state)")
    cases["c_big_tree_fresh_state"] = (tree, work / "initialize-fresh", True)
    return cases


def measure_initialize(tree: Path, work: Path, state: Path | None, repeat: int, embed: str) -> dict:
    packages = [
        str(BENCH.parent / name) for name in ("corpus", "mcp_gateway", "payments", "kernel", "dir2mcp_site")
    ]
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *packages], check=True, stdout=subprocess.DEVNULL
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIR2MCP_", "MISTRAL"))}
    env["DIR2MCP_EMBED__PROVIDER"] = embed
    cases = initialize_cases(tree, work, state)
    for root, folder, fresh in cases.values():  # a first start migrates what exists; not counted
        if not fresh:
            port = free_port()
            time_to_answer(up_command(root, folder, port), "/mcp", port, env, BENCH)
    runs: dict[str, list[dict]] = {"reference": [], **{name: [] for name in cases}}
    for i in range(repeat):
        order = ["reference", *cases]
        order = order[i % len(order) :] + order[: i % len(order)]
        for name in order:
            port = free_port()
            if name == "reference":
                daphne = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
                command = [*daphne, "hello_asgi:application"]
                runs[name].append(time_to_answer(command, "/", port, env, BENCH))
                continue
            root, folder, fresh = cases[name]
            if fresh:
                shutil.rmtree(folder, ignore_errors=True)
            runs[name].append(time_to_answer(up_command(root, folder, port), "/mcp", port, env, BENCH))
            say(f"{name}: {runs[name][-1]}")
    return summarize_initialize(runs)


def summarize_initialize(runs: dict[str, list[dict]]) -> dict:
    def median(name: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[name])

    ref_cpu, ref_wall = median("reference", "cpu_s"), median("reference", "wall_s")
    found: dict = {}
    for name, values in runs.items():
        cpu, wall = median(name, "cpu_s"), median(name, "wall_s")
        found[name] = {
            "runs": len(values),
            "cpu_s": round(cpu, 3),
            "wall_s": round(wall, 2),
            "cpu_ratio": round(cpu / ref_cpu, 2),
            "wall_ratio": round(wall / ref_wall, 2),
            "load": [min(r["load"] for r in values), max(r["load"] for r in values)],
        }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tarball", type=Path, default=TARBALL)
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "dir2mcp-bench" / "big-tree")
    parser.add_argument(
        "--embed",
        default="none",
        help="embed.provider: none (lexical only), local, or fake: the whole tree to full dense coverage "
        "through tests/fakes/mistral.py --fast (384 dimensions), configured as Mistral.",
    )
    parser.add_argument("--dense-window", type=float, default=300.0, help="Seconds of dense work measured.")
    parser.add_argument(
        "--eta-interval", type=float, default=60.0, help="Seconds between `stats` ETA samples."
    )
    parser.add_argument(
        "--probes", type=int, default=6, help="Files opened or searched for during the window."
    )
    parser.add_argument(
        "--probe-timeout", type=float, default=300.0, help="Seconds a probe's files may take to be embedded."
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=7200.0,
        help="Seconds before giving up (the dense window ends by it too).",
    )
    parser.add_argument("--initialize", action="store_true", help="Measure only the time to initialize.")
    parser.add_argument("--tree", type=Path, help="With --initialize: this tree instead of the kernel.")
    parser.add_argument("--state", type=Path, help="With --initialize: an existing index of the tree.")
    parser.add_argument("--repeat", type=int, default=5, help="With --initialize: runs of each case.")
    parser.add_argument(
        "--subtrees", nargs="+", help="Only these paths of the tree (fs kernel drivers/net); default all."
    )
    parser.add_argument(
        "--prepare-processes",
        nargs="+",
        default=["auto"],
        help="ingest.prepare_processes of each pass, one pass each in this run (e.g. 0 auto).",
    )
    parser.add_argument("--skip-floor", action="store_true", help="Do not time the cold read.")
    args = parser.parse_args()
    # stopped (kill PID), its servers and fake provider stop too (run's finally)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.initialize:
        tree = args.tree or prepare(args.tarball, args.work)
        state = args.state or args.work / f"state-{args.embed}"
        load = os.getloadavg()
        files = (
            len(tracked(tree)) if (tree / ".git").exists() else sum(1 for p in tree.rglob("*") if p.is_file())
        )
        print(f"# {machine()}, load {load[0]:.1f}, tree {tree} ({files} files)", flush=True)
        found = measure_initialize(tree, args.work, state, args.repeat, args.embed)
        print(json.dumps({"initialize": found, "load_after": os.getloadavg()[0]}), flush=True)
        return
    if not args.tarball.is_file():
        raise SystemExit(f"{args.tarball} is missing: apt-get install linux-source-6.12")
    tree = prepare(args.tarball, args.work, args.subtrees)
    files = tracked(tree)
    load = os.getloadavg()
    print(
        f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load {load[0]:.1f}, {len(files)} files tracked by git",
        flush=True,
    )
    if not args.skip_floor:
        print(json.dumps({"floor_read": floor_read(tree)}), flush=True)
    for processes in args.prepare_processes:
        dense = DenseOptions(args.dense_window, args.eta_interval, args.probes, args.probe_timeout)
        found = run(tree, args.work, args.embed, dense, args.timeout, processes)
        print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
