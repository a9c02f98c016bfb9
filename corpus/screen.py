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

A verdict is kept with the representations it judged, and checked again
against them after :data:`CHECK_SECONDS`: a reindexed file is judged anew,
and the texts are read and screened once per version. A verdict can only be
stale by a reindex, and a reindex screens the file itself under the same
rules (one holding a credential leaves every listing at once, as skipped):
what the wait can keep is a file cleaned since, hidden a little longer.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from corpus.models import Representation

#: how long a verdict is served before its representations are looked up again
CHECK_SECONDS = 30.0
#: verdicts kept (a path, a few ids and a flag each)
KEPT = 200_000


class SecretBearing:
    """``holds(rel_path)``: whether the live stored texts of the document at
    ``rel_path`` hold a credential under ``find_secret`` (the rules now)."""

    def __init__(self, find_secret: Callable[[str], object]) -> None:
        self._find_secret = find_secret
        self._known: OrderedDict[str, tuple[tuple[int, ...], bool, float]] = OrderedDict()
        self._lock = threading.Lock()

    def holds(self, rel_path: str) -> bool:
        now = time.monotonic()
        with self._lock:
            known = self._known.get(rel_path)
        if known is not None and now - known[2] < CHECK_SECONDS:
            return known[1]
        live = Representation.objects.filter(
            document__rel_path=rel_path, document__deleted=False, deleted=False
        ).order_by("rep_id")
        rep_ids = tuple(live.values_list("rep_id", flat=True))
        if known is not None and known[0] == rep_ids:
            verdict = known[1]
        else:
            texts = live.values_list("text", flat=True).iterator(chunk_size=1)
            verdict = any(self._find_secret(text) for text in texts if text)
        with self._lock:
            self._known[rel_path] = (rep_ids, verdict, now)
            self._known.move_to_end(rel_path)
            while len(self._known) > KEPT:
                self._known.popitem(last=False)
        return verdict
