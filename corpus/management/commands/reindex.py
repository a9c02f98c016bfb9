from typing import Any

from django.core.management.base import CommandParser

from corpus.events import format_progress
from corpus.ingest.indexing import index_directory
from corpus.management.base import Dir2mcpCommand
from corpus.store import describe, open_store


class Command(Dir2mcpCommand):
    help = "Rebuild the index of a directory: re-read every file (or only changes with --incremental)."

    def add_command_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--incremental",
            action="store_true",
            help="Only re-process files whose size, mtime or content changed (what `up` does at start).",
        )

    def handle(self, *args: Any, **options: Any) -> None:  # Any: BaseCommand.handle's signature
        rt = self.runtime(options)
        open_store(rt.state, allow_rebuild=not options["incremental"], reporter=rt.reporter)
        self.prepare_state(rt)
        mode = "incremental" if options["incremental"] else "full"
        rt.reporter.say(f"Index: {rt.state.path}  ({describe(rt.state)})")
        rt.reporter.say(f"Mode: {mode}")
        # A full reindex starts the vectors over, so it switches to the configured
        # embedder; --incremental keeps the one the index was built with.
        embedder = rt.embedder(switch=mode == "full")
        counters = index_directory(
            rt.root, state=rt.state, config=rt.config, mode=mode, reporter=rt.reporter, embedder=embedder
        )
        if rt.quiet and not rt.json:
            self.stdout.write(format_progress(counters.as_dict()))
