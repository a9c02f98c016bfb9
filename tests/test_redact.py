"""``security.secret_mode: redact`` (issue #32, item 6): a file that holds a
credential is indexed and served with each credential replaced by a marker
naming its rule, the rest of it searchable at its own line numbers.

The corpus is tests/test_secret_rules.py's positive corpus (every shape of
credential, as files and inside a zip, a tar.gz and a zip in a zip), built
at run time so no token-shaped literal sits here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corpus import documents, files, uris
from corpus.models import Chunk, Document, ReferenceName, Representation, Symbol
from corpus.navigation import outline, reads
from corpus.security import ExclusionEngine, ExclusionPolicy
from kernel import errors
from kernel.config import DEFAULT_SECRET_PATTERNS, build_config
from tests.test_secret_routes import (
    FRAGMENTS,
    call,
    fragment,
    rest,
    rpc,
    serving,
    state_traces,
    write_tree,
)
from tests.test_secret_rules import (
    ARCHIVES,
    CONTENT_SECRETS,
    EXCLUDED_NAMES,
    HARMLESS,
    TOKEN_NAMES,
    content_paths,
    pem,
    positive_corpus,
    rand,
)

REDACT = {"security": {"secret_mode": "redact"}}
ENGINE = ExclusionEngine(
    Path("/nonexistent"), ExclusionPolicy((), tuple(DEFAULT_SECRET_PATTERNS), secret_mode="redact")
)

# A note and a module with credentials in their middle, and text after them
# whose line numbers must stay the file's own.
KEY = pem("RSA")
TOKEN = f"ghp_{rand(36)}"
NOTE = (
    "# Deploy runbook\n\nThe service key, for the record:\n\n"
    f"{KEY}\nAfter the key comes the zebracrossing procedure.\n"
)
NOTE_LINE = NOTE.splitlines().index("After the key comes the zebracrossing procedure.") + 1
MODULE = (
    f'"""Deploy client."""\n\nGITHUB = "{TOKEN}"\n\n\n'
    + "def rotate_quagga_credentials(client):\n    return client\n"
)
MODULE_LINE = 6
PLANTED = {"ops/runbook.md": NOTE, "ops/deploy.py": MODULE}
PLANTED_SECRETS = [KEY, TOKEN]


def windows(secret: str, width: int = 16) -> list[str]:
    """Every piece of ``secret`` of ``width`` characters: none may come back."""
    secret = secret.strip()
    return [secret[i : i + width] for i in range(max(1, len(secret) - width + 1))]


def leaks(text: str, secrets) -> list[str]:
    return [piece for secret in secrets for piece in windows(secret) if piece in text]


# -- the redaction itself ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CONTENT_SECRETS))
def test_each_kind_is_replaced_by_a_marker_naming_its_rule(name):
    _, text, secret = CONTENT_SECRETS[name]
    redacted = ENGINE.redact(text)
    assert redacted is not None and redacted.count >= 1 and redacted.rules
    assert leaks(redacted.text, [secret]) == []
    assert all(f"[REDACTED:{rule}]" in redacted.text for rule in redacted.rules)
    assert redacted.text.count("\n") == text.count("\n")
    assert ENGINE.find_secret(redacted.text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("id AKIA" + "Q" * 16 + " here\n", "id [REDACTED:aws-access-key] here\n", id="aws"),
        pytest.param(
            'DATABASE_URL = "postgres://app:Xy7kPq2mZr@db/app"\n',
            'DATABASE_URL = "postgres://app:[REDACTED:connection-string-password]@db/app"\n',
            id="the user stays",
        ),
        pytest.param(
            "AccountName=a;AccountKey=" + "Ab1+" * 22 + "==;EndpointSuffix=x\n",
            "AccountName=a;AccountKey=[REDACTED:azure-sendgrid-key];EndpointSuffix=x\n",
            id="the label stays, the whole 88-character key goes",
        ),
        pytest.param(
            'DB_PASSWORD = "Zq8!rT5mWx2#Lp9k"\n',
            'DB_PASSWORD = "[REDACTED:password-assignment]"\n',
            id="the assigned value",
        ),
    ],
)
def test_the_marker_replaces_the_credential_and_only_it(text, expected):
    assert ENGINE.redact(text).text == expected


def test_a_multi_line_key_keeps_its_lines():
    redacted = ENGINE.redact(NOTE).text
    lines = redacted.split("\n")
    assert len(lines) == len(NOTE.split("\n"))
    assert lines[NOTE_LINE - 1] == "After the key comes the zebracrossing procedure."
    assert lines[4] == "[REDACTED:private-key]"
    assert leaks(redacted, [KEY]) == []


def test_offsets_are_characters_in_text_that_is_not_ascii():
    text = "é\udcff ключ AKIA" + "Z" * 16 + " ü\n"
    assert ENGINE.redact(text).text == "é\udcff ключ [REDACTED:aws-access-key] ü\n"


def test_text_without_a_credential_comes_back_as_it_is():
    for text in HARMLESS.values():
        redacted = ENGINE.redact(text)
        assert (redacted.text, redacted.count, redacted.rules) == (text, 0, ())


def test_a_users_rule_is_named_by_its_index_and_its_secret_group_is_what_goes():
    engine = ExclusionEngine(Path("/nonexistent"), ExclusionPolicy((), ("corp-(?P<secret>[0-9a-f]{12})",)))
    assert engine.redact("id corp-0123456789ab.\n").text == "id corp-[REDACTED:rule-0].\n"


def test_text_a_marker_cannot_make_clean_is_not_redacted():
    engine = ExclusionEngine(Path("/nonexistent"), ExclusionPolicy((), (r"REDACTED",)))
    assert engine.redact("REDACTED\n") is None


# -- indexing and reading in process ----------------------------------------------------------


def _engine(corpus_dir: Path, state, config) -> ExclusionEngine:
    return ExclusionEngine.from_config(corpus_dir, config, state_dir=state.path)


@pytest.fixture
def redacted_index(corpus_dir: Path, state, index, monkeypatch):
    """The positive corpus and the planted files, indexed in redact mode."""
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    config = build_config(REDACT, {}, {})
    index(positive_corpus() | PLANTED, config=config)
    return _engine(corpus_dir, state, config)


@pytest.mark.django_db
def test_every_kind_is_indexed_redacted_in_files_and_archives(redacted_index):
    secrets = [secret for _, _, secret in CONTENT_SECRETS.values()] + PLANTED_SECRETS
    stored = [
        *Representation.objects.values_list("text", flat=True),
        *(chunk.text for chunk in Chunk.objects.select_related("representation")),
        *Symbol.objects.values_list("name", flat=True),
        *ReferenceName.objects.values_list("name", flat=True),
    ]
    assert leaks("\n".join(stored), secrets) == []
    served = []
    for rel, _ in content_paths():
        doc = Document.objects.get(rel_path=rel, deleted=False)
        assert doc.status == "ok", (rel, doc.error)
        rep = Representation.objects.get(document=doc, deleted=False)
        assert rep.meta_json["redacted"]["count"] >= 1
        content = files.open_file(redacted_index, rel_path=rel)["content"]
        assert "[REDACTED:" in content, rel
        served.append(content)
    assert leaks("\n".join(served), secrets) == []
    assert len(served) == (1 + len(ARCHIVES)) * len(CONTENT_SECRETS)


@pytest.mark.django_db
def test_names_that_are_credentials_stay_excluded(redacted_index):
    for rel in [*EXCLUDED_NAMES, *TOKEN_NAMES]:
        assert not Document.objects.filter(rel_path=rel, deleted=False).exists()
        with pytest.raises(errors.Dir2mcpError) as refused:
            files.open_file(redacted_index, rel_path=rel)
        assert refused.value.code == errors.FORBIDDEN


@pytest.mark.django_db
def test_the_rest_of_the_file_is_found_at_its_own_lines(redacted_index):
    engine = redacted_index
    found = files.find(engine, content="zebracrossing")["matches"]
    assert [(m["rel_path"], m["span"]["start_line"]) for m in found] == [("ops/runbook.md", NOTE_LINE)]
    opened = files.open_file(engine, rel_path="ops/runbook.md", start_line=NOTE_LINE, end_line=NOTE_LINE)
    assert opened["content"] == "After the key comes the zebracrossing procedure."
    symbol = Symbol.objects.get(name="rotate_quagga_credentials")
    assert (symbol.start, symbol.document.rel_path) == (MODULE_LINE, "ops/deploy.py")
    module = files.open_file(engine, rel_path="ops/deploy.py")["content"]
    assert 'GITHUB = "[REDACTED:github-token]"' in module
    assert module.count("\n") == MODULE.count("\n") - 1  # open_file joins lines without the last newline


@pytest.mark.django_db
def test_every_read_path_serves_the_redacted_text(redacted_index):
    engine, secrets = redacted_index, PLANTED_SECRETS
    answers = [
        json.dumps(outline.outline(engine, "ops/deploy.py").__dict__, default=str),
        json.dumps(reads.diff(engine, "ops/runbook.md", "ops/deploy.py")),
        documents.read_whole(engine, "ops/runbook.md").text,
        files.read_document(engine, "ops/deploy.py", max_chars=100_000).lines,
    ]
    assert all(answers) and leaks("\n".join(answers), secrets) == []
    assert "[REDACTED:private-key]" in answers[2]


@pytest.mark.django_db
def test_a_checksum_of_a_redacted_file_is_refused(redacted_index):
    with pytest.raises(errors.Dir2mcpError) as refused:
        reads.checksum(redacted_index, "ops/deploy.py")
    assert refused.value.code == errors.FORBIDDEN
    assert reads.checksum(redacted_index, "docs/keys.md")["digest"]  # a file without one is hashed


@pytest.mark.django_db
def test_a_file_given_a_credential_after_indexing_is_read_redacted(corpus_dir, state, index):
    config = build_config(REDACT, {}, {})
    index({"notes/plain.md": "# Plain\n\nnothing here\n"}, config=config)
    (corpus_dir / "notes/plain.md").write_text(f"# Plain\n\nGITHUB = {TOKEN}\nnothing here\n")
    content = files.open_file(_engine(corpus_dir, state, config), rel_path="notes/plain.md")["content"]
    assert content == "# Plain\n\nGITHUB = [REDACTED:github-token]\nnothing here"
    with pytest.raises(errors.Dir2mcpError):  # exclude mode refuses the same read
        files.open_file(_engine(corpus_dir, state, build_config({}, {}, {})), rel_path="notes/plain.md")


@pytest.mark.django_db
def test_flipping_the_mode_reindexes_the_files_that_hold_credentials_and_only_them(corpus_dir, state, index):
    exclude, redact = build_config({}, {}, {}), build_config(REDACT, {}, {})
    tree = PLANTED | {f"clean/{n}.md": f"# Clean {n}\n\nordinary text\n" for n in range(5)}
    first = index(tree, config=exclude)
    assert (first.indexed, first.skipped) == (5, 2)

    flipped = index(config=redact)
    assert (flipped.indexed, flipped.unchanged) == (2, 5)
    assert files.find(_engine(corpus_dir, state, redact), content="zebracrossing")["matches"]

    back = index(config=exclude)
    assert (back.skipped, back.unchanged) == (2, 5)
    doc = Document.objects.get(rel_path="ops/runbook.md")
    assert doc.status == "skipped" and doc.error_code == errors.SECRET_DETECTED
    assert not Chunk.objects.filter(representation__document=doc, deleted=False).exists()
    assert files.find(_engine(corpus_dir, state, exclude), content="zebracrossing")["matches"] == []
    with pytest.raises(errors.Dir2mcpError) as refused:
        files.open_file(_engine(corpus_dir, state, exclude), rel_path="ops/runbook.md")
    assert refused.value.code == errors.FORBIDDEN

    assert index(config=exclude).unchanged == 7  # settled: nothing read again


# -- a real server ---------------------------------------------------------------------------------

ALL_FRAGMENTS = FRAGMENTS + [fragment(secret) for secret in PLANTED_SECRETS]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_tree(root, positive_corpus() | PLANTED)
    yield from serving(root, ALL_FRAGMENTS, env={"DIR2MCP_SECURITY__SECRET_MODE": "redact"})


def _leaked(text: str) -> list[str]:
    return [piece for piece in ALL_FRAGMENTS if piece in text]


def test_the_state_directory_holds_no_trace_of_any_secret(server):
    assert state_traces(server.root, ALL_FRAGMENTS) == {}
    assert (server.root / ".dir2mcp" / "meta.sqlite").stat().st_size > 0


def test_search_finds_the_rest_of_a_redacted_file_at_its_own_lines(server):
    hits = call(server, "dir2mcp.search", {"query": "zebracrossing procedure", "k": 5})["structuredContent"]
    top = hits["hits"][0]
    assert top["rel_path"] == "ops/runbook.md"
    assert top["span"]["start_line"] <= NOTE_LINE <= top["span"]["end_line"]
    found = rest(server, "/symbols", {"name": "rotate_quagga_credentials"}).json()
    assert [(s["rel_path"], s["span"]["start_line"]) for s in found["symbols"]] == [
        ("ops/deploy.py", MODULE_LINE)
    ]


def test_no_tool_or_route_returns_a_secret(server):
    answers: list[str] = []
    paths = [rel for rel, _ in content_paths()] + list(PLANTED)
    for rel in paths:
        opened = call(server, "dir2mcp.open_file", {"rel_path": rel})
        assert not opened.get("isError"), (rel, opened)
        assert "[REDACTED:" in opened["structuredContent"]["content"], rel
        answers += [json.dumps(opened), rest(server, "/files/slice", {"rel_path": rel}).text]
        answers.append(json.dumps(rpc(server, "resources/read", {"uri": uris.file_uri(rel)})))
    singles = [rel for rel in paths if "!/" not in rel]
    for rel in singles:
        for name, args in [
            ("dir2mcp.outline", {"rel_path": rel}),
            ("dir2mcp.checksum", {"rel_path": rel}),
            ("dir2mcp.diff", {"rel_path_a": rel, "rel_path_b": "ops/runbook.md"}),
            ("dir2mcp.verify", {"text": f"See [{rel}:L1-L3]."}),
        ]:
            answers.append(json.dumps(call(server, name, args)))
        answers.append(
            json.dumps(rpc(server, "prompts/get", {"name": "explain", "arguments": {"path": rel}}))
        )
        answers.append(rest(server, "/files/outline", {"rel_path": rel}).text)
    checksum = call(server, "dir2mcp.checksum", {"rel_path": "ops/deploy.py"})
    assert checksum["structuredContent"]["error"]["code"] == "FORBIDDEN"
    for start in range(0, len(paths), 20):
        slices = [{"rel_path": rel} for rel in paths[start : start + 20]]
        answers.append(json.dumps(call(server, "dir2mcp.open_files", {"slices": slices})))
    queries = ["DATABASE_URL", "client-key-data", "AccountKey", "POSTGRES_PASSWORD", "Authorization Basic"]
    queries += ["REDIS_AUTH", "SendGridAPIClient", "GH_AUTH", "private key", "REDACTED", "GITHUB"]
    for query in queries:
        answers.append(json.dumps(call(server, "dir2mcp.search", {"query": query, "k": 50})))
        answers.append(json.dumps(call(server, "dir2mcp.ask", {"question": query, "k": 20})))
        answers.append(rest(server, "/search", {"query": query, "k": 50}).text)
        answers.append(json.dumps(call(server, "dir2mcp.search", {"query": query, "max_tokens": 4000})))
        answers.append(json.dumps(call(server, "dir2mcp.symbols", {"name": query})))
        answers.append(json.dumps(call(server, "dir2mcp.references", {"name": query})))
    for piece in ALL_FRAGMENTS:
        answers.append(json.dumps(call(server, "dir2mcp.find", {"content": piece})))
    answers.append(json.dumps(call(server, "dir2mcp.find", {"content": "REDACTED", "limit": 200})))
    answers.append(json.dumps(call(server, "dir2mcp.list_files", {"limit": 5000})))
    answers.append(rest(server, "/resources", {}).text)
    answers.append(
        json.dumps(rpc(server, "prompts/get", {"name": "changes", "arguments": {"since": "2000"}}))
    )
    params = {
        "ref": {"type": "ref/resource", "uri": uris.FILE_TEMPLATE},
        "argument": {"name": "path", "value": ""},
    }
    answers.append(json.dumps(rpc(server, "completion/complete", params)))
    assert _leaked("\n".join(answers)) == []
