"""gitleaks' published rules against ours, on the same corpora (not a test).

Issue #34 asked whether to run a published rule set rather than our own.
This reads a ``gitleaks.toml`` (``config/gitleaks.toml`` of
github.com/gitleaks/gitleaks; not vendored here: pass its path), compiles
every rule for RE2 as one set, and screens with it:

* the negative corpus of ``bench/secret_rules.py`` (the standard library,
  the packages, ``--extra`` directories): files flagged by the expressions
  alone, then with gitleaks' own filters applied as it applies them (each
  rule's ``entropy`` on the secret group, ``keywords``, the global and the
  rule's allowlist expressions and stop words);
* the positive corpus of ``tests/test_secret_rules.py``: which of its kinds
  gitleaks' rules catch.

    python bench/gitleaks_rules.py path/to/gitleaks.toml [--extra /usr/share/doc]
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dir2mcp_site.settings")

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import tomllib  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402

import django  # noqa: E402
import re2  # noqa: E402

django.setup()

from bench.secret_rules import DEFAULT_PACKAGES, corpus_files, read_text  # noqa: E402
from corpus.security import ExclusionEngine, ExclusionPolicy  # noqa: E402
from kernel.config import DEFAULT_PATH_EXCLUDES, DEFAULT_SECRET_PATTERNS  # noqa: E402
from tests.test_secret_rules import CONTENT_SECRETS  # noqa: E402

MIB = 1024 * 1024


def entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values()) if text else 0.0


class Gitleaks:
    """gitleaks' rules in one RE2 set, with its filters applied per finding."""

    def __init__(self, path: Path):
        config = tomllib.loads(path.read_text())
        options = re2.Options()
        options.max_mem = 256 << 20
        options.log_errors = False
        self.options = options
        glob = config.get("allowlist", {})
        self.allow = [re2.compile(rx, options) for rx in glob.get("regexes", [])]
        self.stopwords = [w.lower() for w in glob.get("stopwords", [])]
        self.rules, self.refused = [], []
        self.set = re2.Set.SearchSet(options)
        for rule in config["rules"]:
            if "regex" not in rule:
                continue  # path-only rules (file names)
            try:
                compiled = re2.compile(rule["regex"], options)
                self.set.Add(rule["regex"])
            except re2.error:
                self.refused.append(rule["id"])
                continue
            allows = [
                re2.compile(rx, options)
                for block in rule.get("allowlists", [])
                for rx in block.get("regexes", [])
            ]
            stops = [w.lower() for block in rule.get("allowlists", []) for w in block.get("stopwords", [])]
            self.rules.append((rule, compiled, allows, stops))
        self.set.Compile()

    def hits(self, text: str, *, filtered: bool) -> list[str]:
        matched = self.set.Match(text) or []
        if not filtered:
            return [self.rules[i][0]["id"] for i in matched]
        lowered = text.lower()
        found = []
        for index in matched:
            rule, rx, allows, stops = self.rules[index]
            if rule.get("keywords") and not any(k.lower() in lowered for k in rule["keywords"]):
                continue
            for match in rx.finditer(text):
                group = rule.get("secretGroup") or next(
                    (n for n in range(1, (rx.groups or 0) + 1) if match.group(n)), 0
                )
                secret = match.group(group) or match.group(0)
                if rule.get("entropy") and entropy(secret) < rule["entropy"]:
                    continue
                if any(a.search(secret) for a in self.allow + allows):
                    continue
                if any(w in secret.lower() for w in self.stopwords + stops):
                    continue
                found.append(rule["id"])
                break
        return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("gitleaks_toml", type=Path)
    parser.add_argument("--packages", nargs="*", default=list(DEFAULT_PACKAGES))
    parser.add_argument("--extra", nargs="*", default=[])
    parser.add_argument("--limit", type=int, default=0, help="screen only the first N text files")
    args = parser.parse_args()

    start = time.perf_counter()
    gitleaks = Gitleaks(args.gitleaks_toml)
    print(f"gitleaks rules compiled for RE2: {len(gitleaks.rules)}; refused: {len(gitleaks.refused)} "
          f"{gitleaks.refused}; {time.perf_counter() - start:.2f} s")  # fmt: skip
    ours = ExclusionEngine(
        Path("/nonexistent"),
        ExclusionPolicy(tuple(DEFAULT_PATH_EXCLUDES), tuple(DEFAULT_SECRET_PATTERNS), use_gitignore=False),
    )
    texts = []
    for label, path in corpus_files(tuple(args.packages), tuple(args.extra)):
        text = read_text(path)
        if text is not None and not ours.excluded_reason(label.split("/", 1)[1]):
            texts.append((label, text))
    if args.limit:
        texts = texts[: args.limit]
    size = sum(len(t.encode("utf-8", "replace")) for _, t in texts) / MIB
    print(f"negative corpus: {len(texts)} text files, {size:.1f} MiB")

    for filtered in (False, True):
        start = time.perf_counter()
        flagged = {label: gitleaks.hits(text, filtered=filtered) for label, text in texts}
        seconds = time.perf_counter() - start
        flagged = {k: v for k, v in flagged.items() if v}
        by_rule = Counter(rule for rules in flagged.values() for rule in set(rules))
        what = "expressions, entropy, keywords and allowlists" if filtered else "expressions alone"
        print(f"gitleaks, {what}: {len(flagged)} files ({len(flagged) / len(texts):.2%}), {seconds:.2f} s")
        print("  most frequent:", ", ".join(f"{r} {n}" for r, n in by_rule.most_common(8)))
    start = time.perf_counter()
    ours_flagged = sum(1 for _, text in texts if ours.find_secret(text))
    print(
        f"ours: {ours_flagged} files ({ours_flagged / len(texts):.2%}), {time.perf_counter() - start:.2f} s"
    )

    caught = {name: gitleaks.hits(text, filtered=True) for name, (_, text, _) in CONTENT_SECRETS.items()}
    missed = sorted(name for name, rules in caught.items() if not rules)
    print(
        f"positive corpus: gitleaks catches {len(caught) - len(missed)} of {len(caught)} kinds; "
        f"misses {missed}"
    )


if __name__ == "__main__":
    main()
