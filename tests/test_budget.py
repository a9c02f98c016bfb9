"""Search under a token budget (issue #32 item 4): passages merged per file,
in rank order, cut to max_tokens, never over it."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from corpus.citations import SpanRef
from corpus.ingest.indexing import index_directory
from corpus.navigation import budget
from corpus.retrieval import Hit
from kernel.config import build_config
from mcp_gateway import budgets, context, tools


def hit(chunk_id: int, rel_path: str, start: int, end: int, kind: str = "lines") -> Hit:
    return Hit(chunk_id, rel_path, "code", "raw_text", 1.0 / chunk_id, "", SpanRef(kind, start, end))


def shape(passages) -> list[tuple]:
    return [(p.best.chunk_id, p.best.rel_path, p.span.start, p.span.end, p.chunk_ids) for p in passages]


def test_overlapping_and_touching_spans_of_one_file_merge_in_rank_order():
    hits = [
        hit(1, "a.py", 10, 20),
        hit(2, "b.py", 1, 5),
        hit(3, "a.py", 21, 30),  # touches 10-20
        hit(4, "a.py", 50, 60),
        hit(5, "a.py", 15, 25),  # inside
        hit(6, "b.py", 7, 9),  # a gap of one line: apart
    ]
    assert shape(budget.merge(hits)) == [
        (1, "a.py", 10, 30, [1, 3, 5]),
        (2, "b.py", 1, 5, [2]),
        (4, "a.py", 50, 60, [4]),
        (6, "b.py", 7, 9, [6]),
    ]


def test_a_hit_between_two_passages_joins_them_at_the_better_ones_place():
    hits = [hit(1, "a.py", 1, 10), hit(2, "a.py", 20, 30), hit(3, "a.py", 8, 22)]
    assert shape(budget.merge(hits)) == [(1, "a.py", 1, 30, [1, 2, 3])]


def test_pages_and_time_ranges_are_not_merged():
    hits = [hit(1, "d.pdf", 2, 2, "page"), hit(2, "d.pdf", 2, 2, "page"), hit(3, "t.wav", 0, 900, "time")]
    assert len(budget.merge(hits)) == 3


# -- on a real index, through the tool table ---------------------------------------------------


@pytest.fixture
def ctx(corpus_dir, state):
    for i in range(6):
        body = "".join(
            f"def loader_{i}_{j}(path):\n    '''Read the config file {j}.'''\n"
            + "    value = path\n" * 8
            + "    return value\n\n"
            for j in range(6)
        )
        (corpus_dir / f"loader_{i}.py").write_text(body)
    config = build_config({"embed": {"provider": "none"}, "chat": {"provider": "none"}}, {}, {})
    index_directory(corpus_dir, state=state, config=config)
    return context.build(root=corpus_dir, state=state, config=config, auth_spec="none")


def search(ctx, **arguments) -> dict:
    result = tools.run(tools.table()["dir2mcp.search"], arguments, tools.Call(ctx))
    assert not result.get("isError"), result
    Draft202012Validator(tools.table()["dir2mcp.search"].output_schema).validate(result["structuredContent"])
    return result


@pytest.mark.django_db
def test_a_budgeted_search_never_exceeds_its_budget(ctx, corpus_dir):
    for max_tokens in (1000, 2000, 5000):
        check_budget(ctx, corpus_dir, max_tokens)


def check_budget(ctx, corpus_dir, max_tokens: int) -> None:
    result = search(ctx, query="read the config file loader", k=50, max_tokens=max_tokens)
    found = result["structuredContent"]
    spent = found["budget"]
    assert spent["used_tokens"] == budgets.measure(result) <= max_tokens  # the whole result, links and all
    read: dict[str, set[int]] = {}
    for passage in found["hits"]:
        span = passage["span"]
        lines = (corpus_dir / passage["rel_path"]).read_text().split("\n")
        assert passage["content"] == "\n".join(lines[span["start_line"] - 1 : span["end_line"]])
        cited = set(range(span["start_line"], span["end_line"] + 1))
        assert not cited & read.setdefault(passage["rel_path"], set())  # no line read twice
        read[passage["rel_path"]] |= cited


@pytest.mark.django_db
def test_a_larger_budget_reads_more_and_a_small_one_says_what_it_left_out(ctx):
    small = search(ctx, query="read the config file loader", k=50, max_tokens=1000)["structuredContent"]
    large = search(ctx, query="read the config file loader", k=50, max_tokens=20_000)["structuredContent"]
    assert small["budget"]["truncated"] and small["budget"]["omitted"] > 0
    assert not large["budget"]["truncated"] and len(large["hits"]) > len(small["hits"])
    assert [h["chunk_id"] for h in small["hits"]] == [h["chunk_id"] for h in large["hits"]][
        : len(small["hits"])
    ]


@pytest.mark.django_db
def test_without_a_budget_search_is_unchanged(ctx):
    plain = search(ctx, query="read the config file loader", k=20)["structuredContent"]
    assert "budget" not in plain and all("content" not in h for h in plain["hits"])
