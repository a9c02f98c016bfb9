import json
import time
from typing import Any

from corpus import adapter as query_adapter
from corpus.events import format_progress
from corpus.index.dense.embedding import recipe_summary, recorded_model, recorded_waiting
from corpus.ingest import coverage
from corpus.ingest.pending import pending_count
from corpus.management.base import Dir2mcpCommand, Runtime
from corpus.providers.registry import EmbedderChoice
from corpus.status import IndexSummary, embedder_choice, indexer_state, scaleout_summary, summarize
from corpus.store import open_store, uses_state_sqlite
from kernel import errors
from kernel.jsontypes import JsonObject
from kernel.output import printable


class Command(Dir2mcpCommand):
    help = "Show the state of a directory's index: counts, the latest indexing job and recent errors."

    def handle(self, *args: Any, **options: Any) -> None:  # Any: BaseCommand.handle's signature
        rt = self.runtime(options)
        if uses_state_sqlite(rt.state) and not rt.state.meta_db.exists():
            raise errors.Dir2mcpError(
                errors.INDEX_NOT_READY,
                f"no index at {rt.state.path}",
                hint="Run `dir2mcp reindex` or `dir2mcp up` first.",
            )
        open_store(rt.state, reading=True)
        summary = summarize()
        embedder = embedder_choice(rt.config, rt.state, secrets_lookup=rt.secret)
        celery = scaleout_summary()
        indexer = indexer_state()
        waiting = recorded_waiting()
        recipe = recipe_summary(rt.config.embed.signature_weight)
        code_model = recorded_model("code")
        adapter = query_adapter.summary(
            rt.config.search.query_adapter, code_model.model if code_model else None
        )
        if rt.json:
            out = {
                **self._as_dict(rt, summary),
                "embedder": embedder.as_dict(),
                "signature_weight": recipe,
                "query_adapter": adapter,
                "indexer": indexer,
                "dense_waiting_for_file": waiting,
                "celery": celery,
            }
            self.stdout.write(json.dumps(out))
            return
        self._print(rt, summary)
        self._print_embedder(embedder)
        if recipe["note"]:
            self.stdout.write(f"  {recipe['note']}")
        applies = "" if adapter["applies"] or adapter["configured"] == "off" else " (not applied)"
        self.stdout.write(f"Query adapter: {adapter['configured']}{applies}")
        if adapter["note"]:
            self.stdout.write(f"  {adapter['note']}")
        if indexer is not None:
            self._print_indexer(indexer)
        if waiting:
            self.stdout.write(
                f"Dense search of the {' and '.join(waiting)} index waits for the indexer's file "
                "(lexical only meanwhile)"
            )
        if celery is not None:
            self._print_celery(celery)

    def _print_embedder(self, choice: EmbedderChoice) -> None:
        w = self.stdout.write
        active = choice.active.label if choice.active else "none (search is lexical only)"
        w(f"Embedder: {active}")
        if choice.message:
            w(f"  {choice.message}")
        elif choice.recorded and not choice.active:
            w(f"  the index holds {choice.recorded.label} vectors; embed.provider is none")

    def _print_indexer(self, found: JsonObject) -> None:
        """The indexing child of the server that last ran here (`up`, `mcp_stdio`)."""
        state = f"running (pid {found['pid']})" if found.get("running") else "not running"
        line = f"Indexer process: {state}, restarted {found.get('restarts', 0)} time(s)"
        last = found.get("last_exit")
        if isinstance(last, dict) and last.get("reason"):
            line += f"; last exit: {last['reason']}"
        self.stdout.write(line)
        unwritten = found.get("unwritten")
        if (
            found.get("running")
            and isinstance(unwritten, dict)
            and (unwritten.get("paths") or unwritten.get("walk"))
        ):
            self.stdout.write(
                f"  not yet written: {unwritten.get('paths', 0)} changed path(s)"
                + (" and a walk of the tree" if unwritten.get("walk") else "")
                + f", retried until they land ({printable(str(unwritten.get('code')))}: "
                + f"{printable(str(unwritten.get('message')))})"
            )

    def _print_celery(self, c: JsonObject) -> None:
        w = self.stdout.write
        depth = "unknown (broker unreachable)" if c["queued_messages"] is None else c["queued_messages"]
        w(
            f"Celery: broker {c['broker']}  queue {c['queue']}: {depth} message(s), "
            f"{c['files_waiting']} file(s) waiting"
        )
        if not c["workers"]:
            w("Workers seen: none in the last 10 minutes (start: celery -A dir2mcp_site worker)")
        for worker in c["workers"]:
            age = time.time() - worker["last_seen_unix"]
            w(
                f"  worker {worker['name']} pid {worker['pid']}: {worker['tasks_done']} task(s), "
                f"seen {age:.0f}s ago"
            )

    def _as_dict(self, rt: Runtime, s: IndexSummary) -> JsonObject:
        job = s.job
        return {
            "root": str(rt.root),
            "state_dir": str(rt.state.path),
            "documents": s.documents,
            "by_type": s.by_type,
            "by_status": s.by_status,
            "deleted": s.deleted,
            "representations": s.representations,
            "chunks": s.chunks,
            "embedded": s.embedded,
            "embedding_pending": s.pending,
            "embedding_error": s.embed_error,
            "documents_on_older_format": s.older_format,
            "indexing": None
            if job is None
            else {
                "job_id": job.job_id,
                "mode": job.mode,
                "running": s.job_alive,
                "outcome": job.outcome or ("running" if s.job_alive else "stopped"),
                "started_unix": job.started_unix,
                "updated_unix": job.updated_unix,
                **job.counters(),
            },
            "recent_errors": [error.as_dict() for error in s.recent_errors],
            "needs_provider": s.needs_provider,
            "coverage": coverage.summary(),
            "pending_changes": pending_count(),
        }

    def _print(self, rt: Runtime, s: IndexSummary) -> None:
        w = self.stdout.write
        found = coverage.summary()
        if found and found["warning"]:
            w(f"WARNING: {printable(found['warning'])}")
        w(f"Root:  {rt.root}")
        w(f"Index: {rt.state.path}")
        w(f"Documents: {s.documents}  ({_pairs(s.by_type) or 'none'})")
        w(f"Status:    {_pairs(s.by_status) or 'none'}  deleted={s.deleted}")
        w(f"Representations: {s.representations}  Chunks: {s.chunks}")
        w(f"Embedded: {s.embedded}  Pending: {s.pending}")
        if s.embed_error:
            w(f"Embedding stopped: {printable(s.embed_error)}")
        if s.older_format:
            w(
                f"Units: {s.older_format} document(s) still cut by an older format; they keep serving "
                "until `dir2mcp up` or `dir2mcp reindex --incremental` re-cuts them"
            )
        job = s.job
        if job is None:
            w("Indexing: never run")
        else:
            state = "running" if s.job_alive else (job.outcome or "stopped")
            age = time.time() - job.updated_unix
            w(f"Indexing: {state} ({job.mode}, job {job.job_id}, updated {age:.0f}s ago)")
            w(format_progress(job.counters()))
        pending = pending_count()
        if pending:
            w(f"Pending changes: {pending} (seen by live sync, not yet indexed)")
        if s.recent_errors:
            w("Recent errors:")
            for error in s.recent_errors:
                w(f"  {printable(error.rel_path)}: {printable(error.error)}")
        if found:
            w(printable(coverage.describe(found)))
        if s.needs_provider:
            waiting = ", ".join(f"{n} file(s) {reason}" for reason, n in s.needs_provider.items())
            w(f"Waiting for a key: {waiting}")


def _pairs(counts: JsonObject) -> str:
    return " ".join(f"{k}={v}" for k, v in counts.items())
