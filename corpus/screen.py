"""Whether a document the index holds is secret-bearing under the rules now.

The indexer screens a file's whole text and keeps out (``SECRET_DETECTED``)
one that holds a credential. A secret pattern added since is seen by the
walk it starts, and under ``up --no-index`` never: meanwhile the stored
text of such a file is served by what quotes the index. Screening one unit
at a time (session 29) missed a credential two units hold together (a PEM
key whose header ends one and whose body fills the next), and a listing
named the file. So the verdict is the document's: its stored texts are
screened whole, as the indexer does, and a document holding a credential
is one no surface reads or names (session 30).

A verdict is kept with the representations it judged (their ids and
content hashes: a reindex rewrites a representation in place, its id
kept), and checked again against them after :data:`CHECK_SECONDS`: a
reindexed file is judged anew,
and the texts are read and screened once per version. A verdict can only be
stale by a reindex, and a reindex screens the file itself under the same
rules (one holding a credential leaves every listing at once, as skipped):
what the wait can keep is a file cleaned since, hidden a little longer.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from corpus.index.idlists import each_of
from corpus.models import Representation

#: how long a verdict is served before its representations are looked up again
CHECK_SECONDS = 30.0
#: paths judged a query by :meth:`SecretBearing.prime`
BATCH = 256
#: verdicts kept (a path, a few ids and a flag each)
KEPT = 200_000


class SecretBearing:
    """``holds(rel_path)``: whether the live stored texts of the document at
    ``rel_path`` hold a credential under ``find_secret`` (the rules now)."""

    def __init__(self, find_secret: Callable[[str], object]) -> None:
        self._find_secret = find_secret
        #: per path: its live representations' version (:func:`_version`), the verdict, when judged
        self._known: OrderedDict[str, tuple[int, bool, float]] = OrderedDict()
        self._lock = threading.Lock()

    def prime(self, rel_paths: Iterable[str]) -> None:
        """Judge ``rel_paths`` whose verdicts are not fresh now, a batch of
        :data:`BATCH` a query (the representations' versions, then the texts of
        those whose versions changed), rather than two queries a path when each
        is asked (``search`` judges a few hundred files at once)."""
        now = time.monotonic()
        with self._lock:
            stale = [p for p in dict.fromkeys(rel_paths) if not self._fresh(p, now)]
        for at in range(0, len(stale), BATCH):
            self._judge(stale[at : at + BATCH], now)

    def _judge(self, batch: list[str], now: float) -> dict[str, bool]:
        """Verdicts of ``batch``, kept: the representations' versions in one
        query, then the texts of the paths whose versions changed."""
        live = Representation.objects.filter(
            document__rel_path__in=each_of(batch, text=True), document__deleted=False, deleted=False
        )
        ids: dict[str, list[tuple[int, str]]] = {path: [] for path in batch}
        for path, rep_id, rep_hash in live.order_by("rep_id").values_list(
            "document__rel_path", "rep_id", "rep_hash"
        ):
            ids[path].append((rep_id, rep_hash))
        with self._lock:
            known = {path: self._known.get(path) for path in batch}
        verdicts = {
            path: entry[1]
            for path, entry in known.items()
            if entry is not None and entry[0] == _version(ids[path])
        }
        unread = [path for path in batch if path not in verdicts]
        for path in unread:
            verdicts[path] = False
        texts = live.filter(document__rel_path__in=each_of(unread, text=True)).values_list(
            "document__rel_path", "text"
        )
        for path, text in texts.iterator(chunk_size=16):
            if text and not verdicts[path] and self._find_secret(text):
                verdicts[path] = True
        with self._lock:
            for path in batch:
                self._keep(path, (_version(ids[path]), verdicts[path], now))
        return verdicts

    def _fresh(self, rel_path: str, now: float) -> bool:
        known = self._known.get(rel_path)
        return known is not None and now - known[2] < CHECK_SECONDS

    def _keep(self, rel_path: str, entry: tuple[int, bool, float]) -> None:
        self._known[rel_path] = entry
        self._known.move_to_end(rel_path)
        while len(self._known) > KEPT:
            self._known.popitem(last=False)

    def holds(self, rel_path: str) -> bool:
        now = time.monotonic()
        with self._lock:
            known = self._known.get(rel_path) if self._fresh(rel_path, now) else None
        if known is not None:
            return known[1]
        return self._judge([rel_path], now)[rel_path]


def _version(reps: Iterable[tuple[int, str]]) -> int:
    """What changes when a document's live representations do: their ids
    and content hashes, in id order, as one number (a path's entry small)."""
    return hash(tuple(reps))
