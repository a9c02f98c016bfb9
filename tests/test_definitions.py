"""A unit defines a name when its signature line declares it; queries name identifiers."""

from __future__ import annotations

import pytest

from corpus.definitions import declared_name, defines, query_identifiers, signature_line

DECLARES = [
    ("def get_boundary(self, failobj=None):", "get_boundary"),
    ("    async def get_boundary(self):", "get_boundary"),
    ("export function getBoundary(a) {", "getBoundary"),
    ("  getBoundary(): string;", "getBoundary"),
    ("  readonly length: number;", "length"),
    ("class Boundary(Base):", "Boundary"),
    ("public static int getN() { return n; }", "getN"),
    ("func (m *Msg) Boundary() string {", "Boundary"),
    ("pub fn boundary(&self) -> &str {", "boundary"),
    ("const boundary = () => 1;", "boundary"),
    ("struct rec *rec_new(int a);", "rec_new"),
    ("type Id = string;", "Id"),
    ("interface Array<T> {", "Array"),
    ("/** Doc. */\n@decorator\ndef get_boundary():", "get_boundary"),
    ("class Parser:\n    def other(self):\n        pass\n\n    def get_boundary(self):", "get_boundary"),
    ("interface Mailbox {\n  /** Doc. */\n  readonly unread: number;\n}", "unread"),
    ("class A {\n  public static getN(): number { return 1; }\n}", "getN"),
]
USES = [
    ("    return get_boundary(x)", "get_boundary"),
    ("x = get_boundary(msg)", "get_boundary"),
    ("    if get_boundary(m):", "get_boundary"),
    ("# get_boundary does x\ndef other():", "get_boundary"),
    ("    b = self.get_boundary()", "get_boundary"),
    ("def get_boundary_of(x):", "get_boundary"),
    ("class P:\n    def run(self):\n        get_boundary(x)\n        self.get_boundary()", "get_boundary"),
    ("def f():\n    return {'get_boundary': 1}", "get_boundary"),
]


@pytest.mark.parametrize(("text", "name"), DECLARES, ids=[t.split("\n")[-1].strip() for t, _ in DECLARES])
def test_signature_lines_that_declare_the_name(text, name):
    assert defines(text, name)


@pytest.mark.parametrize(("text", "name"), USES, ids=[t.split("\n")[-1].strip() for t, _ in USES])
def test_lines_that_only_use_the_name(text, name):
    assert not defines(text, name)


def test_signature_line_skips_comments_and_decorators():
    assert signature_line("# c\n\n@d(1)\n/// doc\ndef f():\n  pass") == "def f():"
    assert signature_line("# only a comment") == ""


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("get_boundary", ["get_boundary"]),
        ("parse", ["parse"]),
        ("how are MIME multipart messages parsed", []),
        ("what does email.message.Message.get_boundary return", ["get_boundary"]),
        ("parseConfigFile in utils", ["parseConfigFile"]),
        ("std::vector::push_back", ["push_back"]),
    ],
    ids=["snake", "one-word", "prose", "dotted", "camel", "scoped"],
)
def test_query_identifiers(query, names):
    assert query_identifiers(query) == names


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("@cached\nasync def _compress_hextets(cls, hextets):\n    pass", "_compress_hextets"),
        ("class TopologicalSorter:\n    pass", "TopologicalSorter"),
        ("function baseFlatten(array, depth) {", "baseFlatten"),
        ("var reIsDeepProp = /\\.|\\[/;", "reIsDeepProp"),
        ("/** Doc. */\npublic static <T> List<T> asList(T... a) {", "asList"),
        ("  readonly length: number;", "length"),
        ("  indexOf(searchElement: T): number;", "indexOf"),
        ("Thread.prototype.join = function (timeout) {", "join"),
    ],
    ids=["python", "class", "js-function", "js-var", "java-generic", "ts-field", "ts-method", "dotted"],
)
def test_declared_name(text, name):
    assert declared_name(text) == name


@pytest.mark.parametrize(
    "text",
    ["# only a comment", "return parse(text)", "if (ready) {", "else if (x) {", "throw new Error(message);"],
    ids=["comment", "return", "if", "else-if", "throw"],
)
def test_declared_name_is_none_for_a_line_that_declares_nothing(text):
    assert declared_name(text) is None
