"""Wire test vectors (tests/vectors/*.json), built deterministically from named inputs.

``python -m monotape.platform.wire.vectors tests/vectors`` rewrites them; tests/wire/test_vectors.py
rebuilds them in memory and fails on any difference (STYLE 14). Each case holds its inputs,
the expected bytes as hex, and the expected decoded value, derived from the inputs here and
not from the decoder, so another team's codec can be checked against both directions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from monotape.platform.wire.batch_vectors import bad_batch_cases, batch_cases, bundle_cases
from monotape.platform.wire.message_vectors import (
    BAD_MESSAGES,
    message_cases,
    record_cases,
    websocket_cases,
)
from monotape.platform.wire.request_vectors import request_cases

__all__ = ["build", "main", "render"]


def build() -> dict[str, Any]:
    """File name -> JSON value."""
    return {
        "records.json": {"cases": record_cases()},
        "messages.json": {"cases": message_cases()},
        "bad_messages.json": {"cases": [{"name": n, "hex": h} for n, h in BAD_MESSAGES]},
        "websocket.json": {"cases": websocket_cases()},
        "requests.json": request_cases(),
        "batches.json": {
            "cases": batch_cases(),
            "bad": bad_batch_cases(),
            "bundles": bundle_cases(),
        },
    }


def render(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0] if args else "tests/vectors")
    out.mkdir(parents=True, exist_ok=True)
    for name, value in build().items():
        (out / name).write_text(render(value), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
