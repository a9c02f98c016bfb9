import signal
import threading
from typing import Any

from corpus.ingest.watch import watch_directory
from corpus.management.base import Dir2mcpCommand
from corpus.store import describe, open_store


class Command(Dir2mcpCommand):
    help = "Index a directory, then keep the index in step with file changes until interrupted."

    def handle(self, *args: Any, **options: Any) -> None:  # Any: BaseCommand.handle's signature
        rt = self.runtime(options)
        open_store(rt.state, reporter=rt.reporter)
        self.prepare_state(rt)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        rt.reporter.say(f"Index: {rt.state.path}  ({describe(rt.state)})")
        rt.reporter.say(f"Watching {rt.root} for changes; Ctrl-C to stop.")
        watch_directory(
            rt.root, state=rt.state, config=rt.config, reporter=rt.reporter, stop=stop, embedder=rt.embedder()
        )
