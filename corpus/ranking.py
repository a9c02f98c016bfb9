"""Fusing rankings, and how strong a result set is.

Pure functions over ``(chunk_id, score)`` lists, best first. The choices
(reciprocal rank fusion, its weights, definitions first, the weak-match
threshold) were made on ``bench/retrieval.py``; docs/benchmarks.md has the
tables, including what did not help.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from corpus.index import words

Ranking = list[tuple[int, float]]

#: added to a unit that defines a name the query asks for, so it leads
DEFINITION_BONUS = 1.0


@dataclass(frozen=True)
class Weighted:
    """One ranking in a fusion and the weight it carries. ``absolute``
    scores (cosines) are on one scale across rankings and queries, so score
    fusion takes them as they are; others (BM25) are min-max normalised."""

    ranking: Ranking
    weight: float
    absolute: bool = False
    #: per-hit factors on the weight (a hit not named counts in full)
    shares: dict[int, float] | None = None


def rrf(rankings: Sequence[Weighted], rrf_k: int) -> Ranking:
    """Weighted reciprocal rank fusion: score = sum of weight / (rrf_k + rank).

    A hit of an ``absolute`` ranking (cosines) counts in proportion to its
    cosine over the best cosine of any such ranking: ranks alone would let
    the first hit of the code index, however far from the query, weigh as
    much as a close first hit of the text index."""
    best = max((each.ranking[0][1] for each in rankings if each.absolute and each.ranking), default=0.0)
    scores: dict[int, float] = {}
    for each in rankings:
        for rank, (cid, score) in enumerate(each.ranking, start=1):
            share = max(score, 0.0) / best if each.absolute and best > 0 else 1.0
            if each.shares:
                share *= each.shares.get(cid, 1.0)
            scores[cid] = scores.get(cid, 0.0) + each.weight * share / (rrf_k + rank)
    return _ordered(scores)


def score_fusion(rankings: Sequence[Weighted]) -> Ranking:
    """Weighted sum of each ranking's scores: cosines as they are (a poor
    nearest neighbour stays poor), BM25 min-max normalised per ranking."""
    scores: dict[int, float] = {}
    for each in rankings:
        if not each.ranking:
            continue
        values = [score for _, score in each.ranking]
        low, span = min(values), max(values) - min(values)
        for cid, score in each.ranking:
            if each.absolute:
                share = max(score, 0.0)
            else:  # a lone hit (or a tie) is that ranking's best: it counts in full
                share = (score - low) / span if span else 1.0
            if each.shares:
                share *= each.shares.get(cid, 1.0)
            scores[cid] = scores.get(cid, 0.0) + each.weight * share
    return _ordered(scores)


def fuse(rankings: Sequence[Weighted], *, method: str, rrf_k: int) -> Ranking:
    if method == "score":
        return score_fusion(rankings)
    return rrf(rankings, rrf_k)


def long_unit_shares(lines: dict[int, int], limit: int) -> dict[int, float]:
    """The share of its weight each unit longer than ``limit`` lines keeps:
    ``limit / lines``. A lexical hit on a long block is weak evidence (it
    holds many words) and costly (an agent reads all of it)."""
    if limit <= 0:
        return {}
    return {cid: limit / n for cid, n in lines.items() if n > limit}


def cost_shares(lines: dict[int, int], limit: int, exponent: float) -> dict[int, float]:
    """The share of its score each unit longer than ``limit`` lines keeps:
    ``(limit / lines) ** exponent``. Hits are read in order and each costs
    the lines it cites, so a long unit read first must be likelier to be
    the answer than the several short ones its lines would have paid for."""
    if limit <= 0 or exponent <= 0:
        return {}
    return {cid: (limit / n) ** exponent for cid, n in lines.items() if n > limit}


#: shorter words than this are neither a name's word nor a query's to match
NAME_WORD_MIN = 3
#: a name's word matches a query word it begins when it has at least this
#: many letters ("thread" matches "threading", "back" "backward"; ``map``
#: does not match "mapping": measured, it cost Python queries)
NAME_PREFIX_MIN = 4
#: a query word matches a name's word it begins when it has at least this
#: many letters: "get" the one-word ``getreply``, "run" ``runsource``
QUERY_PREFIX_MIN = 3
#: names that declare a constructor (Python's, JavaScript's and TypeScript's),
#: which a query word beginning with ``CONSTRUCTING`` names in full:
#: "Constructor for the GzipFile class." asks for ``__init__``
CONSTRUCTOR_NAMES = frozenset({"__init__", "constructor"})
CONSTRUCTING = "construct"


def name_words(name: str) -> list[str]:
    """The words of an identifier (``_compress_hextets``: compress, hextets;
    ``baseFlatten``: base, flatten), lower-cased, without short ones."""
    found = words.tokens(name)
    pieces = found[1:] if len(found) > 1 else found  # the first of several is the joined form
    return [word for word in dict.fromkeys(pieces) if len(word) >= NAME_WORD_MIN]


def _word_matches(word: str, terms: Sequence[str]) -> bool:
    """Whether a name's ``word`` equals a query term, begins one
    (``NAME_PREFIX_MIN``) or is begun by one (``QUERY_PREFIX_MIN``)."""
    for term in terms:
        if term == word:
            return True
        if len(term) < len(word):
            if len(term) >= QUERY_PREFIX_MIN and word.startswith(term):
                return True
        elif len(word) >= NAME_PREFIX_MIN and term.startswith(word):
            return True
    return False


def name_match_shares(names: dict[int, str], query_words: Sequence[str], weight: float) -> dict[int, float]:
    """What each unit's score is multiplied by when the query holds the
    words of the name it declares: ``1 + weight × matched / words``. A
    sentence describing code tends to use the words its name is made of
    ("Move the turtle backward" → ``back``, "Compresses a list of hextets"
    → ``_compress_hextets``), while the units around it match the sentence's
    topic, not its verb. A constructor's name (``CONSTRUCTOR_NAMES``) is
    matched whole by a word beginning with "construct"."""
    terms = [term for term in query_words if len(term) >= NAME_WORD_MIN]
    if weight <= 0 or not terms:
        return {}
    constructing = any(term.startswith(CONSTRUCTING) for term in terms)
    shares = {}
    for cid, name in names.items():
        parts = name_words(name)
        if constructing and name in CONSTRUCTOR_NAMES:
            matched = len(parts)
        else:
            matched = sum(_word_matches(part, terms) for part in parts)
        if matched:
            shares[cid] = 1 + weight * matched / len(parts)
    return shares


def scaled(fused: Ranking, shares: dict[int, float]) -> Ranking:
    """``fused`` with each unit's score times its share in ``shares`` (1 when not named)."""
    if not shares:
        return fused
    return _ordered({cid: score * shares.get(cid, 1.0) for cid, score in fused})


#: a line that only brings names in or hands them out (an import, a
#: ``require``, an export of a name defined elsewhere), a comment, or a
#: closing bracket: what a unit made of nothing else says is in other units
_FRAGMENT_LINE = re.compile(
    r"\s*(?:$|//|/\*|\*|#(?!\s*define)|import\b|from\s+\S+\s+import\b|package\s|using\s"
    r"|export\s+(?:\*|\{[^}]*\}|default\s+[\w.$]+\s*;?\s*$)"
    r"|module\.exports\s*=\s*[\w.$]+\s*;?\s*$"
    r"|(?:(?:var|let|const)\s+)?[\w$]+\s*=\s*require\("
    r"|[\])};,]+\s*$)"
)


#: a line that brings a name in or hands one out
_TRADE_LINE = re.compile(
    r"\s*(?:import\b|from\s+\S+\s+import\b|package\s|using\s|export\s|module\.exports\s*="
    r"|(?:(?:var|let|const)\s+)?[\w$]+\s*=\s*require\()"
)


def is_fragment(text: str) -> bool:
    """Whether a code unit is only imports, exports of names defined
    elsewhere and ``require`` calls (with comments and brackets between
    them): it names what other units are, and is rarely what a description
    of behaviour asks for. A unit of comments alone is not one: it describes."""
    lines = text.splitlines()
    return any(_TRADE_LINE.match(line) for line in lines) and all(
        _FRAGMENT_LINE.match(line) for line in lines
    )


def fragments_last(fused: Ranking, fragments: set[int], share: float) -> Ranking:
    """``fused`` with the units in ``fragments`` keeping ``share`` of their score."""
    if not fragments or share >= 1:
        return fused
    return _ordered({cid: score * share if cid in fragments else score for cid, score in fused})


def feedback_query(query: np.ndarray, leaders: np.ndarray, weight: float) -> np.ndarray:
    """Pseudo-relevance feedback (Rocchio): the unit-length ``query + weight
    * mean(leaders)``, where ``leaders`` are the stored vectors of the units
    the first fusion ranked best."""
    moved = np.asarray(query, dtype=np.float32) + weight * leaders.mean(axis=0)
    norm = float(np.linalg.norm(moved))
    return moved / norm if norm > 0 else np.asarray(query, dtype=np.float32)


def query_share(terms: int, full_at: int) -> float:
    """How much of its weight a dense ranking keeps for a query of ``terms``
    terms: a one- or two-word query is a lookup, where the words themselves
    are the evidence, while a question of ``full_at`` words or more is what
    the model is good at."""
    if full_at <= 1:
        return 1.0
    return min(1.0, max(terms, 1) / full_at)


def definitions_first(fused: Ranking, defining: Sequence[int]) -> Ranking:
    """``fused`` with the units in ``defining`` (best first) moved ahead of
    the rest; a defining unit the fusion had not ranked joins at the end of
    the definitions."""
    if not defining:
        return fused
    base = dict(fused)
    floor = min(base.values(), default=0.0)
    scores = dict(base)
    for position, cid in enumerate(defining):
        # Keeps the defining units in their own order, all above the rest.
        scores[cid] = base.get(cid, floor) + DEFINITION_BONUS + (len(defining) - position) * 1e-6
    return _ordered(scores)


def definitions_ranking(defining: Sequence[int], weight: float) -> Weighted:
    """The units in ``defining`` (best first) as one more ranking to fuse:
    for a sentence that mentions a name, defining it is evidence, not the
    answer (the sentence may describe what uses the name)."""
    return Weighted([(cid, 1.0) for cid in defining], weight)


def _ordered(scores: dict[int, float]) -> Ranking:
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def is_weak(
    *, full_lexical_matches: int, lexical_hits: int, best_cosine: float | None, threshold: float
) -> bool:
    """Nothing matches well: no unit holds every query term, and the nearest
    vector is less similar than ``threshold``. Without a dense ranking (no
    embedder, or the provider is down) only a query nothing matches at all
    is weak: a long question's every word is rarely in one unit."""
    if full_lexical_matches:
        return False
    if best_cosine is None:
        return lexical_hits == 0
    return best_cosine < threshold
