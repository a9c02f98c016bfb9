"""Review of session 31's security work (2026-11-30, review31b): each test
shows a probe that answered otherwise before its fix; see docs/security.md,
"Review, 2026-11-30 (session 31)"."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from corpus import containers
from corpus.index.dense import stored
from corpus.security import ExclusionEngine, ExclusionPolicy
from kernel import errors
from kernel.config import DEFAULT_PATH_EXCLUDES
from tests.support import zip_bytes


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


#: a self-extracting archive's stub: what comes before its zip (any bytes)
STUB = b"MZ" + bytes(510)


@pytest.mark.parametrize("name", ["tools/setup.exe", "docs/report.docx", "notes/bundle.txt"])
def test_a_zip_behind_other_bytes_has_its_parts_screened(tmp_path: Path, name: str) -> None:
    """A zip is read from its end (its directory), so bytes before it (a
    self-extracting archive's stub, anything) leave it a zip every tool
    opens; the parts were screened only for a file whose head was a zip's,
    so a ``.docx``, ``.exe`` or ``.txt`` of a stub and then a zip holding a
    ``.env`` was served whole. Such a zip's parts are judged now; the same
    stub before a clean zip is still served."""
    (tmp_path / name).parent.mkdir(parents=True)
    (tmp_path / name).write_bytes(STUB + zip_bytes({"app/.env": "DB_PASSWORD=hunter2-production\n"}))
    (tmp_path / "clean.exe").write_bytes(STUB + zip_bytes({"app/readme.txt": "hello\n"}))
    engine = ExclusionEngine(tmp_path, ExclusionPolicy(tuple(DEFAULT_PATH_EXCLUDES), ()))
    with engine.open(name) as opened, pytest.raises(errors.Dir2mcpError) as refused:
        containers.screen_zip_parts(engine, opened)  # before: nothing raised
    assert refused.value.code == errors.FORBIDDEN, refused.value
    with engine.open("clean.exe") as opened:
        containers.screen_zip_parts(engine, opened)


@pytest.mark.django_db
def test_the_feedback_leaders_vectors_are_read_by_their_ids() -> None:
    """``stored_vectors`` (search feedback's few leaders, each search) read
    through the index on ``deleted`` and ``embedding_status`` on SQLite:
    every live embedded chunk's entry (940,000 on a large tree), as
    ``lexical.live`` did before it said ``NOT INDEXED``. Each is looked up by
    its id now."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's planner: PostgreSQL plans by its statistics")
    with CaptureQueriesContext(connection) as queries:
        stored.stored_vectors([3, 1, 2])
    (query,) = queries.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
        plan = [row[3] for row in cursor.fetchall()]
    assert any("INTEGER PRIMARY KEY" in step for step in plan), plan  # before: chunk_embed_queue
