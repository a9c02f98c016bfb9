"""Whether dense retrieval took part in a search, as ``search`` and ``ask`` report it
(and, in the same shape, whether ``ask`` generated its answer: ``generation``).

``{"status": "ok"}``: the query was embedded and the dense ranking was fused in.
``{"status": "off"}``: no embedder is configured (``embed.provider: none``).
``{"status": "unavailable", "code": ..., "message": ...}``: embedding the query
failed (a provider error, a timeout, a local model that cannot load); the
results come from the lexical index alone. The code is the error's §14 code;
the message is the error's own, which the provider client has scrubbed of
the API key.
``{"status": "waiting", "kinds": [...], "message": ...}``: the query was
embedded, but the dense indices of ``kinds`` wait for the file the indexing
process is building (a server following its child's saves that has no
usable file of its own, corpus/index/dense/embedding.py:
DenseStore.waiting): those indices' results are lexical only; the others'
dense rankings were fused in.
"""

from __future__ import annotations

from kernel import errors
from kernel.jsontypes import JsonObject

OK = "ok"
OFF = "off"
UNAVAILABLE = "unavailable"
WAITING = "waiting"
MESSAGE_LIMIT = 500
NOTICE_LIMIT = 200

# A non-Dir2mcpError from an embedder's own code: what to call it.
_FAILED_CODE = {
    "mistral": errors.MISTRAL_FAILED,
    "openai_compatible": errors.PROVIDER_FAILED,
    "local": errors.CONFIG_INVALID,  # the model cannot load or run
}


def ok() -> JsonObject:
    return {"status": OK}


def off() -> JsonObject:
    return {"status": OFF}


def waiting(kinds: list[str]) -> JsonObject:
    """The status for a search whose dense indices of ``kinds`` wait for the
    indexing process's file."""
    named = " and ".join(kinds)
    return {
        "status": WAITING,
        "kinds": list(kinds),
        "message": (
            f"the {named} dense index{'es wait' if len(kinds) > 1 else ' waits'} for the file the "
            "indexing process is building"
        ),
    }


def unavailable(exc: BaseException, provider: str, *, what: str = "embedder") -> JsonObject:
    """The status for a provider call that raised ``exc``: ``provider``'s
    query embedding, or (``what="chat model"``) its answer generation."""
    if isinstance(exc, errors.Dir2mcpError):
        code, message = exc.code, exc.message
    else:
        code = _FAILED_CODE.get(provider, errors.PROVIDER_FAILED)
        message = f"the {provider or 'configured'} {what} failed: {type(exc).__name__}: {exc}"
    message = " ".join(str(message).split())
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 1] + "…"
    return {"status": UNAVAILABLE, "code": code, "message": message}


def notice(dense: JsonObject | None) -> str | None:
    """The line a reader sees when results are lexical only; None otherwise."""
    if dense and dense.get("status") == WAITING:
        return f"Dense search waiting ({dense.get('message', '')}); {_kinds(dense)} results are lexical only."
    detail = _detail(dense)
    return None if detail is None else f"Dense search unavailable ({detail}); results are lexical only."


def generation_notice(generation: JsonObject | None) -> str | None:
    """The line a reader sees when ``ask`` could not generate its answer; None otherwise."""
    detail = _detail(generation)
    if detail is None:
        return None
    return f"Answer generation unavailable ({detail}); the top matches are listed instead."


def _detail(status: JsonObject | None) -> str | None:
    """``CODE: message`` of an unavailable status, the message shortened; None otherwise."""
    if not status or status.get("status") != UNAVAILABLE:
        return None
    message = status.get("message") or ""
    if len(message) > NOTICE_LIMIT:
        message = message[: NOTICE_LIMIT - 1] + "…"
    return f"{status.get('code', '')}: {message}" if message else str(status.get("code", ""))


def _kinds(status: JsonObject) -> str:
    kinds = status.get("kinds")
    return " and ".join(str(kind) for kind in kinds) if isinstance(kinds, list) else ""
