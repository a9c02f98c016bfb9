"""What the status page shows, as plain data: one read of the index state.

The page renders it once and its live stream sends it again whenever it
changes. Secrets appear only as their source (``env:MISTRAL_API_KEY``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from decimal import Decimal

from corpus.status import IndexSummary, models_summary, summarize
from kernel.jsontypes import JsonObject
from kernel.secrets import resolve_all
from mcp_gateway.context import Context
from mcp_gateway.models import McpSession
from payments.models import SettlementLog
from payments.reports import totals_per_tool

ERROR_LIMIT = 20
SESSION_LIMIT = 20


def snapshot() -> JsonObject:
    """Progress, counts, recent errors, sessions and payments, JSON-ready."""
    summary = summarize(error_limit=ERROR_LIMIT)
    return {
        "job": _job(summary),
        "documents": summary.documents,
        "by_type": summary.by_type,
        "by_status": summary.by_status,
        "deleted": summary.deleted,
        "representations": summary.representations,
        "chunks": summary.chunks,
        "embedded": summary.embedded,
        "pending": summary.pending,
        "embed_error": summary.embed_error,
        "needs_provider": summary.needs_provider,
        "errors": [{"rel_path": e.rel_path, "reason": e.error} for e in summary.recent_errors],
        "sessions": sessions(),
        "payments": payments_today(),
    }


def _job(summary: IndexSummary) -> JsonObject | None:
    job = summary.job
    if job is None:
        return None
    return {
        "job_id": job.job_id,
        "mode": job.mode,
        "running": summary.job_alive,
        "outcome": job.outcome,
        "started": _iso(job.started_unix),
        "updated": _iso(job.updated_unix),
        **job.counters(),
    }


def sessions() -> JsonObject:
    """Open MCP sessions, most recently seen first."""
    rows = McpSession.objects.order_by("-last_seen_unix").values(
        "client_name", "client_version", "protocol_version", "created_unix", "last_seen_unix"
    )[:SESSION_LIMIT]
    return {
        "count": McpSession.objects.count(),
        "recent": [
            {
                "client": f"{row['client_name'] or 'client'} {row['client_version']}".strip(),
                "protocol_version": row["protocol_version"],
                "opened": _iso(row["created_unix"]),
                "last_seen": _iso(row["last_seen_unix"]),
            }
            for row in rows
        ],
    }


def payments_today() -> JsonObject:
    """Today's (UTC) payment events: a count per outcome, and per outcome and
    tool the count and the amount, in the asset's own units (``0.02 USDC``)."""
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    totals = totals_per_tool(SettlementLog.objects.all(), since=midnight, by_outcome=True)
    by_outcome: dict[str, int] = {}
    rows = []
    for total in sorted(totals, key=lambda t: (t.outcome, t.tool, t.network, t.asset)):
        by_outcome[total.outcome] = by_outcome.get(total.outcome, 0) + total.count
        amount, unit = in_asset_units(total.amount, total.network, total.asset)
        rows.append(
            {
                "outcome": total.outcome,
                "tool": total.tool,
                "count": total.count,
                "amount": amount,
                "unit": unit,
            }
        )
    return {"total": sum(by_outcome.values()), "by_outcome": dict(sorted(by_outcome.items())), "rows": rows}


def in_asset_units(atomic: int, network: str, asset: str) -> tuple[str, str]:
    """``(amount, unit)``: ``("0.02", "USDC")`` for a known asset, else atomic units."""
    # x402's EVM helpers (web3) take ~0.5 s to import (measured); only payment rows need it
    from payments.evm import get_asset_info

    try:
        info = get_asset_info(network, asset)
    except ValueError:
        return str(atomic), f"atomic units of {asset or 'the asset'}"
    value = Decimal(atomic).scaleb(-int(info["decimals"])).normalize()
    return format(value, "f"), info["name"]


def providers(ctx: Context) -> JsonObject:
    """Provider configuration: models in use and where each secret comes from."""
    config = ctx.config
    secrets = resolve_all(config, ctx.state, root=ctx.root)
    return {
        "embed_provider": config.embed.provider,
        "models": models_summary(config),
        "secret_sources": {name: secret.describe() for name, secret in secrets.items()},
    }


def _iso(unix: float | None) -> str:
    if not unix:
        return ""
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def now_iso() -> str:
    return _iso(time.time())
