"""Fusion and result-strength rules (corpus/ranking.py), as pure functions."""

from __future__ import annotations

import numpy as np
import pytest

from corpus import ranking
from corpus.ranking import Weighted


def test_rank_fusion_scales_a_dense_hit_by_its_cosine_over_the_best():
    lexical = Weighted([(1, 9.0)], 1.0)
    text = Weighted([(2, 0.62)], 0.2, absolute=True)  # a close prose unit
    code = Weighted([(3, 0.20)], 2.0, absolute=True)  # the code index's best, far away

    fused = dict(ranking.rrf([lexical, text, code], rrf_k=30))

    assert fused[3] == pytest.approx(2.0 * (0.20 / 0.62) / 31)
    assert fused[2] == pytest.approx(0.2 / 31)
    # by rank alone the far code hit would have led with 2.0 / 31
    assert fused[1] > fused[3]


def test_rank_fusion_without_cosines_is_plain_weighted_rrf():
    fused = ranking.rrf([Weighted([(1, 5.0), (2, 4.0)], 1.0), Weighted([(2, 3.0)], 2.0)], rrf_k=60)
    assert fused == [(2, pytest.approx(1 / 62 + 2 / 61)), (1, pytest.approx(1 / 61))]


def test_score_fusion_counts_a_lone_lexical_hit_in_full():
    fused = dict(ranking.score_fusion([Weighted([(7, 3.2)], 1.0), Weighted([(8, 0.5)], 1.0, absolute=True)]))
    assert fused == {7: 1.0, 8: 0.5}


def test_definitions_lead_in_their_own_order_and_the_rest_keeps_its_order():
    fused = [(1, 0.9), (2, 0.8), (3, 0.7)]
    assert [cid for cid, _ in ranking.definitions_first(fused, [3, 9])] == [3, 9, 1, 2]
    assert ranking.definitions_first(fused, []) == fused


def test_definitions_as_a_ranking_add_their_rank_share_without_leading():
    lexical = Weighted([(1, 5.0), (2, 4.0), (3, 3.0)], 1.0)
    fused = ranking.rrf([lexical, ranking.definitions_ranking([3], 1.0)], rrf_k=30)
    assert [cid for cid, _ in fused] == [3, 1, 2]
    assert fused[0][1] == pytest.approx(1 / 33 + 1 / 31)
    # a definition far down the fusion rises (1/69 + 1/31) past what only the
    # lexical ranking holds, not past what both rankings agree on
    lexical = Weighted([(i, 1.0) for i in range(1, 40)], 1.0)
    dense = Weighted([(1, 0.9), (2, 0.8)], 2.0, absolute=True)
    far = ranking.rrf([lexical, dense, ranking.definitions_ranking([39], 1.0)], rrf_k=30)
    assert [cid for cid, _ in far][:4] == [1, 2, 39, 3]


@pytest.mark.parametrize(("terms", "share"), [(1, 0.25), (2, 0.5), (4, 1.0), (9, 1.0)])
def test_short_queries_keep_part_of_the_dense_weight(terms, share):
    assert ranking.query_share(terms, 4) == share


@pytest.mark.parametrize(
    ("full", "hits", "best", "weak"),
    [
        (0, 5, 0.2, True),
        (0, 5, 0.5, False),
        (3, 5, 0.1, False),
        (0, 0, None, True),
        (0, 5, None, False),
        (1, 1, None, False),
    ],
    ids=["far", "near", "every-term-held", "no-dense-nothing-found", "no-dense-some-terms", "no-dense-all"],
)
def test_weak_means_no_unit_holds_every_term_and_nothing_is_near(full, hits, best, weak):
    verdict = ranking.is_weak(full_lexical_matches=full, lexical_hits=hits, best_cosine=best, threshold=0.35)
    assert verdict is weak


def test_a_unit_longer_than_the_limit_keeps_limit_over_its_lines_of_its_weight():
    assert ranking.long_unit_shares({1: 10, 2: 30, 3: 90}, 30) == {3: pytest.approx(1 / 3)}
    assert ranking.long_unit_shares({3: 90}, 0) == {}


@pytest.mark.parametrize("method", ["rrf", "score"])
def test_shares_scale_a_hit_in_either_fusion(method):
    lexical = [(1, 9.0), (2, 8.0), (3, 1.0)]
    plain = dict(ranking.fuse([Weighted(lexical, 1.0)], method=method, rrf_k=30))
    shared = dict(ranking.fuse([Weighted(lexical, 1.0, shares={1: 0.25})], method=method, rrf_k=30))

    assert shared[1] == pytest.approx(plain[1] * 0.25)
    assert shared[2] == pytest.approx(plain[2]) and shared[3] == pytest.approx(plain[3])


def test_feedback_moves_the_query_towards_the_leaders_and_keeps_unit_length():
    query = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    leaders = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=np.float32)

    moved = ranking.feedback_query(query, leaders, 0.5)

    assert float(np.linalg.norm(moved)) == pytest.approx(1.0)
    # query + 0.5 * mean(leaders) = (1, 0.25, 0.25), normalised
    assert moved == pytest.approx(np.array([1.0, 0.25, 0.25]) / np.sqrt(1.125))
    assert ranking.feedback_query(query, leaders, 0.0) == pytest.approx(query)


@pytest.mark.parametrize(
    "text",
    [
        "module.exports = baseMap;",
        "var baseIsMap = require('./_baseIsMap'),\n    baseUnary = require('./_baseUnary');",
        "import os\n# the platform's paths\nimport sys\n",
        "export { parse, format } from './url';\nexport default parse;",
        "package java.util;\n\nimport java.io.Serializable;",
    ],
)
def test_a_unit_of_imports_and_exports_is_a_fragment(text):
    assert ranking.is_fragment(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "    # The following functions support printing of reports\n    # (a comment alone describes)",
        "var objectProto = Object.prototype;",
        "import os\n\ndef home():\n    return os.environ['HOME']",
        "export default function parse(text) {",
        "export class Parser {",
        "var isMap = nodeIsMap ? baseUnary(nodeIsMap) : baseIsMap;\nmodule.exports = isMap;",
    ],
)
def test_a_unit_that_defines_or_describes_is_not_a_fragment(text):
    assert not ranking.is_fragment(text)


def test_fragments_keep_their_share_and_the_rest_its_order():
    fused = [(1, 0.9), (2, 0.8), (3, 0.5), (4, 0.1)]
    assert ranking.fragments_last(fused, {1}, 0.5) == [(2, 0.8), (3, 0.5), (1, 0.45), (4, 0.1)]
    assert ranking.fragments_last(fused, {1, 2}, 0.0)[:2] == [(3, 0.5), (4, 0.1)]
    assert ranking.fragments_last(fused, {1}, 1.0) == fused


def test_name_words_are_the_pieces_of_an_identifier():
    assert ranking.name_words("_compress_hextets") == ["compress", "hextets"]
    assert ranking.name_words("baseFlatten") == ["base", "flatten"]
    assert ranking.name_words("S_ISREG") == ["isreg"]  # one-letter pieces are no word
    assert ranking.name_words("back") == ["back"]


def test_name_match_shares_scale_a_unit_by_the_share_of_its_name_the_query_holds():
    names = {1: "back", 2: "forward", 3: "_compress_hextets", 4: "compress_all_headers", 5: "the"}
    query = ["move", "turtle", "backward", "compresses", "hextets", "ab"]

    shares = ranking.name_match_shares(names, query, 0.5)

    # "backward" begins with "back", "compresses" with "compress": whole names
    assert shares[1] == pytest.approx(1.5)
    assert shares[3] == pytest.approx(1.5)
    assert shares[4] == pytest.approx(1 + 0.5 / 3)  # one word of three
    assert 2 not in shares and 5 not in shares  # no word of the query; "the" is not one
    assert ranking.name_match_shares(names, query, 0.0) == {}


def test_a_short_name_word_begins_no_query_word_but_a_short_query_word_begins_a_name():
    # the name's "map" is shorter than NAME_PREFIX_MIN: it does not match "mapping"
    assert ranking.name_match_shares({1: "map", 2: "mapping"}, ["mapping"], 1.0) == {2: 2.0}
    # the query's "get" (QUERY_PREFIX_MIN letters) begins the one-word getreply
    assert ranking.name_match_shares({1: "getreply", 2: "reply_code"}, ["get"], 1.0) == {1: 2.0}
    assert ranking.name_match_shares({1: "back", 2: "bac"}, ["bac"], 1.0) == {1: 2.0, 2: 2.0}


def test_a_word_beginning_with_construct_names_a_constructor_whole():
    names = {1: "__init__", 2: "constructor", 3: "reopen", 4: "init_db"}

    shares = ranking.name_match_shares(names, ["constructs", "gzip", "file"], 0.5)

    assert shares == {1: 1.5, 2: 1.5}  # not init_db: a constructor is named by what it is
    assert ranking.name_match_shares(names, ["gzip", "file"], 0.5) == {}
