"""The resource URIs: every citation's slice round-trips, bad URIs are refused."""

import pytest

from corpus import uris
from corpus.citations import SpanRef


@pytest.mark.parametrize(
    "rel_path, span",
    [
        ("README.md", None),
        ("src/a b/#odd%name?.py", SpanRef("lines", 10, 20)),
        ("docs/scan.pdf", SpanRef("page", 3, 3)),
        ("talks/ünïcode.mp3", SpanRef("time", 65000, 95000)),
    ],
)
def test_a_uri_names_what_it_was_made_from(rel_path, span):
    uri = uris.file_uri(rel_path) if span is None else uris.slice_uri(rel_path, span)
    assert uri.startswith("dir2mcp:///")
    assert " " not in uri and "#" not in uri.removeprefix("dir2mcp:///")
    assert uris.parse(uri) == (rel_path, span)


def test_the_file_uri_does_not_depend_on_the_slice():
    span_uri = uris.slice_uri("a/b.py", SpanRef("lines", 1, 2))
    assert span_uri.startswith(uris.file_uri("a/b.py") + "?")


@pytest.mark.parametrize(
    "uri",
    [
        "file:///etc/passwd",
        "dir2mcp://host/a.py",
        "dir2mcp:///",
        "dir2mcp:///a.py#L1",
        "dir2mcp:///a.py?lines=20-10",
        "dir2mcp:///a.py?lines=0-3",
        "dir2mcp:///a.py?page=0",
        "dir2mcp:///a.py?page=1&lines=1-2",
        "dir2mcp:///a.py?bytes=1-2",
        "dir2mcp:///a%00.py",
        42,
    ],
)
def test_what_is_not_a_uri_of_this_server_is_refused(uri):
    with pytest.raises(uris.BadUri):
        uris.parse(uri)


@pytest.mark.parametrize(
    ("uri", "rel_path", "canonical"),
    [
        ("dir2mcp:///docs/gu%69de.md", "docs/guide.md", "dir2mcp:///docs/guide.md"),
        ("dir2mcp:///a.zip!/x%2emd", "a.zip!/x.md", "dir2mcp:///a.zip%21/x.md"),
        ("dir2mcp:///a%e2%80%99s.md", "a\u2019s.md", "dir2mcp:///a%E2%80%99s.md"),
        ("dir2mcp:///a\tb.md", "a\tb.md", "dir2mcp:///a%09b.md"),  # urlsplit would drop the tab
    ],
)
def test_another_encoding_names_the_same_file_and_has_one_canonical_uri(uri, rel_path, canonical):
    parsed, span = uris.parse(uri)
    assert parsed == rel_path
    assert uris.canonical(parsed, span) == canonical


@pytest.mark.parametrize(
    ("uri", "rel_path"),
    [
        ("dir2mcp:///./docs/guide.md", "./docs/guide.md"),  # the resolver refuses these forms
        ("dir2mcp:///docs/guide.md/", "docs/guide.md/"),
        ("dir2mcp:////etc/passwd", "/etc/passwd"),
        ("dir2mcp:///docs%2F..%2Fx", "docs%2F..%2Fx"),  # an encoded separator stays encoded
    ],
)
def test_the_path_is_passed_on_as_spelled_for_the_resolver_to_judge(uri, rel_path):
    assert uris.parse(uri)[0] == rel_path
