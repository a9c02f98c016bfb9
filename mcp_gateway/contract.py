"""The tool contract snapshot: ``docs/contracts/tools.json``.

``python -m mcp_gateway.contract`` rewrites it from the live registry;
tests/test_contract.py fails whenever the two differ, so every change to a
tool's name, description, schemas or annotations is a reviewed diff that
comes with a ``SCHEMA_VERSION`` bump (rules in ``docs/contracts.md``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from kernel.jsontypes import JsonObject

SNAPSHOT = Path(__file__).resolve().parents[1] / "docs" / "contracts" / "tools.json"


def snapshot() -> JsonObject:
    # tools read models: `python -m mcp_gateway.contract` imports this before django.setup()
    from mcp_gateway import schemas, tools

    return {
        "schemaVersion": schemas.SCHEMA_VERSION,
        "tools": tools.list_page(page_size=len(tools.table()))["tools"],
    }


def render() -> str:
    return json.dumps(snapshot(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    import django

    # The registry needs the app registry, not a corpus: no root to choose.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dir2mcp_site.settings")
    django.setup()
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    SNAPSHOT.write_text(render(), encoding="utf-8")
    sys.stdout.write(f"wrote {SNAPSHOT.relative_to(SNAPSHOT.parents[2])}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
