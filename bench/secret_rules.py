"""How often the default secret rules skip files that hold no secret, and
what they cost (not a test).

The negative corpus is code and prose nobody here wrote: every text file
of the standard library of the interpreter the venv was made from (its
``lib/pythonX.Y``, without site-packages), and a few packages installed in
the venv. Each file is judged the way ingestion judges it: its path against
the default ``security.path_excludes``, then its text through
:meth:`ExclusionEngine.find_secret` with the default
``security.secret_patterns``. Every file it flags is listed with the rule,
for a person to say whether it holds a credential.

File names are screened too, by the same rules (a file named like a token
is refused): how many names of the corpus the rules flag.

Then the cost: the whole corpus screened the way ``main`` did before issue
#34 (its 18 rules under Python's ``re``, one pass per rule behind its word
test) and the way it is now (all the rules in one ``re2.Set`` pass,
:mod:`kernel.secret_scan`), the ratio between them, each rule's own time,
and crafted texts built to make a backtracking rule slow, at 1 and 4 MiB (a
linear scan takes four times as long on four times the text). Record the
figures in docs/security.md.

    python bench/secret_rules.py [--packages django celery ...] [--extra /usr/share/doc]
                                 [--repeat 3] [--quiet]
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import sqlite3  # noqa: E402
import sysconfig  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402

from corpus.security import ExclusionEngine, ExclusionPolicy  # noqa: E402
from kernel import literals  # noqa: E402
from kernel.config import DEFAULT_PATH_EXCLUDES, DEFAULT_SECRET_PATTERNS  # noqa: E402
from kernel.secret_scan import SecretScanner  # noqa: E402

#: The 18 default rules before issue #34, as they ran: Python's re, one
#: pass per rule (with look-arounds and possessive repeats to stay linear).
_T = "A-Za-z0-9_-"
PREVIOUS_RULES = [
    r"AKIA[0-9A-Z]{16}",
    r"(?i)aws.{0,20}secret.{0,20}\s*[:=]\s*['\"]?[0-9a-zA-Z/+=]{40}(?![0-9a-zA-Z/+=])",
    r"(?i)(?=[air])(?:authorization\s*[:=]\s*bearer\s+|(?:access|id|refresh)_token\s*[:=]\s*)"
    r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    r"(?i)token\s*[:=]\s*[A-Za-z0-9_.-]{20,}",
    r"sk_[a-z0-9]{32}|api_[A-Za-z0-9]{32}",
    r"-{4,5} ?BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)? ?-{4,5}[^-]{0,300}?[A-Za-z0-9+/=]{40}",
    r"PuTTY-User-Key-File-\d{1,2}: ",
    rf"gh[pousr]_(?<![{_T}]gh[pousr]_)[A-Za-z0-9]{{36,251}}(?![A-Za-z0-9])",
    rf"github_pat_(?<![{_T}]github_pat_)[A-Za-z0-9_]{{22,244}}(?![A-Za-z0-9_])",
    rf"gl(?<![{_T}]gl)(?:pat|ptt|dt|rt|ft|soat)-[{_T}]{{20,255}}",
    rf"xox[abposre]-(?<![{_T}]xox[abposre]-)[A-Za-z0-9-]{{10,255}}",
    r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+-]{20,255}|xapp-\d-[A-Z0-9]{6,20}-",
    r"[rs]k_live_[A-Za-z0-9]{20,255}",
    rf"AIza(?<![{_T}]AIza)[{_T}]{{35}}(?![{_T}])",
    rf"sk-(?<![{_T}]sk-)(?:(?:proj|svcacct|admin|ant-(?:api|admin|sid)\d\d)-[{_T}]{{20,400}}"
    r"|[A-Za-z0-9]{32,200}(?![A-Za-z0-9_-]))",
    rf"eyJ(?<![{_T}]eyJ)[{_T}]{{8,2000}}\.eyJ[{_T}]{{8,8000}}\.[{_T}]{{16,2000}}",
    r"npm_(?<![A-Za-z0-9_]npm_)[A-Za-z0-9]{36}(?![A-Za-z0-9])"
    r"|pypi-AgE[A-Za-z0-9_-]{50,1000}"
    r"|hf_(?<![A-Za-z0-9_]hf_)[A-Za-z0-9]{34}(?![A-Za-z0-9])",
    r"(?=[AaPpSs][AaCcEePpRr])(?i:passw(?:or)?d|secret|api_?key|access_?key|private_?key)"
    r"[A-Za-z0-9_-]{0,20}['\"]?[ \t]{0,5}(?::=|=>|[:=])[ \t]{0,5}['\"]?"
    r"(?=[A-Za-z0-9+/=_~!@#$%^&*-]{0,399}?[0-9])"
    r"(?=[A-Za-z0-9+/=_~!@#$%^&*-]{0,399}?[a-z])"
    r"(?=[A-Za-z0-9+/=_~!@#$%^&*-]{0,399}?[A-Z])"
    r"[A-Za-z0-9+/=_~!@#$%^&*-]{16,400}+(?![^\s'\"])",
]
#: The path excludes before issue #34 (no *.env, env.<stage>, kubeconfig).
_ADDED_EXCLUDES = {"**/*.env", "!**/example.env", "!**/sample.env", "!**/template.env", "**/kubeconfig"}
_ADDED_EXCLUDES |= {"**/*.kubeconfig"} | {f"**/env.{s}" for s in ("local", "dev", "development", "test")}
_ADDED_EXCLUDES |= {f"**/env.{s}" for s in ("staging", "prod", "production")}
PREVIOUS_EXCLUDES = [p for p in DEFAULT_PATH_EXCLUDES if p not in _ADDED_EXCLUDES]
DEFAULT_PACKAGES = (
    "django",
    "celery",
    "kombu",
    "aiohttp",
    "pydantic",
    "cryptography",
    "httpx",
    "redis",
    "psycopg",
    "amqp",
)
MAX_BYTES = 20 * 1024 * 1024
MIB = 1024 * 1024


def stdlib_dir() -> Path:
    return Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"


def corpus_files(packages: tuple[str, ...], extra: tuple[str, ...] = ()) -> list[tuple[str, Path]]:
    """(label, path) of every file of the standard library, of ``packages``
    and of the ``extra`` directories (labelled by their own name)."""
    found: list[tuple[str, Path]] = []
    for top in map(Path, extra):
        for path in sorted(top.rglob("*")):
            if path.is_file() and not path.is_symlink():
                found.append((f"{top.name}/{path.relative_to(top).as_posix()}", path))
    lib = stdlib_dir()
    for path in sorted(lib.rglob("*")):
        rel = path.relative_to(lib)
        if rel.parts[0] in ("site-packages", "lib-dynload") or "__pycache__" in rel.parts:
            continue
        if path.is_file() and not path.is_symlink():
            found.append((f"stdlib/{rel.as_posix()}", path))
    purelib = Path(sysconfig.get_paths()["purelib"])
    for name in packages:
        folder = purelib / name
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(purelib)
            if "__pycache__" in rel.parts or not path.is_file() or path.is_symlink():
                continue
            found.append((f"site-packages/{rel.as_posix()}", path))
    return found


def read_text(path: Path) -> str | None:
    """The text ingestion would screen, or None for a binary or too large file."""
    if path.stat().st_size > MAX_BYTES:
        return None
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def engine_for(rules: list[str], excludes: list[str], root: Path) -> ExclusionEngine:
    return ExclusionEngine(root, ExclusionPolicy(tuple(excludes), tuple(rules), use_gitignore=False))


class PythonRules:
    """The scan as it was before issue #34: each rule in turn, behind its word test."""

    def __init__(self, rules: list[str]):
        self.rules = [(rx, literals.prefilter(rx)) for rx in map(re.compile, rules)]

    def find_secret(self, text: str) -> str | None:
        lowered = literals.lowered_if_ascii(text)
        for index, (rx, may_match) in enumerate(self.rules):
            if may_match(text, lowered) and rx.search(text):
                return f"secret_patterns[{index}]"
        return None


def screen_all(engine: ExclusionEngine, texts: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    flagged = sum(1 for text in texts if engine.find_secret(text))
    return time.perf_counter() - start, flagged


def best(runs: int, fn):
    results = [fn() for _ in range(runs)]
    return min(results, key=lambda r: r[0])


def rule_time(pattern: str, texts: list[str]) -> tuple[float, int]:
    """One rule alone, as find_secret runs it (RE2, then its checks)."""
    scanner = SecretScanner([pattern])
    start = time.perf_counter()
    hits = sum(1 for text in texts if scanner.first(text) is not None)
    return time.perf_counter() - start, hits


def crafted(size: int) -> dict[str, str]:
    """Texts meant to make a backtracking rule slow: each rule's start,
    over and over, without the rest it needs (and long runs of the
    characters its repeats take)."""
    pieces = {
        "jwt starts": "eyJ",
        "jwt almost": "eyJabcdefghij.eyJabcdefghij.",
        "github starts": "ghp_",
        "openai starts": "sk-",
        "key headers": "-----BEGIN ",
        "assignments": "password = ",
        "assignment values": "api_key=aB3",
        "token assignments": "token:",
        "one long run": "a",
        "base64 run": "Ab0+/",
        "url credentials": "postgres://u:",
        "base64 pem starts": "LS0tLS1CRUdJTi",
        "basic auth": "Authorization: Basic ",
    }
    return {name: (piece * (size // len(piece) + 1))[:size] for name, piece in pieces.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--packages", nargs="*", default=list(DEFAULT_PACKAGES))
    parser.add_argument("--extra", nargs="*", default=[], help="more directories of text (docs)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quiet", action="store_true", help="do not list the flagged files")
    args = parser.parse_args()

    root = Path("/nonexistent-bench-root")
    current = engine_for(DEFAULT_SECRET_PATTERNS, DEFAULT_PATH_EXCLUDES, root)
    previous_paths = engine_for([], PREVIOUS_EXCLUDES, root)
    previous = PythonRules(PREVIOUS_RULES)

    files = corpus_files(tuple(args.packages), tuple(args.extra))
    texts: list[str] = []
    labels: list[str] = []
    binary = 0
    path_excluded: list[tuple[str, str]] = []
    path_excluded_before = 0
    for label, path in files:
        rel = label.split("/", 1)[1]
        reason = current.excluded_reason(rel)
        if previous_paths.excluded_reason(rel):
            path_excluded_before += 1
        text = read_text(path)
        if text is None:
            binary += 1
            continue
        if reason:
            path_excluded.append((label, reason))
            continue
        texts.append(text)
        labels.append(label)
    size = sum(len(t.encode("utf-8", errors="replace")) for t in texts)

    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, {platform.system()} {platform.release()}")
    print(f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {time.strftime('%Y-%m-%d')}")
    print(f"corpus: {stdlib_dir()} + site-packages {', '.join(args.packages)} + {' '.join(args.extra)}")
    print(f"files: {len(files)}; binary or > 20 MiB: {binary}")
    print(f"text files screened: {len(texts)} ({size / MIB:.1f} MiB)")
    print(
        f"path-excluded text files: {len(path_excluded)} "
        f"(previous defaults: {path_excluded_before}, binary ones included)"
    )
    by_name = [(label, reason) for label, reason in path_excluded if reason.startswith("SECRET_DETECTED")]
    print(f"  of which by a secret rule on the name: {len(by_name)} of {len(files)} names")
    for label, reason in path_excluded:
        print(f"  {label}: {reason}")

    flagged_now = {label: current.find_secret(text) for label, text in zip(labels, texts, strict=True)}
    flagged_now = {k: v for k, v in flagged_now.items() if v}
    flagged_before = sum(1 for text in texts if previous.find_secret(text))
    rate = len(flagged_now) / len(texts) if texts else 0.0
    print(
        f"flagged by content: {len(flagged_now)} of {len(texts)} ({rate:.2%}); "
        f"previous rules: {flagged_before} ({flagged_before / len(texts):.2%})"
    )
    by_rule = Counter(flagged_now.values())
    for rule, count in sorted(by_rule.items(), key=lambda kv: int(re.sub(r"\D", "", kv[0]))):
        print(f"  {rule} (first match): {count}")
    if not args.quiet:
        for label, rule in sorted(flagged_now.items()):
            print(f"  {label}: {rule}")

    print(f"\ntiming, best of {args.repeat}, over {len(texts)} texts ({size / MIB:.1f} MiB):")
    old_time, _ = best(args.repeat, lambda: screen_all(previous, texts))
    new_time, _ = best(args.repeat, lambda: screen_all(current, texts))
    print(f"  previous 18 rules, Python re: {old_time:.3f} s ({size / MIB / old_time:.0f} MiB/s)")
    print(
        f"  current {len(DEFAULT_SECRET_PATTERNS)} rules, one RE2 set: {new_time:.3f} s "
        f"({size / MIB / new_time:.0f} MiB/s); ratio {new_time / old_time:.2f}x"
    )
    print("  each rule alone (RE2, then its checks), files it matches:")
    for index, pattern in enumerate(DEFAULT_SECRET_PATTERNS):
        seconds, hits = best(args.repeat, lambda p=pattern: rule_time(p, texts))
        print(f"    [{index:2}] {seconds:.3f} s  {hits:4} files")

    print("\ncrafted texts, current rules (seconds at 1 MiB, 4 MiB; 4x is linear):")
    small, large = crafted(MIB), crafted(4 * MIB)
    worst = 0.0
    for name in small:
        t1, _ = best(args.repeat, lambda n=name: screen_all(current, [small[n]]))
        t4, _ = best(args.repeat, lambda n=name: screen_all(current, [large[n]]))
        worst = max(worst, t4)
        print(f"  {name:18} {t1:.3f} s  {t4:.3f} s  ({t4 / t1:.1f}x)")
    print(f"  slowest 4 MiB text: {worst:.3f} s")


if __name__ == "__main__":
    main()
