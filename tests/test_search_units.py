"""Search over definition and section units: auto routing, definitions first,
weak matches, and citations that open to exactly the cited lines."""

from __future__ import annotations

import numpy as np
import pytest

from corpus import files
from corpus.index.dense.embedding import from_bytes
from corpus.ingest.indexing import index_directory
from corpus.models import Chunk
from corpus.providers.local import LocalEmbedder
from corpus.retrieval import Filters, Searcher
from corpus.security import ExclusionEngine
from kernel.config import build_config

pytestmark = pytest.mark.django_db

PYTHON = '''
import re


class MessageParser:
    """Reads raw mail."""

    def split_multipart(self, body, boundary):
        parts = body.split("--" + boundary)
        return [part.strip() for part in parts if part.strip()]

    def close(self):
        self.closed = True

    def header_names(self, headers):
        return [name.lower() for name, _ in headers]

    def is_multipart(self, content_type):
        return content_type.startswith("multipart/")

    def charset(self, content_type, default="utf-8"):
        match = re.search(r"charset=([\\w-]+)", content_type)
        return match.group(1) if match else default

    def get_boundary(self, header):
        match = re.search(r'boundary="([^"]+)"', header)
        return match.group(1) if match else None


def render_invoice(lines):
    total = sum(line.price * line.quantity for line in lines)
    return f"Total due: {total:.2f}"
'''

TYPESCRIPT = """
export interface Mailbox {
  /** Messages waiting to be read. */
  unread: number;
}

export function getBoundary(contentType: string): string | undefined {
  const match = /boundary=([^;]+)/.exec(contentType);
  return match ? match[1] : undefined;
}

export function archiveOldMessages(box: Mailbox, days: number): void {
  box.unread = 0;
}
"""

GO = """
package mail

// Boundary returns the multipart boundary of a content type.
func Boundary(contentType string) string {
	return contentType
}

func useBoundary() string {
	return Boundary("multipart/mixed")
}
"""

GUIDE = """
# Mail guide

How the project handles mail, from the moment a message is written to the
moment it lands in a folder. Each part below stands on its own, and each
can be read without the others; the configuration keys are listed at the
end of the project's main README rather than here.

## Sending

Outgoing messages are queued and retried with backoff when the relay is
down. A message that still fails after a day is returned to its author with
the relay's last answer, so nothing is lost silently.

## Receiving

Incoming messages are parsed and filed into folders by their sender. Mail
from unknown senders waits in a separate folder until someone looks at it.
"""


@pytest.fixture(scope="module")
def embedder():
    return LocalEmbedder()


@pytest.fixture
def indexed(corpus_dir, state, embedder):
    for rel, text in {
        "mail/parser.py": PYTHON,
        "web/mail.ts": TYPESCRIPT,
        "mail/boundary.go": GO,
        "docs/guide.md": GUIDE,
        "docs/zz_uses.py": "from mail.parser import MessageParser\n\nMessageParser().get_boundary('x')\n",
    }.items():
        path = corpus_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.lstrip("\n"))
    config = build_config({"embed": {"provider": "local"}}, {}, {})
    index_directory(corpus_dir, state=state, config=config, embedder=embedder)
    return Searcher(state, config, embedder), corpus_dir


def where(hit) -> tuple[str, str]:
    return hit.rel_path, hit.text.split("\n")[0].strip()


def test_auto_finds_code_through_the_dense_code_index_for_a_prose_question(indexed, embedder):
    searcher, _ = indexed
    question = "compute the total amount owed on a bill"

    # The dense code ranking itself puts the function first ...
    vector = embedder.embed_query(question, kind="code")
    dense = searcher._dense(vector, "code", 5, Filters())
    top = Chunk.objects.get(chunk_id=dense[0][0])
    assert top.text.startswith("def render_invoice")
    # ... and auto (a natural-language query) consults that index.
    result = searcher.search(question, k=3)
    assert result.index_used == "both" and result.dense == {"status": "ok"}
    assert ("mail/parser.py", "def render_invoice(lines):") in [where(hit) for hit in result.hits[:2]]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("get_boundary", ("mail/parser.py", "def get_boundary(self, header):")),
        (
            "getBoundary",
            ("web/mail.ts", "export function getBoundary(contentType: string): string | undefined {"),
        ),  # noqa: E501
        ("Boundary", ("mail/boundary.go", "// Boundary returns the multipart boundary of a content type.")),
        ("Mailbox.unread", ("web/mail.ts", "export interface Mailbox {")),
    ],
    ids=["python", "typescript", "go", "dotted-member"],
)
def test_an_identifier_ranks_the_unit_defining_it_first(indexed, query, expected):
    searcher, _ = indexed

    hits = searcher.search(query, k=5).hits

    assert where(hits[0]) == expected
    assert hits[0].score > hits[1].score


def test_units_that_use_an_identifier_follow_its_definition(indexed):
    searcher, _ = indexed

    paths = [where(hit) for hit in searcher.search("get_boundary", k=5).hits]

    assert paths[0][1].startswith("def get_boundary")
    assert "docs/zz_uses.py" in [path for path, _ in paths[1:]]


def test_nonsense_is_a_weak_match_and_a_real_question_is_not(indexed):
    searcher, _ = indexed

    assert searcher.search("zanzibarquux", k=5).match == "weak"
    assert searcher.search("queued messages retried with backoff", k=5).match == "good"


def test_markdown_sections_are_units_with_their_heading_path(indexed):
    searcher, _ = indexed

    hit = searcher.search("relay down retried backoff", k=1).hits[0]

    assert hit.rel_path == "docs/guide.md" and hit.text.startswith("## Sending")
    chunk = Chunk.objects.get(chunk_id=hit.chunk_id)
    assert chunk.context == "docs/guide.md › Mail guide › Sending"


def test_every_unit_opens_to_exactly_its_cited_lines(indexed):
    searcher, root = indexed
    engine = ExclusionEngine.from_config(root, searcher.config, state_dir=searcher.state.path)
    chunks = Chunk.objects.filter(deleted=False).select_related("representation__document")
    code = [c for c in chunks if c.index_kind == "code"]
    assert len(code) >= 8
    for chunk in code:
        span = chunk.spans.get()
        rel = chunk.representation.document.rel_path
        opened = files.open_file(engine, rel_path=rel, start_line=span.start, end_line=span.end)
        assert opened["content"] == chunk.text
        assert chunk.context.split("\n")[0] == rel


def write_refunds(corpus_dir):
    """A 62-line table that says "refund ledger" 120 times, and a 3-line function that posts a refund."""
    rows = "\n".join(f"    ('refund', 'ledger', {n}),  # refund ledger entry {n}" for n in range(60))
    (corpus_dir / "tables.py").write_text(f"REFUNDS = [\n{rows}\n]\n")
    (corpus_dir / "refunds.py").write_text(
        "def post_refund(ledger, amount):\n    ledger.append(('refund', amount))\n    return ledger\n"
    )


def test_a_long_block_matching_the_words_ranks_below_a_short_unit_that_matches_them(corpus_dir, state):
    """``search.code_lexical_lines``: the lexical half weighs a long unit by
    its length, so a table that repeats the words does not bury the function."""
    write_refunds(corpus_dir)
    found = {}
    for limit in (30, 0):
        config = build_config(
            {"embed": {"provider": "none"}, "search": {"code_lexical_lines": limit}}, {}, {}
        )
        index_directory(corpus_dir, state=state, config=config, embedder=None)
        found[limit] = [
            hit.rel_path for hit in Searcher(state, config, None).search("refund ledger", k=2).hits
        ]

    assert found[0] == ["tables.py", "refunds.py"]  # BM25 alone: the table says it 120 times
    assert found[30] == ["refunds.py", "tables.py"]


def test_a_long_unit_keeps_a_share_of_its_final_score_by_its_length(corpus_dir, state):
    """``search.long_unit_lines``: a code unit longer than that keeps
    ``(limit / lines) ** long_unit_exponent`` of its final score, so a short
    unit that matches as well is read first; ``Searcher.ranked`` is the
    whole ranking ``search`` cuts to ``k``."""
    write_refunds(corpus_dir)
    found = {}
    for limit in (20, 0):
        config = build_config(
            {"embed": {"provider": "none"}, "search": {"long_unit_lines": limit, "long_unit_exponent": 0.5}},
            {},
            {},
        )
        index_directory(corpus_dir, state=state, config=config, embedder=None)
        searcher = Searcher(state, config, None)
        found[limit] = [hit.rel_path for hit in searcher.search("refund ledger", k=2).hits]
        whole = searcher.ranked("refund ledger").fused
        assert [hit.chunk_id for hit in searcher.search("refund ledger", k=2).hits] == [
            cid for cid, _ in whole[:2]
        ]

    assert found[0] == ["tables.py", "refunds.py"]  # BM25 alone: the table says it 120 times
    assert found[20] == ["refunds.py", "tables.py"]  # 62 lines keep sqrt(20 / 62) of the score


def test_a_unit_named_by_the_query_s_words_gains_on_one_that_only_matches_its_topic(corpus_dir, state):
    """``search.name_match_weight``: a sentence describing code uses the
    words its name is made of; the unit declaring ``back`` comes before a
    neighbour that says more of the sentence's words in its body."""
    (corpus_dir / "turtle.py").write_text(
        "def step(turtle, distance):\n"
        "    # move the turtle by distance, then move the pen\n"
        "    turtle.move(distance)\n"
        "    turtle.pen.move(distance)\n"
        "\n\n"
        "def back(turtle, distance):\n"
        "    turtle.go(-distance)\n"
    )
    query = "Move the turtle backward by distance."
    found = {}
    for weight in (0.0, 1.0):
        config = build_config(
            {"embed": {"provider": "none"}, "search": {"name_match_weight": weight}}, {}, {}
        )
        index_directory(corpus_dir, state=state, config=config, embedder=None)
        searcher = Searcher(state, config, None)
        found[weight] = [hit.snippet.split("(")[0] for hit in searcher.search(query, k=2).hits]

    assert found[0.0] == ["def step", "def back"]  # BM25: "move" twice, and the other words
    assert found[1.0] == ["def back", "def step"]


def test_a_three_letter_word_begins_a_name_and_construct_names_a_constructor(corpus_dir, state):
    """A three-letter query word begins a one-word name ("get" and
    ``getreply``; ranking.QUERY_PREFIX_MIN), and a word beginning with
    "construct" names ``__init__`` whole (ranking.CONSTRUCTOR_NAMES): at the
    default weight each unit leads the neighbour that, by its words alone
    (name_match_weight 0), comes first."""
    (corpus_dir / "client.py").write_text(
        "class Client:\n"
        "    def getreply(self):\n"
        "        return self.server.readline()\n"
        "\n"
        "    def status(self, code):\n"
        "        # the code of the server's reply\n"
        "        return self.replies[code]\n"
    )
    (corpus_dir / "fields.py").write_text(
        "class Entry:\n"
        "    def __init__(self, pair):\n"
        "        self.name, self.value = pair\n"
        "\n"
        "    def parse(self, field_name, field_value):\n"
        "        return field_name.strip(), field_value.strip()\n"
    )
    queries = {
        "Get a reply from the server.": "def getreply",
        "Constructor from field name and value.": "def __init__",
    }
    first = {}
    for weight in (0.0, None):
        search = {} if weight is None else {"name_match_weight": weight}
        # classes of more than 5 lines are opened: each method is a unit
        chunking = {"code": {"unit_max_lines": 5}}
        config = build_config({"embed": {"provider": "none"}, "search": search, "chunking": chunking}, {}, {})
        index_directory(corpus_dir, state=state, config=config, embedder=None)
        searcher = Searcher(state, config, None)
        first[weight] = {
            query: searcher.search(query, k=3).hits[0].text.strip().split("(")[0] for query in queries
        }

    by_words = ("def status", "def parse")
    assert first[0.0] == dict(zip(queries, by_words, strict=True))
    assert first[None] == queries  # the default weight, 0.75


def test_a_unit_that_declares_nothing_keeps_a_share_of_its_score(corpus_dir, state):
    """``search.undeclared_share``: a statement between definitions that
    says the query's words more often comes after the definitions that
    match them, when it keeps half its score."""
    (corpus_dir / "ledger.py").write_text(
        "def post_refund(ledger, amount):\n"
        "    ledger.append(('refund', amount))\n"
        "    return ledger\n"
        "\n\n"
        "for _ in range(3):\n"
        "    LEDGER.extend(('refund', 'ledger refund'))\n"
        "    LEDGER.extend(('refund ledger', 'refund ledger entries'))\n"
        "\n\n"
        "def close(ledger):\n"
        "    ledger.closed = True\n"
    )
    found = {}
    for share in (1.0, 0.5):
        config = build_config(
            {"embed": {"provider": "none"}, "search": {"undeclared_share": share, "name_match_weight": 0}},
            {},
            {},
        )
        index_directory(corpus_dir, state=state, config=config, embedder=None)
        hits = Searcher(state, config, None).search("refund ledger entries", k=2).hits
        found[share] = [hit.text.split("(")[0] for hit in hits]

    assert found[1.0] == ["for _ in range", "def post_refund"]
    assert found[0.5] == ["def post_refund", "def close"]  # 1/31 halved is below 1/33


def test_feedback_searches_again_from_the_query_moved_towards_the_first_leader(indexed, embedder):
    """``search.feedback_units``: the dense index is searched a second time
    with ``query + w * leader`` (unit length), the leader being the first
    fusion's best unit; at ``feedback_share: 1`` that ranking replaces the
    first. Checked against an exact search over the stored vectors."""
    searcher, _ = indexed
    question = "zqxv wvyq"  # no word of the corpus: the ranking is the dense one alone
    # fragment_share 1: the order is the dense one alone, imports and exports where they rank
    one_round = build_config(
        {"embed": {"provider": "local"}, "search": {"feedback_units": 0, "fragment_share": 1}}, {}, {}
    )
    two_rounds = build_config(
        {
            "embed": {"provider": "local"},
            "search": {
                "feedback_units": 1,
                "feedback_weight": 4.0,
                "feedback_share": 1.0,
                "fragment_share": 1,
            },
        },
        {},
        {},
    )
    first = Searcher(searcher.state, one_round, embedder).search(question, k=50, index="code")
    again = Searcher(searcher.state, two_rounds, embedder).search(question, k=50, index="code")

    stored = {
        c.chunk_id: from_bytes(c.embedding)
        for c in Chunk.objects.filter(deleted=False, index_kind="code").exclude(embedding=None)
    }
    query = embedder.embed_query(question, kind="code")
    moved = query + 4.0 * stored[first.hits[0].chunk_id]
    moved /= np.linalg.norm(moved)
    expected = sorted(stored, key=lambda cid: -float(stored[cid] @ moved))

    assert [hit.chunk_id for hit in again.hits] == expected[: len(again.hits)]
    assert [hit.chunk_id for hit in again.hits] != [hit.chunk_id for hit in first.hits]


def test_feedback_leaves_an_index_it_is_not_configured_for_alone(indexed, embedder):
    """``search.feedback_indices``: an index not named keeps its first ranking
    (prose is left out by default). The same strong feedback on the code
    index changes this ranking (the test above)."""
    searcher, _ = indexed
    question = "zqxv wvyq"
    strong = {"feedback_units": 1, "feedback_weight": 4.0, "feedback_share": 1.0}
    results = []
    for search in ({"feedback_units": 0}, {**strong, "feedback_indices": ["text"]}):
        config = build_config({"embed": {"provider": "local"}, "search": search}, {}, {})
        found = Searcher(searcher.state, config, embedder).search(question, k=50, index="code")
        results.append([hit.chunk_id for hit in found.hits])

    assert results[0] and results[0] == results[1]
    assert build_config({}, {}, {}).search.feedback_indices == ["code"]


SHOP = """
def strip_symbol(text):
    return text.strip().lstrip("$")


def order_total(lines):
    return sum(line.quantity * float(strip_symbol(line.price)) for line in lines)


def order_weight(lines):
    return sum(line.quantity * line.item.weight for line in lines)


def line_discount(line, rate):
    return line.quantity * rate


def price_with_tax(price, tax):
    return price * (1 + tax)


def cheapest_line(lines):
    return min(lines, key=lambda line: line.price)


def order_tax(lines, rate):
    return sum(line.price for line in lines) * rate


def largest_quantity(lines):
    return max(line.quantity for line in lines)


def order_count(orders):
    return len([order for order in orders if order.lines])


def restock(item, count):
    item.stock += count
    return item.stock
"""

#: a sentence describing order_total that names the helper it calls
ORDER_TOTAL = (
    "The total of an order: the sum over its lines of quantity times price, each price read by strip_symbol."
)


@pytest.fixture
def shop(corpus_dir, state, embedder):
    (corpus_dir / "shop.py").write_text(SHOP.lstrip("\n"))
    config = build_config({"embed": {"provider": "local"}}, {}, {})
    index_directory(corpus_dir, state=state, config=config, embedder=embedder)
    return state


def test_a_sentence_naming_a_helper_ranks_the_code_it_describes_first(shop, embedder):
    config = build_config({"embed": {"provider": "local"}}, {}, {})

    hits = Searcher(shop, config, embedder).search(ORDER_TOTAL, k=5).hits

    # the helper's definition joins the fusion as evidence: close behind, not ahead
    assert [where(hit)[1] for hit in hits[:2]] == ["def order_total(lines):", "def strip_symbol(text):"]


def test_with_every_query_a_lookup_the_named_helper_leads(shop, embedder):
    lookups = {"definitions_lead_words": 1000}
    config = build_config({"embed": {"provider": "local"}, "search": lookups}, {}, {})

    hits = Searcher(shop, config, embedder).search(ORDER_TOTAL, k=5).hits

    assert where(hits[0])[1] == "def strip_symbol(text):"
