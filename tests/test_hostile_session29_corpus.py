"""Hostile round of 2026-11-30, session 29: the corpus surfaces (completions,
search's ``match``, navigation, ``find``, reads, prompts); see
docs/security.md, "Hostile round, 2026-11-30 (session 29): the corpus
surfaces". Each test shows a probe that answered otherwise before its fix.
A file excluded since the index was written (a ``.gitignore`` line, as
under ``up --no-index``) must not be named, counted or probed.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from corpus import files, uris
from corpus.ingest.indexing import index_directory
from corpus.models import Chunk
from corpus.providers.registry import make_embedder
from corpus.retrieval import Searcher
from kernel.config import DEFAULT_SECRET_PATTERNS, build_config
from kernel.jsontypes import JsonObject
from kernel.state import StateDir
from mcp_gateway import completion, context
from mcp_gateway.context import Context
from tests.mcp_http import Server, write_corpus
from tests.test_cli import cli
from tests.test_dispatch import call
from tests.test_hostile_clients import WAIT, token_of
from tests.test_hostile_session27 import rpc
from tests.test_office import make_xlsx
from tests.test_review26 import indexed
from tests.test_stdio import Raw, command

CONFIG = {"embed": {"provider": "none"}, "chat": {"provider": "none"}}


def built(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]
) -> Context:
    """``files`` written and indexed; the completion tables this index's."""
    for rel, text in files.items():
        (corpus_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus_dir / rel).write_text(text)
    config = build_config(CONFIG, {}, {})
    index_directory(corpus_dir, state=state, config=config)
    monkeypatch.setattr(completion, "PATHS", completion.Cached(completion.build_paths))
    monkeypatch.setattr(completion, "SYMBOLS", completion.Cached(completion.build_symbols))
    return context.build(root=corpus_dir, state=state, config=config, auth_spec="none")


def completed(ctx: Context, name: str, value: str) -> JsonObject:
    params = {"ref": {"type": "ref/prompt", "name": "explain"}, "argument": {"name": name, "value": value}}
    got = completion.complete(ctx, params)["completion"]
    assert isinstance(got, dict)
    return got


# -- completions -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_name_a_readable_fifth_file_defines_is_offered(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The symbol table kept, for each name, the first four files defining
    it (``FILES_PER_NAME``): with those four excluded now, a name a fifth,
    readable file defines was not offered (left open by session 26). Every
    defining file is kept now, judged in turn until one passes."""
    files = {f"src/m{n}.py": "def shared_handler(value):\n    return value\n" for n in range(8)}
    ctx = built(corpus_dir, state, monkeypatch, files)
    units = Chunk.objects.order_by("chunk_id").values_list("representation__document__rel_path", flat=True)
    *excluded, _readable = dict.fromkeys(units)  # the files in the order the table reads them
    assert len(excluded) == 7, excluded
    (corpus_dir / ".gitignore").write_text("".join(f"{rel}\n" for rel in excluded))
    got = completed(ctx, "symbol", "shared_")
    assert got == {"values": ["shared_handler"], "total": 1, "hasMore": False}, got  # before: no value
    (corpus_dir / ".gitignore").write_text("src/\n")
    monkeypatch.setattr(completion, "SYMBOLS", completion.Cached(completion.build_symbols))  # verdicts anew
    assert completed(ctx, "symbol", "shared_") == {"values": [], "total": 0, "hasMore": False}


@pytest.mark.django_db
def test_a_path_completion_names_no_folder_only_excluded_files_occupy(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path completion offered each folder entry the index's files made,
    judging the folder alone: ``keys/``, whose two files a ``*.secret`` line
    excludes now, was offered (its name, and that indexed files lie there);
    and ``certs/``, holding one readable file and one excluded, was offered
    as a folder where a folder of one file completes straight to it (a
    count of the excluded file). A folder is offered now while a file
    under it passes, and as that file when it is the only one that does."""
    files = {
        "keys/a.secret": "alpha\n",
        "keys/b.secret": "beta\n",
        "certs/public.txt": "public\n",
        "certs/private.secret": "private\n",
        "docs/one.txt": "one\n",
        "docs/two.txt": "two\n",
    }
    ctx = built(corpus_dir, state, monkeypatch, files)
    assert completed(ctx, "path", "")["values"] == ["certs/", "docs/", "keys/"]
    (corpus_dir / ".gitignore").write_text("*.secret\n")
    monkeypatch.setattr(completion, "PATHS", completion.Cached(completion.build_paths))  # verdicts anew
    got = completed(ctx, "path", "")
    # before: ["certs/", "docs/", "keys/"]
    assert got == {"values": ["certs/public.txt", "docs/"], "total": 2, "hasMore": False}, got
    assert completed(ctx, "path", "k") == {"values": [], "total": 0, "hasMore": False}
    assert completed(ctx, "path", "keys/")["values"] == []


#: generated code defining five names ``zz_`` begins
GENERATED = "".join(f"def zz_{c}(x):\n    return x\n\n" for c in "abcde")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("files", "name", "typed", "offered"),
    [
        pytest.param(
            {**{f"gen/out{n}.txt": "built\n" for n in range(4)}, "src/main.py": "x = 1\n"},
            "path",
            "",
            "src/main.py",
            id="a folder excluded whole",
        ),
        pytest.param(
            {"gen/api.py": GENERATED, "src/zz_tail.py": "def zz_ok(x):\n    return x\n"},
            "symbol",
            "zz_",
            "zz_ok",
            id="one file defining many names",
        ),
    ],
)
def test_an_excluded_folder_or_file_counts_once_towards_the_bound(
    corpus_dir: Path,
    state: StateDir,
    monkeypatch: pytest.MonkeyPatch,
    files: dict[str, str],
    name: str,
    typed: str,
    offered: str,
) -> None:
    """An answer stops past ``PASSED_OVER`` excluded files (lowered to 2
    here). A first version counted each refusal: a folder the rules exclude
    whole (``gen/``, 4 files) cost one a file, and one ignored file of
    generated code one for each name of the range it defines, so either
    stopped the answer before the readable values after it. A folder is
    now judged as a folder first, and a file counts once."""
    ctx = built(corpus_dir, state, monkeypatch, files)
    monkeypatch.setattr(completion, "PASSED_OVER", 2)
    (corpus_dir / ".gitignore").write_text("gen/\n")
    assert completed(ctx, name, typed) == {"values": [offered], "total": 1, "hasMore": False}


@pytest.mark.django_db
def test_a_total_is_given_whenever_the_readable_values_are_few_enough(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer gave a total only when the range, excluded values included,
    held at most ``JUDGED`` values: ``JUDGED`` readable names and one only
    an excluded file defines answered no total where ``JUDGED`` readable
    names alone answered ``total: JUDGED``, so whether a total came told
    of an excluded name in the range (narrowing the prefix, its first
    characters). The total now counts readable values alone, whatever the
    excluded ones."""
    ctx = indexed(corpus_dir, state, monkeypatch, completion.JUDGED)
    for name, value in (("symbol", "handler_"), ("path", "src/")):
        got = completed(ctx, name, value)
        assert got.get("total") == completion.JUDGED, (name, got.get("total"))  # before: no total
        assert len(got["values"]) == completion.MAX_VALUES


# -- search's match past excluded full matches ---------------------------------------------------

#: all four words of the long query, in every unit holding them
WORDS = "walrus tusk blubber floe"


@pytest.mark.django_db
def test_a_readable_full_match_past_the_excluded_ones_is_seen(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query of more than ``search.all_terms_first_max`` terms takes its
    full matches from the first ``limit`` units holding every term, in the
    order they are stored, and keeps the readable ones: with more than
    ``limit`` units of excluded files first, a readable full match past them
    was not seen (so ``match`` could say weak; left open by session 28).
    Pages of units outside the files passed over are read now."""
    limit = 50  # search.candidates at its least (the largest k)
    files = {f"private/p{n:03}.txt": f"Log {n}: {WORDS}.\n" for n in range(limit + 10)}
    files["zz/zoo.txt"] = f"Zoo: {WORDS}.\n"
    ctx = built(corpus_dir, state, monkeypatch, files)
    config = build_config({**CONFIG, "search": {"candidates": limit}}, {}, {})
    ctx = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    units = Chunk.objects.order_by("chunk_id").values_list("representation__document__rel_path", flat=True)
    assert list(units)[-1] == "zz/zoo.txt"  # stored after every excluded unit
    (corpus_dir / ".gitignore").write_text("private/\n")
    full = ctx.searcher.ranked(WORDS).full_matches
    assert [Chunk.objects.get(chunk_id=cid).representation.document.rel_path for cid in full] == [
        "zz/zoo.txt"
    ]
    # the control: nothing readable holds them all
    (corpus_dir / ".gitignore").write_text("private/\nzz/\n")
    assert ctx.searcher.ranked(WORDS).full_matches == ()


@pytest.mark.django_db
def test_readable_hits_ranked_below_many_excluded_units_are_found(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lexical ranking reads the first ``search.candidates`` units and
    leaves out those of files excluded now: with more than that many of
    them ranked first, no readable hit was left (``walrus floe`` found
    nothing, and ``match`` rested on nothing), and whether one came told
    how the excluded units ranked. It reads deeper now, up to
    ``CROWDED_DEPTH`` pools."""
    limit = 50
    files = {f"private/p{n:03}.txt": "walrus floe\n" for n in range(limit + 10)}
    files["zz/zoo.txt"] = "walrus floe " + "and many other words about the zoo keepers " * 20 + "\n"
    built(corpus_dir, state, monkeypatch, files)
    config = build_config({**CONFIG, "search": {"candidates": limit}}, {}, {})
    ctx = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    ranked = [hit.rel_path for hit in ctx.searcher.search("walrus floe", k=limit).hits]
    assert "zz/zoo.txt" not in ranked and len(ranked) == limit  # it ranks below them all
    (corpus_dir / ".gitignore").write_text("private/\n")
    assert [hit.rel_path for hit in ctx.searcher.search("walrus floe", k=10).hits] == [
        "zz/zoo.txt"
    ]  # before: []


@pytest.mark.django_db
def test_a_dense_ranking_reads_past_the_excluded_units_nearest_the_query(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch, fake_mistral
) -> None:
    """A dense ranking read the ``search.candidates`` nearest units and then
    left out those of files excluded now: with that many of them nearer
    than every readable unit, the ranking held none (``match``'s best
    readable cosine unseen), and a readable unit was in it or not as
    excluded ones were nearer or not. It reads deeper now, as the lexical
    ranking does. The fake Mistral's vectors are random (by text), so the
    readable file is the one its vectors rank last."""
    limit = 50
    files = {f"notes/n{n:03}.txt": f"Field note {n}: the tide came in at dusk.\n" for n in range(limit + 11)}
    for rel, text in files.items():
        (corpus_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus_dir / rel).write_text(text)
    sections = {"mistral": {"base_url": fake_mistral.url}, "embed": {"provider": "mistral"}}
    config = build_config({**CONFIG, **sections, "search": {"candidates": limit}}, {}, {})
    embedder = make_embedder(config, secrets_lookup=lambda name: fake_mistral.API_KEY)
    index_directory(corpus_dir, state=state, config=config, embedder=embedder)
    engine = context.build(root=corpus_dir, state=state, config=config, auth_spec="none").engine

    def nearest() -> list[str]:
        searcher = Searcher(state, config, embedder, readable=lambda rel: engine.excluded_reason(rel) is None)
        (cosines,) = searcher.ranked("tide at dusk", index="text").cosines
        paths = Chunk.objects.filter(chunk_id__in=[cid for cid, _ in cosines])
        by_id = dict(paths.values_list("chunk_id", "representation__document__rel_path"))
        return [by_id[cid] for cid, _ in cosines]

    ranked = nearest()
    assert len(ranked) == limit
    last = next(rel for rel in sorted(files) if rel not in ranked)  # nearer than none of the first 50
    (corpus_dir / ".gitignore").write_text("".join(f"{rel}\n" for rel in files if rel != last))
    assert nearest() == [last]  # before: []


# -- find: a regex looking past the screened window -------------------------------------------------

#: a credential of a shape the rules learn only after the file was indexed
CREDENTIAL = "MYCO-KEY-q7w8e9r0t1y2u3i4"
#: a line the probes anchor on, far enough from it that the screen around a match never reaches it
FILE_WITH_KEY = "anchor line\n" + "filler text for the distance\n" * 40 + f"key = {CREDENTIAL}\n"


@pytest.mark.django_db
def test_a_regex_cannot_look_past_its_screened_window_at_a_credential(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``find`` screens the text around each match (the match and 256
    characters either side) before quoting it, but a regex's lookaround
    (and ``\\K``) reads text outside the match: with a secret pattern added
    since the file was indexed (so its stored text holds what is a
    credential now, as under ``up --no-index``), ``anchor(?=[\\s\\S]{1200}…)``
    matched at the anchor, 1,200 characters from the credential, for its
    true first characters and not for others: the credential spelled out a
    character at a time. A regex now finds nothing in a text that holds a
    credential under the rules as they are now."""
    ctx = built(corpus_dir, state, monkeypatch, {"notes/keys.txt": FILE_WITH_KEY})
    patterns = [*DEFAULT_SECRET_PATTERNS, "MYCO-KEY-[a-z0-9]{16}"]
    config = build_config({**CONFIG, "security": {"secret_patterns": patterns}}, {}, {})
    engine = context.build(root=corpus_dir, state=state, config=config, auth_spec="none").engine
    assert engine.find_secret(FILE_WITH_KEY) is not None  # a credential under the rules now

    def probe(guess: str) -> int:
        distance = FILE_WITH_KEY.index(CREDENTIAL) - len("anchor")
        pattern = f"anchor(?=[\\s\\S]{{{distance}}}{guess})"
        return len(files.find(engine, content=pattern, regex=True)["matches"])

    assert probe("MYCO-KEY-q") == probe("MYCO-KEY-z") == 0  # before: 1 and 0
    assert probe(r"MYCO-KEY-q\K") == 0
    # the control: under the rules it was indexed by, the file holds no credential and is found
    assert len(files.find(ctx.engine, content="anchor(?=[\\s\\S]{6}filler)", regex=True)["matches"]) == 1


USES_KEY = f'def login(key="{CREDENTIAL}"):\n    return connect("{CREDENTIAL}")\n'


@pytest.mark.django_db
def test_no_answer_quotes_a_credential_a_rule_added_since_indexing_names(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index was screened for credentials by the rules it was written
    under; under ``--no-index`` (or until the walk a rule's change starts
    ends) a secret pattern added since was applied by the reads alone:
    ``search``'s snippets and text (and so ``ask``'s passages), a
    reference's line and a definition's signature quoted the credential
    whole. Such units and hits are passed over now."""
    before = built(
        corpus_dir,
        state,
        monkeypatch,
        {"src/use.py": USES_KEY, "src/other.py": "def connect(x):\n    return x\n"},
    )
    patterns = [*DEFAULT_SECRET_PATTERNS, "MYCO-KEY-[a-z0-9]{16}"]
    config = build_config({**CONFIG, "security": {"secret_patterns": patterns}}, {}, {})
    now = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    asked = [
        ("dir2mcp.search", {"query": "login connect key"}),
        ("dir2mcp.references", {"name": "connect"}),
        ("dir2mcp.symbols", {"name": "login"}),
    ]
    for name, arguments in asked:
        assert CREDENTIAL in json.dumps(call(before, name, arguments)), name  # the control: the old rules
        answer = json.dumps(call(now, name, arguments))
        assert CREDENTIAL not in answer, (name, answer[:500])  # before: quoted in each
    # nor does match tell its words: the credential's last token against one held nowhere
    token = CREDENTIAL.rsplit("-", 1)[1]
    for query in (token, "zq9zq9zq9zq9zq9zq9"):
        found = call(now, "dir2mcp.search", {"query": query})["structuredContent"]
        assert (found["hits"], found["match"]) == ([], "weak"), query  # before: good for the token


# -- the same on a real ``up`` (MCP, REST) and ``mcp_stdio`` -------------------------------------


def path_values(reply: dict) -> list[str]:
    return reply["result"]["completion"]["values"]


#: what quoted the credential of ``USES_KEY`` before (tool, arguments; the REST routes take the same)
QUOTING = [
    ("dir2mcp.search", {"query": "login connect key"}),
    ("dir2mcp.references", {"name": "connect"}),
    ("dir2mcp.symbols", {"name": "login"}),
]
COMPLETE_PATH = {
    "ref": {"type": "ref/resource", "uri": uris.FILE_TEMPLATE},
    "argument": {"name": "path", "value": ""},
}


@pytest.mark.slow
def test_the_corpus_probes_on_every_transport(tmp_path: Path, running) -> None:
    """Under ``up --no-index`` and ``mcp_stdio --no-index``, over an index
    written before the rules changed: ``find``'s lookahead at a credential a
    secret pattern added since names (MCP, ``GET /api/v1/find``, stdio), and
    a path completion naming a folder only excluded files occupy (MCP,
    stdio), and the credential quoted by ``search``, ``references`` and
    ``symbols`` (MCP, REST, stdio). Before: the true guess matched and the
    false one did not, ``keys/`` was offered, and each quoted the credential."""
    root = tmp_path / "corpus"
    write_corpus(root)
    (root / "notes" / "keys.txt").parent.mkdir()
    (root / "notes" / "keys.txt").write_text(FILE_WITH_KEY)
    (root / "src" / "use.py").write_text(USES_KEY)
    for name in ("a", "b"):
        (root / "keys" / f"{name}.secret").parent.mkdir(exist_ok=True)
        (root / "keys" / f"{name}.secret").write_text(f"{name}\n")
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    patterns = [*DEFAULT_SECRET_PATTERNS, "MYCO-KEY-[a-z0-9]{16}"]
    (root / ".dir2mcp.yaml").write_text(json.dumps({"security": {"secret_patterns": patterns}}))
    (root / ".gitignore").write_text("*.secret\n")
    distance = FILE_WITH_KEY.index(CREDENTIAL) - len("anchor")
    guesses = [{"content": f"anchor(?=[\\s\\S]{{{distance}}}MYCO-KEY-{c})", "regex": True} for c in "qz"]
    up = running("--dir", str(root), "--json", "--no-index")
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    found = [len(srv.call(session, "dir2mcp.find", g)["structuredContent"]["matches"]) for g in guesses]
    auth = {"Authorization": f"Bearer {srv.token}"}
    for guess in guesses:
        rest = httpx.get(srv.base + "/api/v1/find", params=guess, headers=auth, timeout=WAIT)
        assert rest.status_code == 200, rest.text
        found.append(len(rest.json()["matches"]))
    offered = path_values(rpc(srv, "completion/complete", COMPLETE_PATH))
    quoted = [json.dumps(srv.call(session, name, arguments)) for name, arguments in QUOTING]
    for route, (_, arguments) in zip(("search", "references", "symbols"), QUOTING, strict=True):
        rest = httpx.get(f"{srv.base}/api/v1/{route}", params=arguments, headers=auth, timeout=WAIT)
        assert rest.status_code == 200, rest.text
        quoted.append(rest.text)
    stdio = Raw(command(root, "--no-index"))
    try:
        stdio.initialize()
        for n, guess in enumerate(guesses):
            found.append(len(stdio.call(f"find-{n}", "dir2mcp.find", guess)["structuredContent"]["matches"]))
        offered += path_values(stdio.request("complete", "completion/complete", COMPLETE_PATH))
        quoted += [json.dumps(stdio.call(f"q-{n}", *asked)) for n, asked in enumerate(QUOTING)]
        assert stdio.close() == 0
    finally:
        stdio.kill()
    assert found == [0] * 6, found  # before: [1, 0] on each transport
    assert [CREDENTIAL in text for text in quoted] == [False] * 9, quoted  # before: True for each
    assert "keys/" not in offered and offered.count("docs/guide.md") == 2, offered  # before: keys/ twice
    assert "Traceback" not in up.stderr, up.stderr


@pytest.mark.django_db
def test_a_definition_passed_over_for_a_credential_leaves_the_page_full(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``symbols`` passed over a definition whose signature holds a
    credential under the rules now after cutting the answer to ``limit``:
    with ``limit`` 1 it answered no definition and ``truncated`` true (no
    cursor to go on with), where a readable one came next, and the flag
    told of the one passed over. It now reads on past it."""
    built(
        corpus_dir,
        state,
        monkeypatch,
        {"src/a_use.py": USES_KEY, "src/b_clean.py": "def login(user):\n    return user\n"},
    )
    patterns = [*DEFAULT_SECRET_PATTERNS, "MYCO-KEY-[a-z0-9]{16}"]
    config = build_config({**CONFIG, "security": {"secret_patterns": patterns}}, {}, {})
    now = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    found = call(now, "dir2mcp.symbols", {"name": "login", "limit": 1})["structuredContent"]
    assert CREDENTIAL not in json.dumps(found)
    # before: [] and truncated true
    assert [hit["rel_path"] for hit in found["symbols"]] == ["src/b_clean.py"], found
    assert (found["count"], found["truncated"]) == (1, False)


@pytest.mark.django_db
def test_a_page_label_holding_a_credential_is_screened_with_the_text(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sheet's name is its units' label (``sheet '…'``), shown with every
    hit and citation, but only its first unit's text opens with it: a
    sheet named with what a rule added since indexing calls a credential
    was quoted by the hits of its later units, screened by their text
    alone. The label is screened with the text."""
    rows = [[f"row {n} of plain filler words for length"] for n in range(150)] + [["zebrafinch"]]
    (corpus_dir / "book.xlsx").write_bytes(make_xlsx({CREDENTIAL: rows}))
    earlier = built(corpus_dir, state, monkeypatch, {})
    patterns = [*DEFAULT_SECRET_PATTERNS, "MYCO-KEY-[a-z0-9]{16}"]
    config = build_config({**CONFIG, "security": {"secret_patterns": patterns}}, {}, {})
    now = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    # the control: a later unit of the sheet, labelled with its name
    assert CREDENTIAL in json.dumps(call(earlier, "dir2mcp.search", {"query": "zebrafinch"}))
    found = call(now, "dir2mcp.search", {"query": "zebrafinch"})["structuredContent"]
    assert CREDENTIAL not in json.dumps(found)  # before: in the hit's label
    assert (found["hits"], found["match"]) == ([], "weak")


@pytest.mark.django_db
def test_a_defined_name_holding_a_credential_is_not_offered(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Completion offers the names the index knows to be defined, each while
    a defining file passes the rules, but the name itself was never screened:
    a name that a secret pattern added since indexing calls a credential was
    offered whole (``symbols`` passes such a hit over since session 29). It
    is left out, and counted out of the total. (Since session 30 the file
    defining it is secret-bearing as a whole, so its other names are left
    out too: ``mycokeeper`` is defined in another file.)"""
    name = "mycokey_q7w8e9r0t1y2u3i4"
    built(
        corpus_dir,
        state,
        monkeypatch,
        {
            "src/keys.py": f"def {name}():\n    return 1\n\ndef mycokeep():\n    return 2\n",
            "src/keeper.py": "def mycokeeper():\n    return 2\n",
        },
    )
    patterns = [*DEFAULT_SECRET_PATTERNS, "mycokey_[a-z0-9]{16}"]
    config = build_config({**CONFIG, "security": {"secret_patterns": patterns}}, {}, {})
    now = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    got = completed(now, "symbol", "myco")
    assert got == {"values": ["mycokeeper"], "total": 1, "hasMore": False}, got  # before: the name too
    # and among the names of one file the client has chosen: none of a secret-bearing file
    params = {
        "ref": {"type": "ref/prompt", "name": "explain"},
        "argument": {"name": "symbol", "value": "myco"},
        "context": {"arguments": {"path": "src/keys.py"}},
    }
    got = completion.complete(now, params)["completion"]
    assert got == {"values": [], "total": 0, "hasMore": False}, got  # before: the name too
