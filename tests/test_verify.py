"""dir2mcp.verify (issue #32 item 7): each citation in a text checked against
the files, and ask's check of its own generated answer."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from corpus.ingest.indexing import index_directory
from corpus.navigation import verify as grounding
from corpus.security import ExclusionEngine
from kernel import errors
from kernel.config import build_config
from mcp_gateway import context, dispatch, tools
from mcp_gateway.transport import shape_message
from tests.samples import make_pdf

pytestmark = pytest.mark.django_db

GUIDE = "# Guide\n\nThe loader reads configuration files from disk.\n\nIt never writes.\n"


@pytest.fixture
def engine(corpus_dir, state, index):
    index({"docs/guide.md": GUIDE, "paper.pdf": make_pdf(["Fees are ten dollars", "Refunds in 30 days"])})
    return ExclusionEngine.from_config(corpus_dir, build_config({}, {}, {}), state_dir=state.path)


@pytest.mark.parametrize(
    ("citation", "parsed"),
    [
        ("[src/a.py:L3-L9]", ("src/a.py", {"start_line": 3, "end_line": 9})),
        ("[docs/my file.md:L1-L1]", ("docs/my file.md", {"start_line": 1, "end_line": 1})),
        ("[paper.pdf#p=2]", ("paper.pdf", {"page": 2})),
        ("[talk.wav@t=01:05-1:01:35]", ("talk.wav", {"start_ms": 65_000, "end_ms": 3_695_000})),
    ],
)
def test_citations_parse_into_open_file_spans(citation, parsed):
    assert grounding.parse(citation) == parsed


def checked(engine, text: str) -> list[tuple]:
    result = grounding.verify(engine, text)
    return [(c["citation"], c["exists"], c["in_bounds"], c["ok"]) for c in result["citations"]]


def test_a_span_inside_the_file_holds_and_one_past_its_end_does_not(engine):
    text = "Reads config [docs/guide.md:L3-L3]. Beyond [docs/guide.md:L4-L40]. Past [docs/guide.md:L90-L91]."
    assert checked(engine, text) == [
        ("[docs/guide.md:L3-L3]", True, True, True),
        ("[docs/guide.md:L4-L40]", True, False, False),
        ("[docs/guide.md:L90-L91]", True, False, False),
    ]


def test_a_quotation_must_be_in_the_cited_slice(engine):
    text = (
        'The guide says "reads   CONFIGURATION files" [docs/guide.md:L3-L3] '
        "and `writes to the network` [docs/guide.md:L5-L5]."
    )
    result = grounding.verify(engine, text)
    first, second = result["citations"]
    assert first["quotes"] == [{"text": "reads   CONFIGURATION files", "found": True}] and first["ok"]
    assert second["quotes"] == [{"text": "writes to the network", "found": False}] and not second["ok"]
    assert (result["checked"], result["ok"], result["all_ok"]) == (2, 1, False)


def test_pages_are_checked_in_their_text(engine):
    result = grounding.verify(engine, 'Fees: "ten dollars" [paper.pdf#p=1]; refunds [paper.pdf#p=3].')
    first, second = result["citations"]
    assert first["ok"] and first["quotes"][0]["found"]
    assert second["exists"] and not second["in_bounds"] and second["error"]["code"] == errors.INVALID_RANGE


@pytest.mark.parametrize(
    ("citation", "code"),
    [
        ("[docs/missing.md:L1-L2]", errors.FILE_NOT_FOUND),
        ("[../outside.md:L1-L2]", errors.PATH_OUTSIDE_ROOT),
        ("[.env:L1-L1]", errors.FORBIDDEN),
    ],
)
def test_a_citation_of_what_cannot_be_read_fails_with_its_reason(engine, corpus_dir, citation, code):
    (corpus_dir / ".env").write_text("X=1\n")
    (only,) = grounding.verify(engine, f"see {citation}")["citations"]
    assert (only["exists"], only["ok"], only["error"]["code"]) == (False, False, code)


def test_only_the_first_fifty_citations_are_opened(engine):
    text = " ".join(f"[docs/guide.md:L{i}-L{i}]" for i in range(1, 61))
    result = grounding.verify(engine, text)
    assert (result["checked"], result["unchecked"]) == (50, 10)


# -- ask checks its own answer ---------------------------------------------------------------


def test_ask_reports_whether_its_generated_answer_is_grounded(corpus_dir, state, fake_mistral, monkeypatch):
    (corpus_dir / "docs").mkdir()
    (corpus_dir / "docs" / "guide.md").write_text(GUIDE)
    monkeypatch.setenv("MISTRAL_API_KEY", fake_mistral.API_KEY)
    config = build_config(
        {
            "mistral": {"base_url": fake_mistral.url},
            "embed": {"provider": "none"},
            "chat": {"provider": "mistral"},
        },
        {},
        {},
    )
    index_directory(corpus_dir, state=state, config=config)
    ctx = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    fake_mistral.chat_reply = (
        'It "reads configuration files from disk" [docs/guide.md:L3-L3] and "deletes them" '
        "[docs/guide.md:L5-L5]."
    )
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "dir2mcp.ask", "arguments": {"question": "what does the loader read?"}},
    }
    result = dispatch.respond(shape_message(body), dispatch.SessionState("s", "2025-11-25"), ctx)["result"]
    answer = result["structuredContent"]
    Draft202012Validator(tools.table()["dir2mcp.ask"].output_schema).validate(answer)
    assert answer["mode"] == "answer"
    verification = answer["verification"]
    assert [c["ok"] for c in verification["citations"]] == [True, False]
    assert verification["all_ok"] is False
