"""End-to-end MCP benchmark (not a test): ``tools/call dir2mcp.search`` over HTTP.

    python bench/mcp_http.py [--size 10000] [--modes lexical hybrid] [--rounds 2]
                             [--sequential N] [--clients 32] [--calls N]
                             [--without-reference]

Builds a state directory of N chunks with ``bench/search.py``'s
``build_synthetic`` (40 stdlib lines per chunk, random 384-dim unit vectors
recorded as all-MiniLM-L6-v2), then serves it twice, side by side on free
loopback ports, each server one process:

- ours: ``manage.py up --no-index`` on the prepared state directory (daphne
  as ``up`` runs it; ``--no-index`` because an indexer would reconcile the
  empty root with the synthetic rows), bearer auth on (the product default);
- the reference: ``bench/mcp_reference_server.py``, the official MCP Python
  SDK's low-level ``Server`` + ``StreamableHTTPSessionManager`` (stateful,
  JSON responses) under uvicorn, whose ``call_tool`` handler runs the same
  ``tools.run`` in a worker thread.

Both get the same ``DIR2MCP_*`` environment, the same client code (raw
JSON-RPC over ``httpx.AsyncClient``: initialize, notifications/initialized,
then ``tools/call``), the same queries (three identifiers drawn from the
corpus's own text with a seeded RNG, ``k=10``, ``index=text``), and are
checked to return the same hits. Per mode (lexical: ``embed.provider none``;
hybrid: the local embedder) and round (the order of the servers alternates):

- 1 client: warm-up, then calls one after another, p50/p99 (``--sequential``
  per server over all rounds: 300 lexical, 150 hybrid);
- ``--clients`` clients, each with its own session and connection, all at
  once, a fixed number of calls each: requests/s and latency under load
  (``--calls`` per client over all rounds: 30 lexical, 12 hybrid);
- each server's CPU time per request (from /proc), and the client's.

Ours is measured a second time in the same rounds as ``ours-stateless``: the
same server process asked by MCP 2026-07-28 clients, which open no session
and send every ``tools/call`` with its version and capabilities in
``_meta`` and its ``Mcp-Method``/``Mcp-Name`` headers (issue #33: stateless
must not be slower than a session); the ratios compare the two.
``--without-reference`` leaves the reference server out.

The floor both share, ``tools.run`` called in-process without HTTP, is timed
too. Results go to bench/results/ and are printed as a table.

BLAS: every process of the run gets ``OPENBLAS_NUM_THREADS=1`` unless
``--blas-default`` (which then reaches only the reference server: every
dir2mcp process sets it itself when no BLAS thread count is set,
dir2mcp_site/bootstrap.py). The local embedder runs a one-query forward pass with
OpenBLAS's default threads (2 here), whose spin-waiting makes hybrid figures
swing several-fold from run to run on 2 busy cores, for both servers alike
(docs/benchmarks.md). Lexical search does not touch BLAS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

from search import build_synthetic, percentile, setup_django, stdlib_lines  # noqa: E402

PROTOCOL = "2025-11-25"
STATELESS = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": STATELESS,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
}
ACCEPT = "application/json, text/event-stream"
PROVIDERS = {"lexical": "none", "hybrid": "local"}
# Per mode: timed 1-client calls and calls per concurrent client, per server over all
# rounds. Hybrid runs fewer: each call costs 3-4x the CPU, and the run must stay short.
COUNTS = {"lexical": (300, 30), "hybrid": (150, 12)}
CLK_TCK = os.sysconf("SC_CLK_TCK")
T0 = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f} s] {message}", file=sys.stderr, flush=True)


# -- corpus ----------------------------------------------------------------------


def prepare(size: int) -> tuple[Path, Path]:
    """A root (empty) and a state directory holding ``size`` synthetic chunks."""
    work = Path(tempfile.mkdtemp(prefix="dir2mcp-mcp-http-"))
    root, state_dir = work / "root", work / "state"
    root.mkdir()
    setup_django(root, state_dir)
    from django.db import connections

    from corpus.index.dense.embedding import dense_store
    from corpus.store import open_store
    from kernel.state import StateDir

    state = StateDir(state_dir)
    open_store(state)
    build_synthetic(size, 384)
    store = dense_store(state)
    store.sync("text")
    store.save(force=True)  # the servers load the ANN file instead of rebuilding it
    connections.close_all()
    return root, state_dir


def make_queries(count: int) -> list[str]:
    words = [w for line in stdlib_lines()[:20000] for w in line.split() if w.isidentifier() and len(w) > 3]
    rng = random.Random(11)
    return [" ".join(rng.sample(words, 3)) for _ in range(count)]


def arguments(query: str) -> dict:
    return {"query": query, "k": 10, "index": "text"}


def in_process(mode: str, root: Path, state_dir: Path, queries: list[str], n: int) -> dict:
    """``tools.run`` without HTTP: the work both servers share."""
    os.environ["DIR2MCP_EMBED__PROVIDER"] = PROVIDERS[mode]
    from kernel.state import StateDir
    from mcp_gateway import context, tools

    ctx = context.build(root=root, state=StateDir(state_dir), auth_spec="none")
    tool = tools.table()["dir2mcp.search"]
    for q in queries[:10]:
        tools.run(tool, arguments(q), tools.Call(ctx))
    times = []
    for i in range(n):
        t = time.perf_counter()
        result = tools.run(tool, arguments(queries[i % len(queries)]), tools.Call(ctx))
        times.append((time.perf_counter() - t) * 1000)
        assert not result.get("isError"), result
    return {"p50_ms": round(percentile(times, 50), 2), "p99_ms": round(percentile(times, 99), 2)}


# -- servers ---------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Served:
    name: str
    url: str
    proc: subprocess.Popen
    log: Path


@dataclass(frozen=True)
class Target:
    """What is measured: a server, asked through sessions or statelessly."""

    name: str
    served: Served
    stateless: bool = False

    def client(self, token: str) -> Client:
        return Client(self.served.url, token, stateless=self.stateless)


def targets_of(servers: list[Served]) -> list[Target]:
    ours = next(s for s in servers if s.name == "ours")
    return [Target("ours", ours), Target("ours-stateless", ours, stateless=True)] + [
        Target(s.name, s) for s in servers if s.name != "ours"
    ]


def server_env(mode: str, root: Path, state_dir: Path, token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIR2MCP_", "MISTRAL", "DJANGO_"))}
    env.update(
        DIR2MCP_ROOT=str(root),
        DIR2MCP_STATE_DIR=str(state_dir),
        DIR2MCP_AUTH="auto",
        DIR2MCP_AUTH_TOKEN=token,
        DIR2MCP_EMBED__PROVIDER=PROVIDERS[mode],
        # Stateless callers are one client per address and token for the
        # per-client share (16 calls at once by default), a session is one
        # per session: every client here is on one address with one token,
        # so the share is raised to the process's bound for both to be
        # admitted alike.
        DIR2MCP_SERVER__MAX_CALLS_PER_CLIENT="64",
    )
    return env


def start(name: str, argv: list[str], port: int, env: dict[str, str], logdir: Path) -> Served:
    log = logdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    return Served(name, f"http://127.0.0.1:{port}/mcp", proc, log)


def start_servers(
    mode: str, root: Path, state_dir: Path, token: str, sdk_validation: bool, reference: bool = True
) -> list[Served]:
    env = server_env(mode, root, state_dir, token)
    ours_port, ref_port = free_port(), free_port()
    logdir = state_dir.parent
    ours = start(
        "ours",
        [
            sys.executable,
            str(REPO / "manage.py"),
            "up",
            "--dir",
            str(root),
            "--state-dir",
            str(state_dir),
            "--listen",
            f"127.0.0.1:{ours_port}",
            "--no-index",
            "--quiet",
        ],
        ours_port,
        env,
        logdir,
    )
    ref_argv = [
        sys.executable,
        str(BENCH / "mcp_reference_server.py"),
        "--dir",
        str(root),
        "--state-dir",
        str(state_dir),
        "--port",
        str(ref_port),
    ]
    servers = [ours]
    if reference:
        ref_argv += ["--sdk-validation"] if sdk_validation else []
        servers.append(start("reference", ref_argv, ref_port, env, logdir))
    try:
        for served in servers:
            wait_until_serving(served)
    except Exception:
        stop(servers)
        raise
    return servers


def wait_until_serving(served: Served, seconds: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if served.proc.poll() is not None:
            raise RuntimeError(f"{served.name} exited: {served.log.read_text(errors='replace')[-2000:]}")
        try:
            httpx.get(served.url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"{served.name} did not start in {seconds:.0f} s")


def stop(servers: list[Served]) -> None:
    for served in servers:
        if served.proc.poll() is None:
            served.proc.terminate()
    for served in servers:
        try:
            served.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            served.proc.kill()
            served.proc.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


# -- client ----------------------------------------------------------------------


@dataclass
class Client:
    """One MCP session over one keep-alive connection, raw JSON-RPC; or,
    ``stateless``, a 2026-07-28 client on one connection and no session."""

    url: str
    token: str
    stateless: bool = False
    session: str = ""
    next_id: int = 1
    http: object = field(default=None, repr=False)

    def headers(self, body: dict | None = None) -> dict[str, str]:
        headers = {
            "Accept": ACCEPT,
            "Content-Type": "application/json",
            "Authorization": f"Bearer {self.token}",
            "MCP-Protocol-Version": STATELESS if self.stateless else PROTOCOL,
        }
        if self.session:
            headers["MCP-Session-Id"] = self.session
        if self.stateless and body is not None:  # the revision's mirrored headers
            headers["Mcp-Method"] = body["method"]
            headers["Mcp-Name"] = body["params"]["name"]
        return headers

    async def post(self, body: dict):
        headers = self.headers(body)
        response = await self.http.post(self.url, headers=headers, content=json.dumps(body).encode())
        if response.status_code not in (200, 202):
            raise RuntimeError(f"{self.url}: HTTP {response.status_code}: {response.text[:500]}")
        return response

    async def open(self) -> None:
        import httpx

        self.http = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=1))
        if self.stateless:
            return  # nothing to open: every request says who it is
        response = await self.post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "1"},
                },
            }
        )
        self.session = response.headers["MCP-Session-Id"]
        await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def search(self, query: str) -> dict:
        self.next_id += 1
        body = {
            "jsonrpc": "2.0",
            "id": self.next_id,
            "method": "tools/call",
            "params": {"name": "dir2mcp.search", "arguments": arguments(query)},
        }
        if self.stateless:
            body["params"]["_meta"] = META
        message = (await self.post(body)).json()
        result = message.get("result")
        if not result or result.get("isError"):
            raise RuntimeError(f"{self.url}: tools/call failed: {json.dumps(message)[:500]}")
        if self.stateless and result.get("resultType") != "complete":
            raise RuntimeError(f"{self.url}: not a 2026-07-28 result: {json.dumps(message)[:500]}")
        return result["structuredContent"]

    async def close(self) -> None:
        try:
            if self.session:
                await self.http.delete(self.url, headers=self.headers())
        finally:
            await self.http.aclose()


async def same_hits(targets: list[Target], token: str, queries: list[str]) -> int:
    """Every target must answer the same structured hits (same search function)."""
    clients = [t.client(token) for t in targets]
    for client in clients:
        await client.open()
    try:
        for q in queries:
            answers = [await c.search(q) for c in clients]
            if any(answer != answers[0] for answer in answers):
                raise RuntimeError(f"the targets disagree on {q!r}")
    finally:
        for client in clients:
            await client.close()
    return len(queries)


async def sequential(target: Target, token: str, queries: list[str], n: int, warmup: int) -> dict:
    served = target.served
    client = target.client(token)
    await client.open()
    try:
        for i in range(warmup):
            await client.search(queries[i % len(queries)])
        cpu = cpu_seconds(served.proc.pid)
        times = []
        for i in range(n):
            t = time.perf_counter()
            await client.search(queries[(warmup + i) % len(queries)])
            times.append((time.perf_counter() - t) * 1000)
        cpu = cpu_seconds(served.proc.pid) - cpu
    finally:
        await client.close()
    return {"times": times, "server_cpu_ms_per_call": cpu * 1000 / n}


async def concurrent(target: Target, token: str, queries: list[str], clients: int, calls: int) -> dict:
    served = target.served
    pool = [target.client(token) for _ in range(clients)]
    await asyncio.gather(*(c.open() for c in pool))
    try:
        await asyncio.gather(*(c.search(queries[i % len(queries)]) for i, c in enumerate(pool)))
        times: list[float] = []

        async def worker(n: int, client: Client) -> None:
            for j in range(calls):
                q = queries[(n * calls + j) % len(queries)]
                t = time.perf_counter()
                await client.search(q)
                times.append((time.perf_counter() - t) * 1000)

        cpu, own = cpu_seconds(served.proc.pid), time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(worker(n, c) for n, c in enumerate(pool)))
        wall = time.perf_counter() - started
        cpu, own = cpu_seconds(served.proc.pid) - cpu, time.process_time() - own
    finally:
        await asyncio.gather(*(c.close() for c in pool), return_exceptions=True)
    total = clients * calls
    return {
        "rps": total / wall,
        "times": times,
        "server_cpu_ms_per_call": cpu * 1000 / total,
        "client_cpu_ms_per_call": own * 1000 / total,
        "server_cpu_cores": cpu / wall,
    }


# -- the run ---------------------------------------------------------------------


def summarize(rounds: list[dict]) -> dict:
    seq = [t for r in rounds for t in r["sequential"]["times"]]
    conc = [t for r in rounds for t in r["concurrent"]["times"]]
    rps = [r["concurrent"]["rps"] for r in rounds]

    def mean(key: str, part: str) -> float:
        return round(sum(r[part][key] for r in rounds) / len(rounds), 2)

    return {
        "p50_ms": round(percentile(seq, 50), 2),
        "p95_ms": round(percentile(seq, 95), 2),
        "p99_ms": round(percentile(seq, 99), 2),
        "rps": round(sum(rps) / len(rps), 1),
        "rps_rounds": [round(x, 1) for x in rps],
        "p50_ms_under_load": round(percentile(conc, 50), 1),
        "p95_ms_under_load": round(percentile(conc, 95), 1),
        "p99_ms_under_load": round(percentile(conc, 99), 1),
        "server_cpu_ms_per_call_1_client": mean("server_cpu_ms_per_call", "sequential"),
        "server_cpu_ms_per_call_concurrent": mean("server_cpu_ms_per_call", "concurrent"),
        "server_cpu_cores_concurrent": mean("server_cpu_cores", "concurrent"),
        "client_cpu_ms_per_call_concurrent": mean("client_cpu_ms_per_call", "concurrent"),
    }


async def measure(servers: list[Served], token: str, queries: list[str], args, counts) -> dict:
    n_seq, n_calls = counts
    targets = targets_of(servers)
    checked = await same_hits(targets, token, queries[:20])
    per: dict[str, list[dict]] = {t.name: [] for t in targets}
    for r in range(args.rounds):
        order = targets if r % 2 == 0 else targets[::-1]
        seq, conc = {}, {}
        for s in order:
            progress(f"round {r + 1}: {s.name}, 1 client")
            seq[s.name] = await sequential(s, token, queries, n_seq, args.warmup)
        for s in order:
            progress(f"round {r + 1}: {s.name}, {args.clients} clients")
            conc[s.name] = await concurrent(s, token, queries, args.clients, n_calls)
        for s in targets:
            per[s.name].append({"sequential": seq[s.name], "concurrent": conc[s.name]})
    out: dict = {
        "sequential_calls": n_seq * args.rounds,
        "calls_per_client": n_calls * args.rounds,
        **{name: summarize(rounds) for name, rounds in per.items()},
    }
    for t in targets:
        out[t.name]["rss_mb"] = rss_mb(t.served.proc.pid)
    ours, stateless = out["ours"], out["ours-stateless"]
    out["ratios"] = {
        "p50_stateless_over_session": round(stateless["p50_ms"] / ours["p50_ms"], 2),
        "p95_stateless_over_session": round(stateless["p95_ms"] / ours["p95_ms"], 2),
        "throughput_stateless_over_session": round(stateless["rps"] / ours["rps"], 2),
        "p95_under_load_stateless_over_session": round(
            stateless["p95_ms_under_load"] / ours["p95_ms_under_load"], 2
        ),
    }
    out["goals"] = {
        "p50_le_15ms": ours["p50_ms"] <= 15.0,
        "stateless_p50_le_session": stateless["p50_ms"] <= ours["p50_ms"],
        "stateless_throughput_ge_session": stateless["rps"] >= ours["rps"],
    }
    if "reference" in out:
        ref = out["reference"]
        out["ratios"].update(
            p50_ours_over_reference=round(ours["p50_ms"] / ref["p50_ms"], 2),
            p99_ours_over_reference=round(ours["p99_ms"] / ref["p99_ms"], 2),
            throughput_ours_over_reference=round(ours["rps"] / ref["rps"], 2),
        )
        out["goals"]["throughput_ge_1x"] = ours["rps"] >= ref["rps"]
    out["identical_hits_checked"] = checked
    return out


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return f"{platform.machine()} {model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def versions() -> dict:
    from importlib.metadata import version

    names = ("Django", "daphne", "Twisted", "mcp", "uvicorn", "starlette", "httpx")
    found = {name: version(name) for name in names}
    found["python"] = platform.python_version()
    found["sqlite"] = sqlite3.sqlite_version
    return found


def print_table(results: dict) -> None:
    print()
    for mode in results["modes"]:
        r = results[mode]
        names = [n for n in ("ours", "ours-stateless", "reference") if n in r]
        print(
            f"{mode}: {r['sequential_calls']} sequential calls, {results['clients']} clients x "
            f"{r['calls_per_client']} calls; in-process tools.run p50 {r['in_process']['p50_ms']} ms, "
            f"p99 {r['in_process']['p99_ms']} ms"
        )
        rows = [
            ("1 client p50 ms", "p50_ms"),
            ("1 client p95 ms", "p95_ms"),
            ("1 client p99 ms", "p99_ms"),
            (f"{results['clients']} clients, req/s", "rps"),
            ("  p50 ms under load", "p50_ms_under_load"),
            ("  p95 ms under load", "p95_ms_under_load"),
            ("  p99 ms under load", "p99_ms_under_load"),
            ("server CPU ms/call, 1 client", "server_cpu_ms_per_call_1_client"),
            ("server CPU ms/call, loaded", "server_cpu_ms_per_call_concurrent"),
            ("server CPU cores used, loaded", "server_cpu_cores_concurrent"),
            ("client CPU ms/call, loaded", "client_cpu_ms_per_call_concurrent"),
            ("server RSS MB", "rss_mb"),
        ]
        print(f"  {'measure':32} " + " ".join(f"{n:>15}" for n in names))
        for label, key in rows:
            print(f"  {label:32} " + " ".join(f"{r[n][key]:>15}" for n in names))
        print(f"  ratios: {r['ratios']}")
        print(f"  goals: {r['goals']}")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=10000)
    parser.add_argument("--modes", nargs="+", choices=list(PROVIDERS), default=list(PROVIDERS))
    parser.add_argument(
        "--sequential",
        type=int,
        help="Timed 1-client calls per server, all rounds (lexical 300, hybrid 150).",
    )
    parser.add_argument("--warmup", type=int, default=10, help="Untimed 1-client calls before each run.")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument(
        "--calls", type=int, help="Calls per concurrent client, all rounds (lexical 30, hybrid 12)."
    )
    parser.add_argument("--rounds", type=int, default=2, help="Rounds; which server goes first alternates.")
    parser.add_argument(
        "--blas-default",
        action="store_true",
        help="Leave OpenBLAS at its default thread count (pinned to 1 in every process otherwise).",
    )
    parser.add_argument(
        "--without-reference",
        action="store_true",
        help="Measure only ours (sessions and stateless), not the SDK reference server.",
    )
    parser.add_argument(
        "--reference-sdk-validation",
        action="store_true",
        help="Leave the SDK's per-call jsonschema.validate on in the reference (off by default).",
    )
    args = parser.parse_args()
    if not args.blas_default:
        # Before numpy loads, here and (inherited) in both servers. See BLAS in the docstring.
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    started = time.perf_counter()
    progress(f"building {args.size} chunks")
    root, state_dir = prepare(args.size)
    build_s = time.perf_counter() - started
    queries = make_queries(200)
    token = secrets.token_urlsafe(24)
    results: dict = {
        "chunks": args.size,
        "build_s": round(build_s, 1),
        "modes": args.modes,
        "clients": args.clients,
        "rounds": args.rounds,
        "reference_sdk_validation": args.reference_sdk_validation,
        "reference": not args.without_reference,
        "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
        "load_average_start": os.getloadavg(),
    }
    try:
        for mode in args.modes:
            total_seq, total_calls = COUNTS[mode]
            counts = (
                max(1, (args.sequential or total_seq) // args.rounds),
                max(1, (args.calls or total_calls) // args.rounds),
            )
            progress(f"{mode}: timing tools.run in-process")
            in_proc = in_process(mode, root, state_dir, queries, 200)
            from django.db import connections

            connections.close_all()
            progress(f"{mode}: starting both servers")
            servers = start_servers(
                mode, root, state_dir, token, args.reference_sdk_validation, not args.without_reference
            )
            try:
                measured = asyncio.run(measure(servers, token, queries, args, counts))
            finally:
                stop(servers)
            results[mode] = {"in_process": in_proc, **measured}
    finally:
        shutil.rmtree(state_dir.parent, ignore_errors=True)
    results.update(
        date=time.strftime("%Y-%m-%d"),
        machine=machine(),
        versions=versions(),
        load_average_end=os.getloadavg(),
        total_s=round(time.perf_counter() - started, 1),
    )
    out = REPO / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"mcp-http-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=2))
    print_table(results)
    print(f"results: {path} ({results['total_s']} s)")


if __name__ == "__main__":
    main()
