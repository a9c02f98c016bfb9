"""A state directory is used only if dir2mcp made it for this user, here
(kernel/state_identity.py): a ``.dir2mcp/`` shipped inside a root (a cloned
repository, an unpacked archive) is refused by every command before anything
in it is read, whatever its modes; ``dir2mcp state adopt`` empties it and
makes it the user's; one without ``state.id`` (an earlier dir2mcp's, or
shipped) is refused too (docs/security.md, "A root's own configuration and
state")."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import pytest

from kernel import config_trust, errors, state_identity
from kernel.config import Config
from kernel.secrets import resolve_secret
from kernel.state import StateDir, ensure_token
from tests.support import TLS
from tests.test_cli import REPO, base_env
from tests.up_process import Up

PASSWORD = "a-long-admin-password-for-tests-42"
POISON = "zebracrossingcode"


@pytest.fixture(autouse=True)
def own_trust_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """This test's per-user records, never the session's or the user's."""
    trust = tmp_path / "trust"
    monkeypatch.setenv(state_identity.TRUST_DIR_ENV, str(trust))
    return trust


def refusal(attempt) -> errors.Dir2mcpError:
    with pytest.raises(errors.Dir2mcpError) as caught:
        attempt()
    assert caught.value.code == errors.CONFIG_UNTRUSTED and caught.value.exit_code == errors.EXIT_CONFIG
    return caught.value


def tree(top: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under ``top``: mode, modification time and content hash."""
    found = {}
    for path in sorted(top.rglob("*")):
        st = os.lstat(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        found[str(path.relative_to(top))] = (st.st_mode, st.st_mtime_ns, digest)
    return found


def earlier_versions_state(root: Path) -> StateDir:
    """A ``<root>/.dir2mcp`` as a dir2mcp before state ids left it: no
    ``state.id``, a token, and the corpus.json naming the root it indexed."""
    state = StateDir(root / ".dir2mcp")
    (state.path / "cache" / "ocr").mkdir(parents=True)
    state.token_file.write_text("users-own-token\n")
    state.token_file.chmod(0o600)
    (state.path / "meta.sqlite").write_bytes(b"")
    (state.path / "corpus.json").write_text(json.dumps({"root": str(root)}))
    return state


# -- made by this version ----------------------------------------------------------


def test_a_state_directory_made_by_this_version_is_accepted_and_recorded_outside_the_root(
    corpus_dir, own_trust_dir
):
    state = StateDir(corpus_dir / ".dir2mcp")

    state.ensure()
    token = ensure_token(state)
    state.ensure()

    assert ensure_token(state) == token
    found = state.id_file.read_text().strip()
    assert re.fullmatch(r"[0-9a-f]{32}", found)
    record_path = own_trust_dir / "states" / f"{found}.json"
    record = json.loads(record_path.read_text())
    assert record["path"] == os.path.realpath(state.path)
    assert record["inode"] == state.path.stat().st_ino
    assert os.stat(record_path).st_mode & 0o777 == 0o600
    assert os.stat(own_trust_dir / "states").st_mode & 0o777 == 0o700
    assert os.stat(state.id_file).st_mode & 0o777 == 0o600


def test_a_copy_of_a_users_own_state_directory_is_refused_elsewhere_and_in_its_place(corpus_dir, tmp_path):
    state = StateDir(corpus_dir / ".dir2mcp")
    state.ensure()
    ensure_token(state)

    moved = StateDir(tmp_path / "elsewhere" / ".dir2mcp")
    shutil.copytree(state.path, moved.path)
    error = refusal(moved.ensure)
    assert "copied or moved here" in error.message and str(moved.path) in error.message
    assert "dir2mcp state adopt --state-dir" in (error.hint or "")

    # the same path, the same id, but another directory: a copy put back in its place
    shutil.rmtree(state.path)
    shutil.copytree(moved.path, state.path)
    assert "not that directory" in refusal(state.ensure).message
    refusal(lambda: ensure_token(state))


@pytest.mark.parametrize("planted", ["not-an-id\n", "link", "foreign-record"])
def test_an_id_that_is_not_this_users_is_refused(corpus_dir, tmp_path, planted):
    state = StateDir(corpus_dir / ".dir2mcp")
    state.path.mkdir()
    state.token_file.write_text("known-token\n")
    state.token_file.chmod(0o600)
    if planted == "link":
        elsewhere = tmp_path / "id"
        elsewhere.write_text("0" * 32 + "\n")
        state.id_file.symlink_to(elsewhere)
    elif planted == "foreign-record":
        state.id_file.write_text("ab" * 16 + "\n")  # an id, but no record of this user's has it
    else:
        state.id_file.write_text(planted)

    refusal(state.ensure)
    refusal(lambda: ensure_token(state))


def _ensure_in_a_process(path: str, barrier, results) -> None:
    barrier.wait()
    try:
        StateDir(Path(path)).ensure()  # claims, then makes the layout and a probe file in it
        results.put("ok")
    except Exception as exc:  # noqa: BLE001 (reported by the test)
        results.put(repr(exc))


def test_a_new_state_directory_claimed_by_processes_at_once_gets_one_id(tmp_path, own_trust_dir):
    """Two workers of a scaled-out deployment start on one root at once (CI
    saw one refuse the directory the other was claiming)."""
    fork = multiprocessing.get_context("fork")
    outcomes = []
    for attempt in range(20):
        path = tmp_path / f"root{attempt}" / ".dir2mcp"
        path.mkdir(parents=True)
        barrier, results = fork.Barrier(4), fork.Queue()
        processes = [
            fork.Process(target=_ensure_in_a_process, args=(str(path), barrier, results)) for _ in range(4)
        ]
        for process in processes:
            process.start()
        outcomes += [results.get(timeout=120) for _ in processes]
        for process in processes:
            process.join(60)

    assert [o for o in outcomes if o != "ok"] == []
    ids = {(tmp_path / f"root{attempt}" / ".dir2mcp" / "state.id").read_text() for attempt in range(20)}
    assert len(ids) == 20 and len(list((own_trust_dir / "states").iterdir())) == 20


# -- made by an earlier version -----------------------------------------------------


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


def packed_and_unpacked(state: StateDir, kind: str) -> None:
    """``state`` packed into an archive (tar keeping modes and times, or zip)
    and unpacked in its place by this user, as someone's download would be."""
    archive = state.path.parent.parent / f"shipped.{kind}"
    if kind == "tar":
        with tarfile.open(archive, "w") as packed:
            packed.add(state.path, arcname=".dir2mcp")
    else:
        shutil.make_archive(str(archive.with_suffix("")), "zip", state.path.parent, ".dir2mcp")
    shutil.rmtree(state.path)
    if kind == "tar":
        with tarfile.open(archive) as packed:
            packed.extractall(state.path.parent, filter="tar")
    else:
        shutil.unpack_archive(archive, state.path.parent)


def a_secrets_file_written_by_hand(root: Path) -> StateDir:
    state = StateDir(root / ".dir2mcp")
    state.path.mkdir()
    (state.path / "secret.env").write_text("DIR2MCP_AUTH_TOKEN=known-to-whoever-wrote-it\n")
    (state.path / "secret.env").chmod(0o600)
    return state


@pytest.mark.parametrize(
    "shape", ["earlier-version", "git-tracked", "tar-unpacked", "zip-unpacked", "secret-env"]
)
def test_a_state_directory_without_an_id_is_refused_untouched_naming_state_adopt(corpus_dir, shape):
    """No ``state.id``: nothing it holds tells an earlier dir2mcp's directory
    from an archive unpacked by this user whose corpus.json names exactly the
    path it was unpacked to, or from a lone secret.env shipped the same way
    (session 21: all three were taken over, the last one's token used)."""
    if shape == "secret-env":
        state = a_secrets_file_written_by_hand(corpus_dir)
    else:
        state = earlier_versions_state(corpus_dir)
    if shape == "git-tracked":
        git(corpus_dir, "init", "-q")
        git(corpus_dir, "add", "-f", ".dir2mcp")
        git(corpus_dir, "commit", "-q", "-m", "ship the state")
    elif shape.endswith("-unpacked"):
        packed_and_unpacked(state, shape.removesuffix("-unpacked"))
    before = tree(state.path)

    for attempt in (state.ensure, lambda: ensure_token(state)):
        error = refusal(attempt)
        assert f"dir2mcp state adopt --state-dir {state.path}" in error.message
        assert "state.id" in error.message
    if shape == "secret-env":
        elsewhere = StateDir(corpus_dir.parent / "elsewhere")
        elsewhere.ensure()

        def resolving() -> object:
            return resolve_secret("auth_token", Config(), elsewhere, environ={}, root=corpus_dir)

        assert "dir2mcp state adopt" in refusal(resolving).message
    assert tree(state.path) == before
    assert not state.id_file.exists()


def test_adopting_an_earlier_versions_state_directory_makes_it_the_users_with_a_new_token(corpus_dir):
    state = earlier_versions_state(corpus_dir)

    moved, aside = state_identity.adopt(state.path)
    state.ensure()

    assert moved == 4 and aside is not None and (aside / "secret.token").is_file()
    assert ensure_token(state) != "users-own-token"


def test_a_secrets_file_written_into_a_dot_dir2mcp_dir2mcp_made_is_read(corpus_dir):
    """The way to keep a secret.env there now: dir2mcp makes the directory first."""
    state = StateDir(corpus_dir / ".dir2mcp")
    state.ensure()
    (state.path / "secret.env").write_text("DIR2MCP_AUTH_TOKEN=mine-and-long-enough-0123456789\n")
    (state.path / "secret.env").chmod(0o600)

    state.ensure()
    found = resolve_secret("auth_token", Config(), state, environ={}, root=corpus_dir)

    assert found is not None and found.value == "mine-and-long-enough-0123456789"


def test_a_secrets_file_a_repository_ships_in_dot_dir2mcp_is_refused_not_read(corpus_dir, tmp_path):
    """``secrets.file.path`` defaults to ``<root>/.dir2mcp/secret.env`` wherever the state is."""
    shipped = corpus_dir / ".dir2mcp" / "secret.env"
    shipped.parent.mkdir()
    shipped.write_text("DIR2MCP_AUTH_TOKEN=known-to-the-writer\n")
    shipped.chmod(0o600)  # a clone under umask 077
    git(corpus_dir, "init", "-q")
    git(corpus_dir, "add", "-f", ".dir2mcp/secret.env")
    git(corpus_dir, "commit", "-q", "-m", "ship a token")
    state = StateDir(tmp_path / "elsewhere")
    state.ensure()

    error = refusal(lambda: resolve_secret("auth_token", Config(), state, environ={}, root=corpus_dir))

    assert "but no state.id" in error.message and str(shipped.parent) in error.message


def test_an_empty_directory_is_a_new_state_directory(corpus_dir):
    """As an operator makes one for a service (systemd's ReadWritePaths)."""
    state = StateDir(corpus_dir / ".dir2mcp")
    (state.path / "cache").mkdir(parents=True)

    state.ensure()

    assert state.id_file.is_file()


# -- the per-user records -------------------------------------------------------------


def recorded_state(corpus_dir: Path, trust: Path) -> tuple[StateDir, Path]:
    state = StateDir(corpus_dir / ".dir2mcp")
    state.ensure()
    return state, trust / "states" / f"{state.id_file.read_text().strip()}.json"


def test_a_record_that_is_a_link_is_refused(corpus_dir, own_trust_dir, tmp_path):
    state, record = recorded_state(corpus_dir, own_trust_dir)
    planted = tmp_path / "planted.json"
    planted.write_text(record.read_text())
    planted.chmod(0o600)
    record.unlink()
    record.symlink_to(planted)

    assert "symbolic link" in refusal(state.ensure).message


def test_a_record_readable_by_others_is_refused(corpus_dir, own_trust_dir):
    state, record = recorded_state(corpus_dir, own_trust_dir)
    record.chmod(0o644)

    assert "0644" in refusal(state.ensure).message


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_record_of_another_user_is_refused(corpus_dir, own_trust_dir):
    state, record = recorded_state(corpus_dir, own_trust_dir)
    os.chown(record, 4242, 4242)

    assert "belongs to another user (uid 4242)" in refusal(state.ensure).message


def test_a_records_directory_others_may_write_or_that_links_elsewhere_is_refused(
    corpus_dir, own_trust_dir, tmp_path
):
    state, _ = recorded_state(corpus_dir, own_trust_dir)
    records = own_trust_dir / "states"
    records.chmod(0o777)
    assert "written by group or others" in refusal(state.ensure).message

    records.chmod(0o700)
    records.rename(tmp_path / "moved")
    records.symlink_to(tmp_path / "moved")
    assert "symbolic link" in refusal(state.ensure).message


def test_a_store_of_approvals_that_is_a_link_or_another_users_is_refused(corpus_dir, tmp_path):
    config = corpus_dir / ".dir2mcp.yaml"
    config.write_text("server:\n  public: true\n")
    store = config_trust.approve(config, config.read_text())
    planted = tmp_path / "planted.json"
    planted.write_text(store.read_text())
    planted.chmod(0o600)
    store.unlink()
    store.symlink_to(planted)

    assert "symbolic link" in refusal(lambda: config_trust.approval(config, config.read_text())).message


# -- adoption -------------------------------------------------------------------------------


def test_adopting_sets_aside_what_a_state_directory_held_and_records_it(corpus_dir):
    state = StateDir(corpus_dir / ".dir2mcp")
    (state.path / "cache" / "ocr").mkdir(parents=True)
    (state.path / "cache" / "ocr" / "page.json").write_text('{"text": "what the writer says the page says"}')
    state.token_file.write_text("known-token\n")
    state.token_file.chmod(0o600)
    (state.path / "django.secret").write_text("known-key\n")
    (state.path / "meta.sqlite").write_bytes(b"SQLite format 3\x00")
    held = tree(state.path)
    refusal(state.ensure)

    moved, aside = state.adopt()

    assert moved == 4 and aside is not None and aside.parent == state.path
    assert tree(aside) == held  # nothing lost, nothing left where dir2mcp reads
    assert sorted(p.name for p in state.path.iterdir()) == sorted(
        ["cache", "locks", "payments", "state.id", aside.name]
    )
    assert not any(p.is_file() for p in state.cache.rglob("*"))
    state.ensure()
    assert ensure_token(state) != "known-token"


def test_adopting_refuses_a_state_directory_that_links_elsewhere_untouched(corpus_dir, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("x")
    state = StateDir(corpus_dir / ".dir2mcp")
    state.path.symlink_to(victim)

    refusal(state.adopt)

    assert [p.name for p in victim.iterdir()] == ["keep.txt"]


# -- a shipped state directory, end to end ---------------------------------------------


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A command with nothing on its standard input."""
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        cwd=REPO,
        env=base_env() | env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def sign_in(base: str, username: str, password: str) -> httpx.Response:
    with httpx.Client(timeout=60, trust_env=False, verify=TLS) as http:
        page = http.get(f"{base}/admin/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        return http.post(
            f"{base}/admin/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": csrf, "next": "/admin/"},
        )


def admin_page(base: str, session: str) -> httpx.Response:
    return httpx.get(f"{base}/admin/", headers={"Cookie": f"sessionid={session}"}, timeout=60, verify=TLS)


def search(base: str, token: str, query: str) -> httpx.Response:
    return httpx.get(
        f"{base}/api/v1/search",
        params={"query": query},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
        verify=TLS,
    )


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The writer's state directory, made by a real dir2mcp of theirs: an
    admin user, a signed-in session, a token (0600) and the index of a file
    the shipped root no longer holds. Its path, token and session cookie."""
    top = tmp_path_factory.mktemp("author")
    root = top / "project"
    root.mkdir()
    (root / "guide.md").write_text("# Guide\n\nThe loader reads configuration files.\n")
    (root / "plan.md").write_text(f"# Plan\n\nThe code is {POISON}.\n")
    env = {"DIR2MCP_TRUST_DIR": str(top / "trust"), "DIR2MCP_ADMIN_PASSWORD": PASSWORD}
    made = run("createadmin", "--dir", str(root), "--username", "author", env=env)
    assert made.returncode == 0, made.stderr
    up = Up("--dir", str(root), "--json", env=env)
    try:
        base = up.url().removesuffix("/mcp")
        up.event("scan_progress", lambda data: data.get("running") is False)
        signed = sign_in(base, "author", PASSWORD)
        assert signed.status_code == 302, signed.text[:300]
        session = signed.cookies["sessionid"]
        token = (root / ".dir2mcp" / "secret.token").read_text().strip()
        # in the writer's own server all of it works
        assert admin_page(base, session).status_code == 200
        assert POISON in json.dumps(search(base, token, POISON).json()["hits"])
    finally:
        code = up.stop()
        up.close()
    assert code == 0, up.stderr
    (root / "plan.md").unlink()  # shipped without the file; its index entries stay
    return root, token, session


def ship(shipped, tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """The writer's project as the user receives it (modes kept, as a tar or
    a clone under umask 077 keeps them): the root, its .dir2mcp, the user's env."""
    project, _, _ = shipped
    root = tmp_path / "received"
    shutil.copytree(project, root, symlinks=True)
    state = root / ".dir2mcp"
    assert os.stat(state / "secret.token").st_mode & 0o777 == 0o600
    assert (state / "meta.sqlite").is_file() and (state / "django.secret").is_file()
    return root, state, {"DIR2MCP_TRUST_DIR": str(tmp_path / "users-trust")}


COMMANDS = [
    pytest.param(("up", "--json"), id="up"),
    pytest.param(("up", "--no-index"), id="up-no-index"),
    pytest.param(("mcp_stdio",), id="stdio"),
    pytest.param(("mcp_stdio", "--no-index"), id="stdio-no-index"),
    pytest.param(("status",), id="status"),
    pytest.param(("reindex",), id="reindex"),
    pytest.param(("reindex", "--incremental"), id="reindex-incremental"),
    pytest.param(("ask", "what is the code?"), id="ask"),
    pytest.param(("createadmin", "--username", "user"), id="createadmin"),
    pytest.param(("watch",), id="watch"),
]


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_a_shipped_state_directory_is_refused_and_nothing_in_it_is_read(shipped, tmp_path, command):
    root, state, env = ship(shipped, tmp_path)
    before = tree(state)

    done = run(*command, "--dir", str(root), env=env | {"DIR2MCP_ADMIN_PASSWORD": PASSWORD})

    said = done.stdout + done.stderr
    assert done.returncode == errors.EXIT_CONFIG, said
    assert errors.CONFIG_UNTRUSTED in said and str(state) in said, said
    assert "dir2mcp state adopt" in said
    # nothing written, nothing opened: SQLite makes -wal and -shm files as it opens a database
    assert tree(state) == before


@pytest.mark.slow
@pytest.mark.parametrize("command", [("status",), ("up", "--no-index")], ids=["status", "up-no-index"])
def test_a_shipped_read_only_state_directory_is_refused_too(shipped, tmp_path, command):
    root, state, env = ship(shipped, tmp_path)
    state.chmod(0o500)
    try:
        done = run(*command, "--dir", str(root), env=env)
    finally:
        state.chmod(0o700)

    assert done.returncode == errors.EXIT_CONFIG, done.stdout + done.stderr
    assert errors.CONFIG_UNTRUSTED in done.stdout + done.stderr


@pytest.mark.slow
def test_adopting_a_shipped_state_directory_leaves_nothing_of_its_writers(shipped, tmp_path):
    _, token, session = shipped
    root, state, env = ship(shipped, tmp_path)

    adopted = run("state", "adopt", "--dir", str(root), "--json", env=env)

    assert adopted.returncode == 0, adopted.stderr
    event = json.loads(adopted.stdout.splitlines()[0])
    assert event["event"] == "state_adopted" and event["data"]["path"] == str(state)
    assert event["data"]["set_aside"] >= 3
    up = Up("--dir", str(root), "--json", env=env)
    try:
        base = up.url().removesuffix("/mcp")
        up.event("scan_progress", lambda data: data.get("running") is False)
        own = (state / "secret.token").read_text().strip()
        mcp = httpx.post(
            f"{base}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
            timeout=60,
            verify=TLS,
        )
        shipped_search = search(base, token, "loader")
        own_search = search(base, own, POISON)
        found = search(base, own, "loader configuration")
        page = admin_page(base, session)
        writer = sign_in(base, "author", PASSWORD)
    finally:
        code = up.stop()
        up.close()
    assert code == 0, up.stderr

    assert own != token
    assert mcp.status_code == 401 and shipped_search.status_code == 401
    assert own_search.status_code == 200 and POISON not in json.dumps(own_search.json()["hits"])
    assert "guide.md" in json.dumps(found.json()["hits"])
    assert page.status_code == 302 and "/admin/login/" in page.headers["location"]
    assert writer.status_code == 200 and "sessionid" not in writer.cookies


@pytest.mark.slow
def test_the_users_own_state_directory_keeps_serving_across_runs(corpus_dir, tmp_path):
    (corpus_dir / "guide.md").write_text("# Guide\n\nThe loader reads configuration files.\n")
    env = {"DIR2MCP_TRUST_DIR": str(tmp_path / "trust")}

    first = run("reindex", "--dir", str(corpus_dir), env=env)
    second = run("status", "--dir", str(corpus_dir), env=env)
    stdio = run("mcp_stdio", "--dir", str(corpus_dir), "--no-index", env=env)

    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert stdio.returncode == 0, stdio.stderr
