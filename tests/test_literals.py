"""kernel.literals: the words every match of a secret rule holds, and the
quick test built from them, which may only rule out texts the rule
cannot match."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.config import DEFAULT_SECRET_PATTERNS
from kernel.literals import lowered_if_ascii, prefilter, required_words

PATTERNS = [
    *DEFAULT_SECRET_PATTERNS,
    r"a(?i:bc)d",
    r"(?i)x(?-i:Yz)w",
    r"(ab)+c",
    r"(?:foo|bar)?baz",
    r"(?:foo|bar){0}qux",
    r"k(?=ey)",
    r"(?>atom)ic",
    r"(?i)stra(?:ss|ß)e",
    r"(?i)kelvin",
    r"(?i)SeCrEt",
    r"(?x) s p a c e d  # comment",
    r"[Tt]oken",
    r"x?",
]

#: Pieces the texts are made of: the rules' words in several cases, near
#: misses, characters re matches case-insensitively beyond str.lower (the
#: Kelvin sign, the long s), and filler.
PIECES = [
    "token", "TOKEN", "ToKeN", "tok", "en", "_token", "Authorization", "bearer", "BEARER ",
    "access", "id", "refresh", "aws", "AWS", "secret", "SeCrEt", "AKIA", "akia", "sk_", "SK_",
    "api_", "abcd", "aBCd", "xyzw", "XYzW", "xYzw", "ab", "abab", "c", "foo", "bar", "baz", "qux",
    "key", "atomic", "strasse", "STRAßE", "straße", "kelvin", "\u212aelvin", "\u017fecret", "spaced",
    "Token", "=", ":", " ", "\n", "A" * 20, "0123456789abcdef0123456789abcdef", "abc.def-ghi_jkl.mno",
    "é", "ghp_", "github_pat_", "glpat-", "xoxb-", "AIza", "sk-", "sk-proj-", "eyJ", ".eyJ", "hf_",
    "-----BEGIN ", "PRIVATE KEY", "-----", "Password", "PASSWD", "api_key", "ApiKey", " = ", "\"",
    "aB3dE5gH7jK9mN1pQ", "ſecret",
]  # fmt: skip


def test_the_default_rules_words():
    words = [required_words(re.compile(p)) for p in DEFAULT_SECRET_PATTERNS]
    assert words == [
        {("AKIA", False)},
        {("secret", True)},
        {("authorization", True), ("_token", True)},
        {("token", True)},
        {("sk_", False), ("api_", False)},
        {("PRIVATE KEY", False)},
        {("PuTTY-User-Key-File-", False)},
        {("gh", False)},
        {("github_pat_", False)},
        {("gl", False)},
        {("xox", False)},
        {("hooks.slack.com/", False), ("xapp-", False)},
        {("k_live_", False)},
        {("AIza", False)},
        {("sk-", False)},
        {(".eyJ", False)},
        {("npm_", False), ("pypi-AgE", False), ("hf_", False)},
        {("passw", True), ("secret", True), ("api", True), ("access", True), ("private", True)},
        {("LS0tLS1CRUdJTi", False), ("client-key-data", True)},
        {("://", False)},
        {("AccountKey", True), ("SharedAccessKey", True), ("SG.", False)},
        {("authorization", True)},
        {("pass", True), ("pwd", True), ("auth", True)},
    ]


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        (r"a(?i:bc)d", {("bc", True)}),
        (r"(?i)x(?-i:Yz)w", {("Yz", False)}),
        (r"(ab)+c", {("ab", False)}),
        (r"(?:foo|bar)?baz", {("baz", False)}),
        (r"(?:foo|bar){0}qux", {("qux", False)}),
        (r"(?:foo|b)", {("foo", False), ("b", False)}),
        (r"(?:foo|.)", None),
        (r"x?", None),
        (r"k(?=ey)", {("k", False)}),
    ],
)
def test_only_what_every_match_holds_counts(pattern, words):
    assert required_words(re.compile(pattern)) == words


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=12), st.sampled_from(PATTERNS))
def test_the_test_never_rules_out_a_text_the_rule_matches(pieces, pattern):
    text = "".join(pieces)
    rx = re.compile(pattern)
    if rx.search(text):
        assert prefilter(rx)(text, lowered_if_ascii(text)), (pattern, text)


def test_case_rules_wider_than_lower_keep_non_ascii_texts_in():
    rx = re.compile(r"(?i)secret")
    text = "\u017fecret"  # the long s: re matches it as s, lower() leaves it
    assert rx.search(text) and "secret" not in text.lower()
    assert prefilter(rx)(text, lowered_if_ascii(text))


def test_most_texts_without_the_words_are_ruled_out():
    rules = [prefilter(re.compile(p)) for p in DEFAULT_SECRET_PATTERNS]
    texts = ["def parse(path):\n    return open(path).read()\n", "Plain prose.", "x = 1\n" * 100]
    assert not any(rule(text, lowered_if_ascii(text)) for rule in rules for text in texts)
    leaked = "config = {'token': 'abcdefghijklmnopqrstuvwxyz'}"
    assert rules[3](leaked, lowered_if_ascii(leaked))


def test_an_expression_that_cannot_be_read_runs_on_every_text():
    class Unreadable:
        pattern = "(unbalanced"
        flags = 0

    assert required_words(Unreadable()) is None
    assert prefilter(Unreadable())("anything", "anything")
