"""What one ``dir2mcp.symbols`` call costs, before and after it searches the
generated tables of constants only when the index holds one (issue #37; a
benchmark, not a test).

Copies ``--files`` C headers of this machine's ``/usr/include`` into two
trees, the second with a generated register header added (a table of
constants, like the kernel's ``asic_reg/*_offset.h``), indexes each once
with this checkout's code (``embed.provider: none``; the index is the same
for both codes), then times ``symbols`` on each with the code of ``--base``
(a checkout of the commit before the change) and with this checkout's, each
in its own process (``bench/macros.py``'s ``_query`` phase: CPU
milliseconds, best of three, per name). Prints JSON: the machine, the load
average during the run, per tree and code the CPU per call by name and its
mean, and the ratio after/before.

    python bench/symbols_cost.py --base DIR [--files 300] [--work DIR]
    python bench/symbols_cost.py --base DIR --tree TREE [--names a,b,c]  # one tree as it is
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench.macros import child  # noqa: E402  (runs bench/macros.py's phases in a checkout)

NAMES = "printf,FILE,EOF,size_t,pthread_create,O_RDONLY,SEEK_SET,errno,mmREG_00042,no_such_name_here"


def register_header(registers: int) -> str:
    """A #define per register and its index, as the kernel's generated headers."""
    body = "".join(
        f"#define mmREG_{n:05d}                                        0x{n:04x}\n"
        f"#define mmREG_{n:05d}_BASE_IDX                               0\n"
        for n in range(registers)
    )
    return f"/* generated */\n#ifndef _REG_HEADER\n#define _REG_HEADER\n\n{body}\n#endif\n"


def make_tree(tree: Path, files: int, *, table: bool) -> None:
    shutil.rmtree(tree, ignore_errors=True)
    for path in sorted(glob.glob("/usr/include/**/*.h", recursive=True))[:files]:
        target = tree / path.removeprefix("/usr/include/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    if table:
        (tree / "asic_reg").mkdir(parents=True, exist_ok=True)
        (tree / "asic_reg" / "gc_offset.h").write_text(register_header(3000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkout of the code before the change")
    parser.add_argument("--files", type=int, default=300, help="headers of /usr/include to copy")
    parser.add_argument("--work", type=Path, help="where the trees and states go (a temporary folder)")
    parser.add_argument("--names", default=NAMES, help="names to time symbols for")
    parser.add_argument("--tree", type=Path, help="index this tree as it is instead (e.g. a kernel subtree)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="dir2mcp-symbols-"))
    work.mkdir(parents=True, exist_ok=True)
    config = work / "config.yaml"
    config.write_text("embed:\n  provider: none\n")
    load = [os.getloadavg()]
    report: dict = {
        "machine": {"nproc": os.cpu_count(), "cpu": _cpu_model(), "python": platform.python_version()}
    }
    trees = (
        [("tree", args.tree, False)]
        if args.tree
        else [("no_tables", None, False), ("with_table", None, True)]
    )
    for label, given, table in trees:
        tree, state = given or work / f"tree-{label}", work / f"state-{label}"
        if given is None:
            make_tree(tree, args.files, table=table)
        shutil.rmtree(state, ignore_errors=True)
        indexed = child("_index", REPO, ["--tree", str(tree), "--state", str(state), "--config", str(config)])
        row: dict = {"indexed": indexed["indexed"]}
        for code_label, code in (("before", args.base.resolve()), ("after", REPO)):
            found = child("_query", code, ["--tree", str(tree), "--state", str(state), "--names", args.names])
            per_name = {name: hit["symbols_cpu_ms"] for name, hit in found.items()}
            row[code_label] = {"mean_cpu_ms": round(sum(per_name.values()) / len(per_name), 1)} | per_name
            row[f"{code_label}_first"] = {name: hit.get("first", "") for name, hit in found.items()}
            load.append(os.getloadavg())
        row["ratio"] = round(row["after"]["mean_cpu_ms"] / row["before"]["mean_cpu_ms"], 3)
        report[label] = row
    report["load"] = [round(sample[0], 1) for sample in load]
    print(json.dumps(report, indent=1))


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
