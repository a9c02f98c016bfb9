"""Hybrid search (spec §9.1–9.2): lexical BM25 and dense kNN, fused by
reciprocal rank fusion, with filters applied before the cut to k."""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np

from corpus import adapter as query_adapter
from corpus import globs, patterns, ranking, slices
from corpus.citations import SpanRef, place_dict
from corpus.definitions import declared_name, defines, query_identifiers
from corpus.files import prefix_range, under_prefix
from corpus.index import chunks, idlists, lexical, tables, words
from corpus.index.dense import status as dense_status
from corpus.index.dense import stored
from corpus.index.dense.embedding import dense_store, from_bytes
from corpus.index.dense.vectors import KINDS, VectorIndex
from corpus.models import Chunk
from corpus.providers.base import Embedder, ModelInfo
from corpus.status import indexing_complete
from kernel import errors
from kernel.config import MAX_K, Config
from kernel.jsontypes import JsonObject
from kernel.state import StateDir

log = logging.getLogger(__name__)

INDEXES = ("auto", "text", "code", "both")
# Below this many filtered candidates, exact search over their stored
# vectors beats growing an ANN oversample until enough of them turn up.
BRUTE_FORCE_LIMIT = 20000
#: units a lexical search for a queried name reads to find its definition
DEFINITION_POOL = 50
#: how deep a lexical ranking is read, in pools, while units of files the
#: rules exclude now take the places of readable ones (Searcher._lexical)
CROWDED_DEPTH = 16
#: units whose text is read at once to be screened for credentials (Searcher._clean)
SCREENED_BATCH = 64
#: pages of units holding every query term read past the first ``limit``
#: when those all lie in files passed over (Searcher._full_past)
FULL_PAGES = 8
#: how far down the fused ranking feedback looks for each index's units
#: (``search.feedback_units`` times this)
FEEDBACK_DEPTH = 4
#: how far down the fused ranking units are read to tell imports from code
FRAGMENT_DEPTH = 100

_CODE_HINTS = re.compile(
    # camelCase: a lowercase letter, digits, a capital. Found wherever
    # [a-z][a-z0-9]*[A-Z] is, but scanned from each start once (that form
    # rescans the rest of a long word from every letter: quadratic, issue #23).
    r"[a-z][0-9]*[A-Z]"
    r"|\b[a-z0-9]+_[a-z0-9_]+\b"  # snake_case
    r"|\w\(\)?|::|->|=>|\bdef\b|\bclass\b|\bfunc\b|\bimport\b|\breturn\b"
    r"|\.(?:py|go|rs|js|ts|java|c|h|cpp|rb|php|sh)\b|[{};]"
)
_CODE_TYPES = {"code"}


@dataclass(frozen=True)
class Filters:
    path_prefix: str = ""
    file_glob: str = ""
    doc_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.file_glob:
            globs.compile_glob(self.file_glob)  # INVALID_FIELD before any work, not a 500 midway

    def sql(self) -> tuple[str, list[str]]:
        """A predicate over documents ``d`` for the filters SQL can apply."""
        clauses: list[str] = []
        params: list[str] = []
        if self.path_prefix:
            escaped = self.path_prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            clauses.append("d.rel_path LIKE %s ESCAPE '\\'")
            params.append(escaped + "%")
            bounds = prefix_range(self.path_prefix)
            if bounds is not None:  # case-sensitive, as under_prefix
                clauses.append("d.rel_path >= %s AND d.rel_path < %s")
                params.extend(bounds)
        if self.doc_types:
            clauses.append(f"d.doc_type IN ({', '.join(['%s'] * len(self.doc_types))})")
            params.extend(self.doc_types)
        return " AND ".join(clauses), params

    def glob_matches(self, rel_path: str) -> bool:
        if not self.file_glob:
            return True
        # gitignore syntax, matched in linear time (corpus/globs.py)
        return globs.compile_glob(self.file_glob).match_file(rel_path)


@dataclass(frozen=True)
class Hit:
    chunk_id: int
    rel_path: str
    doc_type: str
    rep_type: str
    score: float
    snippet: str
    span: SpanRef
    text: str = field(repr=False, default="")
    #: a human pointer to the span ("slide 7", "sheet 'Q2'"), from its extra data
    label: str | None = None

    def as_dict(self) -> JsonObject:
        details = {
            "doc_type": self.doc_type,
            "rep_type": self.rep_type,
            "score": round(self.score, 6),
            "snippet": self.snippet,
        }
        return place_dict(self.chunk_id, self.rel_path, self.span, self.label, details)


@dataclass(frozen=True)
class Ranked:
    """A query's final ranking, every candidate (``Searcher.ranked``)."""

    fused: ranking.Ranking
    index_used: str
    dense: JsonObject
    weak: bool
    #: what ``weak`` was judged from, to judge it again over the units a
    #: reader may see: the lexical hits holding every query term, every
    #: lexical hit, and each dense ranking's units with their cosines
    full_matches: tuple[int, ...] = ()
    lexical_hits: tuple[int, ...] = ()
    cosines: tuple[ranking.Ranking, ...] = ()
    #: ``search.weak_cosine``
    threshold: float = 0.0

    def units(self) -> list[int]:
        """Every unit the ranking and ``weak`` were judged from."""
        ranked = [cid for r in (self.fused, *self.cosines) for cid, _ in r]
        return list(dict.fromkeys([*ranked, *self.full_matches, *self.lexical_hits]))

    def weak_among(self, seen: Callable[[int], bool]) -> bool:
        """:func:`ranking.is_weak` over the units ``seen`` lets through only."""
        # Each ranking is best first, and is_weak asks only whether there is
        # a full match, whether there is a lexical hit, and the best cosine.
        best = [next((score for cid, score in r if seen(cid)), None) for r in self.cosines]
        known = [score for score in best if score is not None]
        return ranking.is_weak(
            full_lexical_matches=int(any(seen(cid) for cid in self.full_matches)),
            lexical_hits=int(any(seen(cid) for cid in self.lexical_hits)),
            best_cosine=max(known) if known else None,
            threshold=self.threshold,
        )


@dataclass(frozen=True)
class SearchResult:
    query: str
    k: int
    index_used: str
    hits: list[Hit]
    indexing_complete: bool
    #: whether dense retrieval took part (corpus/index/dense/status.py): ok, off, or unavailable
    dense: JsonObject = field(default_factory=dense_status.off)
    #: "weak" when nothing matches well (corpus/ranking.py: is_weak), else "good"
    match: str = "good"
    #: the position in the ranking the hits after these start from (the
    #: tools' next_cursor); None when the ranking has nothing after them
    next_start: int | None = None

    def as_dict(self) -> JsonObject:
        return {
            "query": self.query,
            "k": self.k,
            "index_used": self.index_used,
            "hits": [hit.as_dict() for hit in self.hits],
            "indexing_complete": self.indexing_complete,
            "dense": dict(self.dense),
            "match": self.match,
        }


def route(query: str, index: str, filters: Filters) -> str:
    """``auto`` becomes ``code`` for code-like queries or code-only filters."""
    if index != "auto":
        return index
    if filters.doc_types and set(filters.doc_types) <= _CODE_TYPES:
        return "code"
    return "code" if _CODE_HINTS.search(query) else "text"


#: the deepest position of a ranking a page may start from (a ranking holds
#: a few hundred units: ``search.candidates`` from each half)
MAX_START = 10_000


def validate(query: str, k: int, index: str) -> None:
    if not isinstance(query, str) or not query.strip():
        raise errors.Dir2mcpError(errors.MISSING_FIELD, "query must be a non-empty string")
    patterns.check_query(query)
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise errors.Dir2mcpError(errors.INVALID_RANGE, f"k must be an integer from 1 to {MAX_K}")
    if index not in INDEXES:
        raise errors.Dir2mcpError(errors.INVALID_FIELD, f"index must be one of {', '.join(INDEXES)}")


def _holds_secret(holds_secret: Callable[[str], object], row: chunks.HitRow) -> bool:
    """Whether what a hit shows of its unit holds a credential: its text, or
    its label (a sheet's name, shown with each of its units' hits where only
    the first one's text opens with it: session 29's review)."""
    return bool(holds_secret(row.text)) or (row.label is not None and bool(holds_secret(row.label)))


class Searcher:
    """Hybrid search over one state directory."""

    def __init__(
        self,
        state: StateDir,
        config: Config,
        embedder: Embedder | None,
        *,
        readable: Callable[[str], bool] | None = None,
        pinned: Callable[[], AbstractContextManager[None]] | None = None,
        holds_secret: Callable[[str], object] | None = None,
        prime: Callable[[Iterable[str]], None] | None = None,
    ) -> None:
        self.state = state
        self.config = config
        self.embedder = embedder
        #: whether the rules as they are now let a file be read: the index
        #: may still hold one excluded since it was written (a rule changed,
        #: its walk not done yet, or ``--no-index``); such hits are passed over
        self.readable = readable
        #: a block in which ``readable`` looks each directory's rules up once
        #: (``ExclusionEngine.pinned``), held for one search
        self.pinned = pinned
        #: whether a unit's stored text holds a credential under the rules as
        #: they are now (``ExclusionEngine.find_secret``): it was screened by
        #: the rules it was indexed under, and a secret pattern added since
        #: is seen by the walk it starts (under ``--no-index``, never); such
        #: a unit is passed over as one gone (session 29)
        self.holds_secret = holds_secret
        #: judges a batch of paths ``readable`` will be asked about, a few
        #: queries for them all (``corpus.screen.SecretBearing.prime``)
        self.prime = prime
        #: one search's verdicts by path (each ranking and the page judge the
        #: same files); per thread, as one searcher serves every call
        self._searching = threading.local()

    def search(
        self, query: str, *, k: int = 10, index: str = "auto", filters: Filters = Filters(), start: int = 0
    ) -> SearchResult:
        """The first ``k`` hits of the ranking from position ``start`` (0:
        its top; a previous result's ``next_start``: the hits after it).
        The ranking does not depend on ``k``, so the pages of a query are
        the first hits of a larger ``k``, cut."""
        validate(query, k, index)
        if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start <= MAX_START:
            raise errors.Dir2mcpError(errors.INVALID_RANGE, f"start must be an integer from 0 to {MAX_START}")
        with self._judging():
            return self._search(query, k, index, filters, start)

    @contextlib.contextmanager
    def _judging(self) -> Iterator[None]:
        """One search's block: each file judged once, under the rules as
        they stand when it starts."""
        if self.readable is None or getattr(self._searching, "verdicts", None) is not None:
            yield
            return
        self._searching.verdicts = {}
        try:
            with self.pinned() if self.pinned is not None else contextlib.nullcontext():
                yield
        finally:
            self._searching.verdicts = None

    def _judged(self, path: str) -> bool:
        """``readable(path)``, once a search."""
        readable = self.readable
        assert readable is not None
        verdicts: dict[str, bool] | None = getattr(self._searching, "verdicts", None)
        if verdicts is None:
            return readable(path)
        if path not in verdicts:
            verdicts[path] = readable(path)
        return verdicts[path]

    def _search(self, query: str, k: int, index: str, filters: Filters, start: int) -> SearchResult:
        ranked = self.ranked(query, k=k, index=index, filters=filters)
        fused, weak = ranked.fused, ranked.weak
        if self.readable is not None:
            # Positions, whether more follow and whether anything matches
            # well, over the units the rules let through now: judged over
            # the whole ranking, a unit of a file excluded since the index
            # was written told a client of its words (session 27). Each
            # file is judged once, and only as far as the answer needs.
            seen = self._seen(ranked.units())
            weak = ranked.weak_among(seen)
            readable = (unit for unit in fused if seen(unit[0]))
            fused = list(itertools.islice(readable, start + k + 1))  # the page and one after it
            hits, after = self._hits(query, fused, k, start)
            if len(hits) < k and len(fused) == start + k + 1:  # units gone since the ranking was read
                fused += readable
                hits, after = self._hits(query, fused, k, start)
        else:
            hits, after = self._hits(query, fused, k, start)
        return SearchResult(
            query=query,
            k=k,
            index_used=ranked.index_used,
            hits=hits,
            indexing_complete=indexing_complete(self.embedder is not None),
            dense=ranked.dense,
            match="weak" if weak else "good",
            next_start=after if after < len(fused) else None,
        )

    def _seen(self, ids: list[int]) -> Callable[[int], bool]:
        """Whether a unit of ``ids`` (a ranking: a few hundred units) lies in
        a file ``readable`` lets through, and its stored text holds no
        credential under the rules now; each file judged once, when asked."""
        paths = chunks.chunk_paths(ids)
        if self.prime is not None:
            self.prime(paths.values())
        clean = self._clean(ids)

        def seen(cid: int) -> bool:
            path = paths.get(cid)
            return path is not None and self._judged(path) and clean(cid)

        return seen

    def _clean(self, ids: list[int]) -> Callable[[int], bool]:
        """Whether a unit of ``ids`` holds no credential under the rules now
        (``holds_secret``), its text read when asked, with the next
        ``SCREENED_BATCH`` of the ranking. Such a unit is passed over by the
        page (``_hits_of``) and by ``match`` and the positions alike: counted
        there, a query of a credential's words answered ``good`` with no hit
        (session 29)."""
        holds_secret = self.holds_secret
        if holds_secret is None:
            return lambda cid: True
        at = {cid: n for n, cid in enumerate(ids)}
        known: dict[int, bool] = {}

        def clean(cid: int) -> bool:
            if cid not in known:
                start = at.get(cid, 0)
                batch = [c for c in ids[start : start + SCREENED_BATCH] if c not in known] or [cid]
                rows = chunks.hit_rows(batch)
                known.update((c, c not in rows or not _holds_secret(holds_secret, rows[c])) for c in batch)
            return known.get(cid, True)

        return clean

    def ranked(self, query: str, *, k: int = 10, index: str = "auto", filters: Filters = Filters()) -> Ranked:
        """The whole final ranking of ``query`` (every candidate, best first),
        before it is cut to ``k``: ``search`` returns its first ``k`` units.
        ``k`` matters only with ``search.candidates: 0`` (the earlier pool)."""
        used = route(query, index, filters)
        search_cfg = self.config.search
        pool = self._pool(k)
        lexical_kinds = (used,) if index in ("text", "code") else ()
        lexical_hits, full_matches = self._lexical(query, pool, filters, lexical_kinds)
        plan = self._dense_plan(query, index, used)
        dense_rankings, dense, vectors = self._dense_rankings(query, plan, pool, filters)
        if dense.get("status") == dense_status.OK:
            waiting = [kind for kind in dense_store(self.state).waiting() if index in (kind, "auto", "both")]
            if waiting:
                dense = dense_status.waiting(waiting)
        lexical_ranking = ranking.Weighted(lexical_hits, 1.0, shares=self._long_shares(lexical_hits))
        rankings = [lexical_ranking, *dense_rankings]
        fused = ranking.fuse(rankings, method=search_cfg.fusion, rrf_k=search_cfg.rrf_k)
        if dense_rankings and search_cfg.feedback_units and search_cfg.feedback_share:
            again = self._feedback(fused, plan, dense_rankings, vectors, pool, filters)
            if again is not None:
                rankings = [lexical_ranking, *again]
                fused = ranking.fuse(rankings, method=search_cfg.fusion, rrf_k=search_cfg.rrf_k)
        defining = self._defining(query, fused, filters, lexical_kinds)
        if len(query.split()) <= search_cfg.definitions_lead_words:
            fused = ranking.definitions_first(self._reordered(fused, query), defining)
        elif defining:
            fused = ranking.fuse(
                [*rankings, ranking.definitions_ranking(defining, lexical_ranking.weight)],
                method=search_cfg.fusion,
                rrf_k=search_cfg.rrf_k,
            )
            fused = self._reordered(fused, query)
        else:
            fused = self._reordered(fused, query)
        best = max((r.ranking[0][1] for r in dense_rankings if r.ranking), default=None)
        weak = ranking.is_weak(
            full_lexical_matches=len(full_matches),
            lexical_hits=len(lexical_hits),
            best_cosine=best,
            threshold=search_cfg.weak_cosine,
        )
        return Ranked(
            fused=fused,
            index_used=_index_used(used, plan, dense),
            dense=dense,
            weak=weak,
            full_matches=full_matches,
            lexical_hits=tuple(cid for cid, _ in lexical_hits),
            cosines=tuple(r.ranking for r in dense_rankings),
            threshold=search_cfg.weak_cosine,
        )

    def _pool(self, k: int) -> int:
        """Candidates each ranking hands the fusion: ``search.candidates``,
        whatever ``k`` is, so that every stage after it (fusion, feedback,
        definitions first) sees the same lists and the first ``k`` hits are
        the first ``k`` of any larger ``k``. With 0, the earlier per-request
        pool: ``k × rag.oversample_factor``, or ``k`` for a lone lexical ranking."""
        if self.config.search.candidates:
            return self.config.search.candidates
        return k * self.config.rag.oversample_factor if self.embedder is not None else k

    # -- dense rankings -----------------------------------------------------

    def _dense_plan(self, query: str, index: str, used: str) -> list[tuple[str, float]]:
        """(kind, weight) of each dense index to search. ``auto`` searches every
        index holding vectors, the one the query's shape points at in full
        and the other at ``search.other_index_weight``; a short query keeps
        only part of the dense weight (``ranking.query_share``)."""
        if self.embedder is None:
            return []
        cfg = self.config.search
        weight = {"text": cfg.dense_weight, "code": cfg.code_dense_weight}
        if index in ("text", "code"):
            return [(index, weight[index])]
        if index == "both":
            return [("text", weight["text"]), ("code", weight["code"])]
        store = dense_store(self.state)
        share = ranking.query_share(len(words.query_terms(query)), cfg.dense_full_terms)
        weight = {kind: value * share for kind, value in weight.items()}
        return [
            (kind, weight[kind] if kind == used else weight[kind] * cfg.other_index_weight)
            for kind in KINDS
            if (held := store.for_search(kind)) is not None and len(held)
        ]

    def _dense_rankings(
        self, query: str, plan: list[tuple[str, float]], pool: int, filters: Filters
    ) -> tuple[list[ranking.Weighted], JsonObject, dict[str, np.ndarray]]:
        """The dense rankings of ``plan`` and the query vector of each kind,
        or none and why (degrade, don't fail)."""
        if self.embedder is None:
            return [], dense_status.off(), {}
        vectors: dict[
            ModelInfo, np.ndarray
        ] = {}  # one query embedding per model, shared by the indices using it
        by_kind: dict[str, np.ndarray] = {}
        out = []
        for kind, weight in plan:
            model = self.embedder.model_info(kind)
            try:
                if model not in vectors:
                    vectors[model] = self.embedder.embed_query(query, kind=kind)
            except Exception as exc:  # provider error, timeout, a model that cannot load
                dense = dense_status.unavailable(exc, self.embedder.provider)
                log.warning(
                    "dense search unavailable (%s: %s); answering from the lexical index",
                    dense["code"],
                    dense["message"],
                )
                return [], dense, {}
            by_kind[kind] = self._adapted(vectors[model], kind, model)
            hits = self._dense(by_kind[kind], kind, pool, filters)
            out.append(ranking.Weighted(hits, weight, absolute=True))
        return out, dense_status.ok(), by_kind

    def _adapted(self, vector: np.ndarray, kind: str, model: ModelInfo) -> np.ndarray:
        """The query vector for ``kind``'s index: moved by the query adapter
        (``search.query_adapter``, corpus/adapter.py) for the code index of
        the model it was fitted for, else as embedded."""
        if kind != "code":
            return vector
        adapter = query_adapter.for_query(self.config.search.query_adapter, model.model, vector.shape[-1])
        return adapter.apply(vector) if adapter is not None else vector

    def _feedback(
        self,
        fused: ranking.Ranking,
        plan: list[tuple[str, float]],
        first: list[ranking.Weighted],
        vectors: dict[str, np.ndarray],
        pool: int,
        filters: Filters,
    ) -> list[ranking.Weighted] | None:
        """The dense rankings with a second round (None when no index gets
        one, so the first fusion stands): each index of
        ``search.feedback_indices`` is searched again with its query vector
        moved towards the vectors of the best fused units it holds
        (``ranking.feedback_query``), and that ranking takes
        ``search.feedback_share`` of the index's weight. What both halves agree
        on first tells the model which neighbourhood the question is about.
        An index none of whose units lead the fusion keeps its first ranking."""
        cfg = self.config.search
        if not any(kind in cfg.feedback_indices for kind, _ in plan):
            return None  # e.g. a prose-only search: no stored vectors to read
        leaders = stored.stored_vectors([cid for cid, _ in fused[: FEEDBACK_DEPTH * cfg.feedback_units]])
        out, moved_any = [], False
        for (kind, weight), before in zip(plan, first, strict=True):
            near = [vector for cid, (of, vector) in leaders.items() if of == kind][: cfg.feedback_units]
            if kind not in cfg.feedback_indices or not near or near[0].shape != vectors[kind].shape:
                out.append(before)
                continue
            moved = ranking.feedback_query(vectors[kind], np.vstack(near), cfg.feedback_weight)
            again = self._dense(moved, kind, pool, filters)
            if cfg.feedback_share < 1:
                out.append(ranking.Weighted(before.ranking, weight * (1 - cfg.feedback_share), absolute=True))
            out.append(ranking.Weighted(again, weight * cfg.feedback_share, absolute=True))
            moved_any = True
        return out if moved_any else None

    def _defining(
        self, query: str, fused: ranking.Ranking, filters: Filters, kinds: Sequence[str]
    ) -> list[int]:
        """Units that define a name the query asks for, best ranked first:
        those the fusion found, then those a lexical search for the name finds."""
        names = query_identifiers(query)
        if not names:
            return []
        candidates = [cid for cid, _ in fused]
        for name in names:
            found, _ = self._lexical(name, DEFINITION_POOL, filters, kinds)
            candidates.extend(cid for cid, _ in found)
        candidates = list(dict.fromkeys(candidates))
        rows = Chunk.objects.filter(chunk_id__in=idlists.each_of(candidates), deleted=False).values_list(
            "chunk_id", *slices.FIELDS
        )
        texts = dict(slices.texts(list(rows), 1))
        return [cid for cid in candidates if cid in texts and any(defines(texts[cid], n) for n in names)]

    # -- lexical ------------------------------------------------------------

    def _lexical(
        self, query: str, pool: int, filters: Filters, kinds: Sequence[str]
    ) -> tuple[ranking.Ranking, tuple[int, ...]]:
        """The lexical ranking, and the units holding every query term that
        the filters and the rules let through (with a short query, the
        first of its hits)."""
        where, params = filters.sql()
        if kinds:
            kind_sql = f"c.index_kind IN ({', '.join(['%s'] * len(kinds))})"
            where = f"{where} AND {kind_sql}" if where else kind_sql
            params = [*params, *kinds]
        limit = pool
        while True:
            found, full = lexical.search_tiers(
                query,
                limit=limit,
                chunk_filter_sql=where,
                params=params,
                all_first_max=self.config.search.all_terms_first_max,
                drop_stop_words=self.config.search.drop_stop_words,
            )
            kept = set(self._glob_filter([cid for cid, _ in found], filters))
            refused = self._refused(list(kept))
            kept -= refused
            hits = [hit for hit in found if hit[0] in kept]
            # Units of files excluded now took places: a deeper ranking, up
            # to CROWDED_DEPTH times the pool (until session 29 none, so 200
            # such units ranked first hid every readable hit)
            crowded = bool(refused) and limit < pool * CROWDED_DEPTH
            if len(hits) >= pool or len(found) < limit or not (filters.file_glob or crowded):
                readable = self._kept_full(full, found, kept, filters)
                if not readable and len(full) >= limit:  # all passed over, and more may follow
                    readable = self._full_past(query, full, limit, (where, params), filters)
                return hits[:pool], readable
            limit *= 4

    def _kept_full(
        self, full: tuple[int, ...], found: ranking.Ranking, kept: set[int], filters: Filters
    ) -> tuple[int, ...]:
        """Those of ``full`` (the units holding every query term) that pass
        the glob and the rules now. A query of more than
        ``search.all_terms_first_max`` terms is ranked by BM25 alone, so its
        full matches need not be among ``found`` (``kept`` judged those):
        the others are judged here, at most the lexical ``limit`` of them.
        Until session 28 they were a count over the whole index, so a long
        query whose words only an excluded file held together answered
        ``match: good``."""
        ranked = {cid for cid, _ in found}
        others = [cid for cid in full if cid not in ranked]
        if others:
            more = set(self._glob_filter(others, filters))
            kept = kept | (more - self._refused(list(more)))
        return tuple(cid for cid in full if cid in kept)

    def _full_past(
        self, query: str, full: tuple[int, ...], limit: int, where: tuple[str, list[str]], filters: Filters
    ) -> tuple[int, ...]:
        """Readable units holding every term of ``query``, when the first
        ``limit`` that do (``full``) lie in files the rules exclude now or
        the glob leaves out: each page asks again for units outside every
        file passed over so far, so it holds new files only, and stops at
        the first page holding a readable one. Until session 29 a readable
        full match past ``limit`` such units was not seen (``match`` could
        be weak). At most :data:`FULL_PAGES` pages: past ``limit`` ×
        (FULL_PAGES + 1) units of files passed over, "more than that many
        units of excluded files hold these words", never a name."""
        sql, params = where
        passed = set(chunks.chunk_paths(list(full)).values())
        for _ in range(FULL_PAGES if passed else 0):  # none: every unit gone since it was read
            outside, listed = _outside(passed)
            page = lexical.full_ids(
                query,
                limit=limit,
                chunk_filter_sql=f"{sql} AND {outside}" if sql else outside,
                params=[*params, listed],
            )
            paths = chunks.chunk_paths(list(page))
            readable = tuple(
                cid
                for cid in page
                if cid in paths
                and filters.glob_matches(paths[cid])
                and (self.readable is None or self._judged(paths[cid]))
            )
            if readable or len(page) < limit:
                return readable
            passed.update(paths.values())
        return ()

    def _long_shares(self, hits: ranking.Ranking) -> dict[int, float] | None:
        """``ranking.long_unit_shares`` of the code units among ``hits``."""
        limit = self.config.search.code_lexical_lines
        if not limit or not hits:
            return None
        return ranking.long_unit_shares(chunks.code_unit_lines([cid for cid, _ in hits]), limit)

    def _reordered(self, fused: ranking.Ranking, query: str) -> ranking.Ranking:
        """``fused`` after what the units are, not how they matched: a code
        unit longer than ``search.long_unit_lines`` keeps
        ``ranking.cost_shares`` of its score; among the first
        ``FRAGMENT_DEPTH``, a code unit whose declared name is made of the
        query's words gains ``ranking.name_match_shares`` of its score
        (``search.name_match_weight``), one whose signature line declares
        nothing (``definitions.declared_name``: a comment, a statement, a
        leftover window) keeps ``search.undeclared_share`` of it, and code
        units that are only imports and exports (``ranking.is_fragment``)
        keep ``search.fragment_share`` of theirs."""
        cfg = self.config.search
        if fused and cfg.long_unit_lines and cfg.long_unit_exponent:
            lines = chunks.code_unit_lines([cid for cid, _ in fused])
            fused = ranking.scaled(
                fused, ranking.cost_shares(lines, cfg.long_unit_lines, cfg.long_unit_exponent)
            )
        share, weight, undeclared = cfg.fragment_share, cfg.name_match_weight, cfg.undeclared_share
        if not fused or (share >= 1 and weight <= 0 and undeclared >= 1):
            return fused
        ids = [cid for cid, _ in fused[:FRAGMENT_DEPTH]]
        rows = Chunk.objects.filter(chunk_id__in=idlists.each_of(ids), index_kind="code").values_list(
            "chunk_id", *slices.FIELDS
        )
        texts = slices.texts(list(rows), 1)
        if weight > 0 or undeclared < 1:
            names = {cid: name for cid, text in texts if (name := declared_name(text))}
            query_words = [term for term in words.query_terms(query) if term not in lexical.STOP_WORDS]
            shares = ranking.name_match_shares(names, query_words, weight)
            if undeclared < 1:
                shares.update((cid, undeclared) for cid, _ in texts if cid not in names)
            fused = ranking.scaled(fused, shares)
        fragments = {cid for cid, text in texts if ranking.is_fragment(text)}
        return ranking.fragments_last(fused, fragments, share)

    def _glob_filter(self, ids: list[int], filters: Filters) -> list[int]:
        if not filters.file_glob or not ids:
            return ids
        paths = chunks.chunk_paths(ids)  # one parameter: an ORM ``__in`` bound a variable an id
        return [cid for cid in ids if filters.glob_matches(paths.get(cid, ""))]

    # -- dense --------------------------------------------------------------

    def _dense(self, vector: np.ndarray, kind: str, pool: int, filters: Filters) -> ranking.Ranking:
        """(chunk_id, cosine) of the nearest live chunks of ``kind``, best first."""
        index = dense_store(self.state).for_search(kind)
        if index is None or not len(index):
            return []
        if vector.shape[-1] != index.dim:
            raise errors.Dir2mcpError(
                errors.INDEX_VERSION_MISMATCH,
                f"the {kind} index holds {index.model} vectors ({index.dim} dims); the query embedder "
                f"gives {vector.shape[-1]} dims",
                hint="Run `dir2mcp reindex` with the embedder you want, or restore embed.provider.",
            )
        candidates = self._candidates(kind, filters)
        if candidates is not None and len(candidates) <= BRUTE_FORCE_LIMIT:
            return self._readable_head(self._exact(vector, candidates, filters), pool)
        return self._approximate(index, vector, kind, pool, filters)

    def _readable_head(self, nearest: ranking.Ranking, pool: int) -> ranking.Ranking:
        """The first ``pool`` units of ``nearest`` in files the rules let
        through, read a pool at a time and at most ``CROWDED_DEPTH`` pools
        deep (until session 29, the first ``pool`` less those excluded: a
        readable unit's place in the ranking, or in it at all, depended on
        how many excluded ones were nearer)."""
        kept: ranking.Ranking = []
        for start in range(0, min(len(nearest), pool * CROWDED_DEPTH), pool):
            window = nearest[start : start + pool]
            refused = self._refused([cid for cid, _ in window])
            kept += [hit for hit in window if hit[0] not in refused]
            if len(kept) >= pool:
                break
        return kept[:pool]

    def _refused(self, ids: list[int]) -> set[int]:
        """The units of ``ids`` in files ``readable`` refuses now (each file
        judged once). Every ranking is cut to them as it is read, so what a
        fusion makes of it (a hit's ``score``: its rank in each ranking;
        the definitions put first; the feedback round's vectors) depends on
        the units the rules let through alone: until session 27's review a
        readable hit's score counted the excluded units ranked above it, a
        probe of the words an excluded file holds. A unit gone from the
        index is kept (``_hits_of`` passes over it), so with nothing
        excluded every ranking is the one it was."""
        if self.readable is None or not ids:
            return set()
        paths = chunks.chunk_paths(ids)
        if self.prime is not None:
            self.prime(paths.values())
        return {cid for cid, path in paths.items() if not self._judged(path)}

    def _candidates(self, kind: str, filters: Filters) -> list[int] | None:
        """Ids passing the SQL filters, or None when nothing narrows the set."""
        if not (filters.path_prefix or filters.doc_types or filters.file_glob):
            return None
        query = stored.live_chunks(kind)
        if filters.path_prefix:
            query = query.filter(under_prefix("representation__document__rel_path", filters.path_prefix))
        if filters.doc_types:
            query = query.filter(representation__document__doc_type__in=filters.doc_types)
        return list(query.values_list("chunk_id", flat=True)[: BRUTE_FORCE_LIMIT + 1])

    def _exact(self, vector: np.ndarray, candidates: list[int], filters: Filters) -> ranking.Ranking:
        rows = Chunk.objects.filter(chunk_id__in=idlists.each_of(candidates)).values_list(
            "chunk_id", "embedding", "representation__document__rel_path"
        )
        ids, vecs = [], []
        for cid, blob, path in rows.iterator(chunk_size=2000):
            if blob and filters.glob_matches(path):
                ids.append(cid)
                vecs.append(from_bytes(blob))
        if not ids:
            return []
        scores = np.vstack(vecs) @ vector
        # best first, ties by chunk id: the order never depends on the rows' order
        return [(ids[i], float(scores[i])) for i in np.lexsort((np.asarray(ids), -scores))]

    def _approximate(
        self, index: VectorIndex, vector: np.ndarray, kind: str, pool: int, filters: Filters
    ) -> ranking.Ranking:
        """kNN with oversampling that grows until ``pool`` live hits pass
        the glob and the rules; while only units of files the rules exclude
        now keep it short, up to ``CROWDED_DEPTH`` pools (as the lexical
        ranking does)."""
        want = pool
        while True:
            neighbours = index.search(vector, want)
            ids = [n.chunk_id for n in neighbours]
            live = stored.live_embedded(ids, kind)
            kept = set(self._glob_filter([cid for cid in ids if cid in live], filters))
            refused = self._refused(list(kept))
            hits = [
                (n.chunk_id, n.score) for n in neighbours if n.chunk_id in kept and n.chunk_id not in refused
            ]
            if len(hits) >= pool or want >= len(index):
                return hits[:pool]
            if len(hits) + len(refused) >= pool and want >= pool * CROWDED_DEPTH:
                return hits
            want = min(len(index), want * 4)

    # -- results ------------------------------------------------------------

    def _hits(self, query: str, fused: ranking.Ranking, k: int, start: int = 0) -> tuple[list[Hit], int]:
        """The first ``k`` units of ``fused`` from position ``start`` that
        still exist (one deleted since the ranking was read is passed over,
        so ``k`` hits are still the first ``k`` of a larger ``k``), and the
        position after the last one read."""
        terms = words.tokens(query)
        hits: list[Hit] = []
        while len(hits) < k and start < len(fused):
            batch = fused[start : start + k - len(hits)]
            start += len(batch)
            hits.extend(self._hits_of(batch, terms))
        return hits, start

    def _hits_of(self, fused: ranking.Ranking, terms: list[str]) -> list[Hit]:
        rows = chunks.hit_rows([cid for cid, _ in fused])
        hits = []
        for cid, score in fused:
            row = rows.get(cid)
            if row is None:
                continue
            text, rep_type, rel_path, doc_type, span, label = row
            if self.readable is not None and not self._judged(rel_path):
                continue
            if self.holds_secret is not None and _holds_secret(self.holds_secret, row):
                continue
            hits.append(
                Hit(
                    chunk_id=cid,
                    rel_path=rel_path,
                    doc_type=doc_type,
                    rep_type=rep_type,
                    score=score,
                    snippet=snippet(text, terms, self.config.search.snippet_chars),
                    span=span,
                    text=text,
                    label=label,
                )
            )
        return hits


def _outside(paths: Collection[str]) -> tuple[str, str]:
    """A predicate over documents ``d``, a path none of ``paths``, and its one
    parameter: a ``NOT IN`` of a variable a path reached
    ``search.candidates`` × 9 variables (45,000 at the largest), past a
    default SQLite's 32,766, which refused the query (session 30)."""
    listed, param = tables.one_of("d.rel_path", sorted(paths), text=True)
    return f"NOT ({listed})", param


def snippet(text: str, terms: Sequence[str], limit: int) -> str:
    """At most ``limit`` characters of ``text``, centred on the first term found."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    lower = flat.lower()
    positions = [pos for term in terms if len(term) > 1 and (pos := lower.find(term.lower())) >= 0]
    centre = min(positions) if positions else 0
    start = max(0, min(centre - limit // 3, len(flat) - limit))
    piece = flat[start : start + limit]
    return ("…" if start else "") + piece.strip() + ("…" if start + limit < len(flat) else "")


def _index_used(used: str, plan: list[tuple[str, float]], dense: JsonObject) -> str:
    """The dense indices searched ("text", "code", "both"), or the route when none were."""
    searched = dense.get("status") in (dense_status.OK, dense_status.WAITING)
    waiting = dense.get("kinds")
    kinds = {kind for kind, _ in plan} if searched else set()
    if isinstance(waiting, list):
        kinds.difference_update(str(kind) for kind in waiting)
    if len(kinds) == 2:
        return "both"
    return kinds.pop() if kinds else used
