"""Hostile round of 2026-11-29, session 23: a hostile client and a hostile
file in the indexed tree, against a real ``up`` (daphne, the gate, the
connection bounds); see docs/security.md, "Hostile round, 2026-11-29
(session 23)". Each test shows a way in that was open before its fix.
"""

from __future__ import annotations

import os
import zipfile

import httpx
import pytest

from kernel import errors
from tests.mcp_http import Server, write_corpus
from tests.support import wait_until
from tests.test_cli import cli
from tests.test_hostile_clients import WAIT, token_of
from tests.test_hostile_session22 import pdf_with_attachment, with_part
from tests.test_office import make_docx

pytestmark = pytest.mark.slow

KEY = b"aws AKIAABCDEFGHIJKLMNOP here\n"


def code_of(result: dict) -> str | None:
    return result["structuredContent"].get("error", {}).get("code")


# -- a digest of bytes no reader serves -----------------------------------------------


def test_a_checksum_answers_only_for_bytes_read_bytes_would_serve(tmp_path, running):
    """``checksum`` refused a file only when the index had judged it
    secret-bearing, while ``read_bytes`` screens the bytes themselves: a
    binary file holding a key (never screened by the indexer), any file
    under ``--no-index``, an archive whose member is refused, a zip document
    whose part holds a key, a PDF whose attachment does. A digest tests
    guesses of a short secret against the rest of the file (why a redacted
    file's checksum was already refused)."""
    root = tmp_path / "corpus"
    write_corpus(root)
    (root / "keystore.bin").write_bytes(b"\x00\x01\x02header\x00" * 4 + KEY)
    (root / "settings.txt").write_text("name = app\nDB_PASSWORD=Sup3rSecretValue123\n")
    with zipfile.ZipFile(root / "backup.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("readme.txt", "what the backup holds\n")
        archive.writestr("keys.txt", KEY)
    clean = make_docx()
    (root / "memo.docx").write_bytes(clean)
    (root / "object.docx").write_bytes(with_part(clean, "word/embeddings/oleObject1.bin", KEY))
    (root / "attached.pdf").write_bytes(pdf_with_attachment(KEY))
    (root / "clean.pdf").write_bytes(pdf_with_attachment(b"minutes of the planning meeting\n"))
    up = running("--dir", str(root), "--json", "--no-index")
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    names = (
        "keystore.bin", "settings.txt", "backup.zip", "object.docx", "attached.pdf", "memo.docx", "clean.pdf",
        "notes.txt",
    )  # fmt: skip
    codes = {name: code_of(srv.call(session, "dir2mcp.checksum", {"rel_path": name})) for name in names}
    assert codes == {
        "keystore.bin": errors.FORBIDDEN,
        "settings.txt": errors.FORBIDDEN,
        "backup.zip": errors.FORBIDDEN,
        "object.docx": errors.FORBIDDEN,
        "attached.pdf": errors.FORBIDDEN,
        "memo.docx": None,
        "clean.pdf": None,
        "notes.txt": None,
    }, codes


# -- a root's own config file ----------------------------------------------------------


def billion_laughs() -> str:
    """Ten lines of YAML anchors and aliases that stand for 10^10 strings."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)]
    return "\n".join(lines) + "\nsecurity:\n  path_excludes: *l9\n"


@pytest.mark.parametrize(
    "plant",
    [
        pytest.param(lambda path: os.mkfifo(path), id="fifo"),
        pytest.param(lambda path: path.symlink_to("/dev/zero"), id="symlink-to-dev-zero"),
        pytest.param(lambda path: path.write_text("# padding\n" * 200_000), id="two-mebibytes"),
        pytest.param(lambda path: path.write_text(billion_laughs()), id="billion-laughs"),
        pytest.param(lambda path: path.write_text("a: " + "[" * 50_000 + "]" * 50_000), id="nested-deep"),
    ],
)
def test_a_root_config_file_built_to_hang_up_is_refused_at_once(tmp_path, running, plant):
    """The root's ``.dir2mcp.yaml`` is whatever the tree holds (a cloned
    repository carries symlinks, an unpacked archive FIFOs too). ``up`` read
    it with ``read_text``: a FIFO held it for good before it served anything,
    a symlink to ``/dev/zero`` was read until memory ran out; ten lines of
    YAML aliases stood for 10^10 values that validation and its error
    message walked for good, and deep nesting was a RecursionError traceback.
    Each is now CONFIG_INVALID, exit 2."""
    root = tmp_path / "corpus"
    write_corpus(root)
    plant(root / ".dir2mcp.yaml")
    up = running("--dir", str(root), "--json", "--no-index")
    assert up.proc.wait(timeout=WAIT) == 2, up.stdout + up.stderr
    up.wait_until(lambda up: errors.CONFIG_INVALID in up.stdout + up.stderr, "the refusal")
    assert "Traceback" not in up.stderr, up.stderr


# -- the operator's terminal ---------------------------------------------------------


def test_ask_prints_names_and_text_from_the_directory_escaped(tmp_path):
    """``ask`` printed its answer as it came: in search-only mode each hit's
    name and snippet, in answer mode what the model wrote from them. A file
    named or holding ``ESC ] 0 ;`` (set the title), ``ESC [ 2 J`` (clear the
    screen), OSC 52 (write the clipboard) drove the operator's terminal,
    and a newline in a name forged a line; the citations under "Sources:"
    were already escaped (issue #23)."""
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "zephyr\x1b]0;PWNED\x07.txt").write_text("zephyrine budget approved\n")
    (root / "plain.txt").write_text("zephyrine budget \x1b]52;c;cm0gLXJmIH4=\x07 held\x1b[2J\n")
    (root / "forged\n1. [ok.txt:L1-L1] zephyrine budget.txt").write_text("zephyrine budget\n")
    done = cli("ask", "zephyrine budget", "--mode", "search_only", "--dir", str(root))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout, done.stdout
    assert "zephyr\\x1b]0;PWNED\\x07.txt" in done.stdout, done.stdout
    assert not any(line.startswith("1. [ok.txt") for line in done.stdout.splitlines()), done.stdout


# -- reading far into a huge file -------------------------------------------------------


FAR = 10**9  # a line far past the end


def mcp_far(srv: Server, session: str, method: str, params: dict) -> str | None:
    """The request on the MCP endpoint: its error code; then whether the
    client's next call (``stats``) is answered."""
    answer = srv.post({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, session=session).json()
    return answer.get("error", {}).get("data", {}).get("code")


def mcp_next(srv: Server, session: str) -> bool:
    stats = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "dir2mcp.stats", "arguments": {}},
    }
    answer = srv.post(stats, session=session).json()
    assert answer.get("error", {}).get("data", {}).get("code") in (None, errors.SERVER_BUSY), answer
    return "result" in answer


def rest_far(srv: Server, path: str, params: dict) -> str | None:
    auth = {"Authorization": f"Bearer {srv.token}"}
    return (
        httpx.get(srv.base + path, params=params, headers=auth, timeout=WAIT)
        .json()
        .get("error", {})
        .get("code")
    )


def rest_next(srv: Server) -> bool:
    answer = httpx.get(
        f"{srv.base}/api/v1/stats", headers={"Authorization": f"Bearer {srv.token}"}, timeout=WAIT
    )
    assert answer.status_code in (200, 503), answer.text
    return answer.status_code == 200


MCP_FAR = [
    ("tools/call", {"name": "dir2mcp.open_file", "arguments": {"rel_path": "huge.log", "start_line": FAR}}),
    ("tools/call", {"name": "dir2mcp.verify", "arguments": {"text": f"it says so [huge.log:L{FAR}-L{FAR}]"}}),
    ("resources/read", {"uri": f"dir2mcp:///huge.log?lines={FAR}-{FAR}"}),
]
REST_FAR = [
    ("/api/v1/files/slice", {"rel_path": "huge.log", "start_line": FAR}),
    ("/api/v1/resources/read", {"uri": f"dir2mcp:///huge.log?lines={FAR}-{FAR}"}),
]


@pytest.mark.parametrize(
    "way",
    [pytest.param(("mcp", *far), id=f"mcp-{far[0]}-{n}") for n, far in enumerate(MCP_FAR)]
    + [pytest.param(("rest", *far), id=f"rest-{far[0]}") for far in REST_FAR],
)
def test_a_line_far_into_a_huge_file_ends_at_its_calls_deadline(tmp_path, running, way):
    """Slices were read up to ``start_line`` without looking at the call's
    stop event, and on the REST mirror no call had a stop event set at its
    deadline at all: a line past the end of a 1 TiB sparse file (its writer
    spends a few bytes of disk) kept the thread reading for a quarter of an
    hour after its client was told DEADLINE_EXCEEDED, and it held its
    client's call slot all that time: the client's next call was SERVER_BUSY."""
    root = tmp_path / "corpus"
    write_corpus(root)
    with open(root / "huge.log", "wb") as log:
        log.write(b"a line of the log\n" * 1000)  # the head the classifier sniffs is text
        log.truncate(2**40)
    env = {"DIR2MCP_SERVER__MAX_CALLS_PER_CLIENT": "1", "DIR2MCP_SERVER__CALL_TIMEOUT": "2s"}
    up = running("--dir", str(root), "--json", "--no-index", env=env)
    srv = Server(root, up.url(), token_of(root), up.proc)
    if way[0] == "mcp":
        session = srv.initialize()
        assert mcp_far(srv, session, way[1], way[2]) == errors.DEADLINE_EXCEEDED
        wait_until(lambda: mcp_next(srv, session), timeout=WAIT, message="the slot of the overdue read back")
    else:
        assert rest_far(srv, way[1], way[2]) == errors.DEADLINE_EXCEEDED
        wait_until(lambda: rest_next(srv), timeout=WAIT, message="the slot of the overdue read back")
    assert "Traceback" not in up.stderr, up.stderr


# -- a sparse file in the tree ---------------------------------------------------------------


def sparse(path, head: bytes, size: int, tail: bytes = b"") -> None:
    """``head``, then a hole up to ``size`` less ``tail``, then ``tail``."""
    with open(path, "wb") as file:
        file.write(head)
        file.truncate(size - len(tail))
        file.seek(0, os.SEEK_END)
        file.write(tail)


def test_the_indexer_screens_a_sparse_file_for_what_it_stores_not_its_size(tmp_path, running):
    """A text file too large to index is screened whole for secrets. A
    sparse one of 1 TiB costs its writer a few bytes of disk, and the
    indexer screened its NULs for a quarter of an hour of CPU (each time it
    changed), while every other change waited. Its holes are now passed
    over; what is stored is still screened, a key past a hole included."""
    root = tmp_path / "corpus"
    write_corpus(root)
    lines = b"a line of the log\n" * 1000  # the head the classifier sniffs is text
    sparse(root / "huge.log", lines, 2**40)
    sparse(root / "keyed.log", lines, 2**36, tail=b"\n" + KEY)
    up = running("--dir", str(root), "--json")
    up.event("scan_progress", lambda data: data.get("running") is False, timeout=WAIT)
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    listed = srv.call(session, "dir2mcp.list_files", {"glob": "*.log"})["structuredContent"]["files"]
    assert [(f["rel_path"], f["status"]) for f in listed] == [("huge.log", "skipped")], listed
    head = srv.call(session, "dir2mcp.open_file", {"rel_path": "keyed.log", "start_line": 1, "end_line": 2})
    assert code_of(head) == errors.FORBIDDEN, head  # refused whole: the key past the hole was seen
