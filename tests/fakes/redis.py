"""A Redis at the network edge, for tests of what the server does while
Redis is slow or away: it takes connections and serves each on a thread of
its own, as its subclass says (:meth:`FakeRedis.serve`)."""

from __future__ import annotations

import contextlib
import socket
import threading

#: How long closing waits for a connection's thread: only a broken fake reaches it.
JOIN_SECONDS = 60.0


class FakeRedis:
    """Takes connections on a port of its own (:attr:`url`)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        self.stopping = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def serve(self, conn: socket.socket) -> None:
        """Serve one connection until it closes or :attr:`stopping` is set."""
        raise NotImplementedError

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                conn = self.listener.accept()[0]
                reader = threading.Thread(target=self._serve, args=(conn,), daemon=True)
                self._threads.append(reader)
                reader.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        with conn:
            self.serve(conn)

    def received(self, conn: socket.socket) -> bytes | None:
        """What arrived next on ``conn``: b"" while nothing did, None once it
        closed (or the fake is stopping)."""
        if self.stopping.is_set():
            return None
        try:
            return conn.recv(65536) or None
        except TimeoutError:
            return b""
        except OSError:
            return None

    def connections(self) -> int:
        """How many connections it has taken."""
        return len(self._threads) - 1

    def close(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(JOIN_SECONDS)
        self.listener.close()
