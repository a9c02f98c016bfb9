"""A new state database is a copy of the schema template in the user's cache
(corpus.store.schema_template), the same as one migrated anew; a template
that is not a migrated database of these migrations is never used."""

from __future__ import annotations

import contextlib
import sqlite3
import stat
from pathlib import Path

import pytest

from corpus.store import MIGRATIONS_KEY
from tests.support import read_only
from tests.test_cli import cli, make_tree

pytestmark = pytest.mark.slow

APPLIED = "SELECT app, name, applied FROM django_migrations ORDER BY id"


def reindexed(root: Path, cache: Path) -> Path:
    make_tree(root, files=1)
    done = cli("reindex", "--dir", str(root), env={"XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0, done.stderr
    return root / ".dir2mcp" / "meta.sqlite"


def schema(db: Path) -> dict:
    """The tables as created, the migrations recorded (with the time each was
    applied: a copy keeps the template's), and Django's post-migrate rows."""
    with read_only(db) as conn:
        return {
            "sql": conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall(),
            "applied": conn.execute(
                "SELECT app, name, applied FROM django_migrations ORDER BY id"
            ).fetchall(),
            "content_types": conn.execute("SELECT * FROM django_content_type ORDER BY id").fetchall(),
            "permissions": conn.execute("SELECT * FROM auth_permission ORDER BY id").fetchall(),
            "corpus_id": conn.execute("SELECT value FROM settings WHERE key = 'corpus_id'").fetchall(),
        }


def templates(cache: Path) -> list[Path]:
    return sorted((cache / "dir2mcp").glob("schema-*.sqlite"))


def test_a_new_state_database_is_a_copy_of_the_template_the_first_one_left(tmp_path):
    cache = tmp_path / "cache"
    first = schema(reindexed(tmp_path / "a", cache))
    [template] = templates(cache)
    assert stat.S_IMODE(template.stat().st_mode) == 0o600
    with read_only(template) as conn:
        # what migrate wrote, nothing of the corpus it was made for
        assert conn.execute("SELECT key FROM settings").fetchall() == [(MIGRATIONS_KEY,)]
        assert conn.execute("SELECT count(*) FROM documents").fetchone() == (0,)

    second = schema(reindexed(tmp_path / "b", cache))

    # the same migrations recorded at the same times: copied, not migrated again
    assert second["applied"] == first["applied"] != []
    assert {key: second[key] for key in ("sql", "content_types", "permissions")} == {
        key: first[key] for key in ("sql", "content_types", "permissions")
    }
    assert second["corpus_id"] != first["corpus_id"]
    assert templates(cache) == [template]


def test_a_template_that_is_not_a_migrated_database_is_replaced_and_the_new_one_migrated(tmp_path):
    cache = tmp_path / "cache"
    first = schema(reindexed(tmp_path / "a", cache))
    [template] = templates(cache)
    template.write_bytes(b"not a database")

    second = schema(reindexed(tmp_path / "b", cache))

    assert [app for app, _, _ in second["applied"]] == [app for app, _, _ in first["applied"]]
    assert second["applied"] != first["applied"]  # migrated anew, at other times
    assert second["sql"] == first["sql"]
    [kept] = templates(cache)
    with read_only(kept) as conn:
        assert conn.execute("SELECT key FROM settings").fetchall() == [(MIGRATIONS_KEY,)]


def test_a_template_of_other_migrations_is_not_used(tmp_path):
    cache = tmp_path / "cache"
    reindexed(tmp_path / "a", cache)
    [template] = templates(cache)
    # a database migrated from other migration files, under this template's name
    with contextlib.closing(sqlite3.connect(template)) as conn, conn:
        conn.execute("UPDATE settings SET value = 'other files' WHERE key = ?", [MIGRATIONS_KEY])
    with read_only(template) as conn:
        template_applied = conn.execute(
            "SELECT app, name, applied FROM django_migrations ORDER BY id"
        ).fetchall()

    second = schema(reindexed(tmp_path / "b", cache))

    assert second["applied"] != template_applied  # migrated anew
    assert [row[:2] for row in second["applied"]] == [row[:2] for row in template_applied]
    with read_only(tmp_path / "b" / ".dir2mcp" / "meta.sqlite") as conn:
        assert conn.execute("SELECT value FROM settings WHERE key = ?", [MIGRATIONS_KEY]).fetchone() != (
            "other files",
        )


def test_a_template_holding_a_user_or_a_session_is_not_used(tmp_path):
    """Someone who can write the cache put an admin user and a session into
    the template: a new state directory must not start with them."""
    cache = tmp_path / "cache"
    reindexed(tmp_path / "a", cache)
    [template] = templates(cache)
    with contextlib.closing(sqlite3.connect(template)) as conn, conn:
        conn.execute(
            "INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email,"
            " is_staff, is_active, date_joined) VALUES ('x', 1, 'planted', '', '', '', 1, 1, '2026-01-01')"
        )
        conn.execute("INSERT INTO django_session VALUES ('planted', 'x', '2999-01-01')")

    reindexed(tmp_path / "b", cache)

    with read_only(tmp_path / "b" / ".dir2mcp" / "meta.sqlite") as conn:
        assert conn.execute("SELECT count(*) FROM auth_user").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM django_session").fetchone() == (0,)


@pytest.mark.parametrize("how", ["readable-by-others", "symlink"])
def test_a_loose_or_linked_template_is_not_used(tmp_path, how):
    cache = tmp_path / "cache"
    first = schema(reindexed(tmp_path / "a", cache))
    [template] = templates(cache)
    if how == "symlink":
        elsewhere = tmp_path / "elsewhere.sqlite"
        template.rename(elsewhere)
        template.symlink_to(elsewhere)
    else:
        template.chmod(0o644)

    second = schema(reindexed(tmp_path / "b", cache))

    assert second["applied"] != first["applied"]  # migrated anew, not copied
    assert second["sql"] == first["sql"]
