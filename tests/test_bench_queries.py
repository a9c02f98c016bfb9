"""The benchmark's queries from doc comments (bench/corpora.py): markup is
stripped, an element a comment names is kept, and repairing a query keeps the
sample's targets."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _script(name: str) -> ModuleType:
    """A bench/ script as a module: bench/ is scripts, not a package."""
    spec = importlib.util.spec_from_file_location(
        name, Path(__file__).resolve().parent.parent / "bench" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


corpora = _script("corpora")


@pytest.mark.parametrize(
    ("comment", "description"),
    [
        # TypeScript's DOM docs name elements as tags that are never closed.
        (
            "/** Provides properties for manipulating <button> elements. */",
            "Provides properties for manipulating button elements.",
        ),
        (
            '/** Returned by the files property of the HTML <input type="file"> element. */',
            'Returned by the files property of the HTML input type="file" element.',
        ),
        # Markup: closed tags, void formatting tags, closing tags.
        ("/** Returns <code>true</code> if <i>empty</i>.<br> More. */", "Returns true if empty. More."),
        ("/** A <b>bold</b> claim\n * <p>Second paragraph. */", "A bold claim"),
        ("/** Generates a name of the form Thread-<n>. */", "Generates a name of the form Thread-n."),
    ],
)
def test_a_description_keeps_named_elements_and_drops_markup(comment: str, description: str) -> None:
    assert " ".join(corpora.doc_description(comment).split()) == " ".join(description.split())


def test_the_old_rule_is_still_there_to_choose_the_sample() -> None:
    comment = "/** Provides properties for manipulating <button> elements. */"
    old = corpora.doc_description(comment, element_names=False)
    assert " ".join(old.split()) == "Provides properties for manipulating elements."


def test_a_repaired_query_keeps_the_sample_its_old_text_chose(tmp_path: Path) -> None:
    # Three declarations whose descriptions differ only in the element they
    # name: stripped as before, their queries were one text, so none was
    # sampled; repaired, they must still not be (the targets stay as they were),
    # while a fourth, unaffected declaration is sampled with its own text.
    source = (
        "".join(
            f"/** Provides properties for manipulating <{name}> elements here. */\n"
            f"interface HTML{name.title()}Element {{}}\n"
            for name in ("button", "canvas", "audio")
        )
        + "/** Counts the words of a document quickly. */\nfunction count(): number;\n"
    )
    blanked, labels = corpora.label_doc_comments("ts", "lib.test.d.ts", source)
    assert [label["query"] for label in labels][:3] == [
        f"Provides properties for manipulating {name} elements here."
        for name in ("button", "canvas", "audio")
    ]
    kept = corpora.unambiguous(labels)
    assert [label["query"] for label in kept] == ["Counts the words of a document quickly."]
    assert "<button>" not in blanked
