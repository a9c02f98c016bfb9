"""What a branch switch's writing costs against a clean build (issue #37
item 3; a benchmark, not a test).

bench/branch_switch.py's repository (``--subtrees`` of 6.12 and 6.1 as the
branches ``v6.12`` and ``v6.1``, under ``--work``), indexed with
``reindex --incremental`` (what live sync runs) by each dir2mcp checkout
given to ``--code``, the checkouts taking turns step by step so that each
pair of steps ran under the same load:

1. a clean build of ``v6.12`` (state ``S``);
2. a clean build of ``v6.1`` (state ``R``, the reference);
3. ``S`` switched to ``v6.1``: then compared with ``R`` (every live
   document with the same chunk texts and contexts in order);
4. ``S`` switched back to ``v6.12``: compared with step 1's index;

steps 3 and 4 ``--rounds`` times. ``--builds v6.12`` skips step 2 (and
step 3's comparison): for measuring the way back alone. Each step prints its wall and CPU
seconds (the ``reindex`` process and its preparing workers), the CPU as a
ratio to the clean build of the same tree, ``meta.sqlite`` against the
text it indexes (bench/branch_switch.py's ``storage``), and the load average. With
``--profile DIR`` the switches run under cProfile (the writing process;
its CPU is then inflated: profile and measure in separate runs) and the
profiles land in ``DIR``.

    python bench/switch_write.py --work W --subtrees fs kernel
    python bench/switch_write.py --work W --subtrees fs kernel --code BEFORE AFTER
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from branch_switch import compare, environment, git, load, prepare, storage, unit_hashes  # noqa: E402
from tombstones import reindex  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--subtrees", nargs="+", default=["fs", "kernel"])
    parser.add_argument(
        "--code", type=Path, nargs="+", default=[BENCH.parent], help="The dir2mcp checkouts to run, in turn."
    )
    parser.add_argument("--rounds", type=int, default=1, help="Round trips 6.12 -> 6.1 -> 6.12.")
    parser.add_argument("--profile", type=Path, help="Run the switches under cProfile, profiles here.")
    parser.add_argument("--label", default="switch", help="Names the state directories.")
    parser.add_argument(
        "--builds",
        nargs="+",
        default=["v6.12", "v6.1"],
        choices=["v6.12", "v6.1"],
        help="The clean builds to run (v6.12 is the switches' start); a switch to a tree not built "
        "is measured but not compared.",
    )
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    repo = prepare(args.work, args.subtrees)
    env = environment()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    print(
        f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load {load()}, subtrees {' '.join(args.subtrees)}, code {' '.join(map(str, args.code))}",
        flush=True,
    )
    states = {}
    for i, code in enumerate(args.code):
        states[code] = (args.work / f"state-{args.label}-{i}-S", args.work / f"state-{args.label}-{i}-R")
        for state in states[code]:
            shutil.rmtree(state, ignore_errors=True)
    builds: dict[Path, dict[str, dict]] = {code: {} for code in args.code}
    hashes: dict[Path, dict[str, dict]] = {code: {} for code in args.code}

    def step(code: Path, ref: str, which: int, name: str, profiled: bool) -> dict:
        git(repo, "checkout", "-q", "-f", ref)
        state = states[code][which]
        index = args.code.index(code)
        profile = args.profile / f"{args.label}-{index}-{name}.prof" if profiled and args.profile else None
        done = {"code": index, "step": name, "ref": ref, **reindex(code, repo, state, env, profile)}
        found = storage(state / "meta.sqlite")
        done |= {k: found[k] for k in ("text_mib", "meta_sqlite_mib", "ratio")} | {"load": load()}
        return done

    for code in args.code:
        for ref, which in (("v6.12", 0), ("v6.1", 1)):
            if ref not in args.builds and ref != "v6.12":
                continue
            done = step(code, ref, which, f"build {ref}", False)
            builds[code][ref] = done
            hashes[code][ref] = unit_hashes(states[code][which] / "meta.sqlite")
            print(json.dumps(done), flush=True)
    for round_ in range(1, args.rounds + 1):
        for ref in ("v6.1", "v6.12"):
            for code in args.code:
                done = step(code, ref, 0, f"switch {round_} to {ref}", True)
                if ref not in builds[code]:
                    print(json.dumps(done), flush=True)
                    continue
                done["cpu_vs_clean_build"] = round(done["cpu_seconds"] / builds[code][ref]["cpu_seconds"], 2)
                done["equal_to_clean_build"] = compare(
                    unit_hashes(states[code][0] / "meta.sqlite"), hashes[code][ref], done
                )
                print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main()
