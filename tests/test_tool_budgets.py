"""Budgets on every tool that returns text (issue #32 item 4) and next-action
hints (item 6): a result never exceeds max_tokens, a cut says so and a
cursor (or offset, or the next lines) continues it without losing or
repeating an item, and the default keeps every result under a client's cap."""

from __future__ import annotations

import json

import httpx
import pytest

from corpus.ingest.indexing import index_directory
from kernel import errors
from kernel.config import build_config
from mcp_gateway import budgets, context, hints, tools
from tests.mcp_http import daphne_serving, write_corpus
from tests.support import TLS

MODULES, FUNCTIONS = 15, 6
LONG_LINES = 1500


def write_tree(root) -> None:
    (root / "pkg").mkdir(parents=True, exist_ok=True)
    (root / "pkg" / "helpers.py").write_text("def shared_helper(request, n):\n    return request, n\n")
    for i in range(MODULES):
        body = "from pkg.helpers import shared_helper\n\n\n" + "".join(
            f"def handle_{i}_{j}(request):\n"
            f"    '''Handle the config request number {j} of module {i}.'''\n"
            f"    return shared_helper(request, {j})\n\n\n"
            for j in range(FUNCTIONS)
        )
        (root / "pkg" / f"mod_{i}.py").write_text(body)
    (root / "long.py").write_text(
        "".join(f"value_{n} = {n} * 2  # line {n}\n" for n in range(1, LONG_LINES + 1))
    )
    (root / "long2.py").write_text(
        "".join(f"value_{n} = {n} * 3  # line {n}\n" for n in range(1, LONG_LINES + 1))
    )
    (root / "many.py").write_text(
        "".join(f"class Model{n}:\n    def method_{n}(self):\n        return {n}\n\n" for n in range(400))
    )


@pytest.fixture
def ctx(corpus_dir, state):
    write_tree(corpus_dir)
    config = build_config({"embed": {"provider": "none"}, "chat": {"provider": "none"}}, {}, {})
    index_directory(corpus_dir, state=state, config=config)
    return context.build(root=corpus_dir, state=state, config=config, auth_spec="none")


def call(ctx, tool: str, **arguments) -> dict:
    return tools.run(tools.table()[tool], arguments, tools.Call(ctx))


def ok(ctx, tool: str, **arguments) -> dict:
    result = call(ctx, tool, **arguments)
    assert not result.get("isError"), result["content"][0]["text"]
    return result


def key(item: dict) -> str:
    return json.dumps(item, sort_keys=True)


# -- lists: cut, then continued -------------------------------------------------------------------

LISTS = [
    pytest.param(
        "dir2mcp.search", {"query": "handle the config request", "k": 50}, "hits", 1500, id="search-passages"
    ),
    pytest.param("dir2mcp.find", {"content": "shared_helper", "limit": 200}, "matches", 1000, id="find"),
    pytest.param("dir2mcp.symbols", {"name": "handle", "limit": 200}, "symbols", 1000, id="symbols"),
    pytest.param(
        "dir2mcp.references", {"name": "shared_helper", "limit": 200}, "references", 1000, id="references"
    ),
    pytest.param("dir2mcp.list_files", {"limit": 500}, "files", 400, id="list_files"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "arguments", "field", "small"), LISTS)
def test_a_list_cut_to_its_budget_continues_where_it_stopped(ctx, name, arguments, field, small):
    # search with max_tokens returns passages: the whole list is asked for with the largest budget
    whole_budget = {"max_tokens": budgets.MAX_MAX_TOKENS} if name == "dir2mcp.search" else {}
    whole = ok(ctx, name, **arguments, **whole_budget)["structuredContent"][field]
    assert len(whole) > 10
    read: list[dict] = []
    page_arguments = dict(arguments)
    pages = 0
    while True:
        result = ok(ctx, name, **page_arguments, max_tokens=small)
        found = result["structuredContent"]
        assert budgets.measure(result) <= small
        assert result["_meta"][budgets.META_TOKENS] <= small
        read += found[field]
        pages += 1
        if "next_cursor" in found and found["budget"]["truncated"]:
            assert found["budget"]["omitted"] > 0
            assert "next_cursor" in result["content"][0]["text"]
            page_arguments["cursor"] = found["next_cursor"]
        else:
            # search's own cursor (the hits after these k, from its ranking) is not the budget's
            assert "next_cursor" not in found or name == "dir2mcp.search"
            break
    assert pages > 2
    assert [key(item) for item in read] == [key(item) for item in whole]  # none lost, none twice


@pytest.mark.django_db
def test_ask_under_a_budget_retrieves_fewer_passages_and_says_so(ctx):
    question = "which function handles the config request"
    whole = ok(ctx, "dir2mcp.ask", question=question, k=50)
    assert budgets.measure(whole) > 3000
    result = ok(ctx, "dir2mcp.ask", question=question, k=50, max_tokens=3000)
    found = result["structuredContent"]
    assert budgets.measure(result) <= 3000 and found["budget"]["truncated"]
    assert 0 < len(found["hits"]) < len(whole["structuredContent"]["hits"])
    assert "k lowered to" in result["content"][0]["text"]


@pytest.mark.django_db
def test_a_passage_alone_over_the_budget_comes_back_as_its_first_lines(ctx, corpus_dir):
    result = ok(ctx, "dir2mcp.search", query="value line", k=5, max_tokens=1000)
    found = result["structuredContent"]
    assert budgets.measure(result) <= 1000
    (passage,) = found["hits"]  # the first, cut; the rest follow by cursor
    assert passage["truncated"] and found["budget"]["truncated"] and found["next_cursor"]
    span = passage["span"]
    lines = (corpus_dir / passage["rel_path"]).read_text().split("\n")
    assert passage["content"] == "\n".join(lines[span["start_line"] - 1 : span["end_line"]])
    assert "the first cut short" in result["content"][0]["text"]


# -- text: the tool's own cut, lowered ------------------------------------------------------------


@pytest.mark.django_db
def test_open_file_under_a_budget_is_read_whole_by_following_its_hints(ctx, corpus_dir):
    text = (corpus_dir / "long.py").read_text()
    lines: list[str] = []
    arguments = {"rel_path": "long.py", "max_chars": 50000}
    for _ in range(200):
        result = ok(ctx, "dir2mcp.open_file", **arguments, max_tokens=1500)
        found = result["structuredContent"]
        assert budgets.measure(result) <= 1500
        span = found["span"]
        assert span["start_line"] == len(lines) + 1
        lines += found["content"].split("\n")[: span["end_line"] - span["start_line"] + 1]
        actions = result.get("_meta", {}).get(hints.META_NEXT)
        if not found["truncated"]:
            assert actions is None
            break
        assert found["budget"]["truncated"] and actions[0]["tool"] == "dir2mcp.open_file"
        assert hints.line(actions) in result["content"][0]["text"]
        arguments = actions[0]["arguments"] | {"max_chars": 50000}
    assert "\n".join(lines) + "\n" == text


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        pytest.param("dir2mcp.outline", {"rel_path": "many.py", "max_entries": 5000}, id="outline"),
        pytest.param(
            "dir2mcp.diff", {"rel_path_a": "long.py", "rel_path_b": "long2.py", "max_chars": 50000}, id="diff"
        ),
        pytest.param(
            "dir2mcp.open_files",
            {
                "slices": [{"rel_path": "long.py"}, {"rel_path": "long2.py"}, {"rel_path": "many.py"}],
                "max_chars": 50000,
            },
            id="open_files",
        ),
    ],
)
def test_a_text_tool_lowers_its_own_cap_to_fit_and_says_so(ctx, name, arguments):
    whole = ok(ctx, name, **arguments)
    assert budgets.measure(whole) > 2000  # the cut below is real
    result = ok(ctx, name, **arguments, max_tokens=2000)
    found = result["structuredContent"]
    assert budgets.measure(result) <= 2000
    assert found["truncated"] and found["budget"]["truncated"]
    assert "to fit max_tokens 2000" in result["content"][0]["text"]


# -- the default, the floor, bad cursors ----------------------------------------------------------


#: tools whose results are small and bounded by their schema, or not text
UNBUDGETED = {"dir2mcp.stats", "dir2mcp.checksum", "dir2mcp.annotate", "dir2mcp.ask_audio"}


def test_every_tool_that_returns_text_takes_a_budget():
    table = tools.table()
    assert {name for name, tool in table.items() if tool.budget is None} == UNBUDGETED
    for name, tool in table.items():
        if tool.budget is not None:
            assert tool.input_schema["properties"]["max_tokens"]["maximum"] == budgets.MAX_MAX_TOKENS, name
            assert "budget" in tool.output_schema["properties"], name


@pytest.mark.django_db
def test_without_max_tokens_a_large_result_is_cut_to_the_default(corpus_dir, state):
    for n in range(450):  # long paths: each listed file costs about 60 tokens
        (corpus_dir / f"{'nested_directory_name/' * 3}file_with_a_rather_long_name_{n:04}.txt").parent.mkdir(
            parents=True, exist_ok=True
        )
        (corpus_dir / f"{'nested_directory_name/' * 3}file_with_a_rather_long_name_{n:04}.txt").write_text(
            f"{n}\n"
        )
    config = build_config({"embed": {"provider": "none"}, "chat": {"provider": "none"}}, {}, {})
    index_directory(corpus_dir, state=state, config=config)
    ctx = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    uncapped = ok(ctx, "dir2mcp.list_files", limit=5000, max_tokens=budgets.MAX_MAX_TOKENS)
    assert budgets.measure(uncapped) > budgets.DEFAULT_MAX_TOKENS
    result = ok(ctx, "dir2mcp.list_files", limit=5000)
    found = result["structuredContent"]
    assert budgets.measure(result) <= budgets.DEFAULT_MAX_TOKENS
    assert found["budget"]["truncated"] and found["has_more"] and len(found["files"]) < 450
    assert found["next_cursor"] in result["content"][0]["text"]


@pytest.mark.django_db
def test_a_result_that_fits_carries_its_estimate_and_no_budget_field(ctx):
    result = ok(ctx, "dir2mcp.symbols", name="shared_helper")
    assert "budget" not in result["structuredContent"]
    assert result["_meta"][budgets.META_TOKENS] >= budgets.measure(
        {k: v for k, v in result.items() if k != "_meta"}
    )


@pytest.mark.django_db
def test_a_budget_too_small_for_one_item_is_invalid_range_with_what_it_needs(ctx):
    result = call(ctx, "dir2mcp.search", query="value line", k=50, max_tokens=budgets.MIN_MAX_TOKENS)
    if not result.get("isError"):  # the first passage fit: a smaller one cannot be asked for
        assert budgets.measure(result) <= budgets.MIN_MAX_TOKENS
        return
    error = result["structuredContent"]["error"]
    assert error["code"] == errors.INVALID_RANGE and "needs about" in error["message"]


@pytest.mark.django_db
def test_a_cursor_for_other_arguments_or_not_ours_is_invalid_field(ctx):
    first = ok(ctx, "dir2mcp.symbols", name="handle", limit=200, max_tokens=400)["structuredContent"]
    cursor = first["next_cursor"]
    for name, arguments in [
        ("dir2mcp.symbols", {"name": "handler", "limit": 200, "cursor": cursor}),  # another query
        ("dir2mcp.search", {"query": "handle", "cursor": cursor}),  # another tool
        ("dir2mcp.symbols", {"name": "handle", "limit": 200, "cursor": "b.not-base64!"}),
        ("dir2mcp.symbols", {"name": "handle", "limit": 200, "cursor": "b.eyJzIjogLTF9"}),  # {"s": -1}
    ]:
        result = call(ctx, name, **arguments)
        assert result["isError"] and result["structuredContent"]["error"]["code"] == errors.INVALID_FIELD
    resumed = ok(
        ctx, "dir2mcp.symbols", name="handle", limit=200, cursor=cursor, max_tokens=budgets.MAX_MAX_TOKENS
    )
    assert "next_cursor" not in resumed["structuredContent"]  # a larger budget may finish the list


# -- hints ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_hints_name_calls_that_run(ctx):
    found = ok(ctx, "dir2mcp.symbols", name="shared_helper")
    actions = found["_meta"][hints.META_NEXT]
    assert [a["tool"] for a in actions] == ["dir2mcp.open_file", "dir2mcp.references"]
    opened = ok(ctx, actions[0]["tool"], **actions[0]["arguments"])["structuredContent"]
    assert opened["content"].startswith("def shared_helper(")
    uses = ok(ctx, actions[1]["tool"], **actions[1]["arguments"])["structuredContent"]
    assert uses["count"] == 50 and "next_cursor" in uses  # a first page of its 105 uses
    assert all(use["rel_path"].startswith("pkg/mod_") for use in uses["references"])
    hit = ok(ctx, "dir2mcp.search", query="shared_helper")
    top = hit["structuredContent"]["hits"][0]
    action = hit["_meta"][hints.META_NEXT][0]
    assert action["arguments"]["rel_path"] == top["rel_path"]
    assert ok(ctx, action["tool"], **action["arguments"])["structuredContent"]["rel_path"] == top["rel_path"]


# -- over HTTP, under daphne ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root)
    write_tree(root)
    with daphne_serving(root) as srv:
        yield srv


def test_a_budget_holds_over_http_and_its_cursor_continues(server):
    session = server.initialize()
    arguments = {"content": "shared_helper", "limit": 200, "max_tokens": 500}
    result = server.call(session, "dir2mcp.find", arguments)
    found = result["structuredContent"]
    assert budgets.measure(result) <= 500 and found["budget"]["truncated"]
    assert result["_meta"][budgets.META_TOKENS] <= 500
    again = server.call(session, "dir2mcp.find", arguments | {"cursor": found["next_cursor"]}, msg_id=2)
    assert again["structuredContent"]["matches"][0] not in found["matches"]
    too_small = server.call(session, "dir2mcp.find", {"content": "x", "max_tokens": 10}, msg_id=3)
    assert (
        too_small["structuredContent"]["error"]["code"] == errors.INVALID_RANGE
    )  # under the schema's minimum


def test_an_image_item_counts_what_a_model_reads_of_it_not_its_base64():
    text = {"content": [{"type": "text", "text": "a picture"}], "structuredContent": {"n": 1}}
    image = {"type": "image", "data": "A" * 1_000_000, "mimeType": "image/png"}
    with_image = text | {"content": [*text["content"], image]}
    assert budgets.measure(with_image) == budgets.measure(text) + budgets.IMAGE_TOKENS


def test_the_rest_mirror_takes_the_budget_and_its_cursor(server):
    def find(**params) -> httpx.Response:
        auth = {"Authorization": f"Bearer {server.token}"}
        return httpx.get(f"{server.base}/api/v1/find", params=params, headers=auth, timeout=30, verify=TLS)

    params = {"content": "shared_helper", "limit": 200, "max_tokens": 500}
    first = find(**params)
    assert first.status_code == 200, first.text
    found = first.json()
    assert found["budget"]["truncated"] and found["budget"]["used_tokens"] <= 500
    again = find(**params, cursor=found["next_cursor"]).json()
    assert again["matches"] and again["matches"][0] not in found["matches"]
    small = find(**(params | {"max_tokens": 10}))
    assert small.status_code == 400 and small.json()["error"]["code"] == errors.INVALID_RANGE
