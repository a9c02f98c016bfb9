"""Retrieval benchmark: is the code an agent asks for found within a reading budget?

    python bench/retrieval.py                      # every language, default sizes (~25 min, 2 cores)
    python bench/retrieval.py --smoke              # tiny corpora, 20 queries: proves the pipeline
    python bench/retrieval.py --languages python java --queries 200 \\
        --try search.dense_weight=0.3 --try search.rrf_k=20
    python bench/retrieval.py --units-only --build embed.precision=int8   # the int8 model

The measure. An agent reads hits in rank order and each hit costs the lines
it cites (``end - start + 1``; a page or time span costs its whole file). A
query is *found within B lines* when, walking the hits in order and adding
each one's cost, a hit overlapping the target (same file, line ranges
intersect) is reached with the running cost still <= B. Per language and
row: found@200, found@1000 (over the top 50 hits, ``MAX_K``), recall@10 (an
overlapping hit in the top 10), MRR@10, and lines/hit (the mean cost of a
top-10 hit), all from ``search(k=50)``; then recall@10 and MRR@10 of
``search(k=10)``, what an agent asking for the default ten reads, and "top 10
same": the share of queries whose ``k=10`` hits are the first ten of the
``k=50`` ones (1.0 when the ranking does not depend on k). Overlapping hits
are paid for in full each time.

The corpora (bench/corpora.py) are real code and prose nobody on this
project wrote, with their documentation removed (line numbers kept); each
query is a doc comment's first paragraph and its target the lines of the
definition it documented. Queries whose text labels two targets are dropped.

- python: standard-library modules, docstrings → function/class definitions;
- ts: TypeScript's ``lib.*.d.ts`` (``npm pack``), JSDoc → declarations;
- js: lodash's modules (``npm pack``), JSDoc → declarations;
- java: the JDK's ``src.zip`` (java.base: util, lang, io, time, …), Javadoc → declarations;
- prose: the long descriptions of the installed packages (``*.dist-info/METADATA``),
  ``Summary:`` → the whole file, so its measures are file-level.

Rows, all on the same corpus and queries:

- ``bm25s windows``: bm25s (default parameters, no stop words) over the
  spec's windows (``chunk_code`` 200/30 for code, ``chunk_prose`` for prose),
  tokenised by ``corpus.index.words.tokens`` (identifier splitting);
  ``bm25s windows, plain`` uses bm25s' own tokenizer;
- ``bm25s units`` (and ``, plain``): the same over the live chunks of the
  units-mode index (``chunking.code.mode: units``), their ``context`` (when
  chunks have one) indexed with their text;
- ``lexical units``: our own lexical ranking alone (``Searcher._lexical``,
  what the fusion gets from the lexical index) on the units index, to set
  beside ``bm25s units``;
- ``dense units``: the local model alone on the units, each embedded
  plainly with its context (``Searcher._dense`` on the units index when its
  code vectors are plain; an exact search over plain re-embeddings when they
  lean towards the signature view, ``embed.signature_weight``, whose own
  vectors are then the ``dense units, as stored`` row);
- ``dense units, as stored + adapter``: the same with the query moved by
  ``search.query_adapter`` (corpus/adapter.py), when the units index is
  built with one (``--build search.query_adapter=builtin``);
  ``--no-plain-dense`` skips the plain re-embedding, ``dense units`` being
  then the index's own vectors;
- ``bm25s units ∪ dense units``: not a search: a query counts when
  ``bm25s units`` or ``dense units`` (``, as stored`` without the plain
  re-embedding) alone finds it within the budget or the top 10; what fusing
  the two could reach by interleaving them (issue #36's bound for fusion);
- ``today``: ``Searcher.search`` (index ``auto``) on an index built the old
  way: line windows for code, character windows for prose, and only the
  dense index the query is routed to (``TODAY``);
- ``default``: ``Searcher.search`` with every default, on the units index;
- ``try <key=value>``: ``Searcher.search`` on the units index with a config
  override (``--try``), without reindexing.

Each index is built in its own temp state directory by a subprocess of this
script (Django is set up once per process), with the local embedder. Cost per
index: chunks, tokens (the local model's tokenizer, in full and as embedded
after truncation), indexing wall time, and in-process ``search`` p50/p99
(k=10) for ``today`` and ``default``. Tables go to stdout, everything to
bench/results/retrieval-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import corpora  # noqa: E402

BUDGETS = (200, 1000)
TOP = 10
DEEP = 50  # corpus.retrieval.MAX_K: the hits an agent could page through
DEFAULT_MAX_LINES = {"python": 80_000, "ts": 45_000, "js": 25_000, "java": 50_000, "prose": 40_000}
SMOKE_MAX_LINES = 1_500
SMOKE_QUERIES = 20
MODES = ("lines", "units")
ROW_ORDER = (
    "bm25s windows",
    "bm25s windows, plain",
    "bm25s units",
    "bm25s units, plain",
    "lexical units",
    "dense units",
    "dense units, as stored",
    "dense units, as stored + adapter",
    "today",
    "default",
)
#: not a search: what lexical or dense alone finds (``union_found``)
UNION = "bm25s units ∪ dense units"


# -- the measure -----------------------------------------------------------------


def overlaps(hit: list, label: dict) -> bool:
    """Same file, and the line ranges intersect (a span without lines covers its file)."""
    path, start, end = hit
    if path != label["file"]:
        return False
    return start is None or (start <= label["end"] and end >= label["start"])


def hit_cost(hit: list, file_lines: dict[str, int]) -> int:
    """Lines an agent reads for a hit: its line span, or its whole file."""
    path, start, end = hit
    return end - start + 1 if start is not None else file_lines.get(path, 1)


def score(hits: list[list], label: dict, file_lines: dict[str, int]) -> tuple[int | None, int | None]:
    """(lines read up to and including the first overlapping hit, its 1-based rank), or Nones."""
    cost = 0
    for rank, hit in enumerate(hits, start=1):
        cost += hit_cost(hit, file_lines)
        if overlaps(hit, label):
            return cost, rank
    return None, None


def summarise(ranked: list[list[list]], labels: list[dict], file_lines: dict[str, int]) -> dict:
    """found@B for each budget, recall@10, MRR@10 and lines/hit over all queries."""
    n = len(labels)
    found = dict.fromkeys(BUDGETS, 0)
    recall, reciprocal, read, shown = 0, 0.0, 0, 0
    for hits, label in zip(ranked, labels, strict=True):
        cost, rank = score(hits, label, file_lines)
        for budget in BUDGETS:
            found[budget] += cost is not None and cost <= budget
        if rank is not None and rank <= TOP:
            recall += 1
            reciprocal += 1 / rank
        read += sum(hit_cost(hit, file_lines) for hit in hits[:TOP])
        shown += len(hits[:TOP])
    out = {f"found@{budget}": round(found[budget] / n, 3) for budget in BUDGETS}
    out.update(
        {
            f"recall@{TOP}": round(recall / n, 3),
            f"mrr@{TOP}": round(reciprocal / n, 3),
            "lines_per_hit": round(read / max(shown, 1), 1),
            "n": n,
        }
    )
    return out


def union_found(
    lexical: list[list[list]], dense: list[list[list]], labels: list[dict], file_lines: dict
) -> dict:
    """The ``UNION`` row: a query counts as found within B lines (or in the
    top 10) when either ranking alone finds it so. What fusing the two can
    reach by interleaving them (issue #36 calls it the bound for fusion);
    its MRR@10 takes the better of the two ranks, and lines/hit is not defined."""
    first = summarise_each(lexical, labels, file_lines)
    second = summarise_each(dense, labels, file_lines)
    n, pairs = len(labels), list(zip(first, second, strict=True))
    out = {
        f"found@{budget}": round(sum(budget in a["within"] or budget in b["within"] for a, b in pairs) / n, 3)
        for budget in BUDGETS
    }
    ranks = [min(a["rank"] or DEEP + 1, b["rank"] or DEEP + 1) for a, b in pairs]
    out[f"recall@{TOP}"] = round(sum(r <= TOP for r in ranks) / n, 3)
    out[f"mrr@{TOP}"] = round(sum(1 / r for r in ranks if r <= TOP) / n, 3)
    return {**out, "lines_per_hit": "—", "n": n}


def summarise_each(ranked: list[list[list]], labels: list[dict], file_lines: dict[str, int]) -> list[dict]:
    """Per query: the budgets it is found within, and its rank (None when not in the hits)."""
    out = []
    for hits, label in zip(ranked, labels, strict=True):
        cost, rank = score(hits, label, file_lines)
        within = {budget for budget in BUDGETS if cost is not None and cost <= budget}
        out.append({"within": within, "rank": rank})
    return out


# -- the worker: one index, every row that reads it --------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def deep_merge(base: dict, override: dict) -> dict:
    """``base`` with ``override``'s keys set, recursing into dicts both have."""
    out = dict(base)
    for key, value in override.items():
        out[key] = (
            deep_merge(out[key], value)
            if isinstance(value, dict) and isinstance(out.get(key), dict)
            else value
        )
    return out


def parse_try(text: str) -> dict:
    """``search.dense_weight=0.3`` → ``{"search": {"dense_weight": 0.3}}`` (a non-JSON value is a
    string); several overrides join with ``;``."""
    if ";" in text:
        merged: dict = {}
        for part in text.split(";"):
            merged = deep_merge(merged, parse_try(part))
        return merged
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--try wants dotted.key=JSON value, got {text!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    for part in reversed(key.strip().split(".")):
        value = {part: value}
    return value


#: what ``today`` reproduces: line windows for code, character windows for
#: prose, reciprocal rank fusion with every dense ranking at 0.5, units
#: holding every term first, and ``index: auto`` consulting only the dense
#: index the query's shape routes it to (the other one weighted 0)
TODAY = {
    "chunking": {"code": {"mode": "lines"}, "prose_mode": "windows"},
    "search": {
        "fusion": "rrf",
        "dense_weight": 0.5,
        "code_dense_weight": 0.5,
        "all_terms_first_max": 0,
        "other_index_weight": 0,
        # later search features, off so that the row stays what it was
        "code_lexical_lines": 0,
        "feedback_units": 0,
    },
}


def config_data(mode: str, tries: list[str] = ()) -> dict:
    """The first dict for ``build_config``: local embedder, the chunking mode, overrides."""
    data: dict = {"embed": {"provider": "local"}}
    if mode == "lines":
        data = deep_merge(data, TODAY)
    for text in tries:
        data = deep_merge(data, parse_try(text))
    return data


def setup_django(root: Path, state: Path) -> None:
    from dir2mcp_site import bootstrap

    bootstrap.prepare(["--dir", str(root), "--state-dir", str(state)])
    import django

    django.setup()


def live_chunks() -> dict[int, dict]:
    """Every live chunk: path, span (None lines for a non-line span), text and context."""
    from corpus.models import Chunk, Span

    fields = {f.name for f in Chunk._meta.get_fields()}
    extra = ["context"] if "context" in fields else []
    chunks = {}
    live = Chunk.objects.filter(deleted=False)
    columns = ("chunk_id", "index_kind", "representation__document__rel_path", *extra)
    if "stored_text" in fields:  # chunks hold offsets into their representation's text (corpus/slices.py)
        from corpus import slices  # after django.setup(), as the models above

        rows = slices.texts(live.values_list(*columns, *slices.FIELDS), len(columns))
    else:  # a checkout from before the slices (--code)
        rows = list(live.values_list(*columns, "text"))
    for row in rows:
        chunk_id, index_kind, path, *rest = row
        context, text = (rest[0], rest[1]) if extra else ("", rest[0])
        chunks[chunk_id] = {
            "path": path,
            "start": None,
            "end": None,
            "text": text,
            "context": context or "",
            "kind": index_kind,
        }
    for span in Span.objects.filter(chunk__deleted=False).values("chunk_id", "span_kind", "start", "end"):
        chunk = chunks.get(span["chunk_id"])
        if chunk is not None and span["span_kind"] == "lines" and chunk["start"] is None:
            chunk["start"], chunk["end"] = span["start"], span["end"]
    return chunks


def embedded_text(chunk: dict) -> str:
    """What the index embeds and matches for a chunk: its context, then its text."""
    return f"{chunk['context']}\n{chunk['text']}" if chunk["context"] else chunk["text"]


def token_counts(texts: list[str]) -> dict:
    """Tokens of ``texts`` by the local model's tokenizer: in full, and as embedded (truncated)."""
    from tokenizers import Tokenizer

    from corpus.providers.local import default_model_dir

    model_dir = default_model_dir()
    limit = json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"]
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts)] if texts else []
    return {"tokens": sum(lengths), "tokens_embedded": sum(min(n, limit) for n in lengths)}


def hit_of(chunk: dict) -> list:
    return [chunk["path"], chunk["start"], chunk["end"]]


def bm25s_rankings(docs: list[tuple[list, str]], queries: list[str], plain: bool) -> list[list[list]]:
    """Top ``DEEP`` (hit, text) docs per query by bm25s; docs scoring 0 are not hits."""
    import bm25s
    import numpy as np

    from corpus.index import words

    def tokenize(texts: list[str]) -> list[list[str]]:
        if plain:
            return bm25s.tokenize(texts, stopwords=None, return_ids=False, show_progress=False)
        return [words.tokens(text) for text in texts]

    retriever = bm25s.BM25()
    retriever.index(tokenize([text for _, text in docs]), show_progress=False)
    ranked = []
    for tokens in tokenize(queries):
        known = [t for t in tokens if t in retriever.vocab_dict]
        if not known:
            ranked.append([])
            continue
        scores = retriever.get_scores(known)
        top = np.argsort(-scores, kind="stable")[:DEEP]
        ranked.append([docs[i][0] for i in top if scores[i] > 0])
    return ranked


def window_docs(root: Path, kind: str) -> list[tuple[list, str]]:
    """The spec's windows of every file under ``root``: code by lines, prose by characters."""
    from corpus.ingest.chunking import chunk_code, chunk_prose

    docs = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        text = path.read_text(errors="replace")
        drafts = chunk_code(text, max_lines=200, overlap_lines=30) if kind == "code" else chunk_prose(text)
        docs.extend(([rel, d.start, d.end], d.text) for d in drafts)
    return docs


def search_rankings(searcher, queries: list[str]) -> tuple[list[list[list]], dict, list[list[list]]]:
    """``search(q, k=DEEP)`` hits per query, how often each index was routed
    to, and ``search(q, k=TOP)`` hits per query (what an agent asking for the
    default ten gets)."""
    ranked, routed, top = [], {}, []
    for query in queries:
        result = searcher.search(query, k=DEEP)
        routed[result.index_used] = routed.get(result.index_used, 0) + 1
        ranked.append(hit_list(result.hits))
        top.append(hit_list(searcher.search(query, k=TOP).hits))
    return ranked, routed, top


def hit_list(hits) -> list[list]:
    return [
        [h.rel_path, h.span.start, h.span.end] if h.span.kind == "lines" else [h.rel_path, None, None]
        for h in hits
    ]


def at_top(top: list[list[list]], deep: list[list[list]], labels: list[dict], file_lines: dict) -> dict:
    """recall@10 and MRR@10 of the ``k=TOP`` searches, and the share of
    queries whose ``k=TOP`` hits are the first ``TOP`` of the ``k=DEEP`` ones."""
    measured = summarise(top, labels, file_lines)
    same = sum(a == b[:TOP] for a, b in zip(top, deep, strict=True))
    return {
        f"recall@{TOP}_k{TOP}": measured[f"recall@{TOP}"],
        f"mrr@{TOP}_k{TOP}": measured[f"mrr@{TOP}"],
        "prefix_same": round(same / max(len(top), 1), 3),
    }


def latency(searcher, queries: list[str]) -> dict:
    """In-process ``search(q, k=10)`` p50/p99 in ms (query embedding included)."""
    searcher.search(queries[0], k=TOP)
    times = []
    for query in queries:
        started = time.perf_counter()
        searcher.search(query, k=TOP)
        times.append((time.perf_counter() - started) * 1000)
    return {"p50_ms": round(percentile(times, 50), 1), "p99_ms": round(percentile(times, 99), 1)}


def dense_rankings(
    searcher, embedder, kind: str, queries: list[str], chunks: dict, adapter=None
) -> list[list[list]]:
    """``Searcher._dense`` alone: the ``DEEP`` nearest live chunks of ``kind``
    (to the query moved by ``adapter``, a corpus.adapter.QueryAdapter, if given)."""
    from corpus.retrieval import Filters

    ranked = []
    for query in queries:
        # embed_query where this checkout has it (what search uses), else the brief's embed()[0]
        embed_query = getattr(embedder, "embed_query", None)
        vector = embed_query(query, kind=kind) if embed_query else embedder.embed([query], kind=kind)[0]
        if adapter is not None:
            vector = adapter.apply(vector)
        ids = [
            hit[0] if isinstance(hit, tuple) else hit
            for hit in searcher._dense(vector, kind, DEEP, Filters())
        ]
        ranked.append([hit_of(chunks[cid]) for cid in ids if cid in chunks])
    return ranked


def lexical_rankings(searcher, queries: list[str], chunks: dict) -> list[list[list]]:
    """``Searcher._lexical`` alone: the ``DEEP`` best live chunks by the lexical index."""
    from corpus.retrieval import Filters

    return [
        [hit_of(chunks[cid]) for cid, _ in searcher._lexical(query, DEEP, Filters(), ())[0] if cid in chunks]
        for query in queries
    ]


def plain_vectors(embedder, kind: str, texts: list[str], cache: Path | None):
    """``embedder.embed(texts)``, kept in ``cache`` (an .npz named by the model's
    and the texts' digest) so that a rerun on a kept index (``--work``) does not embed them again."""
    import hashlib

    import numpy as np

    # the model's name too: it carries the precision (a rebuild with --work may change it)
    model = embedder.model_info(kind).model
    digest = hashlib.sha256("\0".join([model, *texts]).encode()).hexdigest()[:16]
    path = cache / f"plain-{kind}-{digest}.npy" if cache is not None else None
    if path is not None and path.exists():
        return np.load(path)
    vectors = np.asarray(embedder.embed(texts, kind=kind), dtype=np.float32)
    if path is not None:
        np.save(path, vectors)
    return vectors


def plain_dense_rankings(
    embedder, kind: str, queries: list[str], chunks: dict, cache: Path | None = None
) -> list[list[list]]:
    """The ``dense units`` baseline when the index's code vectors lean towards
    the signature view (``embed.signature_weight``): each unit embedded
    plainly (context and text, as the index reads it), exact cosine search."""
    import numpy as np

    from corpus.index.dense.views import embedding_text

    ids = [cid for cid, chunk in chunks.items() if chunk["kind"] == kind]
    window = embedder.window_chars
    texts = [embedding_text(chunks[c]["context"], chunks[c]["text"], kind, window) for c in ids]
    vectors = plain_vectors(embedder, kind, texts, cache)
    ranked = []
    for query in queries:
        scores = vectors @ np.asarray(embedder.embed_query(query, kind=kind), dtype=np.float32)
        ranked.append([hit_of(chunks[ids[i]]) for i in np.argsort(-scores, kind="stable")[:DEEP]])
    return ranked


def build_index(
    root: Path, state_dir: Path, mode: str, builds: list[str] = ()
) -> tuple[object, object, object, dict]:
    """Index ``root`` into ``state_dir`` (``builds``: config overrides of the
    units index, ``--build``); (state, config, embedder, build facts)."""
    from corpus.ingest.indexing import index_directory
    from corpus.providers.local import LocalEmbedder
    from corpus.providers.precision import resolve_precision
    from corpus.store import open_store
    from kernel.config import build_config
    from kernel.state import StateDir

    state = StateDir(state_dir)
    open_store(state)
    config = build_config(config_data(mode, builds if mode == "units" else []), {}, {})
    embedder = LocalEmbedder(
        precision=resolve_precision(config.embed.precision), max_tokens=config.embed.max_tokens
    )
    embedder.embed(["warm up"], kind="code")
    started = time.perf_counter()
    counters = index_directory(root, state=state, config=config, embedder=embedder)
    facts = {"index_s": round(time.perf_counter() - started, 1)}
    facts["counters"] = {k: v for k, v in vars(counters).items() if isinstance(v, int | float)}
    return state, config, embedder, facts


def index_cost(chunks: dict, facts: dict) -> dict:
    """Chunks, files, tokens and throughput of an index."""
    from corpus.models import Chunk, EmbeddingStatus

    texts = [embedded_text(c) for c in chunks.values()]
    cost = {
        "chunks": len(chunks),
        "files": len({c["path"] for c in chunks.values()}),
        "embedded_ok": Chunk.objects.filter(deleted=False, embedding_status=EmbeddingStatus.OK).count(),
        "with_context": sum(bool(c["context"]) for c in chunks.values()),
        "tokens_est": sum(Chunk.objects.filter(deleted=False).values_list("tokens_est", flat=True)),
        **token_counts(texts),
        "index_s": facts["index_s"],
    }
    # An index kept from an earlier run (--work, --keep) was not built now: no rate.
    built = facts["index_s"] >= 1.0
    cost["chunks_per_s"] = round(len(chunks) / facts["index_s"], 1) if built else "— (reused)"
    return cost


def lines_rows(root: Path, kind: str, queries: list[str]) -> dict:
    """The rows only the lines-mode run adds: bm25s over the spec's windows."""
    windows = window_docs(root, kind)
    return {
        label: {"hits": bm25s_rankings(windows, queries, plain), "units": len(windows)}
        for plain, label in ((False, "bm25s windows"), (True, "bm25s windows, plain"))
    }


def units_rows(
    searcher,
    kind: str,
    queries: list[str],
    chunks: dict,
    tries: list[str],
    builds: list[str] = (),
    plain: bool = True,
) -> dict:
    """The rows only the units-mode run adds: bm25s and dense over its chunks,
    and the ``--try`` rows (``plain``: False leaves out the plain re-embedding,
    ``dense units`` is then the index's own vectors)."""
    from corpus import adapter as query_adapter
    from corpus.retrieval import Searcher
    from kernel.config import build_config

    docs = [(hit_of(c), embedded_text(c)) for c in chunks.values()]
    rows = {
        label: {"hits": bm25s_rankings(docs, queries, plain), "units": len(docs)}
        for plain, label in ((False, "bm25s units"), (True, "bm25s units, plain"))
    }
    rows["lexical units"] = {"hits": lexical_rankings(searcher, queries, chunks), "units": len(chunks)}
    from corpus.index.dense.embedding import signature_weight

    if kind == "code" and signature_weight() > 0 and plain:
        dense = plain_dense_rankings(searcher.embedder, kind, queries, chunks, cache=searcher.state.path)
        rows["dense units, as stored"] = {
            "hits": dense_rankings(searcher, searcher.embedder, kind, queries, chunks),
            "units": len(chunks),
        }
    else:
        dense = dense_rankings(searcher, searcher.embedder, kind, queries, chunks)
    rows["dense units"] = {"hits": dense, "units": len(chunks)}
    adapter = query_adapter.load(searcher.config.search.query_adapter)
    if kind == "code" and adapter is not None:
        # the index's own vectors, the query moved by the adapter (search.query_adapter)
        rows["dense units, as stored + adapter"] = {
            "hits": dense_rankings(searcher, searcher.embedder, kind, queries, chunks, adapter=adapter),
            "units": len(chunks),
        }
    for text in tries:
        config = build_config(config_data("units", [*builds, text]), {}, {})
        tried = Searcher(searcher.state, config, searcher.embedder)
        ranked, routed, top = search_rankings(tried, queries)
        rows[f"try {text}"] = {"hits": ranked, "routed": routed, "top": top, "units": len(chunks)}
    return rows


def nonsense_queries(count: int, seed: int = 13) -> list[str]:
    """Made-up words (one to three), which no corpus should match well."""
    rng = random.Random(seed)

    def word() -> str:
        return "".join(rng.choice("bcdfgjkqvwxz") + rng.choice("aeiou") for _ in range(rng.randint(3, 6)))

    return [" ".join(word() for _ in range(rng.randint(1, 3))) for _ in range(count)]


def weak_calibration(searcher, queries: list[str]) -> dict:
    """How often ``match`` is ``weak`` for real queries and for made-up ones,
    and the quantiles of the best dense cosine of each (to set ``search.weak_cosine``)."""
    from corpus.index.dense.vectors import KINDS
    from corpus.retrieval import Filters

    def measure(texts: list[str]) -> dict:
        weak, best = 0, []
        for text in texts:
            weak += searcher.search(text, k=TOP).match == "weak"
            vector = searcher.embedder.embed_query(text, kind="text")
            tops = [hit[1] for kind in KINDS for hit in searcher._dense(vector, kind, 1, Filters())[:1]]
            best.append(max(tops, default=-1.0))
        quantiles = {f"cos_q{q:02d}": round(percentile(best, q), 3) for q in (5, 25, 50, 75, 95)}
        return {"n": len(texts), "weak_rate": round(weak / max(len(texts), 1), 3), **quantiles}

    return {"real": measure(queries), "nonsense": measure(nonsense_queries(50))}


def run_worker(argv: list[str]) -> None:
    """``_worker``: build one index (lines or units mode) and write every row that reads it."""
    parser = argparse.ArgumentParser(prog="retrieval.py _worker")
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--kind", choices=("code", "text"), required=True)
    parser.add_argument("--try", dest="tries", action="append", default=[])
    parser.add_argument("--build", dest="builds", action="append", default=[])
    parser.add_argument("--no-plain-dense", action="store_true")
    args = parser.parse_args(argv)
    root, state_dir = args.dir / "root", args.dir / f"state-{args.mode}"
    queries = [label["query"] for label in json.loads((args.dir / "labels.json").read_text())]
    setup_django(root, state_dir)
    from corpus.retrieval import Searcher

    say(f"indexing ({args.mode})")
    state, config, embedder, facts = build_index(root, state_dir, args.mode, args.builds)
    chunks = live_chunks()
    say(f"searching ({args.mode}, {len(queries)} queries)")
    searcher = Searcher(state, config, embedder)
    name = "today" if args.mode == "lines" else "default"
    ranked, routed, top = search_rankings(searcher, queries)
    out = {"mode": args.mode, **facts, "cost": index_cost(chunks, facts)}
    out["latency"] = {name: latency(searcher, queries)}
    out["rows"] = {name: {"hits": ranked, "routed": routed, "top": top, "units": len(chunks)}}
    if args.mode == "lines":
        out["rows"].update(lines_rows(root, args.kind, queries))
    else:
        out["rows"].update(
            units_rows(
                searcher, args.kind, queries, chunks, args.tries, args.builds, plain=not args.no_plain_dense
            )
        )
        out["weak"] = weak_calibration(searcher, queries)
    (args.dir / f"{args.mode}.json").write_text(json.dumps(out))


def say(message: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the driver --------------------------------------------------------------------


def spawn_worker(
    lang_dir: Path, mode: str, kind: str, tries: list[str], builds: list[str] = (), plain: bool = True
) -> dict:
    """Run one index's worker in a fresh process; its JSON, or ``{"error": …}``."""
    command = [sys.executable, str(Path(__file__).resolve()), "_worker", "--dir", str(lang_dir)]
    command += ["--mode", mode, "--kind", kind, *(f"--try={t}" for t in tries)]
    command += [f"--build={b}" for b in builds] + ([] if plain else ["--no-plain-dense"])
    log = lang_dir / f"{mode}.log"
    with log.open("w") as handle:
        done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        return {"error": f"worker exited {done.returncode}", "log_tail": tail}
    return json.loads((lang_dir / f"{mode}.json").read_text())


def file_line_counts(root: Path) -> dict[str, int]:
    return {
        p.relative_to(root).as_posix(): p.read_text(errors="replace").count("\n") + 1
        for p in root.rglob("*")
        if p.is_file()
    }


def language_report(corpus: corpora.Corpus, runs: dict[str, dict], file_lines: dict[str, int]) -> dict:
    """Metrics per row, cost per index, and what the corpus was, for one language."""
    rows = {}
    for run in runs.values():
        for name, row in run.get("rows", {}).items():
            rows[name] = {**summarise(row["hits"], corpus.labels, file_lines), "units": row["units"]}
            if "routed" in row:
                rows[name]["routed"] = row["routed"]
            if "top" in row:
                rows[name].update(at_top(row["top"], row["hits"], corpus.labels, file_lines))
    dense = next((name for name in ("dense units", "dense units, as stored") if name in rows), None)
    ranked = {name: row["hits"] for run in runs.values() for name, row in run.get("rows", {}).items()}
    if "bm25s units" in ranked and dense is not None:
        rows[UNION] = {
            **union_found(ranked["bm25s units"], ranked[dense], corpus.labels, file_lines),
            "units": rows["bm25s units"]["units"],
        }
    ordered = {name: rows[name] for name in ROW_ORDER if name in rows}
    ordered.update({name: value for name, value in rows.items() if name not in ordered})
    return {
        "corpus": {
            "source": corpus.source,
            "files": corpus.files,
            "lines": corpus.lines,
            "queries": len(corpus.labels),
            "labelled_candidates": corpus.candidates,
            "file_level": corpus.language == "prose",
        },
        "rows": ordered,
        "indexes": {
            mode: {k: run.get(k) for k in ("cost", "latency", "counters", "error", "log_tail", "weak")}
            for mode, run in runs.items()
        },
    }


def metric_table(language: str, report: dict) -> str:
    """The markdown table of one language's rows."""
    corpus = report["corpus"]
    level = "file-level: the target is the whole file" if corpus["file_level"] else "target: the definition"
    head = (
        f"### {language}: {corpus['queries']} queries, {corpus['files']} files, {corpus['lines']} lines "
        f"({corpus['source']}; {level})\n\n"
        "| row | found@200 | found@1000 | recall@10 | MRR@10 | recall@10, k 10 | MRR@10, k 10 "
        "| top 10 same | lines/hit | n | units |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    body = "".join(
        f"| {name} | {r['found@200']:.3f} | {r['found@1000']:.3f} | {r['recall@10']:.3f} | "
        f"{r['mrr@10']:.3f} | {_cell(r, f'recall@{TOP}_k{TOP}')} | {_cell(r, f'mrr@{TOP}_k{TOP}')} | "
        f"{_cell(r, 'prefix_same')} | {r['lines_per_hit']} | {r['n']} | {r['units']} |\n"
        for name, r in report["rows"].items()
    )
    weak = report["indexes"].get("units", {}).get("weak")
    if weak:
        body += "\n" + "".join(
            f"- weak matches, {name} queries (n={w['n']}): {w['weak_rate']:.0%}; best cosine quantiles "
            + ", ".join(f"{k[5:]}%={v}" for k, v in w.items() if k.startswith("cos_"))
            + "\n"
            for name, w in weak.items()
        )
    return head + body


def _cell(row: dict, key: str) -> str:
    return f"{row[key]:.3f}" if key in row else "—"


def cost_table(report: dict) -> str:
    """The markdown table of one language's index costs and search latency."""
    lines = [
        "| index | chunks | tokens | tokens embedded | index s | chunks/s | search p50 ms | search p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, facts in report["indexes"].items():
        if facts.get("error"):
            tail = " / ".join(facts.get("log_tail") or [])[-300:]
            lines.append(f"| {mode} | failed: {facts['error']} — {tail} |||||||")
            continue
        cost = facts["cost"]
        timing = next(iter(facts["latency"].values()))
        name = mode
        lines.append(
            f"| {name} | {cost['chunks']} | {cost['tokens']} | {cost['tokens_embedded']} | "
            f"{cost['index_s']} | {cost['chunks_per_s']} | {timing['p50_ms']} | {timing['p99_ms']} |"
        )
    return "\n".join(lines) + "\n"


def check_tries(tries: list[str], *, built: bool = False) -> None:
    """Fail before any indexing when an override is not a valid config
    (``built``: ``--build`` overrides, which the index is built with)."""
    from kernel import errors
    from kernel.config import build_config

    for text in tries:
        try:
            build_config(config_data("units", [text]), {}, {})
        except (errors.Dir2mcpError, argparse.ArgumentTypeError) as exc:
            sys.exit(f"--try {text}: {exc}")
        if not built and text.split(".", 1)[0] in ("chunking", "embed", "ingest"):
            print(
                f"note: --try {text} is evaluated without reindexing, so it changes nothing", file=sys.stderr
            )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--languages", nargs="+", choices=corpora.LANGUAGES, default=list(corpora.LANGUAGES))
    parser.add_argument("--queries", type=int, default=300, help="queries per language (default 300)")
    parser.add_argument(
        "--max-lines",
        action="append",
        default=[],
        metavar="LANG=N",
        help=f"source lines per corpus (defaults: {DEFAULT_MAX_LINES})",
    )
    parser.add_argument("--seed", type=int, default=5, help="file and query sampling seed (default 5)")
    parser.add_argument(
        "--try",
        dest="tries",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="an extra row: Searcher.search on the units index with this config override, "
        "e.g. search.dense_weight=0.3 (repeatable)",
    )
    parser.add_argument(
        "--build",
        dest="builds",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="a config override the units index is built with, e.g. chunking.code.unit_max_lines=40 "
        "(repeatable; with --work on an earlier run's directory, only what it changes is re-cut)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"tiny corpora ({SMOKE_MAX_LINES} lines, {SMOKE_QUERIES} queries each), to prove the pipeline",
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=MODES,
        default=list(MODES),
        help="which indexes to build: lines (the today and bm25s windows rows), units (the rest)",
    )
    parser.add_argument(
        "--units-only",
        action="store_true",
        help="the same as --modes units: no `today` or `bm25s windows` rows (half the indexing)",
    )
    parser.add_argument(
        "--no-plain-dense",
        action="store_true",
        help="no plain re-embedding of the units for `dense units` (a third of the embedding): "
        "that row is then the index's own vectors, as `dense units, as stored` is otherwise",
    )
    parser.add_argument("--keep", action="store_true", help="keep the corpora and state directories")
    parser.add_argument("--work", type=Path, help="where to build (default: a new temp directory)")
    return parser.parse_args(argv)


def max_lines_for(args: argparse.Namespace) -> dict[str, int]:
    sizes = dict.fromkeys(corpora.LANGUAGES, SMOKE_MAX_LINES) if args.smoke else dict(DEFAULT_MAX_LINES)
    for item in args.max_lines:
        lang, _, value = item.partition("=")
        if lang not in sizes or not value.isdigit():
            sys.exit(f"--max-lines wants LANG=N with LANG in {', '.join(sizes)}, got {item!r}")
        sizes[lang] = int(value)
    return sizes


def run_language(lang: str, work: Path, args: argparse.Namespace, max_lines: int) -> dict:
    """Build one language's corpus, its two indexes, and its report."""
    lang_dir = work / lang
    queries = SMOKE_QUERIES if args.smoke else args.queries
    corpus = corpora.build(lang, lang_dir / "root", max_lines=max_lines, queries=queries, seed=args.seed)
    (lang_dir / "labels.json").write_text(json.dumps(corpus.labels, indent=1))
    print(
        f"[{time.strftime('%H:%M:%S')}] {lang}: {corpus.files} files, {len(corpus.labels)} queries",
        flush=True,
    )
    runs = {}
    for mode in ("units",) if args.units_only else args.modes:
        started = time.perf_counter()
        units = mode == "units"
        runs[mode] = spawn_worker(
            lang_dir,
            mode,
            corpus.kind,
            args.tries if units else [],
            args.builds if units else [],
            plain=not args.no_plain_dense,
        )
        state = runs[mode].get("error", "ok")
        print(
            f"[{time.strftime('%H:%M:%S')}]   {mode} index: {state} ({time.perf_counter() - started:.0f} s)"
        )
    return language_report(corpus, runs, file_line_counts(lang_dir / "root"))


def header() -> dict:
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
    }


def main(argv: list[str]) -> None:
    if argv[:1] == ["_worker"]:
        run_worker(argv[1:])
        return
    args = parse_args(argv)
    check_tries(args.tries)
    check_tries(args.builds, built=True)
    sizes = max_lines_for(args)
    work = args.work or Path(tempfile.mkdtemp(prefix="dir2mcp-retrieval-"))
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(exist_ok=True)
    out_path = out_dir / f"retrieval-{time.strftime('%Y%m%dT%H%M%S')}.json"
    facts = header()
    result = {**facts, "smoke": args.smoke, "seed": args.seed, "tries": args.tries, "languages": {}}
    print(f"{facts['date']} · {facts['machine']} · Python {facts['python']} · work {work}\n", flush=True)
    started = time.perf_counter()
    for lang in args.languages:
        report = run_language(lang, work, args, sizes[lang])
        result["languages"][lang] = report
        result["total_s"] = round(time.perf_counter() - started, 1)
        out_path.write_text(json.dumps(result, indent=1))
        print("\n" + metric_table(lang, report) + "\n" + cost_table(report), flush=True)
    if not args.keep and args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    print(f"total {result['total_s']} s; results: {out_path.relative_to(REPO)}")


if __name__ == "__main__":
    main(sys.argv[1:])
