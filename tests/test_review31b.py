"""Review of session 31's security work (2026-11-30, review31b): each test
shows a probe that answered otherwise before its fix; see docs/security.md,
"Review, 2026-11-30 (session 31)"."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus.security import ExclusionEngine, ExclusionPolicy
from kernel.config import DEFAULT_PATH_EXCLUDES


@pytest.mark.parametrize(
    ("rule", "rel_path"),
    [
        pytest.param("**/key?.pem", "keys/key\u00df.pem", id="sharp-s"),
        pytest.param("**/key?.pem", "keys/key\u0130.pem", id="dotted-capital-i"),
        pytest.param("**/?.env", "\ufb01.env", id="ligature"),
        pytest.param("**/[\u00df]/**", "\u00df/token", id="class-of-sharp-s"),
    ],
)
def test_a_rule_that_matched_a_name_exactly_still_matches_it_judged_without_case(
    tmp_path: Path, rule: str, rel_path: str
) -> None:
    """Folding without case made some names longer (``ß`` is ``ss``, ``İ`` is
    ``i`` and a combining dot, ``ﬁ`` is ``fi``), so a rule's ``?`` or class,
    one character, no longer matched a name it matched as written: a file the
    rule excluded before session 31 was indexed and served after it. A
    character whose fold is longer is kept as it is now."""
    engine = ExclusionEngine(tmp_path, ExclusionPolicy((*DEFAULT_PATH_EXCLUDES, rule), ()))
    assert engine.excluded_reason(rel_path) == f"path_excludes: {rule}"  # before: None
