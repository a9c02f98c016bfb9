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
- with ``--embed local``: the dense rate over ``--dense-window`` seconds after
  the lexical pass, and the ETA ``stats`` shows then.

    python bench/big_tree.py --work ~/.cache/dir2mcp-bench/big-tree --embed none

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
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from serving import Server, make_tree, peak_rss_mib, percentile  # noqa: E402  (bench/serving.py's)

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

    def post(self, method: str, params: dict, name: str = "") -> dict:
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": {**params, "_meta": META}}
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": STATELESS,
            "Mcp-Method": method,
        }
        if name:
            headers["Mcp-Name"] = name
        response = self.http.post(self.url, headers=headers, content=json.dumps(body))
        response.raise_for_status()
        message = response.json()
        if "error" in message or message["result"].get("isError"):
            raise RuntimeError(json.dumps(message)[:500])
        return message["result"]

    def call(self, tool: str, arguments: dict) -> dict:
        return self.post("tools/call", {"name": tool, "arguments": arguments}, name=tool)["structuredContent"]

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


def run(
    tree: Path, work: Path, embed: str, dense_window: float, timeout: float, processes: str = "auto"
) -> dict:
    state = work / f"state-{embed}-{processes}"
    shutil.rmtree(state, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIR2MCP_", "MISTRAL"))}
    env["DIR2MCP_EMBED__PROVIDER"] = embed
    env["DIR2MCP_INGEST__PREPARE_PROCESSES"] = processes
    # The indexing child runs `python -m dir2mcp_site.cli` from elsewhere: without
    # this it imports whichever checkout the virtualenv's editable install names,
    # not this one (a copy of the project measured another's code).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH.parent), env.get("PYTHONPATH")]))
    if os.environ.get("DIR2MCP_SERVER__INDEXER_NICE"):
        env["DIR2MCP_SERVER__INDEXER_NICE"] = os.environ["DIR2MCP_SERVER__INDEXER_NICE"]
    began = time.monotonic()
    indexing = Server(tree, state, env)
    reference = None
    peaks: dict[str, float] = {}
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
                sample(indexing, peaks)
                result["peak_rss_mib"] = {k: round(v, 1) for k, v in peaks.items()}
                result.update(sizes(state))
                return result
            if reference is None and any(e["event"] == "scan_progress" for e in indexing.events):
                reference = Server(tree, state, env, "--no-index")
                reference.wait(lambda s: bool(s.url), timeout=120)
                searcher.reference = Mcp(reference.url)
            sample(indexing, peaks)
            time.sleep(1.0)
        lexical = next(e for e in indexing.events if e["event"] == "lexical_index_complete")
        result["lexical_seconds"] = round(time.monotonic() - began, 1)
        result["lexical_cpu"] = progress(indexing, began)
        result["lexical"] = lexical["data"]
        result["files_per_second"] = round(lexical["data"]["documents"] / result["lexical_seconds"], 1)
        searcher.phase = "after"
        client = Mcp(indexing.url)
        for label, arguments in (
            ("find_literal", {"content": "EXPORT_SYMBOL_GPL(kmalloc", "limit": 50}),
            ("find_regex", {"content": r"static\s+int\s+\w+_probe\(", "regex": True, "limit": 50}),
        ):
            ms, found = client.timed("dir2mcp.find", arguments)
            result[label] = {"ms": round(ms, 1), "matches": len(found.get("matches") or [])}
        if embed != "none":
            window_end = time.monotonic() + dense_window
            while time.monotonic() < window_end:
                sample(indexing, peaks)
                time.sleep(2.0)
            stats = client.call("dir2mcp.stats", {})
            result["dense"] = stats["indexer"]["dense"]
        else:
            time.sleep(min(30.0, dense_window))
        searcher.halt.set()
        searcher.join()
        result["search"] = searcher.summary()
        # What the walk found against git, and what it left out by reason
        # (bench/git_equality.py compares the file sets themselves).
        result["coverage"] = next((e["data"] for e in indexing.events if e["event"] == "coverage"), None)
        sample(indexing, peaks)
        result["peak_rss_mib"] = {k: round(v, 1) for k, v in peaks.items()}
        result["peak_rss_total_mib"] = round(sum(peaks.values()), 1)
    finally:
        if reference is not None:
            reference.stop()
        indexing.stop()
    result.update(sizes(state))
    return result


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


def sample(server: Server, peaks: dict[str, float]) -> None:
    pids = server.pids()
    labelled = [("server", pids[0])] + [(f"child {n}", pid) for n, pid in enumerate(pids[1:], 1)]
    labelled += [(f"worker {n}", pid) for n, pid in enumerate((w for c in pids[1:] for w in children(c)), 1)]
    for label, pid in labelled:
        peaks[label] = max(peaks.get(label, 0.0), peak_rss_mib(pid))


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
    parser.add_argument("--embed", default="none", help="embed.provider: none (lexical only) or local.")
    parser.add_argument("--dense-window", type=float, default=300.0, help="Seconds of dense work measured.")
    parser.add_argument("--timeout", type=float, default=7200.0, help="Seconds before giving up.")
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
        found = run(tree, args.work, args.embed, args.dense_window, args.timeout, processes)
        print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
