import json
from typing import Any

from django.core.management.base import CommandParser

from corpus.answer import MODES, ask
from corpus.events import Reporter
from corpus.index.dense import status as dense_status
from corpus.index.dense.embedding import check_models
from corpus.ingest.indexing import index_directory
from corpus.management.base import Dir2mcpCommand, Runtime
from corpus.models import IndexJob
from corpus.providers.base import Embedder
from corpus.retrieval import INDEXES, Filters, Searcher
from corpus.store import open_store
from kernel import errors
from kernel.output import printable, printable_lines


class Command(Dir2mcpCommand):
    help = (
        "Answer a question from the index with citations (search-only without a chat model). "
        "Indexes the directory first if it has never been indexed."
    )

    def add_command_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("question", help="The question (quote it).")
        parser.add_argument(
            "--k", type=int, default=None, help="Number of hits (1-50; default rag.k_default)."
        )
        parser.add_argument(
            "--mode", choices=MODES, default="answer", help="answer (default) or search_only."
        )
        parser.add_argument("--index", choices=INDEXES, default="auto", help="Which dense index to use.")
        parser.add_argument("--path-prefix", default="", help="Only files under this path.")
        parser.add_argument("--file-glob", default="", help="Only files matching this glob (e.g. '*.py').")
        parser.add_argument(
            "--doc-type",
            action="append",
            default=[],
            help="Only these doc types (repeatable: code, md, pdf, ...).",
        )

    def handle(self, *args: Any, **options: Any) -> None:  # Any: BaseCommand.handle's signature
        rt = self.runtime(options)
        open_store(rt.state)
        # No NDJSON event here: `ask --json` prints one JSON object; the log warning says it.
        embedder = rt.embedder(events=False)
        if not IndexJob.objects.filter(outcome="complete").exists():
            self._index_first(rt, embedder)
        elif embedder is not None:
            check_models(
                embedder,
                rt.state,
                signature_weight=rt.config.embed.signature_weight,
                vector_store=rt.config.rag.vector_store,
            )
        result = ask(
            options["question"],
            searcher=Searcher(rt.state, rt.config, embedder),
            chat=rt.chat(),
            config=rt.config,
            k=options["k"] or rt.config.rag.k_default,
            mode=options["mode"],
            index=options["index"],
            filters=Filters(options["path_prefix"], options["file_glob"], tuple(options["doc_type"])),
        )
        if rt.json:
            self.stdout.write(json.dumps(result.as_dict()))
            return
        self.stdout.write(printable_lines(result.answer))  # names and text from the directory
        if result.generated and result.citations:
            self.stdout.write("\nSources:")
            for citation in result.citations:
                self.stdout.write(f"  {printable(citation.text)}")
        for notice in (dense_status.generation_notice(result.generation), dense_status.notice(result.dense)):
            if notice:
                self.stderr.write(notice)
        if not result.indexing_complete:
            self.stderr.write(
                "(the index is incomplete: indexing is running or chunks wait for embeddings; "
                "`dir2mcp status` shows which)"
            )

    def _index_first(self, rt: Runtime, embedder: Embedder | None) -> None:
        """A never-indexed directory is indexed before answering; if another
        process is indexing it, answer from what is there."""
        self.prepare_state(rt)
        try:
            index_directory(
                rt.root, state=rt.state, config=rt.config, reporter=Reporter.silent(), embedder=embedder
            )
        except errors.Dir2mcpError as exc:
            if exc.code != errors.INDEX_LOCKED:
                raise
