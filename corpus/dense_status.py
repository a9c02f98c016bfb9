"""Whether dense retrieval took part in a search, as ``search`` and ``ask`` report it.

``{"status": "ok"}``: the query was embedded and the dense ranking was fused in.
``{"status": "off"}``: no embedder is configured (``embed.provider: none``).
``{"status": "unavailable", "code": ..., "message": ...}``: embedding the query
failed (a provider error, a timeout, a local model that cannot load); the
results come from the lexical index alone. The code is the error's §14 code;
the message is the error's own, which the provider client has scrubbed of
the API key.
"""

from __future__ import annotations

from corpus import errors

OK = "ok"
OFF = "off"
UNAVAILABLE = "unavailable"
MESSAGE_LIMIT = 500
NOTICE_LIMIT = 200

# A non-Dir2mcpError from an embedder's own code: what to call it.
_FAILED_CODE = {
    "mistral": errors.MISTRAL_FAILED,
    "openai_compatible": errors.PROVIDER_FAILED,
    "local": errors.CONFIG_INVALID,  # the model cannot load or run
}


def ok() -> dict:
    return {"status": OK}


def off() -> dict:
    return {"status": OFF}


def unavailable(exc: BaseException, provider: str) -> dict:
    """The status for a query embedding that raised ``exc`` (from ``provider``'s embedder)."""
    if isinstance(exc, errors.Dir2mcpError):
        code, message = exc.code, exc.message
    else:
        code = _FAILED_CODE.get(provider, errors.PROVIDER_FAILED)
        message = f"the {provider or 'configured'} embedder failed: {type(exc).__name__}: {exc}"
    message = " ".join(str(message).split())
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 1] + "…"
    return {"status": UNAVAILABLE, "code": code, "message": message}


def notice(dense: dict | None) -> str | None:
    """The line a reader sees when results are lexical only; None otherwise."""
    if not dense or dense.get("status") != UNAVAILABLE:
        return None
    message = dense.get("message") or ""
    if len(message) > NOTICE_LIMIT:
        message = message[: NOTICE_LIMIT - 1] + "…"
    detail = f"{dense.get('code', '')}: {message}" if message else str(dense.get("code", ""))
    return f"Dense search unavailable ({detail}); results are lexical only."
