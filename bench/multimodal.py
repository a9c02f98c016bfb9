"""Multimodal ingestion benchmark (not a test): scanned PDFs and recordings against a slow provider.

Starts the fake Mistral API as its own process with a fixed latency added to
every call, builds a corpus of scanned one-page PDFs and short WAV files, and
times a cold `manage.py reindex` (a fresh state directory, so the OCR and
transcript caches are empty). The ideal is what the concurrency limits allow:
with `c` OCR and `c` transcription calls in flight, `ceil(pdfs / c)` and
`ceil(audio / c)` rounds of `latency` seconds, the two kinds in parallel. The
same corpus indexed with no added latency gives the fixed cost (process start,
reading, chunking, writing), reported separately. Record the figures in
docs/benchmarks.md.

    python bench/multimodal.py [--pdfs 40] [--audio 20] [--latency 0.5] [--concurrency 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fakes.media import make_scanned_pdf, make_wav  # noqa: E402


def start_fake(latency: float) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.mistral", "--latency", str(latency)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    return proc, json.loads(proc.stdout.readline())


def build_corpus(root: Path, pdfs: int, audio: int) -> None:
    for i in range(pdfs):
        (root / f"scan_{i:03d}.pdf").write_bytes(
            make_scanned_pdf([f"scanned invoice number {i} for depot {i % 7}"])
        )
    for i in range(audio):
        segments = [(0.0, 10.0, f"recording {i} starts"), (10.0, 20.0, f"recording {i} ends")]
        (root / f"talk_{i:03d}.wav").write_bytes(make_wav(segments))


def cold_index(root: Path, fake: dict, concurrency: int, expected: int) -> float:
    with tempfile.TemporaryDirectory() as state:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DIR2MCP_", "MISTRAL", "DJANGO_"))}
        env |= {
            "MISTRAL_API_KEY": fake["api_key"],
            "DIR2MCP_MISTRAL__BASE_URL": fake["url"],
            "DIR2MCP_EMBED__PROVIDER": "none",
            "DIR2MCP_STATE_DIR": state,
            "DIR2MCP_OCR__CONCURRENCY": str(concurrency),
            "DIR2MCP_STT__CONCURRENCY": str(concurrency),
        }
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, str(REPO / "manage.py"), "reindex", "--dir", str(root), "--json"],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        elapsed = time.perf_counter() - start
        events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        final = [e["data"] for e in events if e.get("event") == "scan_progress"][-1]
        if final.get("indexed") != expected or final.get("errors"):
            raise SystemExit(f"the run did not index every file: {final}")
        return elapsed


def measure(root: Path, latency: float, concurrency: int, repeat: int, expected: int) -> float:
    proc, fake = start_fake(latency)
    try:
        return statistics.median(cold_index(root, fake, concurrency, expected) for _ in range(repeat))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pdfs", type=int, default=40, help="Scanned one-page PDFs.")
    parser.add_argument("--audio", type=int, default=20, help="WAV recordings.")
    parser.add_argument("--latency", type=float, default=0.5, help="Seconds the fake adds to every call.")
    parser.add_argument("--concurrency", type=int, default=4, help="ocr.concurrency and stt.concurrency.")
    parser.add_argument("--repeat", type=int, default=3, help="Cold runs per setting (median reported).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_corpus(root, args.pdfs, args.audio)
        expected = args.pdfs + args.audio
        fixed = measure(root, 0.0, args.concurrency, args.repeat, expected)
        slow = measure(root, args.latency, args.concurrency, args.repeat, expected)
    rounds = max(math.ceil(args.pdfs / args.concurrency), math.ceil(args.audio / args.concurrency))
    ideal = rounds * args.latency
    serial = (args.pdfs + args.audio) * args.latency
    report = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "load_avg": os.getloadavg()[0],
        "pdfs": args.pdfs,
        "audio": args.audio,
        "latency_s": args.latency,
        "concurrency": args.concurrency,
        "fixed_cost_s": round(fixed, 2),
        "with_latency_s": round(slow, 2),
        "provider_wait_s": round(slow - fixed, 2),
        "ideal_s": ideal,
        "serial_s": serial,
        "ratio_to_ideal": round((slow - fixed) / ideal, 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
