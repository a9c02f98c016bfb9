"""``content[0]`` texts: what an agent reads of each tool's result.

Short, with the citations in the §9.3 form so an agent can quote them and
pass the spans straight to ``dir2mcp.open_file``.
"""

from __future__ import annotations

from collections.abc import Callable

from corpus.citations import SpanRef, format_citation
from corpus.index.dense import status as dense_status
from corpus.ingest import coverage
from kernel.jsontypes import JsonObject

SNIPPET_CHARS = 300


def span_ref(span: JsonObject | None) -> SpanRef | None:
    if not span:
        return None
    if span["kind"] == "page":
        return SpanRef("page", span["page"], span["page"])
    if span["kind"] == "time":
        return SpanRef("time", span["start_ms"], span["end_ms"])
    return SpanRef("lines", span["start_line"], span["end_line"])


def cite(rel_path: str, span: JsonObject | None) -> str:
    ref = span_ref(span)
    return format_citation(rel_path, ref) if ref else f"[{rel_path}]"


def _one_line(text: str, limit: int = SNIPPET_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _where(hit: JsonObject) -> str:
    """The hit's citation, and its human pointer ("slide 7") when it has one."""
    where = cite(hit["rel_path"], hit["span"])
    return f"{where} ({hit['label']})" if hit.get("label") else where


def _hits(hits: list[JsonObject]) -> list[str]:
    return [
        f"{n}. {_where(h)} score={h['score']:.4f}\n"
        + (h["content"] if "content" in h else f"   {_one_line(h['snippet'])}")
        for n, h in enumerate(hits, 1)
    ]


def _notes(result: JsonObject) -> list[str]:
    """Caveats on the results: dense search down (lexical only), a weak match, indexing unfinished."""
    notes = [
        dense_status.generation_notice(result.get("generation")),
        dense_status.notice(result.get("dense")),
    ]
    if result.get("match") == "weak":
        notes.append("(weak match: nothing here matches this query well; these are the nearest units)")
    if not result.get("indexing_complete", True):
        notes.append("(indexing still in progress: results may be partial)")
    return [note for note in notes if note]


def search(result: JsonObject) -> str:
    hits = result["hits"]
    head = f"{len(hits)} hit(s) for {result['query']!r} (index: {result.get('index_used', 'text')})"
    if not hits:
        return "\n".join([head + ". Try other words, a broader filter, or dir2mcp.find.", *_notes(result)])
    return "\n".join([head + ":", *_hits(hits), *_notes(result)])


def ask(result: JsonObject) -> str:
    sources = [cite(c["rel_path"], c["span"]) for c in result["citations"]]
    lines = [result.get("answer") or "No answer: nothing relevant was found."]
    if sources:
        lines += ["", "Sources: " + " ".join(sources)]
    return "\n".join(lines + _notes(result))


def open_file(result: JsonObject) -> str:
    where = cite(result["rel_path"], result.get("span"))
    note = " (truncated: ask for a narrower range or a larger max_chars)" if result["truncated"] else ""
    if result.get("from_index"):
        note += " (from the index: the file kept changing while it was read)"
    return f"{where} {result['doc_type']}{note}\n\n{result['content']}"


def list_files(result: JsonObject) -> str:
    files = result["files"]
    start = result["offset"] + 1 if files else result["offset"]
    of = f" of {result['total']}" if "total" in result else ""
    lines = [f"Files {start}-{result['offset'] + len(files)}{of}:"]
    lines += [
        f"{f['rel_path']}  {f['doc_type']}  {f['size_bytes']} B  {f['status']}"
        + (f" {f['error_code']}" if f.get("error_code") else "")
        for f in files
    ]
    if result.get("timed_out"):
        lines.append("(stopped at the time limit: narrow the glob or continue with the cursor)")
    if result["has_more"]:
        more = result.get("next_cursor")
        lines.append(f"(more: cursor={more})" if more else "(more follow)")
    return "\n".join(lines)


def find(result: JsonObject) -> str:
    matches = result["matches"]
    lines = [f"{len(matches)} match(es) in {result['files_scanned']} file(s) scanned:"]
    for m in matches:
        snippet = f"  {_one_line(m['snippet'], 200)}" if m.get("snippet") else ""
        lines.append(f"{cite(m['rel_path'], m.get('span'))}{snippet}")
    if result.get("timed_out"):
        lines.append("(stopped at the time limit: narrow the query or continue with the cursor)")
    if result.get("next_cursor"):
        lines.append(f"(more: cursor={result['next_cursor']})")
    return "\n".join(lines)


def stats(result: JsonObject) -> str:
    ix = result["indexing"]
    state = "running" if ix["running"] else "idle"
    models = result["models"]
    return (
        _coverage_warning(result.get("coverage"))
        + f"Indexing {state} (job {ix['job_id'] or '-'}, {ix['mode']}): scanned={ix['scanned']} "
        f"indexed={ix['indexed']} skipped={ix['skipped']} deleted={ix['deleted']} "
        f"chunks={ix['chunks_total']} embedded={ix['embedded_ok']} errors={ix['errors']}\n"
        f"Root: {result['root']}\nModels: embed_text={models['embed_text']} chat={models['chat']} "
        f"ocr={models['ocr']} stt={models['stt_provider']}/{models['stt_model']}\n"
        + _embedder_line(result.get("embedder"))
        + _note_line(result.get("signature_weight"))
        + _indexer_line(result.get("indexer"))
        + _coverage_line(result.get("coverage"))
        + _pending_line(result.get("pending_changes"))
        + f"Protocol {result['protocol_version']}, tool schema {result.get('schema_version', '')}"
    )


def _pending_line(pending: int | None) -> str:
    """Changes live sync has seen and not yet indexed, when there are any."""
    return f"Pending changes: {pending} (seen by live sync, not yet indexed)\n" if pending else ""


def _coverage_warning(found: JsonObject | None) -> str:
    """The loud line, first, for an index that covers nothing or far more than git tracks."""
    return f"WARNING: {found['warning']}\n" if found and found["warning"] else ""


def _coverage_line(found: JsonObject | None) -> str:
    """What the last whole walk found, against git, and what it left out."""
    return coverage.describe(found) + "\n" if found else ""


def _indexer_line(indexer: JsonObject | None) -> str:
    """Where the indexer runs and how far dense coverage is."""
    if not indexer:
        return ""
    dense = indexer["dense"]
    line = f"Indexer: {indexer['mode']}"
    if indexer["mode"] == "process":
        line += f" (pid {indexer['pid']})" if indexer["running"] else " (not running)"
        if indexer["restarts"]:
            line += f", restarted {indexer['restarts']}x"
    line += f"; dense {dense['embedded']}/{dense['total']}"
    views = dense.get("views_waiting") or 0
    if views:
        line += f", {views} signature view(s) to come"
    eta = dense["eta_seconds"]
    if (dense["embedded"] < dense["total"] or views) and eta is not None:
        line += f", about {_duration(eta)} to full coverage"
    waiting = dense.get("waiting_for_file") or []
    if waiting:
        named = " and ".join(waiting)
        line += f"; dense search of the {named} index waits for the indexer's file (lexical only)"
    return line + "\n" + unwritten_line(indexer.get("unwritten"))


def unwritten_line(unwritten: JsonObject | None) -> str:
    """Changes the store could not write (a full disk), waiting to be retried."""
    if not unwritten:
        return ""
    what = f"{unwritten['paths']} changed path(s)" + (" and a walk of the tree" if unwritten["walk"] else "")
    return f"Not yet written: {what}, retried until they land ({unwritten['code']}: {unwritten['message']})\n"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _note_line(part: JsonObject | None) -> str:
    return f"{part['note']}\n" if part and part.get("note") else ""


def _embedder_line(embedder: JsonObject | None) -> str:
    """A line when the embedder in use is not simply the configured one."""
    if not embedder or embedder["status"] in ("ok", "off"):
        return ""

    def label(models: JsonObject | None) -> str:
        if not models:
            return "none"
        text, code = models["text_model"], models["code_model"]
        return f"{models['provider']}/{text}" + (f" + {code}" if code != text else "")

    return (
        f"Embedder {embedder['status']}: active={label(embedder['active'])} "
        f"recorded={label(embedder['recorded'])} configured={label(embedder['configured'])}; "
        f"{embedder['note']}\n"
    )


def transcribe(result: JsonObject) -> str:
    segments = result.get("segments") or []
    head = (
        f"Transcribed {result['rel_path']} with {result['provider']}/{result['model']}"
        + (" and indexed it" if result["indexed"] else "")
        + f": {len(segments)} timed segment(s)."
    )
    lines = [
        f"{cite(result['rel_path'], {'kind': 'time', 'start_ms': s['start_ms'], 'end_ms': s['end_ms']})} "
        f"{_one_line(s['text'], 200)}"
        for s in segments[:50]
    ]
    if len(segments) > 50:
        lines.append(f"(… {len(segments) - 50} more in structuredContent.segments)")
    return "\n".join([head, *lines])


def annotate(result: JsonObject) -> str:
    indexed = " and indexed its flattened text" if result["flattened_indexed"] else ""
    preview = result.get("annotation_text_preview") or ""
    if not result["stored"]:  # the document changed during the call (corpus/ingest/ondemand.py)
        head = f"Annotated {result['rel_path']}, not stored: it changed during the call"
        return f"{head} (annotate it again to store it).\n\n{preview}".rstrip()
    return f"Stored the annotation of {result['rel_path']}{indexed}.\n\n{preview}".rstrip()


def outline(result: JsonObject) -> str:
    """One line per entry, indented by depth: its citation, kind and signature."""
    rel = result["rel_path"]
    size = f"{result['pages']} pages" if "pages" in result else f"{result.get('lines', 0)} lines"
    lines = [
        f"Outline of {rel} ({result['outline']}, {size}): {result['count']} of {result['total']} entries"
    ]

    def add(entries: list[JsonObject], depth: int) -> None:
        for entry in entries:
            text = entry["signature"] or entry["name"]
            if "folded" in entry:  # a run of macros or enumerators: its first and last names
                text = f"{entry['folded']}: {entry['name']} … {entry['last']}"
            lines.append(f"{'  ' * depth}{cite(rel, entry['span'])} {entry['kind']} {_one_line(text, 160)}")
            add(entry.get("children", []), depth + 1)

    add(result["entries"], 0)
    if result["truncated"]:
        lines.append("(truncated: raise max_entries, or open_file a span and outline less)")
    return "\n".join(lines)


def open_files(result: JsonObject) -> str:
    """Each slice as open_file's summary writes it, or its error, in order."""
    parts = []
    for piece in result["slices"]:
        if "result" in piece:
            parts.append(open_file(piece["result"]))
        else:
            error = piece["error"]
            parts.append(f"(refused: {error['code']}: {error['message']})")
    return "\n\n".join(parts)


def checksum(result: JsonObject) -> str:
    return f"{result['algorithm']} {result['digest']}  [{result['rel_path']}] ({result['size_bytes']} B)"


def diff(result: JsonObject) -> str:
    a, b = result["rel_path_a"], result["rel_path_b"]
    if result["identical"]:
        return f"[{a}] and [{b}] have the same text."
    head = f"[{a}] -> [{b}]: {result['removed']} line(s) removed, {result['added']} added"
    note = "\n(truncated: raise max_chars, or diff smaller files)" if result["truncated"] else ""
    return f"{head}\n\n{result['diff']}{note}"


def read_bytes(result: JsonObject) -> str:
    where, size = f"[{result['rel_path']}]", result["size_bytes"]
    if result["format"] == "image":
        image = result["image"]
        head = f"{where} {result['mime_type']} {image['width']}x{image['height']}, {image['data_bytes']} B"
        if image["recompressed"]:
            source = f"{image['source_mime_type']} {image['source_width']}x{image['source_height']}"
            head += f" (encoded again from the file's {source}, {size} B)"
        return head
    first, end = result["offset"], result["offset"] + result["length"]
    head = f"{where} bytes {first}-{end} of {size} as {result['format']}"
    head += " (end of file)" if result["eof"] else f" (more: next_offset={result['next_offset']})"
    if result.get("lossy"):
        head += " (bytes that are not UTF-8 shown as U+FFFD)"
    return f"{head}\n\n{result['content']}"


def verify(result: JsonObject) -> str:
    lines = [f"{result['ok']} of {result['checked']} citation(s) hold"]
    for checked in result["citations"]:
        if checked["ok"]:
            lines.append(f"ok {checked['citation']}")
            continue
        if "error" in checked:
            why = f"{checked['error']['code']}: {checked['error']['message']}"
        elif not checked["in_bounds"]:
            why = "the span is past the end of the file"
        else:
            missing = [q["text"] for q in checked["quotes"] if not q["found"]]
            why = "not in the slice: " + "; ".join(repr(_one_line(q, 80)) for q in missing)
        lines.append(f"FAILS {checked['citation']}: {why}")
    if result["unchecked"]:
        lines.append(f"({result['unchecked']} more not checked)")
    return "\n".join(lines)


def symbols(result: JsonObject) -> str:
    """One line per definition: its citation, kind, where it sits and its signature."""

    def line(hit: JsonObject) -> str:
        inside = f" in {hit['enclosing']}" if hit.get("enclosing") else ""
        match = "" if hit["match"] == "exact" else f" [{hit['match']}: {hit['name']}]"
        where = f"{cite(hit['rel_path'], hit['span'])} {hit['kind']}{inside}{match}"
        return f"{where}: {_one_line(hit['signature'], 160)}"

    more = " (more: raise limit)" if result["truncated"] else ""
    return _of_name(result, result["symbols"], ("definition", "Definitions"), more, line)


def references(result: JsonObject) -> str:
    """One line per use: its citation, enclosing definition and the line's text."""

    def line(hit: JsonObject) -> str:
        inside = f" in {hit['enclosing']}" if hit.get("enclosing") else ""
        return f"{cite(hit['rel_path'], hit['span'])}{inside}: {_one_line(hit['snippet'], 160)}"

    more = " (more: pass next_cursor)" if "next_cursor" in result else ""
    return _of_name(result, result["references"], ("use", "Uses"), more, line)


def _of_name(
    result: JsonObject,
    hits: list[JsonObject],
    words: tuple[str, str],
    more: str,
    line: Callable[[JsonObject], str],
) -> str:
    """``Definitions of 'x': 3`` (``words``: one and many) and a line per hit, or that there is none."""
    if not hits:
        return f"No {words[0]} of {result['name']!r} in the index."
    return "\n".join([f"{words[1]} of {result['name']!r}: {result['count']}{more}", *map(line, hits)])
