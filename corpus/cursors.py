"""Sealed paging cursors: opaque to the client, unforgeable, uninformative.

A cursor says where a call goes on: a document id, a path, how many matches
of a file were given. Written as readable base64 JSON it told a client what
it must not learn (``references``' document ids counted the files indexed
between two readable ones, excluded ones among them; session 29), and a
client could write any position it liked. A sealed cursor is the same
fields encrypted and authenticated with AES-GCM under a key derived from
the server's ``SECRET_KEY`` (a random key kept in the state directory
unless ``DJANGO_SECRET_KEY`` is set): it reads as noise, a changed byte
makes it invalid, and it holds in every process serving the same state, so
a cursor one transport gave another resumes. Each kind of cursor is sealed
with its name as associated data: one kind's cursor is never another's.

The key is bound to the index too: derived from the secret and the index's
``corpus_id`` (48 random bits written once into its database's settings
when the store is first opened, :func:`corpus.store.open_store`). Servers
sharing ``DJANGO_SECRET_KEY`` but serving different indexes opened one
another's cursors until session 31 (a cursor resumed at a position of
another directory); every server of one index (a restart, ``up
--no-index`` on a read-only copy, servers sharing one PostgreSQL database)
reads the same id, so they still open one another's.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings

from corpus.store import get_setting
from kernel.jsontypes import JsonObject

#: AES-GCM's 96-bit nonce, carried at the cursor's head
NONCE_BYTES = 12
#: a cursor's fields are padded to a multiple of this many bytes: AES-GCM
#: keeps the plaintext's length, which told a document id's digits, or the
#: length of the name of a row not yet judged (``find`` cut by its budget)
PAD_BYTES = 64


@functools.cache
def _derived(secret: str, index: str) -> tuple[AESGCM, bytes]:
    """The cipher, and the key that derives each cursor's nonce, of ``secret``
    and the index's id (``index``: empty for a database no store opened)."""
    raw = secret.encode("utf-8", "surrogatepass")
    bound = b"\0" + index.encode("utf-8", "surrogatepass") if index else b""
    cipher = hmac.new(raw, b"dir2mcp paging cursor" + bound, hashlib.sha256).digest()
    return AESGCM(cipher), hmac.new(raw, b"dir2mcp paging cursor nonce" + bound, hashlib.sha256).digest()


def _keys() -> tuple[AESGCM, bytes]:
    """:func:`_derived` for this process's secret and index (a one-row read
    of the settings table: the index a connection serves may change)."""
    return _derived(settings.SECRET_KEY, get_setting("corpus_id") or "")


def seal(kind: str, fields: JsonObject) -> str:
    """``fields`` as a cursor of ``kind`` (base64url, no padding, no dot).

    The nonce is a keyed digest of the kind and fields (a synthetic one, as
    AES-GCM-SIV derives it): the same position is the same cursor on every
    transport (a REST page equals its MCP page), and a nonce is reused only
    for the same plaintext, which tells nothing the equal cursors do not."""
    cipher, nonce_key = _keys()
    raw = json.dumps(fields, separators=(",", ":"), sort_keys=True).encode()
    raw += b" " * (-len(raw) % PAD_BYTES)  # JSON reads past trailing spaces
    nonce = hmac.new(nonce_key, kind.encode() + b"\0" + raw, hashlib.sha256).digest()[:NONCE_BYTES]
    sealed = nonce + cipher.encrypt(nonce, raw, kind.encode())
    return base64.urlsafe_b64encode(sealed).decode().rstrip("=")


def opened(kind: str, cursor: object, max_chars: int) -> JsonObject | None:
    """The fields a :func:`seal` of ``kind`` holds; None for anything else
    (not a string, too long, not base64, tampered, another kind's)."""
    if not isinstance(cursor, str) or not cursor or len(cursor) > max_chars:
        return None
    try:
        sealed = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        if base64.urlsafe_b64encode(sealed).decode().rstrip("=") != cursor:
            return None  # another spelling of a cursor (its last character's unused bits)
        nonce, body = sealed[:NONCE_BYTES], sealed[NONCE_BYTES:]
        fields = json.loads(_keys()[0].decrypt(nonce, body, kind.encode()))
    except (ValueError, binascii.Error, InvalidTag, UnicodeDecodeError):
        return None
    return fields if isinstance(fields, dict) else None
