"""Hunt of 2026-11-30, session 31: a hostile client and hostile files in
the indexed tree against a live ``up``; see docs/security.md, "Hunt,
2026-11-30 (session 31)". Each test shows a probe that answered otherwise
before its fix.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12

from corpus.security import ExclusionEngine, ExclusionPolicy
from kernel.config import DEFAULT_PATH_EXCLUDES
from tests.mcp_http import Server, write_corpus
from tests.support import zip_bytes
from tests.test_archive_limits import tar
from tests.test_hostile_clients import WAIT, token_of
from tests.test_hostile_session27 import rpc


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_files() -> dict[str, bytes]:
    """Credential files named as a Windows tool or a person spells them:
    what the default excludes name in lower case. The key stores are DER
    (binary: no text pattern sees a key in them)."""
    key = _key()
    der = key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    bundle = pkcs12.serialize_key_and_certificates(b"x", key, None, None, serialization.NoEncryption())
    return {
        "keys/CERT.PFX": bundle,
        "keys/SERVER.KEY": der,
        "keys/Backup.P12": bundle,
        ".NPMRC": b"//registry.npmjs.org/:_authToken=0f3c2b9e-6a1d-4e8f-9b7a-2c5d8e1f4a6b\n",
        ".Netrc": b"machine example.com login deploy password hunter2-deploy\n",
        "deploy/Production.ENV": b"DB_PASSWORD=hunter2-production\n",
    }


@pytest.mark.parametrize(
    ("rel_path", "excluded_by"),
    [
        pytest.param("keys/CERT.PFX", "**/*.pfx", id="pfx-upper"),
        pytest.param("keys/server.Key", "**/*.key", id="key-mixed"),
        pytest.param(".NPMRC", "**/.npmrc", id="npmrc-upper"),
        pytest.param("home/.AWS/credentials", "**/.aws/credentials", id="aws-dir-upper"),
        pytest.param(".ENV", "**/.env", id="env-upper"),
        pytest.param(".Env.Production", "**/.env.*", id="env-stage-mixed"),
        pytest.param("keys/ID_ED25519", "**/id_ed25519", id="ssh-key-upper"),
        pytest.param("src/.GIT/config", "**/.git/**", id="git-dir-upper"),
        pytest.param("a.zip!/conf/.NETRC", "**/.netrc", id="archive-member-upper"),
        pytest.param("secret.\u212aEY", "**/*.key", id="kelvin-sign"),
    ],
)
def test_a_default_exclude_holds_whatever_the_case_of_the_name(tmp_path: Path, rel_path, excluded_by) -> None:
    """The default excludes were matched case-sensitively: ``CERT.PFX``,
    ``.NPMRC`` or ``.AWS/credentials`` passed every rule, so a key store
    named by a Windows tool was indexed, listed and served, and on a
    case-insensitive file system (macOS, Windows, a casefolded ext4
    directory) asking for ``.NPMRC`` opened ``.npmrc`` past its rule.
    A rule is judged without case now; the reason names it as written."""
    engine = ExclusionEngine(tmp_path, ExclusionPolicy(tuple(DEFAULT_PATH_EXCLUDES), ()))
    assert engine.excluded_reason(rel_path) == f"path_excludes: {excluded_by}"  # before: None


def test_a_negation_and_a_users_rule_are_judged_without_case_too(tmp_path: Path) -> None:
    rules = (*DEFAULT_PATH_EXCLUDES, "**/Private/**")
    engine = ExclusionEngine(tmp_path, ExclusionPolicy(rules, ()))
    assert engine.excluded_reason("config/Example.ENV") is None  # "!**/example.env" re-includes it
    assert engine.excluded_reason("docs/private/notes.md") == "path_excludes: **/Private/**"
    assert engine.excluded_reason("docs/readme.md") is None  # the control


def _names_any(text: str, names: list[str]) -> list[str]:
    return [name for name in names if name in text]


@pytest.mark.slow
def test_credential_files_named_in_another_case_are_served_nowhere(tmp_path: Path, running) -> None:
    """On a live ``up``: a PKCS#12 bundle named ``CERT.PFX``, a DER private
    key named ``SERVER.KEY``, an npm token in ``.NPMRC``, a password in
    ``.Netrc`` and ``Production.ENV`` were listed by ``list_files`` and
    served whole by ``read_bytes`` (MCP and the REST mirror), where their
    lower-case names are excluded. Now they are refused and never listed."""
    root = tmp_path / "corpus"
    write_corpus(root)
    hostile = key_files()
    for rel, data in hostile.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "keys" / "readme.txt").write_text("how the keys are rotated\n")
    up = running("--dir", str(root), "--json")
    up.event("scan_progress", lambda data: data.get("running") is False)
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    auth = {"Authorization": f"Bearer {srv.token}"}

    def rest(route: str, params: dict) -> httpx.Response:
        return httpx.get(srv.base + route, params=params, headers=auth, timeout=WAIT)

    names = list(hostile)
    listed = json.dumps(srv.call(session, "dir2mcp.list_files", {"glob": "**", "limit": 500}))
    rest_listed = rest("/api/v1/files", {"limit": 500}).text
    assert _names_any(listed, names) == [] and _names_any(rest_listed, names) == []  # before: all six
    assert "keys/readme.txt" in listed and "keys/readme.txt" in rest_listed  # the control
    for rel in names:
        answer = srv.call(session, "dir2mcp.read_bytes", {"rel_path": rel})
        assert answer.get("isError") and "FORBIDDEN" in json.dumps(answer), (rel, answer)  # before: the bytes
        refused = rest("/api/v1/files/bytes", {"rel_path": rel})
        assert refused.status_code == 403, (rel, refused.status_code, refused.text[:200])  # before: 200
    control = srv.call(session, "dir2mcp.read_bytes", {"rel_path": "keys/readme.txt"})
    assert not control.get("isError"), control
    assert "Traceback" not in up.stderr, up.stderr


ENV = {".env": b"DB_PASSWORD=hunter2-packed\n", "readme.txt": b"what the bundle holds\n"}
#: archives under names of other kinds, each holding a file the rules exclude by name
DISGUISED = {
    "docs/bundle.txt": zip_bytes(ENV, zipfile.ZIP_DEFLATED),
    "img/photo.png": tar(ENV, "w:gz"),
    "backup.bin": tar(ENV),
    "memo.docx": zip_bytes(
        {"word/document.xml": b"<w:document/>", "conf/.npmrc": b"_authToken=0f3c2b9e\n"}, zipfile.ZIP_DEFLATED
    ),
}
PNG = b"\x89PNG\r\n\x1a\n" + bytes(200)


@pytest.mark.slow
def test_an_archive_under_another_name_is_never_served_as_bytes(tmp_path: Path, running) -> None:
    """Archives' bytes are refused (their members are judged by name, and
    come out unpacked): but the refusal went by the name's kind. A zip
    named ``bundle.txt``, a ``.tar.gz`` named ``photo.png`` and a tar named
    ``backup.bin``, each holding a ``.env``, were served whole by
    ``read_bytes`` and a whole ``resources/read``, and ``checksum`` answered
    for them; a ``.docx`` (a zip document, whose parts are screened for
    secret patterns) carrying an ``.npmrc`` part too. Now the bytes decide,
    and a zip document's parts are judged by name as well."""
    root = tmp_path / "corpus"
    write_corpus(root)
    for rel, data in {**DISGUISED, "img/real.png": PNG}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    up = running("--dir", str(root), "--json")
    up.event("scan_progress", lambda data: data.get("running") is False)
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    for rel in DISGUISED:
        for tool in ("dir2mcp.read_bytes", "dir2mcp.checksum"):
            answer = srv.call(session, tool, {"rel_path": rel})
            assert answer.get("isError") and "FORBIDDEN" in json.dumps(answer), (rel, tool, answer)
        whole = rpc(srv, "resources/read", {"uri": f"dir2mcp:///{rel}"})
        assert "error" in whole and "FORBIDDEN" in json.dumps(whole), (rel, whole)  # before: its bytes
    served = srv.call(session, "dir2mcp.read_bytes", {"rel_path": "img/real.png", "format": "base64"})
    assert not served.get("isError"), served  # the control: an image is served
    assert "Traceback" not in up.stderr, up.stderr
