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
