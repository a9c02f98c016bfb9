"""What the embedder reads of a long code chunk."""

from __future__ import annotations

import pytest

from corpus.index.dense.views import SIGNATURE_LINE_CHARS, embedding_view, signature_text

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


@pytest.mark.parametrize(
    ("context", "text", "expected"),
    [
        pytest.param(
            "lib/paths/a.py\nclass Path:",
            "    @property\n    # the last part\n    def name(self):\n        return self._parts[-1]",
            "a.py\nclass Path:\ndef name(self):",
            id="decorated-method",
        ),
        pytest.param(
            "lib.ts",
            "/** Adds. */\nexport function add(a: number, b: number): number {\n  return a + b;\n}",
            "lib.ts\nexport function add(a: number, b: number): number {",
            id="ts-function",
        ),
        pytest.param(
            "big.py\ndef long_one(x):",
            "    y = x + 1\n    return y",
            "big.py\ndef long_one(x):\ny = x + 1",
            id="window",
        ),
        pytest.param("", "# note\nVALUE = 1\n", "VALUE = 1", id="no-context"),
        pytest.param(
            "lib/lib.dom.d.ts\ninterface HTMLMediaElement extends HTMLElement {",
            "    /** Loads and starts playback of a media resource. */\n    load(): void;",
            "HTMLMediaElement.load(): void;\nhtml media element: load",
            id="declaration-file-member",
        ),
        pytest.param(
            "types/index.d.mts\ndeclare namespace Intl {\ninterface NumberFormatOptions {",
            "    readonly maximumFractionDigits?: number;",
            "NumberFormatOptions.readonly maximumFractionDigits?: number;\n"
            "number format options: maximum fraction digits",
            id="declaration-file-nested-member",
        ),
        pytest.param(
            "lib/lib.dom.d.ts\ninterface NodeList {",
            "    [index: number]: Node;",
            "lib.dom.d.ts\ninterface NodeList {\n[index: number]: Node;",
            id="declaration-file-index-signature",
        ),
        pytest.param(
            "src/media.ts\ninterface HTMLMediaElement extends HTMLElement {",
            "    load(): void;",
            "media.ts\ninterface HTMLMediaElement extends HTMLElement {\nload(): void;",
            id="member-of-a-source-file",
        ),
        pytest.param(
            "lib/lib.dom.d.ts\ninterface Document {",
            "    createElement<K extends keyof HTMLElementTagNameMap>(\n"
            "        tagName: K,\n    ): HTMLElementTagNameMap[K];",
            "lib.dom.d.ts\ninterface Document {\ncreateElement<K extends keyof HTMLElementTagNameMap>(",
            id="declaration-file-member-of-several-lines",
        ),
    ],
)
def test_signature_view_is_the_context_and_the_definition_line(context, text, expected):
    assert signature_text(context, text) == expected


def test_a_long_definition_line_is_cut():
    line = "def f(" + ", ".join(f"arg{i}" for i in range(200)) + "):"
    assert len(signature_text("m.py", line)) == len("m.py\n") + SIGNATURE_LINE_CHARS
