"""What the embedder reads of a long code chunk."""

from __future__ import annotations

import pytest

from corpus.embed_view import embedding_view

LONG_CODE = "\n".join(
    [f"def handler_{i}(request):" if i % 20 == 0 else f"    value_{i} = compute({i})" for i in range(200)]
)


def test_long_code_keeps_every_definition_within_the_window():
    view = embedding_view(LONG_CODE, "code", 400)

    assert len(view) <= 400
    for i in range(0, 200, 20):
        assert f"def handler_{i}(request):" in view
    assert view.index("handler_0") < view.index("value_1") < view.index("handler_20")  # source order


@pytest.mark.parametrize(
    ("text", "kind", "window"),
    [
        pytest.param(LONG_CODE, "text", 400, id="prose-untouched"),
        pytest.param("def f():\n    return 1\n", "code", 400, id="short-code-untouched"),
        pytest.param(LONG_CODE, "code", None, id="large-window-model"),
    ],
)
def test_text_that_fits_or_is_prose_is_unchanged(text, kind, window):
    assert embedding_view(text, kind, window) == text


@pytest.mark.parametrize(
    "line",
    [
        "class Parser:",
        "async def fetch(url):",
        "func main() {",
        "pub fn new() -> Self {",
        "export function load() {",
        "@dataclass",
        "public static void main(String[] args) {",
    ],
)
def test_definitions_in_several_languages_are_kept(line):
    code = "\n".join(["    x = 1"] * 300 + [line] + ["    y = 2"] * 300)
    assert line.strip() in embedding_view(code, "code", 200)
