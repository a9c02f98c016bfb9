"""Opening the metadata store: migrations on first use and format checks."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import django
from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.db import DatabaseError, connection

from corpus import store_faults
from corpus.events import Reporter
from corpus.index import lexical
from corpus.models import Chunk, Document, Representation, Setting, Span
from kernel import errors, state_identity
from kernel.config import PROTOCOL_VERSION
from kernel.jsontypes import JsonObject
from kernel.state import DIR_MODE, FILE_MODE, INDEX_FORMAT_VERSION, StateDir

log = logging.getLogger(__name__)

#: The settings keys of spec §5.5 that name models, each with the key of
#: corpus.json's ``models`` it holds (corpus.status.record_models). The
#: embedding keys (None here) name the models the vectors came from and are
#: written with them (corpus.index.dense.embedding); empty before any vectors.
MODEL_SETTINGS: dict[str, str | None] = {
    "embed_text_model": None,
    "embed_text_dim": None,
    "embed_code_model": None,
    "embed_code_dim": None,
    "ocr_model": "ocr",
    "stt_provider": "stt_provider",
    "stt_model": "stt_model",
    "chat_model": "chat",
}
#: Every key spec §5.5 lists.
SPEC_SETTINGS = ("protocol_version", "corpus_id", "index_format_version", *MODEL_SETTINGS)


def describe(state: StateDir, *, dense: bool = False) -> str:
    """Where the index lives, for the §3.1 ``Index:`` line: the state
    directory's files, or the external database that holds the metadata."""
    db = settings.DATABASES["default"]
    meta = (
        "meta.sqlite"
        if uses_state_sqlite(state)
        else f"{db['ENGINE'].rsplit('.', 1)[-1]} database {db['NAME']}"
    )
    return f"{meta} + vectors_text.hnsw + vectors_code.hnsw" if dense else meta


#: The URI this process opened the state database by, read-only (open_read_only).
_read_only_name: str | None = None


def uses_state_sqlite(state: StateDir) -> bool:
    db = settings.DATABASES["default"]
    return db["ENGINE"].endswith("sqlite3") and str(db["NAME"]) in (str(state.meta_db), _read_only_name)


def writable(state: StateDir) -> bool:
    """Whether this process may write the state directory and its database
    (False on a read-only file system, whoever the user is)."""
    return os.access(state.path, os.W_OK) and (
        not state.meta_db.exists() or os.access(state.meta_db, os.W_OK)
    )


def read_only_uri(state: StateDir) -> str:
    """The database opened for reading only. Without a write-ahead log left
    beside it, ``immutable``: SQLite cannot create the ``-shm`` file a WAL
    database needs in a directory it may not write, and nothing can change
    the file under a read-only directory. With one, its ``-shm`` is read."""
    log_file = state.meta_db.with_name(state.meta_db.name + "-wal")
    has_log = log_file.exists() and log_file.stat().st_size > 0
    return f"file:{quote(str(state.meta_db))}?mode=ro" + ("" if has_log else "&immutable=1")


def open_read_only(state: StateDir) -> None:
    """Open the state directory's database for reading only, writing
    nothing anywhere: `status` on a read-only state directory. The index must
    be migrated and of this build's format already (nothing can be written
    to make it so); it is checked for damage like any other."""
    global _read_only_name
    state.check_identity()
    connection.close()
    _read_only_name = read_only_uri(state)
    settings.DATABASES["default"]["NAME"] = connection.settings_dict["NAME"] = _read_only_name
    check_integrity(state)
    try:
        migrated = _migrated(migrations_fingerprint())
        found = get_setting("index_format_version")
    except DatabaseError as exc:
        raise _corrupt(state, exc) from exc
    if found != INDEX_FORMAT_VERSION:
        raise errors.Dir2mcpError(
            errors.INDEX_VERSION_MISMATCH,
            f"the index in {state.path} has format {found}; this dir2mcp reads format {INDEX_FORMAT_VERSION}",
            hint="Run `dir2mcp reindex` where the state directory can be written.",
        )
    if not migrated:
        raise errors.Dir2mcpError(
            errors.STATE_NOT_WRITABLE,
            f"the index in {state.path} was written by another dir2mcp version and must be migrated, "
            "but the state directory is read-only",
            hint="Run any dir2mcp command once where the state directory can be written.",
        )


MIGRATIONS_KEY = "migrations_fingerprint"


def migrations_fingerprint() -> str:
    """A hash of every migration file name of every app, and Django's version.

    Listing the files costs a few milliseconds; loading the migration graph
    to learn that nothing is pending costs about a tenth of a second of
    every start.
    """
    import django
    from django.apps import apps

    names = [django.get_version()]
    for app in apps.get_app_configs():
        folder = Path(app.path) / "migrations"
        names.extend(f"{app.label}.{path.stem}" for path in folder.glob("[0-9]*.py"))
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()


def _migrated(fingerprint: str) -> bool:
    try:
        return get_setting(MIGRATIONS_KEY) == fingerprint
    except DatabaseError:  # a new database: no settings table yet
        return False


#: pg_advisory_lock key that serialises migrations of one PostgreSQL
#: database across machines ("dir2mcp" + "migrate", as a signed 64-bit int)
PG_MIGRATE_LOCK = 0x64697232_6D696772


def migrate(state: StateDir) -> None:
    """Apply pending migrations, serialised across processes by a file lock
    in the state directory and, on PostgreSQL, across machines by an
    advisory lock on the database itself (processes with different state
    directories share one database). A process that waited finds the work
    done and goes on.

    Skipped when the database records that it was migrated with exactly the
    migration files present now."""
    fingerprint = migrations_fingerprint()
    if _migrated(fingerprint):
        return
    state.locks.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    fd = os.open(state.locks / "migrate.lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
    shared = connection.vendor == "postgresql"
    try:
        os.fchmod(fd, FILE_MODE)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if shared:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_lock(%s)", [PG_MIGRATE_LOCK])
        try:
            if not _migrated(fingerprint):
                _migrate_now(state, fingerprint)
        finally:
            if shared:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [PG_MIGRATE_LOCK])
    except DatabaseError as exc:
        raise (_migration_failed(exc) if shared else _corrupt(state, exc)) from exc
    finally:
        os.close(fd)


def _migrate_now(state: StateDir, fingerprint: str) -> None:
    """Migrate, under the migration lock. A new, empty state database is a copy
    of the schema template (:func:`schema_template`) when there is one for
    these migrations; a migrated new one leaves its copy as the template."""
    new = uses_state_sqlite(state) and _empty()
    try:
        template = schema_template() if new else None
    except (OSError, RuntimeError) as exc:  # no home directory, an unreadable migration file
        log.info("no schema template: %s", exc)
        template = None
    if template is not None and _copied(template, fingerprint):
        return
    call_command("migrate", verbosity=0, interactive=False)
    set_setting(MIGRATIONS_KEY, fingerprint)
    if template is not None:
        _keep_template(template)


#: The schema templates' names begin so (the rest: their key's hash).
TEMPLATE_PREFIX = "schema-"


def schema_template() -> Path:
    """Where a migrated, otherwise empty state database is kept for the next new
    one: in the user's cache (``$XDG_CACHE_HOME/dir2mcp``, else
    ``~/.cache/dir2mcp``), named by what the migrations make it of: every
    migration file's name and contents, Django's and SQLite's versions.

    Migrating a new database costs about 0.35 CPU-s (render the models of
    22 migrations, create the tables, Django's post-migrate rows); a copy
    of the template about 0.01 (docs/benchmarks.md, "The test suite"). It
    holds what ``migrate`` writes and nothing of a corpus: ``corpus_id``
    and the format settings are written after it (:func:`open_store`)."""
    key = hashlib.sha256(f"{django.get_version()}\0{sqlite3.sqlite_version}\0".encode())
    for app in apps.get_app_configs():
        for path in sorted((Path(app.path) / "migrations").glob("[0-9]*.py")):
            key.update(f"{app.label}.{path.stem}\0".encode() + path.read_bytes() + b"\0")
    cache_home = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(cache_home) / "dir2mcp" / f"{TEMPLATE_PREFIX}{key.hexdigest()[:24]}.sqlite"


def _empty() -> bool:
    """Whether the database holds no table, index or view yet."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM sqlite_master")
        return bool(cursor.fetchone()[0] == 0)


def _copied(template: Path, fingerprint: str) -> bool:
    """Copy ``template`` into the (empty) state database; False, the database
    left empty again, when there is none or it is not a migrated database of
    these migrations (then the caller migrates)."""
    problem = state_identity.credential_problem(template)
    if problem is not None:
        log.warning("the schema template %s is not used: it %s", template, problem)
        return False
    connection.ensure_connection()
    target = connection.connection
    try:
        source = sqlite3.connect(f"file:{quote(str(template))}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        source.backup(target)
        if _migrated(fingerprint) and not _holds_people():
            return True
    except (sqlite3.Error, DatabaseError) as exc:
        log.info("the schema template %s is not used: %s", template, exc)
    finally:
        source.close()
    sqlite3.connect(":memory:").backup(target)  # empty again
    return False


#: Tables ``migrate`` leaves empty: a template holding a row in one (an admin
#: user, a session someone wrote into the cache) is not a migrated database.
PEOPLE_TABLES = ("auth_user", "django_session", "auth_user_groups", "auth_user_user_permissions")


def _holds_people() -> bool:
    """Whether the database just copied holds a user, a session or a grant."""
    with connection.cursor() as cursor:
        for table in PEOPLE_TABLES:
            cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {table})")  # noqa: S608  # a constant name
            if cursor.fetchone()[0]:
                return True
    return False


def _keep_template(template: Path) -> None:
    """Keep a copy of the just migrated database as ``template``, replacing
    the earlier templates beside it; where the cache cannot be written,
    nothing is kept. Written whole, then renamed: a process copying a
    template never reads one half written."""
    tmp: str | None = None
    try:
        template.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=template.parent, prefix=f".{template.name}.", suffix=".tmp")
        os.close(fd)
        copy = sqlite3.connect(tmp)
        try:
            connection.connection.backup(copy)
            # read-only copies need no -wal or -shm beside it
            copy.execute("PRAGMA journal_mode=DELETE")
        finally:
            copy.close()
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, template)
        tmp = None
        for old in template.parent.glob(f"{TEMPLATE_PREFIX}*.sqlite"):
            if old != template:
                old.unlink(missing_ok=True)
    except (OSError, sqlite3.Error) as exc:
        log.info("no schema template kept in %s: %s", template.parent, exc)
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _migration_failed(exc: Exception) -> errors.Dir2mcpError:
    """A shared database that could not be migrated is not corrupt, and
    rebuilding it would wipe every machine's index."""
    return errors.Dir2mcpError(
        errors.CONFIG_INVALID,
        f"migrating the shared database failed ({exc})",
        hint="Check that every machine on this database runs the same dir2mcp version; "
        "the migration is retried at the next start.",
    )


def owner_only_database(state: StateDir) -> None:
    """Create ``meta.sqlite`` 0600 before SQLite does, and make it and its
    ``-wal`` and ``-shm`` files 0600 if they exist.

    SQLite creates the database with 0644 less the umask, and gives the
    ``-wal`` and ``-shm`` files it makes later the database file's own mode;
    so a database that is 0600 from the start keeps all three 0600.
    """
    fd = os.open(state.meta_db, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(state.meta_db.with_name(state.meta_db.name + suffix), FILE_MODE)


def _corrupt(state: StateDir, exc: Exception) -> errors.Dir2mcpError:
    found = store_faults.classify(exc)
    if found is not None:
        return found
    return errors.Dir2mcpError(
        errors.STORE_CORRUPT,
        f"the index database in {state.path} cannot be read ({exc})",
        hint=store_faults.CORRUPT_HINT,
    )


#: How long the integrity check at open may take (seconds). SQLite's
#: quick_check reads every page: 3.6 s for 2.6 GB with a warm page cache on
#: a 2-vCPU machine (docs/reliability.md);
#: past the budget it stops, and what it did not reach is checked as queries
#: touch it (a damaged page is STORE_CORRUPT then, through store_faults).
QUICK_CHECK_SECONDS = 2.0
#: The largest database a server checks before it serves (bytes): a
#: damaged small index stops ``up`` before it listens; a larger one is
#: checked once the server has answered (mcp_gateway/server.py). A smaller
#: budget would not do: on SQLite 3.40 budgets of 0.05 and 0.2 s stopped
#: the check on a 470 MB index no sooner than 2 s did (0.26 CPU-s each,
#: under load; docs/benchmarks.md, "time to `initialize`").
SERVING_CHECK_BYTES = 64 * 2**20


def check_integrity(state: StateDir, *, budget: float = QUICK_CHECK_SECONDS) -> bool:
    """``PRAGMA quick_check`` on the state directory's database, bounded by
    ``budget`` seconds: STORE_CORRUPT when it finds damage (or the file is
    not a database), True when it read every page, False when it ran out
    of time first. Only reads. Other databases (PostgreSQL) check their own pages."""
    if not uses_state_sqlite(state) or not state.meta_db.is_file() or state.meta_db.stat().st_size == 0:
        return True
    deadline = time.monotonic() + budget
    try:
        connection.ensure_connection()
        raw = connection.connection
        raw.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA quick_check(5)")
                found = [row[0] for row in cursor.fetchall()]
        finally:
            raw.set_progress_handler(None, 0)
    except DatabaseError as exc:
        if time.monotonic() > deadline and "interrupted" in str(exc):
            log.info(
                "integrity check of %s stopped after %.1f s; queries check the rest", state.meta_db, budget
            )
            return False
        raise _corrupt(state, exc) from exc
    if found != ["ok"]:
        raise store_faults.corrupt(" ".join(" ".join(found).split())[:300])
    return True


def get_setting(key: str, default: str | None = None) -> str | None:
    # Raw SQL: this is read on every search (the embeddings version).
    with connection.cursor() as cursor:
        cursor.execute("SELECT value FROM settings WHERE key = %s", [key])
        row = cursor.fetchone()
    return row[0] if row else default


def get_json_setting(key: str) -> JsonObject | None:
    """A setting holding a JSON object; None when unset or not an object."""
    raw = get_setting(key)
    try:
        found = json.loads(raw) if raw else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def set_setting(key: str, value: str) -> None:
    Setting.objects.update_or_create(key=key, defaults={"value": value})


def set_setting_once(key: str, value: str) -> None:
    """``value`` for ``key`` unless the setting is there already (the first
    writer's value is kept, whoever else writes one at the same time)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO settings (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING", [key, value]
        )


#: What a private copy takes from a read-only state directory besides the
#: database: the token clients hold, and the dense indices (linked: read only).
_COPIED = ("secret.token",)
_LINKED = ("vectors_text.hnsw", "vectors_text.hnsw.json", "vectors_code.hnsw", "vectors_code.hnsw.json")
#: a dense index's full shards (``vectors_KIND.hnsw.N.<sha256 prefix>``, rag.shard_vectors;
#: spelt here rather than asked of corpus.index.dense.vectors, whose hnswlib and
#: usearch every command would then import)
_LINKED_SHARD = re.compile(r"vectors_(text|code)\.hnsw\.\d+\.[0-9a-f]+")


def serving_copy(state: StateDir) -> StateDir:
    """A private, writable copy of a read-only state directory's index, in
    a new 0700 temporary directory removed when the process exits, and the
    process's database switched to it: ``up --no-index`` serves a read-only
    copy this way, since serving writes (MCP sessions, the connection file).
    The database is copied page by page with SQLite's backup API, so a copy
    of a damaged one is found damaged by the check that follows."""
    state.check_identity()
    copy = StateDir(Path(tempfile.mkdtemp(prefix="dir2mcp-read-only-")))
    atexit.register(shutil.rmtree, copy.path, ignore_errors=True)
    copy.ensure()  # a state directory of this user's, its record dropped at exit
    atexit.register(state_identity.forget, copy.path)
    source = sqlite3.connect(read_only_uri(state), uri=True)
    target = sqlite3.connect(copy.meta_db)
    try:
        source.backup(target)
    except sqlite3.Error as exc:
        raise _corrupt(state, exc) from exc
    finally:
        target.close()
        source.close()
    os.chmod(copy.meta_db, FILE_MODE)
    for name in _COPIED:
        if (state.path / name).is_file():
            shutil.copyfile(state.path / name, copy.path / name)
            os.chmod(copy.path / name, FILE_MODE)
    shards = [path.name for path in state.path.glob("vectors_*.hnsw.*") if _LINKED_SHARD.fullmatch(path.name)]
    for name in (*_LINKED, *shards):
        if (state.path / name).is_file():
            (copy.path / name).symlink_to(state.path / name)
    connection.close()
    settings.DATABASES["default"]["NAME"] = connection.settings_dict["NAME"] = copy.meta_db
    settings.DIR2MCP_STATE_DIR = copy.path
    return copy


def open_store(
    state: StateDir,
    *,
    allow_rebuild: bool = False,
    reporter: Reporter | None = None,
    reading: bool = False,
    check: bool = True,
) -> None:
    """Make the store usable, or explain why it is not.

    A database from an incompatible index format stops with
    INDEX_VERSION_MISMATCH (exit 5, "run reindex"), unless ``allow_rebuild``
    (reindex), which starts it afresh. A database that is not SQLite at all
    is moved aside under ``allow_rebuild`` and is STORE_CORRUPT otherwise.

    A state directory found readable by group or others is tightened with a
    logged warning, and, given a ``reporter``, a ``warning`` event too.

    ``reading``: the caller only reads (``status``); on a state directory it
    may not write, the database is opened read-only (:func:`open_read_only`)
    instead of failing with STATE_NOT_WRITABLE.

    ``check``: run the integrity check (:func:`check_integrity`); a caller
    that passes False runs it later itself.
    """
    if reading and uses_state_sqlite(state) and state.meta_db.is_file() and not writable(state):
        open_read_only(state)
        return
    tightened = state.ensure()
    if tightened and reporter is not None:
        reporter.warn(
            f"the state directory {state.path} was readable by group or others; "
            f"tightened {len(tightened)} entries to owner-only",
            code="STATE_PERMISSIONS_TIGHTENED",
            paths=tightened,
        )
    if uses_state_sqlite(state):
        owner_only_database(state)
    try:
        if check:
            check_integrity(state)
        migrate(state)
        found = get_setting("index_format_version")
    except errors.Dir2mcpError as exc:
        if not (allow_rebuild and uses_state_sqlite(state)) or exc.code != errors.STORE_CORRUPT:
            raise
        moved = _move_aside(state)
        if reporter is not None:
            reporter.warn(f"{exc.message}; moved it aside as {moved} and rebuilding", code=exc.code)
        store_faults.forget_corruption()
        migrate(state)
        found = None
    if found not in (None, INDEX_FORMAT_VERSION):
        if not allow_rebuild:
            raise errors.Dir2mcpError(
                errors.INDEX_VERSION_MISMATCH,
                f"the index in {state.path} has format {found}; this dir2mcp reads format "
                f"{INDEX_FORMAT_VERSION}",
                hint="Run `dir2mcp reindex` to rebuild it.",
            )
        wipe_index()
    if found != INDEX_FORMAT_VERSION:
        set_setting("index_format_version", INDEX_FORMAT_VERSION)
        set_setting("protocol_version", PROTOCOL_VERSION)
    if get_setting("corpus_id") is None:
        # written once, by whichever process comes first: two servers opening
        # a new PostgreSQL index at once each wrote theirs, and the one that
        # lost kept sealing cursors with its own (corpus.cursors binds them)
        set_setting_once("corpus_id", f"corpus_{os.urandom(6).hex()}")


def small_enough_to_check(state: StateDir) -> bool:
    """Whether a server checks this store before it serves (``SERVING_CHECK_BYTES``)."""
    if not uses_state_sqlite(state) or not state.meta_db.is_file():
        return True
    return state.meta_db.stat().st_size <= SERVING_CHECK_BYTES


def _move_aside(state: StateDir) -> str:
    """Rename the damaged database (and its -wal and -shm) to
    ``meta.sqlite.corrupt-<time>``; returns that name."""
    connection.close()
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for suffix in ("", "-wal", "-shm"):
        path = state.meta_db.with_name(state.meta_db.name + suffix)
        if path.exists():
            path.rename(path.with_name(f"{path.name}.corrupt-{stamp}"))
    return f"{state.meta_db.name}.corrupt-{stamp}"


def wipe_index() -> None:
    """Delete every document and everything derived from it."""
    lexical.clear()
    for model in (Span, Chunk, Representation, Document):
        model.objects.all().delete()
